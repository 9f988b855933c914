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
        # A gate leaves a child unused on some forwards (alike on every rank). find_unused_parameters: parameters
        # that "don't receive gradients ... are preemptively marked as being ready to be reduced" (distributed.py).
        gated = bool(self.case.model.gates())
        return DDP(model, device_ids=device_ids, find_unused_parameters=gated, **self.ddp_kwargs())

    def ddp_kwargs(self) -> dict:
        """DistributedDataParallel's other arguments (a subclass's plan may set them)."""
        return {}

    def unfreeze(self, names: set[str]) -> None:
        """DDP reduces only the parameters that required gradients when it was built: wrap the module anew.
        DDP's docstring (``torch/nn/parallel/distributed.py``) says that its constructor registers "gradient
        reduction functions on all the parameters of the model itself at the time of construction. If you change
        the model's parameters afterwards, gradient reduction functions no longer match the correct set of
        parameters" (it speaks of changing parameters; changing ``requires_grad`` is the nearest case)."""
        super().unfreeze(names)
        self.model = self.wrap(self.model.module)
        if self.compiler is not None:  # compiled as the first DDP was
            self.model = self.compiler.whole(self.model)

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
        loss = self.forward_loss(batch, target, module)
        params = [p for p in module.parameters() if p.requires_grad]
        # DDP: "the gradients between different nodes are averaged" (torch/nn/parallel/distributed.py): a non-root
        # pass, which DDP does not see, is averaged by hand and accumulated into .grad.
        for p, grad in zip(params, torch.autograd.grad(loss, params, allow_unused=True)):
            if grad is not None:
                # Dense, as AccumulateGrad would make it: the gradient of ``w.sum(0)`` is an expanded view
                # that in-place collectives and division cannot write (a Scale module's 3-D parameter).
                grad = grad.clone(memory_format=torch.contiguous_format)
                dist.all_reduce(grad)
                grad.div_(self.ctx.world_size)
                p.grad = grad if p.grad is None else p.grad.add_(grad)
        return loss.detach()
