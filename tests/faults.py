"""Test-only systems under test: FSDP2, FSDP2 with TP, and FSDP1 with one injected fault each, wrong only in one
situation.

Cases name them as ``tests.faults:ClassName``; rank processes import this
module by that name.
"""

from __future__ import annotations

import os
import time

import torch
import torch.nn as nn

from parityfuzz.run.build import Twice
from parityfuzz.families.composable.system import ComposableSystem
from parityfuzz.parts.fsdp1.system import FSDP1System
from parityfuzz.families.fsdp1_tp.system import FSDP1TPSystem
from parityfuzz.parts.fully_shard.system import FSDP2System
from parityfuzz.families.fsdp2_tp.system import FSDP2TPSystem
from parityfuzz.families.pipeline.system import PipelineSystem
from parityfuzz.families.zero.system import ZeroSystem


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


# --------------------------------------------------------------------------- faults inside FSDP2 itself
# These patch torch's FSDP2 internals in the rank (the rank's isolation snapshot undoes the patch after the
# case), as a real bug there would behave, and each is subtle: one replica, one dtype, a fraction of a
# percent, a late step.


def _wrap_foreach_reduce(change) -> None:
    """Patch FSDP2's gradient reduction (``foreach_reduce`` as ``FSDPParamGroup.post_backward`` calls it):
    ``change(unsharded_grads, reduce_scatter_group, reduce_dtype)`` may edit the gradient list in place before
    the reduction and returns the reduce dtype to use."""
    import functools

    from torch.distributed.fsdp._fully_shard import _fsdp_param_group

    original = _fsdp_param_group.foreach_reduce

    @functools.wraps(original)
    def foreach_reduce(fsdp_params, unsharded_grads, group, stream, comm, orig_dtype, reduce_dtype, *rest):
        reduce_dtype = change(unsharded_grads, group, reduce_dtype)
        return original(fsdp_params, unsharded_grads, group, stream, comm, orig_dtype, reduce_dtype, *rest)

    _fsdp_param_group.foreach_reduce = foreach_reduce


class _Injected:
    """Injects a fault inside torch (:meth:`inject`) before the system under test is set up; the rank's
    isolation snapshot undoes it after the case."""

    def inject(self) -> None:
        raise NotImplementedError

    def setup(self, model):
        self.inject()
        super().setup(model)


def _patch_once(owner, name: str, make) -> None:
    """``owner.name = make(owner.name)``, unless a patch of this kind is in place already: a checkpoint event
    builds the system under test twice in one case, and a second wrapper would undo a swap or double a shift."""
    current = getattr(owner, name)
    if getattr(current, "_parityfuzz_fault", None) == make.__qualname__:
        return
    patched = make(current)
    patched._parityfuzz_fault = make.__qualname__
    setattr(owner, name, patched)


class _InsideFSDP2(_Injected, FSDP2System):
    """A fault inside FSDP2's internals."""


class ReplicaNotAllReduced(_InsideFSDP2):
    """On HSDP meshes with several replicas, rank 0 takes part in FSDP2's all-reduce across replicas but keeps
    its own reduce-scattered gradient: its replica of a shard drifts from the others' (rank 2's on a 2x2 mesh),
    which hold the right value."""

    def inject(self):
        import sys

        import torch.distributed as dist

        if len(self.case.mesh.shape) < 2 or self.case.mesh.shape[0] < 2 or self.ctx.rank != 0:
            return
        original = dist.all_reduce

        def all_reduce(tensor, *args, **kwargs):
            if sys._getframe(1).f_code.co_name == "foreach_reduce":
                tensor = tensor.clone()  # the collective runs; its result never reaches FSDP2's gradient
            return original(tensor, *args, **kwargs)

        dist.all_reduce = all_reduce


class ReducesInBf16(_InsideFSDP2):
    """Where a policy asks to reduce low-precision gradients in float32, FSDP2 reduces them in bfloat16
    (a relative error of about 1e-3)."""

    def inject(self):
        def change(grads, group, reduce_dtype):
            if reduce_dtype == torch.float32 and grads and grads[0].dtype in (torch.bfloat16, torch.float16):
                return torch.bfloat16
            return reduce_dtype

        _wrap_foreach_reduce(change)


class UnevenShardGradOff(_InsideFSDP2):
    """The gradient of a parameter whose dim-0 does not divide the shard group (padded for the
    reduce-scatter) comes out 0.5% too large."""

    def inject(self):
        def change(grads, group, reduce_dtype):
            n = 1 if group is None else group.size()
            for i, g in enumerate(grads):
                if g.size(0) % n:
                    grads[i] = g * 1.005
            return reduce_dtype

        _wrap_foreach_reduce(change)


