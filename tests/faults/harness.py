"""Faults of the harness's own making on FSDP2: gradients dropped, ranks misbehaving (raise, exit, hang, mismatched collectives), state left behind: what the executor, oracle and shrinker must survive and name."""

from __future__ import annotations

import os
import time

import torch
import torch.nn as nn

from parityfuzz.run.build import Twice
from parityfuzz.parts.fully_shard.system import FSDP2System


class _GradDropper(FSDP2System):
    """Zeroes the real gradients of the parameters ``doomed`` picks, before they are read and stepped."""

    def doomed(self, module: nn.Module) -> bool:
        raise NotImplementedError

    def gradients(self):
        seen = set()
        for module in self.inner().modules():
            if self.doomed(module):
                for p in module.parameters():
                    if p.grad is not None and id(p) not in seen:
                        seen.add(id(p))
                        p.grad.zero_()
        return super().gradients()


class OddLinearGradDrop(_GradDropper):
    """Loses the gradient of any Linear whose output width is odd."""

    def doomed(self, module):
        return isinstance(module, nn.Linear) and module.out_features % 2 == 1


class TwiceGradDrop(_GradDropper):
    """Loses the gradient of any module that is called twice in one forward."""

    def doomed(self, module):
        return isinstance(module, Twice)


class _MisbehaveOnRank(FSDP2System):
    """Misbehaves in the first forward/backward on ``RANK``; correct elsewhere."""

    RANK = 1

    def misbehave(self) -> None:
        raise NotImplementedError

    def forward_backward(self, batch, target, path=None):
        if self.ctx.rank == self.RANK:
            self.misbehave()
        return super().forward_backward(batch, target, path)


class RaiseOnRank1(_MisbehaveOnRank):
    def misbehave(self):
        raise RuntimeError("injected failure on rank 1")


class ExitOnRank0(_MisbehaveOnRank):
    RANK = 0

    def misbehave(self):
        os._exit(3)


class ExitOnWarmRank1(_MisbehaveOnRank):
    """Rank 1 exits in a case where its process ran this system in an earlier case, as a heap an earlier case
    damaged would crash a later one: fresh ranks train correctly."""

    ran_before = False  # (per rank process)

    def misbehave(self):
        if type(self).ran_before and not getattr(self, "began", False):
            os._exit(3)
        self.began = type(self).ran_before = True


class AbortOnRank1(_MisbehaveOnRank):
    def misbehave(self):
        os.abort()


class SleepOnRank1(_MisbehaveOnRank):
    def misbehave(self):
        time.sleep(3600)


class MismatchedCollectiveSize(_MisbehaveOnRank):
    """All ranks all-reduce, but rank 1 with a different size (gloo aborts the process)."""

    RANK = -1

    def forward_backward(self, batch, target, path=None):
        import torch
        import torch.distributed as dist

        dist.all_reduce(torch.ones(3 if self.ctx.rank == 1 else 5))
        return super().forward_backward(batch, target, path)


class MismatchedCollectiveKind(_MisbehaveOnRank):
    """Rank 1 broadcasts while the others all-reduce (blocks until timeout)."""

    RANK = -1

    def forward_backward(self, batch, target, path=None):
        import torch
        import torch.distributed as dist

        t = torch.ones(4)
        if self.ctx.rank == 1:
            dist.broadcast(t, src=1)
        else:
            dist.all_reduce(t)
        return super().forward_backward(batch, target, path)


class Polluter(FSDP2System):
    """Leaves the rank process dirty: a patched function, a global hook, a default dtype, RNG draws."""

    def setup(self, model):
        import torch
        import torch.nn.functional as F
        from torch.nn.modules.module import register_module_forward_hook

        original = F.gelu
        F.gelu = lambda x, approximate="none": original(x) * 1.5
        torch.Tensor.parityfuzz_marker = True
        register_module_forward_hook(lambda mod, args, out: out)
        torch.set_default_dtype(torch.float64)
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.rand(100)
        super().setup(model)


class HSDPSkipsReplicaAllReduce(FSDP2System):
    """On 2-D (HSDP) meshes, gradients are reduce-scattered within the shard group but never all-reduced
    across replicas."""

    def wrap(self, model):
        from torch.distributed.fsdp import FSDPModule

        model = super().wrap(model)
        if len(self.case.mesh.shape) == 2:
            for module in model.modules():
                if isinstance(module, FSDPModule):
                    module.set_requires_all_reduce(False)
        return model


class HangWithLayerNorm(FSDP2System):
    """Rank 1 never returns from forward when the model has a LayerNorm."""

    def forward_backward(self, batch, target, path=None):
        if self.ctx.rank == 1 and any(isinstance(m, nn.LayerNorm) for m in self.model.modules()):
            time.sleep(3600)
        return super().forward_backward(batch, target, path)


class RaiseWithLayerNorm(FSDP2System):
    """Every rank raises in the first forward when the model has a LayerNorm (an error, no rank left inside a
    collective: the pool runs on after it)."""

    def forward_backward(self, batch, target, path=None):
        if any(isinstance(m, nn.LayerNorm) for m in self.model.modules()):
            raise RuntimeError("injected failure with a LayerNorm")
        return super().forward_backward(batch, target, path)


