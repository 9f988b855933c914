"""The reference's checkpoint: its full plain tensors through ``torch.save`` and ``torch.load``, which round-trip
bit for bit.  Where a checkpoint event reshards, the reference takes this turn at the same step, into the
reference of the resumed case (which may run on another world size); the LR scheduler's state goes the same way
for every system."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def save(system, directory: str) -> None:
    """Rank 0 writes the model's and optimizer's plain state dicts (every rank holds the same)."""
    model = system.inner().state_dict()
    if any(hasattr(t, "device_mesh") for t in model.values()):
        raise TypeError(f"the trusted checkpoint takes plain tensors; {type(system).__name__} holds DTensors")
    if _rank() == 0:
        torch.save({"model": model, "optim": system.optim.state_dict()}, os.path.join(directory, "reference.pt"))
    save_scheduler(system, directory)


def load(system, directory: str) -> None:
    state = torch.load(os.path.join(directory, "reference.pt"), map_location=system.ctx.device, weights_only=False)
    system.inner().load_state_dict(state["model"])
    system.optim.load_state_dict(state["optim"])
    load_scheduler(system, directory)


def save_scheduler(system, directory: str) -> None:
    """Rank 0 writes the LR scheduler's state (alike on every rank); then every rank waits for the files."""
    if system.scheduler is not None and _rank() == 0:
        torch.save(system.scheduler.state_dict(), os.path.join(directory, "scheduler.pt"))
    _barrier()


def load_scheduler(system, directory: str) -> None:
    if system.scheduler is not None:
        system.scheduler.load_state_dict(torch.load(os.path.join(directory, "scheduler.pt"), weights_only=False))
