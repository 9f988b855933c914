"""The reference: plain DistributedDataParallel over all ranks."""

from __future__ import annotations

import contextlib

import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from fuzz.systems.base import System


class DDPSystem(System):
    name = "ddp"

    def wrap(self, model: nn.Module) -> nn.Module:
        device_ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
        # A gate leaves its child unused on some forwards (alike on every rank): DDP must be told.
        gated = any(node.kind == "gate" for _, node in self.case.model.body.walk("body"))
        return DDP(model, device_ids=device_ids, find_unused_parameters=gated)

    def inner(self) -> nn.Module:
        return self.model.module

    def microbatch(self, index: int, last: bool):
        return contextlib.nullcontext() if last else self.model.no_sync()

    def sync_nonroot_gradients(self) -> None:
        """A forward of a submodule bypasses DDP, whose reducer ignores a backward it did not prepare: the
        gradients are averaged by hand, as PyTorch's own non-root test does."""
        for p in self.inner().parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad.div_(self.ctx.world_size)
