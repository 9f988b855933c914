"""The optimizer state dict get_state_dict gives with StateDictOptions(full_state_dict=True,
flatten_optimizer_state_dict=True) does not load back through set_state_dict with the same options: KeyError
'param_groups.0.params.0' on every rank (the full load merges the nested checkpoint into the optimizer's own state
dict, which it fetches flattened, and the two key formats do not meet).

    torchrun --nproc-per-node=2 full-optimizer-state-dict-flattened-does-not-load.py   (CPU, gloo)

A Linear(4, 4) under fully_shard trains one step with SGD(momentum=0.9); get_state_dict then set_state_dict into a
fresh copy, for each combination of full_state_dict and flatten_optimizer_state_dict. Prints, on rank 0, whether each
load worked and restored the saved momentum buffer. Exit 1: the full flattened load fails (the bug); exit 0: all load.
Variants run: a plain Linear without fully_shard (exit 1); one process (exit 1); Adam in place of SGD (exit 1);
set_optimizer_state_dict alone (exit 1); broadcast_from_rank0=True through set_model_state_dict and
set_optimizer_state_dict, rank 0 holding the full dicts (exit 1: KeyError 'state' on rank 0, 'param_groups' on the
other rank); FSDP1 (FullyShardedDataParallel, use_orig_params=True) in place of fully_shard, which loads through
FSDP.optim_state_dict_to_load instead (exit 0).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_optimizer_state_dict, get_state_dict, set_state_dict)
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank = dist.get_rank()


def build():
    torch.manual_seed(0)
    model = fully_shard(nn.Linear(4, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


bug = False
for full, flatten in ((False, False), (False, True), (True, False), (True, True)):
    options = StateDictOptions(full_state_dict=full, flatten_optimizer_state_dict=flatten)
    model, optim = build()
    model(torch.randn(2, 4)).sum().backward()
    optim.step()
    model_sd, optim_sd = get_state_dict(model, optim, options=options)
    model2, optim2 = build()
    try:
        set_state_dict(model2, optim2, model_state_dict=model_sd, optim_state_dict=optim_sd, options=options)
        check = StateDictOptions(full_state_dict=True)
        ok = torch.equal(get_optimizer_state_dict(model2, optim2, options=check)["state"]["weight"]["momentum_buffer"],
                         get_optimizer_state_dict(model, optim, options=check)["state"]["weight"]["momentum_buffer"])
        result = "loads" if ok else "loads a momentum buffer that differs from the saved one"
    except KeyError as e:
        ok, result = False, f"KeyError: {e}"
    bug |= not ok
    if rank == 0:
        print(f"full_state_dict={full!s:5s} flatten_optimizer_state_dict={flatten!s:5s}: set_state_dict {result}"
              f"{'' if ok else '   <-- BUG'}")
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: a full flattened optimizer state dict does not load back" if bug
                                             else "ok: every combination loads"))
sys.stdout.flush()
os._exit(1 if bug else 0)  # not sys.exit: a gloo thread still releasing a finished all-gather can abort the teardown
