"""Faults inside the composable APIs (replicate under fully_shard, refusals)."""

from __future__ import annotations

import torch

from parityfuzz.families.composable.system import ComposableSystem

from tests.faults.injection import _Injected


class ReplicateUnderFullyShardUnaveraged(_Injected, ComposableSystem):
    """The DDP-based ``replicate`` on a module inside a ``fully_shard`` subtree keeps each rank's own gradients:
    its DistributedDataParallel, built at the first forward, gets a communication hook that returns the bucket
    unreduced.  Wrong only for a replicate under fully_shard, on several ranks with different inputs."""

    def inject(self):
        from torch.distributed._composable.replicate import _ReplicateState

        from parityfuzz.case import under
        from parityfuzz.systems.base import resolve

        plan = self.case.plan
        managed = plan.data_parallel()
        doomed = [p for p, api in managed.items() if api == "replicate"
                  and any(a == "fully_shard" and q != p and under(p, (q,)) for q, a in managed.items())]
        original = _ReplicateState.init
        system = self

        def init(state, module, *args, **kwargs):
            original(state, module, *args, **kwargs)
            if any(module is resolve(system.model, p) for p in doomed):
                def unreduced(_, bucket):
                    fut = torch.futures.Future()
                    fut.set_result(bucket.buffer())
                    return fut
                state._ddp.register_comm_hook(None, unreduced)

        _ReplicateState.init = init


class ComposableRefusalSuppressed(ComposableSystem):
    """A ``replicate`` on a module ``fully_shard`` already manages is skipped instead of refused (and so is a
    second call of one API on a module): a case torch documents refusing then trains."""

    def wrap(self, model):
        import dataclasses

        seen, kept = set(), []
        for c in self.case.plan.applies:
            key = (c.path, "checkpoint" if c.api == "checkpoint" else "data-parallel")
            if key not in seen:
                seen.add(key)
                kept.append(c)
        self.case = dataclasses.replace(self.case, plan=dataclasses.replace(self.case.plan, applies=tuple(kept)))
        return super().wrap(model)
