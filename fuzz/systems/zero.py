"""System under test of the ``zero`` family: DDP (with the plan's ``gradient_as_bucket_view`` and
``static_graph``) and ``ZeroRedundancyOptimizer`` around the case's optimizer, in the case's parameter groups.

Invariant checked after set-up: the ranks' partitions cover every parameter exactly once (an
:class:`~fuzz.systems.fsdp2.InvariantViolation` otherwise).  That every rank holds the same parameters after
each step is the oracle's replica check.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer

from fuzz.systems.base import optimizer_parts
from fuzz.systems.ddp import DDPSystem
from fuzz.systems.fsdp2 import InvariantViolation


class ZeroSystem(DDPSystem):
    name = "zero"

    def ddp_kwargs(self) -> dict:
        plan = self.case.plan
        return {"gradient_as_bucket_view": plan.gradient_as_bucket_view, "static_graph": plan.static_graph}

    def make_optimizer(self) -> torch.optim.Optimizer:
        cls, param_groups, kwargs = optimizer_parts(self.case.train, self.named_parameters())
        optim = ZeroRedundancyOptimizer(param_groups, optimizer_class=cls,
                                        parameters_as_bucket_view=self.case.plan.parameters_as_bucket_view, **kwargs)
        self._check_partition(optim)
        return optim

    def _check_partition(self, optim: ZeroRedundancyOptimizer) -> None:
        """Every parameter given to ZeRO (frozen ones too: it partitions them all) is in exactly one rank's local
        optimizer."""
        index = {id(p): n for n, p in self.named_parameters()}
        mine = sorted(index[id(p)] for g in optim.optim.param_groups for p in g["params"])
        everyone: list = [None] * self.ctx.world_size
        dist.all_gather_object(everyone, mine)
        owned = [n for names in everyone for n in names]
        given = sorted(index.values())
        if sorted(owned) != given:
            extra = sorted({n for n in owned if owned.count(n) > 1} | (set(owned) - set(given)))
            missing = sorted(set(given) - set(owned))
            raise InvariantViolation(f"ZeRO partitions: owned twice or unknown {extra[:5]}, owned by no rank "
                                     f"{missing[:5]}")
