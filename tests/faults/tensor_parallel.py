"""Faults inside tensor and sequence parallelism (fsdp2_tp)."""

from __future__ import annotations

import torch
import torch.nn as nn

from parityfuzz.families.fsdp2_tp.system import FSDP2TPSystem

from tests.faults.fsdp2 import ReducesInBf16
from tests.faults.injection import _Injected, _patch_once


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