class RaiseAfterACollectiveOnRank0(FSDP2System):
    """Every rank raises in the first forward, rank 0 after one more all-reduce than the others (which the
    others never join): an error on every rank, with the process group out of step."""

    def forward_backward(self, batch, target, path=None):
        import torch.distributed as dist

        if self.ctx.rank == 0:
            dist.all_reduce(torch.zeros(1), async_op=True)  # sent, never matched
        raise RuntimeError("injected failure after an unmatched collective")


class SlowOddLinearGradDrop(OddLinearGradDrop):
    """OddLinearGradDrop that takes a second per case, so a run can be interrupted mid-shrink."""

    def setup(self, model):
        time.sleep(1.0)
        super().setup(model)


class _PathGradDropper(FSDP2System):
    """Zeroes the real gradients of every parameter under the modules ``doomed_paths`` names."""

    def doomed_paths(self) -> list[str]:
        raise NotImplementedError

    def gradients(self):
        from parityfuzz.systems.base import resolve

        for path in self.doomed_paths():
            for p in resolve(self.model, path).parameters():
                if p.grad is not None:
                    p.grad.zero_()
        return super().gradients()


class CheckpointedGradDrop(_PathGradDropper):
    """Loses the gradients of activation-checkpointed modules."""

    def doomed_paths(self):
        return [c.path for c in self.case.plan.checkpoints]


class PrefetchTargetGradDrop(_PathGradDropper):
    """Loses the gradients of modules that another module prefetches."""

    def doomed_paths(self):
        return [t for p in self.case.plan.prefetch for t in p.forward + p.backward]


class OffloadForgetsUpdate(FSDP2System):
    """The optimizer's update of CPU-offloaded modules is never copied back."""

    def optimizer_step(self):
        from parityfuzz.systems.base import resolve

        offloaded = [p for w in self.case.plan.wraps if w.offload for p in resolve(self.model, w.path).parameters()]
        saved = [p.detach().clone() for p in offloaded]
        skipped = super().optimizer_step()
        with torch.no_grad():
            for p, old in zip(offloaded, saved):
                p.copy_(old)
        return skipped


class FirstMicrobatchGradDrop(FSDP2System):
    """With gradient sync off, the first microbatch's gradient is lost (its loss still counts)."""

    def microbatch(self, index, last):
        self._index = index
        return super().microbatch(index, last)

    def forward_backward(self, batch, target, path=None):
        if self._index == 0 and self.case.train.microbatches > 1 and self.case.plan.no_sync:
            loss = self.loss(self.model(batch), target)
            (loss * 0).backward()
            return loss.detach()
        return super().forward_backward(batch, target, path)


class NeverReshardsAfterBackward(FSDP2System):
    """Leaves parameters unsharded after backward (the invariant check must catch it)."""

    def wrap(self, model):
        model = super().wrap(model)
        model.set_reshard_after_backward(False)
        return model


class LowPrecisionGradSummed(FSDP2System):
    """Modules computing in bf16/fp16 get their gradients summed over ranks instead of averaged."""

    def gradients(self):
        from parityfuzz.systems.base import resolve

        for w in self.case.plan.wraps:
            if w.param_dtype in ("bfloat16", "float16"):
                state = resolve(self.model, w.path)._get_fsdp_state()
                for group in state._fsdp_param_groups:
                    for fsdp_param in group.fsdp_params:
                        if fsdp_param.sharded_param.grad is not None:
                            fsdp_param.sharded_param.grad.mul_(self.ctx.world_size)
        return super().gradients()


class CheckpointLosesRNG(FSDP2System):
    """Activation checkpointing without ``preserve_rng_state``: recomputed Dropout masks differ."""

    checkpoint_kwargs = {"preserve_rng_state": False}


class GatedGradDrop(_PathGradDropper):
    """Loses the gradients of modules that run only on some forwards."""

    def doomed_paths(self):
        return list(self.case.model.gates())


class BufferReset(FSDP2System):
    """Resets every buffer to ones while wrapping (as a faulty materialisation would)."""

    def wrap(self, model):
        with torch.no_grad():
            for b in model.buffers():
                b.fill_(1.0)
        return super().wrap(model)


class NeverReshardsAfterForward(FSDP2System):
    """Keeps parameters unsharded after forward although the case asks to reshard (the invariant must catch it)."""

    def wrap(self, model):
        model = super().wrap(model)
        model.set_reshard_after_forward(False)
        return model


class OffloadForgetsUpdateAndBufferReset(OffloadForgetsUpdate, BufferReset):
    """Two independent faults in one system: a soak run must report both."""


class NonRootPassUnsynced(FSDP2System):
    """A forward/backward through a non-root module leaves gradient sync off: its gradients are never
    reduced (nor reach the sharded parameters), so that pass's optimizer step is lost."""

    def forward_backward(self, batch, target, path=None):
        if path is None:
            return super().forward_backward(batch, target)
        from parityfuzz.systems.base import resolve

        module = resolve(self.model, path)
        module.set_requires_gradient_sync(False)
        try:
            return super().forward_backward(batch, target, path)
        finally:
            module.set_requires_gradient_sync(True)
