"""replicate_with_fsdp at the root, fully_shard below it and replicate_with_fsdp below that: the first forward raises
"FSDP state has already been lazily initialized for 1 / FSDP requires running forward through the root module
first", though the forward does run through the root. The root's lazy init adopts only states of its own class, so
the fully_shard module stays a root of its own and its lazy init then finds the innermost state already initialised.

    torchrun --nproc-per-node=2 fully-shard-between-fsdp-replicates.py   (CPU, gloo)

The model is Sequential(Sequential(Linear, Linear)): replicate(model[0][1]), fully_shard(model[0]), replicate(model),
with replicate from torch.distributed._composable.replicate_with_fsdp. Prints the error of the first forward and
which states are roots. Exit 1: the forward raises (the bug); exit 0: two steps train.
Variants run: fully_shard on the root instead of replicate: exit 0 (model[0] not a root); fully_shard instead of
replicate on the innermost Linear: exit 0 (but model[0] is still a root of its own: see
fully-shard-roots-of-their-own-unused-in-a-later-backward); no innermost call: exit 0 (model[0] a root of its
own); no fully_shard in the middle: exit 0; no root call: exit 0 (model[0] the only root).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed._composable.replicate_with_fsdp import replicate
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)))
replicate(model[0][1])
fully_shard(model[0])
replicate(model)

bug = False
try:
    for step in range(2):
        model(torch.randn(2, 4)).sum().backward()
except RuntimeError as e:
    bug = True
    if rank == 0:
        print(f"forward raised RuntimeError: {' / '.join(str(e).splitlines())}   <-- BUG")
if rank == 0:
    roots = {name or "(root)": m._get_fsdp_state()._is_root for name, m in model.named_modules()
             if hasattr(m, "_get_fsdp_state")}
    print(f"FSDP/replicate states, is_root: {roots}")
    print(f"torch {torch.__version__}: " + ("BUG: the nesting fails its lazy init" if bug else "ok: two steps train"))
dist.destroy_process_group()
sys.stdout.flush()
os._exit(1 if bug else 0)  # not sys.exit: a gloo thread can abort the interpreter's teardown on this build