class LateGradDrift(_InsideFSDP2):
    """From step 3 on, in models with attention (which amplify rounding from step to step), FSDP2's reduced
    gradients come out 0.3% too large."""

    step = 0

    def zero_grad(self, step):
        self.step = step
        super().zero_grad(step)

    def inject(self):
        if not any(n.kind == "attention" for _, n in self.case.model.body.walk("body")):
            return

        def change(grads, group, reduce_dtype):
            if self.step >= 3:
                grads[:] = [g * 1.003 for g in grads]
            return reduce_dtype

        _wrap_foreach_reduce(change)


class OutputLeftInBf16(_InsideFSDP2):
    """A module whose policy casts its outputs to float32 leaves a bfloat16 output as it is."""

    def inject(self):
        from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

        original = FSDPState._cast_output_dtype

        def _cast_output_dtype(state, output):
            if state._mp_policy.output_dtype == torch.float32 and getattr(output, "dtype", None) == torch.bfloat16:
                return output
            return original(state, output)

        FSDPState._cast_output_dtype = _cast_output_dtype


# --------------------------------------------------------------------------- faults inside tensor parallelism


class _InsideTP(_Injected, FSDP2TPSystem):
    """A fault inside torch's tensor-parallel styles (or FSDP2's handling of them)."""


class ReducesInBf16UnderTP(_InsideTP):
    """:class:`ReducesInBf16` on a tensor-parallel model: FSDP2 reduces the tp-local gradients over the
    data-parallel ranks in bfloat16 where the policy says float32."""

    inject = ReducesInBf16.inject


def _partial_taken_as_reduced(grad):
    """A gradient DTensor whose Partial (pending sum over tp) placements are relabelled Replicate: each rank
    keeps its own partial sum, as if the reduction had happened."""
    from torch.distributed.tensor import DTensor, Replicate

    if not isinstance(grad, DTensor) or not any(p.is_partial() for p in grad.placements):
        return grad
    placements = [Replicate() if p.is_partial() else p for p in grad.placements]
    return DTensor.from_local(grad.to_local(), grad.device_mesh, placements, run_check=False,
                              shape=grad.shape, stride=grad.stride())


class LossParallelBackwardCountsPadding(_InsideTP):
    """``loss_parallel()``'s fused backward of log-softmax and NLL loses the padding mask: ignored target tokens
    (``ignore_index``) are taken as class 0 (``torch.distributed.tensor.parallel.loss``), so the logits of padded
    positions get a gradient.  Only padded token targets under ``loss_parallel()`` reach it."""

    def inject(self):
        from torch.distributed.tensor.parallel import loss

        def make(original):
            def unmasked(grad_output, x, target, weight, reduction, ignore_index, *rest):
                target = torch.where(target == ignore_index, 0, target)
                return original(grad_output, x, target, weight, reduction, ignore_index, *rest)
            return unmasked

        _patch_once(loss, "_nll_loss_and_log_softmax_backward", make)


class SequenceParallelGradNotReduced(_InsideTP):
    """The gradient of a sequence-parallel norm's parameters (replicated over tp, computed from each rank's
    sequence shard) misses its sum over tp: with FSDP2 where FSDP2 redistributes it before its
    reduce-scatter, under TP alone where it is accumulated."""

    def inject(self):
        from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam
        from torch.distributed.tensor.parallel import SequenceParallel

        inner = FSDPParam._get_grad_inner_tensor
        FSDPParam._get_grad_inner_tensor = lambda self_, grad: inner(self_, _partial_taken_as_reduced(grad))
        replicate = SequenceParallel._replicate_module_fn

        def replicate_with_hook(self_, name, module, device_mesh):
            replicate(self_, name, module, device_mesh)
            for p in module.parameters():
                p.register_hook(_partial_taken_as_reduced)

        SequenceParallel._replicate_module_fn = replicate_with_hook


class RowwiseOutputNotReduced(_InsideTP):
    """A rowwise module's output (a partial sum on each tp rank) is taken as reduced: all-reduce or
    reduce-scatter skipped."""

    def inject(self):
        from torch.distributed.tensor.parallel import RowwiseParallel

        def prepare_output(output_layouts, use_local_output, mod, outputs, device_mesh):
            outputs = _partial_taken_as_reduced(outputs)
            if outputs.placements != output_layouts:  # Replicate -> Shard(1): a local chunk, no collective
                outputs = outputs.redistribute(placements=output_layouts)
            return outputs.to_local() if use_local_output else outputs

        RowwiseParallel._prepare_output_fn = staticmethod(prepare_output)


