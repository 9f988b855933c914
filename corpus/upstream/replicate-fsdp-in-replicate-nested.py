"""The DDP-based composable ``replicate`` over a module that replicate_with_fsdp's ``replicate`` manages takes that
module's DTensor parameters and localizes them (replaces them with plain Parameters), although it skips modules that
fully_shard manages: FSDP2's lazy init then fails, or, under a fully_shard root, the DDP reducer waits for gradients of
parameters the module no longer uses.

    torchrun --nproc-per-node=2 replicate-fsdp-in-replicate-nested.py   (CPU, gloo)

Part 1: Sequential(Linear, Linear), replicate_with_fsdp on model[1], the DDP-based replicate on the root: the first
forward raises AttributeError "'Parameter' object has no attribute '_local_tensor'" (FSDPParam.reset_sharded_param).
Part 2: Sequential(Sequential(Linear, Linear), Linear), replicate_with_fsdp on model[0][1], the DDP-based replicate on
model[0], fully_shard on the root: step 0's gradient of model[0][0].weight is not all-reduced (it differs across
ranks), and step 1's forward raises DDP's "Expected to have finished reduction in the prior iteration".
Prints each part's outcome. Exit 1: either part shows the bug; exit 0: both train with equal gradients on all ranks.
Variants run: fully_shard instead of replicate_with_fsdp as the inner call: exit 0 (both parts); in part 1 the
DDP-based replicate applied first, then replicate_with_fsdp on model[1]: the same AttributeError (exit 1).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed._composable.replicate import replicate as ddp_replicate
from torch.distributed._composable.replicate_with_fsdp import replicate
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank = dist.get_rank()
bug = False

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
replicate(model[1])
ddp_replicate(model)
try:
    model(torch.randn(2, 4)).sum().backward()
    msg = "trains"
except AttributeError as e:
    bug, msg = True, f"first forward raised AttributeError: {e}   <-- BUG"
if rank == 0:
    print(f"part 1: {msg}")

torch.manual_seed(0)
model = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)), nn.Linear(4, 4))
replicate(model[0][1])
ddp_replicate(model[0])
fully_shard(model)
try:
    for step in range(2):
        model(torch.randn(2, 4, generator=torch.Generator().manual_seed(rank))).sum().backward()
        grad = model[0][0].weight.grad
        grads = [torch.empty_like(grad) for _ in range(dist.get_world_size())]
        dist.all_gather(grads, grad)
        same = all(torch.equal(grads[0], g) for g in grads)
        bug |= not same
        if rank == 0:
            print(f"part 2, step {step}: model[0][0].weight.grad equal on all ranks: {same}{'' if same else '   <-- BUG'}")
        for p in model.parameters():
            p.grad = None
except RuntimeError as e:
    bug = True
    if rank == 0:
        print(f"part 2, step {step}: RuntimeError: {str(e).splitlines()[0][:110]}...   <-- BUG")
flag = torch.tensor([int(bug)])
dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank exits alike
bug = bool(flag.item())
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: replicate takes the replicate_with_fsdp module's parameters" if bug
                                             else "ok: both nestings train"))
del model  # the DDP object before its process group
dist.destroy_process_group()
sys.stdout.flush()
os._exit(1 if bug else 0)  # not sys.exit: a gloo thread can abort the interpreter's teardown on this build
