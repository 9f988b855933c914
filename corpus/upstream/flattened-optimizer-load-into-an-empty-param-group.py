"""set_state_dict(..., StateDictOptions(flatten_optimizer_state_dict=True)) cannot load the state dict get_state_dict
gave with the same options when the optimizer has a parameter group without parameters (as a pipeline stage's
optimizer has for a group whose parameters live on other stages): IndexError 'list index out of range' in
_unflatten_optim_state_dict, which reads each group's hyperparameters from the keys of its first parameter.

    torchrun --nproc-per-node=2 flattened-optimizer-load-into-an-empty-param-group.py   (CPU, gloo)

nn.Sequential(Linear(4, 4), Linear(4, 1)) under fully_shard, AdamW([{"params": all}, {"params": [], "lr": 0.5}]), one
step, get_state_dict then set_state_dict into a fresh copy, flattened and not. Prints, on rank 0, whether each load
worked. Exit 1: the flattened load raises (the bug); exit 0: both load.
Variants run: without the empty group (exit 0); a plain model without fully_shard (exit 1); one process (exit 1);
set_optimizer_state_dict alone (exit 1); full_state_dict=True (the unflattened full load works, the flattened one
raises the same IndexError; exit 1).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank = dist.get_rank()


def build():
    torch.manual_seed(0)
    model = fully_shard(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1)))
    groups = [{"params": list(model.parameters())}, {"params": [], "lr": 0.5}]
    return model, torch.optim.AdamW(groups, lr=0.1)


bug = False
for flatten in (False, True):
    options = StateDictOptions(flatten_optimizer_state_dict=flatten)
    model, optim = build()
    model(torch.randn(2, 4)).sum().backward()
    optim.step()
    model_sd, optim_sd = get_state_dict(model, optim, options=options)
    model2, optim2 = build()
    try:
        set_state_dict(model2, optim2, model_state_dict=model_sd, optim_state_dict=optim_sd, options=options)
        result = "loads"
    except IndexError as e:
        result, bug = f"IndexError: {e}   <-- BUG", bug or flatten
    if rank == 0:
        print(f"flatten_optimizer_state_dict={flatten!s:5s}: set_state_dict {result}")
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: a flattened state dict does not load with an empty param group"
                                             if bug else "ok: both load"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