class ColwiseShardsInputDim(_InsideTP):
    """ColwiseParallel shards a Linear's weight on dim 1 (its input features) instead of dim 0."""

    def inject(self):
        from torch.distributed.tensor import Shard, distribute_tensor
        from torch.distributed.tensor.parallel import ColwiseParallel

        def partition(self_, name, module, device_mesh):
            for p_name, param in module.named_parameters():
                dim = 1 if p_name == "weight" else 0
                module.register_parameter(p_name, nn.Parameter(distribute_tensor(param, device_mesh, [Shard(dim)])))

        ColwiseParallel._partition_linear_fn = partition


class LeavesAMaskBehind(FSDP2TPSystem):
    """Fails between a RowwiseParallel embedding and the reduction of its output (a forward hook registered
    before tensor parallelism's runs first and raises), as any failing case may: the output's ``MaskPartial``
    keeps its mask materialized in DTensor's cached sharding propagation."""

    def wrap(self, model):
        def fail(module, args, output):
            raise RuntimeError("a failure right after the embedding")

        model.inp.register_forward_hook(fail)
        return super().wrap(model)


class ExtraCollectiveOnRankZero(FSDP2TPSystem):
    """Rank 0 all-reduces its loss over a group of its own after every forward (a collective the other ranks
    do not issue; it cannot block them)."""

    def setup(self, model):
        import torch.distributed as dist

        self.own_group = dist.new_group([0])  # every rank takes part in creating it
        super().setup(model)

    def forward(self, batch, module=None):
        import torch.distributed as dist

        out = super().forward(batch, module)
        if self.ctx.rank == 0:
            dist.all_reduce(torch.zeros(1), group=self.own_group)
        return out


# --------------------------------------------------------------------------- faults inside FSDP1 itself


def _collective_replaced_in(owner, attr: str, collective: str, replacement, when) -> None:
    """Patch ``owner.<attr>`` so that, on calls where ``when(*args)`` holds, the ``torch.distributed.<collective>``
    it calls is ``replacement(real collective)`` (the isolation snapshot undoes the patch after the case)."""
    import functools

    import torch.distributed as dist

    original = getattr(owner, attr)

    @functools.wraps(original)
    def patched(*args):
        if not when(*args):
            return original(*args)
        real = getattr(dist, collective)
        setattr(dist, collective, replacement(real))
        try:
            return original(*args)
        finally:
            setattr(dist, collective, real)

    setattr(owner, attr, patched)


def _all_reduce_skipped_in(function: str, when) -> None:
    """Patch FSDP1's ``_runtime_utils.<function>(state, handle)`` so that, where ``when(state, handle)``, its
    ``dist.all_reduce`` calls do nothing (the gradient keeps this rank's value)."""
    from torch.distributed.fsdp import _runtime_utils

    _collective_replaced_in(_runtime_utils, function, "all_reduce", lambda real: lambda *args, **kwargs: None, when)


class _InsideFSDP1(_Injected, FSDP1System):
    """A fault inside FSDP1's internals."""


class NoShardOrigParamsGradUnreduced(_InsideFSDP1):
    """Under ``NO_SHARD`` with ``use_orig_params=True``, FSDP1 skips its gradient all-reduce: each rank keeps
    its own (pre-divided) gradient."""

    def inject(self):
        _all_reduce_skipped_in("_reduce_grad_no_shard", lambda state, handle: handle._use_orig_params)


class HybridSkipsInterAllReduce(_InsideFSDP1):
    """Under ``HYBRID_SHARD`` (not ``_HYBRID_SHARD_ZERO2``), FSDP1 reduce-scatters within the shard group but
    skips the all-reduce across replicas."""

    def inject(self):
        from torch.distributed.fsdp._flat_param import HandleShardingStrategy

        _all_reduce_skipped_in("_reduce_grad",
                               lambda state, handle: handle._sharding_strategy == HandleShardingStrategy.HYBRID_SHARD)


