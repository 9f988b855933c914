"""What the mixed-precision references share: each parameter kept twice, a master in the model's dtype that the
optimizer steps, and a compute copy in the dtype the forward runs in, re-cast from the master after every step
(as FSDP casts its sharded parameter at every all-gather).

Two layers: :class:`Masters`, a case-free module (the emulations of :mod:`parityfuzz.parts.fully_shard.reference` and
:mod:`parityfuzz.parts.fsdp1.reference` subclass it; an exported script copies them by source), and
:class:`EmulatedReference`, the :class:`~parityfuzz.systems.base.System` that trains a case through one.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn

from parityfuzz.systems.base import System, make_optimizer, make_scheduler


def cast_floats(to: torch.dtype):
    """A function casting a floating-point tensor to ``to`` and leaving anything else alone (a module's input cast)."""
    def cast(x):
        if isinstance(x, torch.Tensor) and torch.is_floating_point(x) and x.dtype != to:
            return x.to(to)
        return x
    return cast


def divide_factors(reduce_dtype: torch.dtype, n: int) -> tuple[float | None, float | None, dist.ReduceOp]:
    """``(pre-divide, post-divide, op)`` for a gradient reduction over ``n`` ranks, as FSDP2 chooses them (the
    pre-divisor is a power of two, so the split is exact: it changes no value short of fp16 overflow)."""
    if reduce_dtype in (torch.float32, torch.bfloat16):
        return None, None, (dist.ReduceOp.SUM if n == 1 else dist.ReduceOp.AVG)
    pre = 1
    while n % pre == 0 and n / pre > pre:
        pre *= 2
    return pre, n / pre, dist.ReduceOp.SUM


class Masters(nn.Module):
    """``module`` trained from master copies of its parameters: ``masters`` (clones, what the optimizer steps and
    what is compared) and ``compute`` (in ``compute_dtype(name)``, what the forward uses; they replace the
    parameters in ``module``, tied ones staying tied).  Used like DDP: call it, run each microbatch but a step's
    last under :meth:`no_sync`, call :meth:`finish_backward` after each backward and :meth:`stepped` after each
    optimizer step, :meth:`thaw` after setting ``requires_grad`` on masters.  A subclass reduces the gradients
    into the masters' ``.grad``."""

    def __init__(self, module: nn.Module, compute_dtype: Callable[[str], torch.dtype]):
        super().__init__()
        self.module = module
        self.masters: dict[str, nn.Parameter] = {}
        self.compute: dict[str, nn.Parameter] = {}
        #: Each parameter's largest local gradient magnitude since :meth:`take_local_scales` (where a subclass
        #: sees the local gradients the reduction sums).
        self.local_scales: dict[str, float] = {}
        #: False inside :meth:`no_sync`: the microbatch running is not its step's last.
        self.syncing = True
        by_id: dict[int, nn.Parameter] = {}
        # FSDP2 param_dtype: "The optimizer step uses the sharded parameter in the original dtype" (_fsdp_api.py);
        # FSDP1: "Outside forward and backward, the *sharded* parameters are kept in full precision" (fsdp/api.py).
        for name, p in module.named_parameters():
            self.masters[name] = nn.Parameter(p.detach().clone(), requires_grad=p.requires_grad)
            by_id[id(p)] = self.compute[name] = nn.Parameter(p.detach().to(compute_dtype(name)),
                                                             requires_grad=p.requires_grad)
        for m in module.modules():
            for key, p in list(m._parameters.items()):
                if p is not None:
                    m._parameters[key] = by_id[id(p)]

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """A microbatch that is not its step's last."""
        self.syncing = False
        try:
            yield
        finally:
            self.syncing = True

    def finish_backward(self) -> None:
        """What runs once a backward is done (a subclass's reduction)."""

    def thaw(self) -> None:
        """The compute copies take their masters' ``requires_grad`` (after frozen parameters are unfrozen)."""
        # requires_grad set on the masters (FSDP's sharded parameters, after reshard(): "the registered parameters
        # must be the sharded parameters", _fully_shard.py) applies to what the forward uses.
        for name, master in self.masters.items():
            self.compute[name].requires_grad_(master.requires_grad)

    def stepped(self) -> None:
        """After an optimizer step: the compute copies re-cast from the masters."""
        with torch.no_grad():
            for name, master in self.masters.items():
                self.compute[name].copy_(master)

    def take_local_scales(self) -> dict[str, float]:
        scales, self.local_scales = self.local_scales, {}
        return scales


class EmulatedReference(System):
    """A reference that trains the case through a :class:`Masters` emulation (:meth:`emulate` builds it): the
    optimizer, the trace and ``unfreeze`` see the masters."""

    def emulate(self, model: nn.Module) -> Masters:
        raise NotImplementedError

    def setup(self, model: nn.Module) -> None:
        self.model = self.emulate(model.to(self.ctx.device))
        self.optim = make_optimizer(self.case.train, self.model.masters.items())
        self.scheduler = make_scheduler(self.case.train, self.optim)
        self.scaler = self.make_scaler()  # (System.setup's, which this one replaces: loss scaling too)

    def inner(self) -> nn.Module:
        return self.model.module

    def named_parameters(self):
        yield from self.model.masters.items()

    def mesh_groups(self):
        """``(shard group, replicate group or None)`` of the case's mesh."""
        mesh = self.ctx.mesh(self.case.mesh.shape, self.case.mesh.names)
        return mesh.get_group("dp_shard"), mesh.get_group("dp_replicate") if "dp_replicate" in self.case.mesh.names \
            else None

    def accumulation(self, index: int, last: bool):
        return contextlib.nullcontext() if last else self.model.no_sync()

    def forward_backward(self, batch, target, path=None):
        loss = super().forward_backward(batch, target, path)
        self.model.finish_backward()
        return loss

    def unfreeze(self, names: set[str]) -> None:
        super().unfreeze(names)  # the masters
        self.model.thaw()

    def optimizer_step(self) -> bool:
        skipped = super().optimizer_step()
        self.model.stepped()
        return skipped

    def _watch_local_gradients(self) -> None:
        """The masters get no autograd gradient: the emulation sees the local ones (:meth:`local_gradient_scales`)."""

    def local_gradient_scales(self) -> dict[str, float]:
        return self.model.take_local_scales()
