"""set_state_dict(..., StateDictOptions(full_state_dict=True, strict=False)) gives optimizer state to parameters the
checkpoint holds none for: it first steps the fresh optimizer with zero gradients (_init_optim_state) and the full
load keeps that state (AdamW: step=1, exp_avg=0, exp_avg_sq=0) for the parameters the given state dict lacks. What
get_optimizer_state_dict gives after the load is not what it gave at the save, and the resumed run's next step
differs from the uninterrupted run's (Adam's bias correction counts the phantom step).

    torchrun --nproc-per-node=2 set-state-dict-gives-state-the-checkpoint-lacks.py   (CPU, gloo)

nn.Sequential(Linear(4, 4), Linear(4, 4)) under fully_shard, the second Linear frozen (requires_grad=False) for the
first AdamW step, so it has no optimizer state; it is unfrozen and saved with get_state_dict(full_state_dict=True).
A fresh copy loads it with set_state_dict(full_state_dict=True, strict=False) (strict=True refuses a parameter
without state, by design), then both the original and the loaded copy take one more step on the same input.
Prints, on rank 0, the parameters with optimizer state saved and loaded, and how far the two runs' weights differ.
Exit 1: the loaded optimizer has state the checkpoint lacks, or the runs differ (the bug); exit 0: neither.
Variants run: full_state_dict=False (saved and loaded the sharded way) with strict=False (exit 0); without the
frozen first step, every parameter having state (exit 0); a plain model without fully_shard (exit 1); one process
(exit 1); SGD(momentum=0.9, dampening=0.5) in place of AdamW (exit 1: a zero momentum_buffer appears and the next step
differs); strict=True (RuntimeError "Missing optimizer state for parameter '1.weight'", as documented in the code).
"""
import copy
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
full = StateDictOptions(full_state_dict=True)


def build():
    torch.manual_seed(0)
    model = fully_shard(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)))
    return model, torch.optim.AdamW(model.parameters(), lr=0.1)


def step(model, optim, seed):
    model(torch.randn(2, 4, generator=torch.Generator().manual_seed(seed))).sum().backward()
    optim.step()
    optim.zero_grad()


model, optim = build()
model[1].requires_grad_(False)  # frozen for the first step: no gradient, so AdamW gives it no state
step(model, optim, seed=1)
model[1].requires_grad_(True)
model_sd, optim_sd = copy.deepcopy(get_state_dict(model, optim, options=full))  # as a checkpoint file holds them

model2, optim2 = build()
set_state_dict(model2, optim2, model_state_dict=model_sd, optim_state_dict=optim_sd,
               options=StateDictOptions(full_state_dict=True, strict=False))
loaded = get_optimizer_state_dict(model2, optim2, options=full)
extra = {fqn: ", ".join(f"{k}={v.abs().max().item():g}" for k, v in loaded["state"][fqn].items())
         for fqn in sorted(set(loaded["state"]) - set(optim_sd["state"]))}
step(model, optim, seed=2)  # the uninterrupted run
step(model2, optim2, seed=2)  # the resumed run
diff = (model[1].weight.full_tensor() - model2[1].weight.full_tensor()).abs().max().item()
bug = bool(extra) or diff != 0
if rank == 0:
    print(f"saved  optimizer state for {sorted(optim_sd['state'])}")
    print(f"loaded optimizer state for {sorted(loaded['state'])}")
    for fqn, values in extra.items():
        print(f"  {fqn}: {values} (max |value|)   <-- BUG: the checkpoint has no state for it")
    print(f"next step: max |1.weight uninterrupted - 1.weight resumed| = {diff:g}{'   <-- BUG' if diff else ''}")
    print(f"torch {torch.__version__}: " + ("BUG: set_state_dict adds optimizer state the checkpoint lacks" if bug
                                             else "ok: the loaded state is the saved one"))
sys.stdout.flush()
os._exit(1 if bug else 0)  # not sys.exit: a gloo thread still releasing a finished all-gather can abort the teardown