class ReducesInParamDtype(FSDP1System):
    """FSDP1's flat-parameter handles forget a ``reduce_dtype`` that differs from ``param_dtype`` and reduce
    gradients in ``param_dtype`` (the special case of ``_init_param_reduce_dtypes`` taken for every policy):
    wrong only under mixed precision with both dtypes given and different."""

    def wrap(self, model):
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        model = super().wrap(model)
        for module in model.modules():
            if isinstance(module, FSDP) and module._handle is not None:
                module._handle._reduce_dtype = module._handle._fwd_bwd_param_dtype
        return model


class RefusalSuppressed(FSDP1System):
    """FSDP1 quietly drops ``cpu_offload`` and ``sync_module_states`` where it cannot honour them (no
    accelerator) instead of raising: a case torch documents refusing then trains."""

    def fsdp_kwargs(self, model):
        kwargs = super().fsdp_kwargs(model)
        kwargs.pop("cpu_offload", None)
        kwargs["sync_module_states"] = False
        return kwargs


class TensorParallelShardNotReduced(_Injected, FSDP1TPSystem):
    """FSDP1 given a device mesh (its DTensor extension on) skips the reduce-scatter over the data-parallel
    group: each rank keeps its own chunk of its local gradient.  Wrong only with tensor parallelism on a mesh
    whose data-parallel axis has several ranks."""

    def inject(self):
        import torch.distributed as dist
        from torch.distributed.fsdp import _runtime_utils

        def keep_own_chunk(real):
            def reduce_scatter(output, input, *args, group=None, **kwargs):
                output.copy_(input.chunk(dist.get_world_size(group))[dist.get_rank(group)])
            return reduce_scatter

        _collective_replaced_in(_runtime_utils, "_reduce_grad", "reduce_scatter_single", keep_own_chunk,
                                lambda state, handle: state._fsdp_extension is not None and state.world_size > 1)


class ZeroBucketFromWrongRank(_Injected, ZeroSystem):
    """With ``parameters_as_bucket_view=True``, ZeRO broadcasts each rank's bucket of updated parameters from
    the next rank instead, which did not step them: every rank ends up with the same stale values.  Wrong only
    with bucket views on several ranks."""

    def inject(self):
        import torch.distributed as dist
        from torch.distributed.optim import ZeroRedundancyOptimizer

        def from_next(real):
            def broadcast(tensor, src, group=None, async_op=False):
                return real(tensor, src=(src + 1) % dist.get_world_size(), group=group, async_op=async_op)
            return broadcast

        _collective_replaced_in(ZeroRedundancyOptimizer, "_broadcast_params_from_rank", "broadcast", from_next,
                                lambda zero, rank: zero.parameters_as_bucket_view and zero.world_size > 1)


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


class ZeroLoadSkipsTheLastOfEachPartition(_Injected, ZeroSystem):
    """ZeRO's ``load_state_dict`` leaves out the last parameter of each rank's partition (an off-by-one in the
    partition's range): that parameter keeps what its local optimizer held, none in a fresh ZeRO, the state it
    trained on to in a live one.  Only the ``zero`` checkpoint way loads through it."""

    def inject(self):
        from torch.distributed.optim import ZeroRedundancyOptimizer

        def skipping_the_last(real):
            def load_state_dict(zero, state_dict):
                mine = [p for group in zero._partition_parameters()[zero.rank] for p in group["params"]]
                kept = zero.optim.state.get(mine[-1]) if mine else None
                real(zero, state_dict)
                if mine:
                    if kept is None:
                        zero.optim.state.pop(mine[-1], None)
                    else:
                        zero.optim.state[mine[-1]] = kept
            return load_state_dict

        _patch_once(ZeroRedundancyOptimizer, "load_state_dict", skipping_the_last)


class ZeroOverlapOnGloo(_Injected, ZeroSystem):
    """Not a fault: ZeRO's overlap with DDP with torch's gloo refusal taken out (``hook_with_zero_step`` sees the
    backend as NCCL), so that the warm-up the reference models can be checked on CPU ranks."""

    def inject(self):
        import types

        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks import ddp_zero_hook

        ddp_zero_hook.dist = types.SimpleNamespace(**{k: getattr(dist, k) for k in dir(dist) if not k.startswith("__")})
        ddp_zero_hook.dist.get_backend = lambda *args, **kwargs: "nccl"


