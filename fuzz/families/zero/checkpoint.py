"""``ZeroRedundancyOptimizer``'s own way (``zero``), as its documentation gives it: ``consolidate_state_dict(to=0)``
on every rank, then ``state_dict()`` on rank 0 ("Return the last global optimizer state known to this rank": the
global state, parameters by their index over the optimizer's parameter groups), written by rank 0 with the DDP
module's state dict through ``torch.save``; loaded on every rank with ``torch.load``, the module's
``load_state_dict`` and ZeRO's ``load_state_dict`` ("Load the state pertaining to the given rank from the input
``state_dict``": each rank keeps its own partition's, whatever the world size that saved it).

A state dict keyed by indices has no names to check: the model's keys are checked, and the loaded state is held
to the saved snapshot by name (:func:`parityfuzz.checkpoint.invariants.snapshot`).
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
