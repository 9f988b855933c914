"""System under test of the ``zero`` family, and its reference.

:class:`ZeroSystem`: DDP (with the plan's ``gradient_as_bucket_view`` and ``static_graph``) and
``ZeroRedundancyOptimizer`` around the case's optimizer, in the case's parameter groups; with ``overlap`` the
optimizer steps inside DDP's backward through ``hook_with_zero_step(_interleaved)``; a ``late_group`` joins through
``add_param_group``; at ``reload_at`` the optimizer state is consolidated on one rank, saved, and loaded into a
fresh ``ZeroRedundancyOptimizer`` that trains on.

:class:`ZeroReference`: plain DDP with the whole optimizer on every rank, which skips the overlap's warm-up steps and
adds the late group at the same step (and is never interrupted).

Invariant checked after set-up (and after every repartition): the ranks' partitions cover every parameter
exactly once (an :class:`~parityfuzz.systems.base.InvariantViolation` otherwise).  That every rank holds the same
parameters after each step is the oracle's replica check.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer

from parityfuzz.run import calls
from parityfuzz.run.calls import Let
from parityfuzz.systems.base import make_scheduler, optimizer_parts
from parityfuzz.systems.ddp import DDPSystem
from parityfuzz.systems.base import InvariantViolation


class _ZeroTraining(DDPSystem):
    """What the system and its reference share: the optimizer's parts with the late group held back, and adding
    it at its step."""

    def optimizer_parts(self) -> tuple[type, list[dict], dict]:
        """The case's optimizer, without the late group (kept in ``self._late``)."""
        cls, groups, kwargs = optimizer_parts(self.case.train, self.named_parameters())
        self._late = groups.pop() if self.case.plan.late_group else None
        return cls, groups, kwargs

    def zero_grad(self, step: int) -> None:
        if step and step == self.case.plan.late_group:
            self.optim.add_param_group(self._late)
            self.joined()
        super().zero_grad(step)

    def joined(self) -> None:
        """Called after the late group joined the optimizer."""


class ZeroReference(_ZeroTraining):
    name = "zero_reference"

    def make_optimizer(self) -> torch.optim.Optimizer:
        cls, groups, kwargs = self.optimizer_parts()
        self._steps = 0
        return cls(groups, **kwargs)

    def optimizer_step(self) -> bool:
        """Under ``overlap`` the first steps update nothing (ZeRO waits for DDP's rebuilt buckets)."""
        self._steps += 1
        return self._steps > self.case.plan.warmup_steps() and super().optimizer_step()


class ZeroSystem(_ZeroTraining):
    name = "zero"

    def ddp_kwargs(self) -> dict:
        return self.case.plan.ddp_options()

    def make_optimizer(self) -> torch.optim.Optimizer:
        cls, groups, kwargs = self.optimizer_parts()
        plan = self.case.plan
        if not plan.overlap:
            optim = calls.run([Let("optim", plan.optimizer_call())], {
                "ZeroRedundancyOptimizer": ZeroRedundancyOptimizer, "groups": groups, "cls": cls, "kwargs": kwargs})["optim"]
            self._check_partition(optim)
            return optim
        from torch.distributed.algorithms.ddp_comm_hooks import ddp_zero_hook
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        # With overlap ZeRO takes a flat parameter list (groups are refused by validation) and partitions DDP's
        # buckets once they are rebuilt.
        optim = ZeroRedundancyOptimizer([p for g in groups for p in g["params"]], optimizer_class=cls,
                                        overlap_with_ddp=True, **kwargs)
        hook = {"hook": ddp_zero_hook.hook_with_zero_step,
                "interleaved": ddp_zero_hook.hook_with_zero_step_interleaved}[plan.overlap]
        self.model.register_comm_hook(None, hook(allreduce_hook, self.model, optim, shard_buckets=plan.shard_buckets))
        return optim

    def optimizer_step(self) -> bool:
        # under overlap the step ran inside the backward (step() would only warn)
        return not self.case.plan.overlap and super().optimizer_step()

    def joined(self) -> None:
        self._check_partition(self.optim)

    def zero_grad(self, step: int) -> None:
        if step and step == self.case.plan.reload_at:
            self.reload()
        super().zero_grad(step)

    def reload(self) -> None:
        """``consolidate_state_dict(to=R)`` and ``state_dict()`` on rank R, the dict broadcast to every rank, a
        fresh ``ZeroRedundancyOptimizer`` (and scheduler) loading it, or (``reload_live``) the live ones; training
        goes on with them."""
        target = self.case.plan.consolidate_to
        self.optim.consolidate_state_dict(to=target)
        state = [self.optim.state_dict() if self.ctx.rank == target else None]
        dist.broadcast_object_list(state, src=target)
        scheduler = self.scheduler.state_dict() if self.scheduler is not None else None
        if not self.case.plan.reload_live:
            self.optim = self.make_optimizer()
            self.scheduler = make_scheduler(self.case.train, self.optim)
        self.optim.load_state_dict(state[0])
        if scheduler is not None:
            self.scheduler.load_state_dict(scheduler)

    def _check_partition(self, optim: ZeroRedundancyOptimizer) -> None:
        check_partition(optim, self.named_parameters())


def check_partition(optim: ZeroRedundancyOptimizer, named) -> None:
    """Every parameter given to ZeRO (frozen ones too: it partitions them all) is in exactly one rank's local
    optimizer (``named``: the model's ``(name, parameter)`` pairs)."""
    index = {id(p): n for n, p in named}
    mine = sorted(index[id(p)] for g in optim.optim.param_groups for p in g["params"])
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    owned = [n for names in everyone for n in names]
    given = sorted(index[id(p)] for g in optim.param_groups for p in g["params"])
    if sorted(owned) != given:
        extra = sorted({n for n in owned if owned.count(n) > 1} | (set(owned) - set(given)))
        missing = sorted(set(given) - set(owned))
        raise InvariantViolation(f"ZeRO partitions: owned twice or unknown {extra[:5]}, owned by no rank "
                                 f"{missing[:5]}")