class ShortShardLoadedAtWrongOffset(_InsideFSDP2):
    """Loading a full state dict into DTensors (``set_state_dict(full_state_dict=True)``, with or without
    ``broadcast_from_rank0``) copies a short last shard (dim 0 not divisible by the shard group) from one row too
    early; every other shard, and every other way to load, is right."""

    def inject(self):
        import torch.distributed._state_dict_utils as utils

        compute = utils.compute_local_shape_and_global_offset

        def short(global_shape, mesh, placements):
            shape, offset = compute(global_shape, mesh, placements)
            full_chunk = -(-global_shape[0] // mesh.size()) if global_shape else 0
            return (shape, offset) if global_shape and 0 < shape[0] < full_chunk and offset[0] > 0 else None

        def shift_offsets(original):
            def shifted(global_shape, mesh, placements, *args, **kwargs):
                found = short(global_shape, mesh, placements)
                if found is None:
                    return original(global_shape, mesh, placements, *args, **kwargs)
                shape, offset = found
                return shape, (offset[0] - 1, *offset[1:])
            return shifted

        def shift_copies(original):
            def distributed(tensor, mesh, placements, *args, **kwargs):
                out = original(tensor, mesh, placements, *args, **kwargs)
                found = short(tuple(tensor.shape), mesh, placements)
                if found is not None:
                    (rows, *_), (first, *_) = found
                    out.to_local().copy_(tensor[first - 1:first - 1 + rows].to(out.to_local().device))
                return out
            return distributed

        _patch_once(utils, "compute_local_shape_and_global_offset", shift_offsets)
        _patch_once(utils, "distribute_tensor", shift_copies)


class OptimizerStateOfRenamedParamSwapped(_InsideFSDP2):
    """Where ``set_state_dict`` maps the optimizer state's names back to parameters of a model whose names had a
    wrapper prefix taken out (``_checkpoint_wrapped_module``, normalised away in the saved names), the states of
    the first two parameters of one shape change places."""

    def inject(self):
        import torch.distributed.checkpoint.state_dict as sd

        def swap_states(original):
            def split(model, optim, optim_state_dict, info):
                out = original(model, optim, optim_state_dict, info)
                state = out.get("state", {})
                renamed = any("_checkpoint_wrapped_module" in n for n, _ in model.named_parameters())
                params = [p for g in optim.param_groups for p in g["params"]]
                fqn = {id(p): next(iter(info.fqn_param_mapping[p])) for p in params if p in info.fqn_param_mapping}
                held = [p for p in params if fqn.get(id(p)) in state]
                pair = next(((p, q) for i, p in enumerate(held) for q in held[i + 1:] if p.shape == q.shape), None)
                if renamed and pair is not None:
                    a, b = fqn[id(pair[0])], fqn[id(pair[1])]
                    state[a], state[b] = state[b], state[a]
                return out

            return split

        _patch_once(sd, "_split_optim_state_dict", swap_states)


# --------------------------------------------------------------------------- faults inside one module's computation
# Where a divergence begins must name the module (parityfuzz.judge.origin): one fault in a module's forward, one in its
# backward, both inside torch's functionals.


class LayerNormOutputOff(_Injected, FSDP2System):
    """``F.layer_norm``'s output comes out 0.2% too large: a forward kernel bug in the LayerNorms alone."""

    def inject(self):
        import torch.nn.functional as F

        original = F.layer_norm

        def layer_norm(*args, **kwargs):
            return original(*args, **kwargs) * 1.002

        F.layer_norm = layer_norm


class GeluBackwardOff(_Injected, FSDP2System):
    """``F.gelu``'s backward is 0.3% off (its forward is right): a backward kernel bug in the GELUs alone."""

    def inject(self):
        import torch.nn.functional as F

        original = F.gelu

        class Gelu(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, approximate):
                ctx.save_for_backward(x)
                ctx.approximate = approximate
                return original(x, approximate=approximate)

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                with torch.enable_grad():
                    x = x.detach().requires_grad_()
                    (dx,) = torch.autograd.grad(original(x, approximate=ctx.approximate), x, grad)
                return dx * 1.003, None

        F.gelu = lambda x, approximate="none": Gelu.apply(x, approximate)


class CompiledBackwardOff(_Injected, FSDP2System):
    """Dynamo's ``aot_eager`` backend compiles every backward graph to return its first floating-point gradient
    0.2% off (a miscompiled backward): only a system under ``torch.compile`` with that backend reaches it."""

    def inject(self):
        import torch._dynamo as dynamo

        def make(lookup):
            def faulty(name):
                if name != "aot_eager":
                    return lookup(name)
                from functorch.compile import make_boxed_func
                from torch._dynamo.backends.common import aot_autograd

                def forward(gm, example_inputs):
                    return make_boxed_func(gm.forward)

                def backward(gm, example_inputs):
                    def run(*args):
                        outs = list(gm.forward(*args))
                        first = next((i for i, o in enumerate(outs)
                                      if isinstance(o, torch.Tensor) and o.is_floating_point()), None)
                        if first is not None:
                            outs[first] = outs[first] * (1 + 2e-3)
                        return outs
                    return make_boxed_func(run)

                return aot_autograd(fw_compiler=forward, bw_compiler=backward)
            return faulty

        _patch_once(dynamo, "lookup_backend", make)


class RecomputeWithoutAutocast(_Injected, FSDP2System):
    """Activation checkpointing's recompute forgets the CPU autocast region the forward ran in
    (``torch.utils.checkpoint._get_autocast_kwargs`` reports it off): only a checkpointed module under autocast
    reaches it, where the recomputed activations come out in float32 instead of the autocast dtype."""

    def inject(self):
        import torch.utils.checkpoint as checkpoint

        def make(original):
            def forgetful(device_type="cuda"):
                device_kwargs, cpu_kwargs = original(device_type)
                if device_type == "cpu" and device_kwargs is not None:
                    device_kwargs = {**device_kwargs, "enabled": False}
                return device_kwargs, {**cpu_kwargs, "enabled": False}
            return forgetful

        _patch_once(checkpoint, "_get_autocast_kwargs", make)


class ReentrantRecomputeWithLaterRng(_Injected, FSDP2System):
    """The reentrant checkpoint's recompute restores the CPU RNG state of the backward's time instead of the one
    its forward saved (``torch.utils.checkpoint.CheckpointFunction.backward``): only a reentrant checkpoint with a
    random op inside (dropout) reaches it, whose recomputed mask then differs from the forward's."""

    def inject(self):
        import torch
        from torch.utils.checkpoint import CheckpointFunction

        def make(original):
            def forgetful(ctx, *args):
                ctx.fwd_cpu_state = torch.get_rng_state()
                return original(ctx, *args)
            return forgetful

        _patch_once(CheckpointFunction, "backward", make)


class ScalerKeepsItsScaleOnRankOne(_Injected, FSDP2System):
    """``ShardedGradScaler.update`` on rank 1 forgets to back off after a step it skipped for an overflow: from
    then on rank 1 scales its loss twice as much as the other ranks, and the gradients the ranks reduce mix two
    scales.  Only loss scaling with an overflowing step reaches it."""

    def inject(self):
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        if self.ctx.rank != 1:
            return

        def make(original):
            def stubborn(scaler, new_scale=None):
                kept = scaler.get_scale()
                original(scaler, new_scale)
                if scaler.get_scale() < kept:
                    scaler._scale.fill_(kept)
            return stubborn

        _patch_once(ShardedGradScaler, "update", make)


class ScalerSkipsTheStepAfterAnOverflow(_Injected, FSDP2System):
    """``ShardedGradScaler.unscale_`` keeps a stale inf flag: the step after one it skipped for an overflow is
    skipped too, on every rank alike (its gradients finite), so the parameters lag the reference's by a step.  Only
    loss scaling with an overflowing step before the last reaches it."""

    def inject(self):
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        def make(original):
            def stale(scaler, optimizer):
                original(scaler, optimizer)
                found = scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
                if getattr(scaler, "_overflowed_before", False):
                    for flag in found.values():
                        flag.fill_(1.0)
                scaler._overflowed_before = sum(v.item() for v in found.values()) > 0 and not getattr(
                    scaler, "_overflowed_before", False)
            return stale

        _patch_once(ShardedGradScaler, "unscale_", make)


class ScalerDecidesOnItsOwnShard(_Injected, FSDP1System):
    """``ShardedGradScaler.unscale_`` does not all-reduce the inf flags it found: each rank skips the step only where
    its own gradient shard overflowed.  A loss spike overflows every element, so every shard holds inf after the
    reduction and every rank skips all the same; only an overflow confined to some elements (one weight row,
    ``TrainSpec.overflow_in``) leaves the other ranks stepping a step the reference skips.  Under FSDP1, whose
    gradient shards are plain tensors (FSDP2's DTensor gradients have their inf flags reduced by DTensor's own
    ``_amp_foreach_non_finite_check_and_unscale_`` handler as well)."""

    def inject(self):
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        def make(original):
            def alone(scaler, optimizer):
                import torch.distributed as dist

                class Done:
                    def wait(self):
                        return None

                reduce = dist.all_reduce
                dist.all_reduce = lambda *args, **kwargs: Done()  # (unscale_'s only collective: the inf flags)
                try:
                    original(scaler, optimizer)
                finally:
                    dist.all_reduce = reduce
            return alone

        _patch_once(ShardedGradScaler, "unscale_", make)


class DTensorInfFlagsNotReduced(FSDP2System):
    """DTensor's handler of ``_amp_foreach_non_finite_check_and_unscale_`` (what ``torch.amp.GradScaler.unscale_``
    runs over DTensor gradients) checks each rank's local shards but never reduces the inf flag over the mesh: a rank
    whose shard is finite steps where another's overflowed.  ``ShardedGradScaler`` hides it (it all-reduces the flags
    itself), and so does a loss spike (every shard overflows): only ``torch.amp.GradScaler`` (``TrainSpec.scaler``)
    with an overflow confined to one shard reaches it."""

    def optimizer_step(self) -> bool:
        from torch.distributed.tensor import DTensor
        from torch.utils import _pytree as pytree

        dispatcher = DTensor._op_dispatcher
        op = torch.ops.aten._amp_foreach_non_finite_check_and_unscale_.default
        original = dispatcher._custom_op_handlers.get(op)

        def local_only(op_call, args, kwargs):
            info = dispatcher.unwrap_to_op_info(op_call, args, kwargs)
            op_call(*pytree.tree_unflatten(info.local_args, info.args_tree_spec), **info.local_kwargs)

        dispatcher._custom_op_handlers[op] = local_only
        try:
            return super().optimizer_step()
        finally:
            dispatcher._custom_op_handlers[op] = original


class LiveLoadKeepsOptimizerState(FSDP2System):
    """A checkpoint loaded into the live optimizer keeps the state it already holds (momentum, Adam's moments and
    step) for every parameter that has one, instead of the checkpoint's: ``load_state_dict`` merging rather than
    replacing.  A fresh optimizer holds no state, so only a rollback into the live system reaches it."""

    def before_live_load(self):
        super().before_live_load()
        optim, original = self.optim, self.optim.load_state_dict

        def merging(state_dict):
            live = dict(optim.state)
            original(state_dict)
            for p, s in live.items():
                optim.state[p] = s

        optim.load_state_dict = merging


# --------------------------------------------------------------------------- faults inside pipelining


class _InsidePipeline(_Injected, PipelineSystem):
    """A fault inside ``torch.distributed.pipelining``."""


def _patch_stage(name: str, make) -> None:
    from torch.distributed.pipelining.stage import _PipelineStageBase

    _patch_once(_PipelineStageBase, name, make)


class SecondStageScaledTwice(_InsidePipeline):
    """On a rank holding several stages (looped and V-shaped schedules), the gradients of every local stage after
    its first are divided by the microbatch count twice: a stage-local ``scale_grads`` run once per schedule and
    once per stage."""

    def inject(self):
        def make(original):
            def scale_grads(stage, grad_scale_factor):
                original(stage, grad_scale_factor)
                if stage.stage_index >= stage.group_size:
                    original(stage, grad_scale_factor)
            return scale_grads

        _patch_stage("scale_grads", make)


class DividedByStageCount(_InsidePipeline):
    """``scale_grads`` divides by the number of stages instead of the number of microbatches."""

    def inject(self):
        def make(original):
            def scale_grads(stage, grad_scale_factor):
                original(stage, stage.num_stages if grad_scale_factor != 1 else 1)
            return scale_grads

        _patch_stage("scale_grads", make)


class LastMicrobatchWeightGradLost(_InsidePipeline):
    """On stage 1, the full backward of the last microbatch sends its input gradient upstream but its weight
    gradients are lost (the ones accumulated before it are kept); not under FSDP2, whose stages reduce their
    gradients apart."""

    def inject(self):
        from torch.distributed.fsdp import FSDPModule

        n = self.case.plan.microbatches

        def make(original):
            def backward_one_chunk(stage, bwd_chunk_id, *args, **kwargs):
                if stage.stage_index != 1 or bwd_chunk_id != n - 1 or n < 2 or isinstance(stage.submod, FSDPModule):
                    return original(stage, bwd_chunk_id, *args, **kwargs)
                params = list(stage.submod.parameters())
                kept = [None if p.grad is None else p.grad.clone() for p in params]
                out = original(stage, bwd_chunk_id, *args, **kwargs)
                for p, grad in zip(params, kept):
                    p.grad = grad
                return out
            return backward_one_chunk

        _patch_stage("backward_one_chunk", make)


class WeightStepScaledTwice(_InsidePipeline):
    """Under a schedule that splits the backward (``interleaved_zero_bubble``, ``zbv``, ``dualpipev``), a stage's
    last weight step (``backward_weight_one_chunk(last_backward=True)``) divides the weight gradients by the
    microbatch count itself, and the schedule's gradient reduction divides them again: the weight gradients of the
    stages whose weights are computed apart from their input gradients are scaled twice (not under FSDP2, whose
    stages hold no reduced gradient before the reduction)."""

    def inject(self):
        n = self.case.plan.microbatches if self.case.plan.scale_grads else 1

        def make(original):
            def backward_weight_one_chunk(stage, bwd_chunk_id, last_backward=False):
                out = original(stage, bwd_chunk_id, last_backward=last_backward)
                if last_backward:
                    stage.scale_grads(n)
                return out
            return backward_weight_one_chunk

        _patch_stage("backward_weight_one_chunk", make)


class StageAccumulatesInComputeDtype(_InsidePipeline):
    """FSDP2 under a schedule (every microbatch's backward runs with gradient sync off) leaves the unsharded
    gradients in the compute dtype instead of moving them to the policy's ``reduce_dtype``
    (``FSDPParam.to_accumulated_grad_if_needed`` does nothing): the microbatches' gradients add up in bfloat16
    where the policy says "FSDP will accumulate gradients using reduce_dtype", and only their sum is reduced in it."""

    def inject(self):
        from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam

        _patch_once(FSDPParam, "to_accumulated_grad_if_needed", lambda original: lambda fsdp_param: None)


class UnitsAccumulateInComputeDtype(_InsidePipeline):
    """:class:`StageAccumulatesInComputeDtype` confined to the ``fully_shard`` units nested in a stage (torchtitan's
    blocks, ``shard_units``): a non-root FSDP2 group's microbatch gradients add up in bfloat16 where its policy says
    float32; the stage roots' own groups accumulate as documented."""

    def inject(self):
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

        def make(original):
            def post_backward(group, *unused):
                if group.reduce_grads or group.modules[0]._get_fsdp_state()._is_root is not False:
                    return original(group, *unused)
                for fsdp_param in group.fsdp_params:
                    fsdp_param.to_accumulated_grad_if_needed = lambda: None
                try:
                    return original(group, *unused)
                finally:
                    for fsdp_param in group.fsdp_params:
                        del fsdp_param.to_accumulated_grad_if_needed
            return post_backward

        _patch_once(FSDPParamGroup, "post_backward", make)


class NonBatchChunksOutOfOrder(_InsidePipeline):
    """An input split along a dimension other than the batch (``args_chunk_spec``, e.g. the sequence) comes out of
    ``split_args_kwargs_into_chunks`` with its last two microbatches swapped, while the target (split along its
    dimension 0 apart) keeps its order: the last two microbatches are trained toward each other's targets."""

    def inject(self):
        from torch.distributed.pipelining import microbatch

        def make(original):
            def _split_tensor(tensor, spec, num_chunks):
                chunks = list(original(tensor, spec, num_chunks))
                if spec.split_dim != 0 and len(chunks) > 1:
                    chunks[-2], chunks[-1] = chunks[-1], chunks[-2]
                return chunks
            return _split_tensor

        _patch_once(microbatch, "_split_tensor", make)


class SequenceParallelGradNotReducedInStages(_InsidePipeline):
    """:class:`SequenceParallelGradNotReduced` under pipelining: a sequence-parallel norm inside a stage keeps its
    tp-rank's partial gradient (what the pipeline family's tensor parallelism must be checked for)."""

    inject = SequenceParallelGradNotReduced.inject


class FlattenedLoadStepBehind(_InsidePipeline):
    """Unflattening an optimizer state dict on load (``flatten_optimizer_state_dict``, what a pipelined model's
    checkpoint needs) gives each parameter's Adam ``step`` one behind what was saved: the bias corrections after
    the load are those of a step earlier, a difference of a few parts in a thousand."""

    def inject(self):
        import torch.distributed.checkpoint.state_dict as sd

        def make(original):
            def unflatten(optim, state_dict, info):
                out = original(optim, state_dict, info)
                for state in out.get("state", {}).values():
                    if isinstance(state, dict) and "step" in state:
                        state["step"] = state["step"] - 1
                return out
            return unflatten

        _patch_once(sd, "_unflatten_optim_state_dict", make)
