"""The reference: plain DistributedDataParallel over all ranks."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from parityfuzz.systems.base import System, resolve


class DDPSystem(System):
    name = "ddp"

    def wrap(self, model: nn.Module) -> nn.Module:
        device_ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
        # A gate leaves its child unused on some forwards (alike on every rank): DDP must be told.
        gated = any(node.kind == "gate" for _, node in self.case.model.body.walk("body"))
        return DDP(model, device_ids=device_ids, find_unused_parameters=gated, **self.ddp_kwargs())

    def ddp_kwargs(self) -> dict:
        """DistributedDataParallel's other arguments (a subclass's plan may set them)."""
        return {}

    def unfreeze(self, names: set[str]) -> None:
        """DDP reduces only the parameters that required gradients when it was built: wrap the module anew,
        as DDP's documentation asks of a user who changes ``requires_grad``."""
        super().unfreeze(names)
        self.model = self.wrap(self.model.module)

    def inner(self) -> nn.Module:
        return self.model.module

    def accumulation(self, index: int, last: bool):
        return contextlib.nullcontext() if last else self.model.no_sync()

    def forward_backward(self, batch, target, path=None):
        """A non-root pass bypasses DDP: its gradients are averaged by hand, as PyTorch's own non-root test
        does.  They are taken with ``autograd.grad``, not ``backward``: with ``find_unused_parameters`` DDP's
        accumulate-grad hooks mark every parameter a backward reaches as used, even in a backward DDP did not
        prepare, and the next step would then all-reduce gradients it never gets (a RuntimeError)."""
        if path is None:
            return super().forward_backward(batch, target)
        module = resolve(self.inner(), path)
        loss = self.loss(self.forward(batch, module), target)
        params = [p for p in module.parameters() if p.requires_grad]
        for p, grad in zip(params, torch.autograd.grad(loss, params, allow_unused=True)):
            if grad is not None:
                # Dense, as AccumulateGrad would make it: the gradient of ``w.sum(0)`` is an expanded view
                # that in-place collectives and division cannot write (a Scale module's 3-D parameter).
                grad = grad.clone(memory_format=torch.contiguous_format)
                dist.all_reduce(grad)
                grad.div_(self.ctx.world_size)
                p.grad = grad if p.grad is None else p.grad.add_(grad)
        return loss.detach()
