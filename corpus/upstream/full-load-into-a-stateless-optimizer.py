"""set_state_dict(..., StateDictOptions(full_state_dict=True)) cannot load the full state dict get_state_dict gave for
an optimizer that keeps no state tensors (plain SGD, no momentum): instead of loading the (tensor-free) state it
raises AssertionError "Expected device to be set" (it looks for the device in the optimizer's own state tensors).

    torchrun --nproc-per-node=2 full-load-into-a-stateless-optimizer.py   (CPU, gloo)

A Linear(4, 4) under fully_shard trains one step with SGD(lr=0.1); get_state_dict(full_state_dict=True) saves it and
set_state_dict with the same options loads it into a fresh copy. Prints, on rank 0, each optimizer tried and whether
the full load worked. Exit 1: the load raises for plain SGD (the bug); exit 0: it loads.
Variants run: SGD(momentum=0.9) (a momentum_buffer tensor; exit 0); Adam (exit 0); full_state_dict=False, the sharded
way (exit 0); set_optimizer_state_dict alone in place of set_state_dict (exit 1); a plain Linear without fully_shard
(exit 1); one process (exit 1); FSDP1 (FullyShardedDataParallel(device_id=cpu), use_orig_params True or False) in
place of fully_shard, which loads through FSDP.optim_state_dict_to_load instead (both optimizers load; exit 0).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank = dist.get_rank()
options = StateDictOptions(full_state_dict=True)
optimizers = {"SGD(lr=0.1)": dict(lr=0.1), "SGD(lr=0.1, momentum=0.9)": dict(lr=0.1, momentum=0.9)}


def build(kwargs):
    torch.manual_seed(0)
    model = fully_shard(nn.Linear(4, 4))
    return model, torch.optim.SGD(model.parameters(), **kwargs)


bug = False
for name, kwargs in optimizers.items():
    model, optim = build(kwargs)
    model(torch.randn(2, 4)).sum().backward()
    optim.step()
    model_sd, optim_sd = get_state_dict(model, optim, options=options)
    model2, optim2 = build(kwargs)
    try:
        set_state_dict(model2, optim2, model_state_dict=model_sd, optim_state_dict=optim_sd, options=options)
        result, failed = "loads", False
    except AssertionError as e:
        result, failed = f"AssertionError: {e}   <-- BUG", True
    bug |= failed
    if rank == 0:
        print(f"{name:26s} full set_state_dict: {result}")
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: a full optimizer state dict of plain SGD does not load" if bug
                                             else "ok: both load"))
sys.stdout.flush()
os._exit(1 if bug else 0)  # not sys.exit: a gloo thread still releasing a finished all-gather can abort the teardown
