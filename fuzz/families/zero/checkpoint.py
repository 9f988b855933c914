"""``ZeroRedundancyOptimizer``'s own way (``zero``), as its documentation gives it: ``consolidate_state_dict(to=0)``
on every rank, then ``state_dict()`` on rank 0 ("Return the last global optimizer state known to this rank": the
global state, parameters by their index over the optimizer's parameter groups), written by rank 0 with the DDP
module's state dict through ``torch.save``; loaded on every rank with ``torch.load``, the module's
``load_state_dict`` and ZeRO's ``load_state_dict`` ("Load the state pertaining to the given rank from the input
``state_dict``": each rank keeps its own partition's, whatever the world size that saved it).

A state dict keyed by indices has no names to check: the model's keys are checked, and the loaded state is held
to the saved snapshot by name (:func:`parityfuzz.checkpoint.invariants.snapshot`), which reads it through
:func:`state_zero` (``get_state_dict`` raises "Optimizer state has not been consolidated on this rank" here).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from parityfuzz.checkpoint.invariants import check_keys

ZERO_FILE = "zero.pt"
#: The module constants the ways read, which an exported script defines.
SCRIPT_CONSTANTS = ("ZERO_FILE",)


def save_zero(system, case, directory: str) -> None:
    model_sd = system.model.module.state_dict()
    system.optim.consolidate_state_dict(to=0)
    if dist.get_rank() == 0:
        check_keys(system, case, model_sd, {}, "the DDP module's state_dict()")
        torch.save({"model": model_sd, "optim": system.optim.state_dict()}, os.path.join(directory, ZERO_FILE))
    dist.barrier()


def load_zero(system, case, directory: str) -> None:
    state = torch.load(os.path.join(directory, ZERO_FILE), map_location="cpu", weights_only=False)
    system.model.module.load_state_dict(state["model"], strict=case.checkpoint.strict)
    system.optim.load_state_dict(state["optim"])


def state_zero(system) -> tuple[dict, dict]:
    """The system's full state as ``get_state_dict`` gives other systems': the DDP module's state dict, and the
    optimizer's global state (consolidated on rank 0, sent to every rank) with each parameter's index over the
    optimizer's parameter groups replaced by its name."""
    system.optim.consolidate_state_dict(to=0)
    state = [system.optim.state_dict() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(state, src=0)
    names = {id(p): name for name, p in system.model.module.named_parameters()}
    order = [names[id(p)] for group in system.optim.param_groups for p in group["params"]]
    optim = {"state": {order[i]: s for i, s in state[0]["state"].items()},
             "param_groups": [{**g, "params": [order[i] for i in g["params"]]} for g in state[0]["param_groups"]]}
    return system.model.module.state_dict(), optim
