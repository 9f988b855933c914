"""Ways through ``torch.distributed.checkpoint.state_dict`` (any family whose state ``get_state_dict`` takes):

- ``dcp``: ``get_state_dict`` (sharded, or full with ``full_state_dict``; ``cpu_offload``) and ``dcp.save``;
  loaded by ``dcp.load`` into the fresh system's own state dict, then ``set_state_dict`` (``strict``);
- ``full``: ``get_state_dict(full_state_dict=True, cpu_offload=...)`` written by rank 0 with ``torch.save``;
  loaded by ``torch.load`` on every rank (or on rank 0 alone, ``broadcast_from_rank0``) and
  ``set_state_dict(full_state_dict=True)``.

With ``separate``, ``get/set_model_state_dict`` then ``get/set_optimizer_state_dict`` instead of the combined
calls; with ``flatten_optimizer``, ``flatten_optimizer_state_dict`` on both sides.  The model is the system's
:meth:`~parityfuzz.systems.base.System.state_module` (a pipeline rank's stages as one module).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_optimizer_state_dict, get_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict, set_state_dict)

from parityfuzz.checkpoint.invariants import check_saved

FULL_FILE = "full.pt"
#: What an exported script copies with the ways: the functions they call, the constants they read.
SCRIPT_HELPERS = {"dcp": ("_get", "_set", "_describe"), "full": ("_get", "_set", "_describe")}
SCRIPT_CONSTANTS = ("FULL_FILE",)


def _get(system, case, options: StateDictOptions) -> tuple[dict, dict]:
    """The model's and the optimizer's state dicts: by one call, or (``separate``) model first, then optimizer."""
    model = system.state_module()
    if case.checkpoint.separate:
        return (get_model_state_dict(model, options=options),
                get_optimizer_state_dict(model, system.optim, options=options))
    return get_state_dict(model, system.optim, options=options)


def _set(system, case, model_sd: dict, optim_sd: dict, options: StateDictOptions) -> None:
    model = system.state_module()
    if case.checkpoint.separate:
        set_model_state_dict(model, model_sd, options=options)
        set_optimizer_state_dict(model, system.optim, optim_sd, options=options)
    else:
        set_state_dict(model, system.optim, model_state_dict=model_sd, optim_state_dict=optim_sd, options=options)


def save_dcp(system, case, directory: str) -> None:
    c = case.checkpoint
    options = StateDictOptions(full_state_dict=c.full_state_dict, cpu_offload=c.cpu_offload,
                               flatten_optimizer_state_dict=c.flatten_optimizer)
    model_sd, optim_sd = _get(system, case, options)
    check_saved(system, case, model_sd, optim_sd, f"get_state_dict({_describe(options)})",
                rank0_only=c.full_state_dict and c.cpu_offload, offloaded=c.cpu_offload)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=os.path.join(directory, "dcp"))


def load_dcp(system, case, directory: str) -> None:
    flatten = case.checkpoint.flatten_optimizer
    model_sd, optim_sd = _get(system, case, StateDictOptions(flatten_optimizer_state_dict=flatten))
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=os.path.join(directory, "dcp"))
    _set(system, case, state["model"], state["optim"],
         StateDictOptions(strict=case.checkpoint.strict, flatten_optimizer_state_dict=flatten))


def save_full(system, case, directory: str) -> None:
    c = case.checkpoint
    options = StateDictOptions(full_state_dict=True, cpu_offload=c.cpu_offload,
                               flatten_optimizer_state_dict=c.flatten_optimizer)
    model_sd, optim_sd = _get(system, case, options)
    holds = check_saved(system, case, model_sd, optim_sd, f"get_state_dict({_describe(options)})",
                        rank0_only=c.cpu_offload, offloaded=c.cpu_offload)
    if dist.get_rank() == 0 and holds:
        torch.save({"model": model_sd, "optim": optim_sd}, os.path.join(directory, FULL_FILE))
    dist.barrier()


def load_full(system, case, directory: str) -> None:
    c = case.checkpoint
    if c.broadcast_from_rank0 and dist.get_rank() != 0:
        state = {"model": {}, "optim": {}}
    else:
        state = torch.load(os.path.join(directory, FULL_FILE), map_location="cpu", weights_only=False)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=c.broadcast_from_rank0, strict=c.strict,
                               flatten_optimizer_state_dict=c.flatten_optimizer)
    _set(system, case, state["model"], state["optim"], options)


def _describe(options: StateDictOptions) -> str:
    return ", ".join(f"{k}=True" for k in ("full_state_dict", "cpu_offload", "flatten_optimizer_state_dict")
                     if getattr(options, k)) or "sharded"
