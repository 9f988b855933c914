"""Faults inside pipelining (stage scaling, weight steps, precision, microbatch order, loads)."""

from __future__ import annotations

from parityfuzz.families.pipeline.system import PipelineSystem

from tests.faults.injection import _Injected, _patch_once
from tests.faults.tensor_parallel import SequenceParallelGradNotReduced


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
