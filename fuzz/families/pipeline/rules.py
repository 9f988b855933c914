"""Validity rules of pipeline plans (``torch.distributed.pipelining``): how a model may be split into stages, how
stages sit on ranks for each schedule, and how a batch splits into microbatches.

The schedules' own checks of the microbatch count (1F1B's "must be greater than or equal to the number of stages",
the interleaved schedules' multiple of rounds, DualPipeV's "at least as many microbatches as stages") are not rules:
torch raises them, so a plan that breaks one is a valid case whose expected error the family names
(:func:`parityfuzz.families.pipeline.expected_error`).

Torch-free.
"""

from __future__ import annotations

from parityfuzz.rules import Rule

STAGES_PER_RANK = Rule(
    "pipeline.stages-per-rank",
    "a single-stage schedule gets one stage per rank, a multi-stage one a list of stages, and a V-shaped one "
    "exactly two",
    "torch/distributed/pipelining/schedules.py: PipelineScheduleSingle takes 'stage: _PipelineStageBase', "
    "PipelineScheduleMulti 'stages: list[_PipelineStageBase]'; ScheduleZBVZeroBubble and ScheduleDualPipeV raise "
    "'ZBV requires exactly 2 stages per rank'")
STAGE_LAYOUT = Rule(
    "pipeline.stage-layout",
    "stage i runs on pipeline rank i % pp (loop layout), or for a V-shaped schedule rank r holds stages r and "
    "2 pp - 1 - r, and every rank passes its stages in ascending order",
    "torch/distributed/pipelining/_utils.py: generate_stage_to_rank_mapping: 'Compute the stage id to rank mapping "
    "for either a looped or V-style schedule' (PipelineScheduleMulti uses style 'loop', ScheduleZBVZeroBubble and "
    "ScheduleDualPipeV style 'v')")
STAGES_SPLIT_THE_MODEL = Rule(
    "pipeline.stages-split-the-model",
    "the stages are consecutive, non-empty runs of the model's top-level modules (the input embedding, each child "
    "of the body, the head), each held by one stage",
    "torch/distributed/pipelining/stage.py: PipelineStage: 'A pipeline stage for pipeline parallelism with "
    "sequential model partitioning' ('submodule: The nn.Module wrapped by this stage'); each stage's output is the "
    "next one's input")
NO_PARAMETER_SHARED_ACROSS_STAGES = Rule(
    "pipeline.no-parameter-shared-across-stages",
    "no parameter is held by two stages (a tied embedding and head sit in one stage)",
    "torch/distributed/pipelining/stage.py: each stage's submodule is its own module: its optimizer steps its "
    "parameters, and PipelineStage.scale_grads divides 'self.submod.parameters()' only; a parameter two stages "
    "hold would be two copies trained apart")
EVEN_MICROBATCHES = Rule(
    "pipeline.even-microbatches",
    "the input splits into microbatches of one size (the dimension the schedule splits, the batch or the sequence, "
    "is a multiple of the microbatch count)",
    "torch/distributed/pipelining/stage.py: PipelineStage: 'Dynamic mode: Metadata is inferred from the first "
    "microbatch at runtime': every later microbatch is received into buffers of the first one's shape")
SPLIT_SPEC_SCHEDULES = Rule(
    "pipeline.split-spec-schedules",
    "the input is split along a dimension other than the batch only under a schedule that takes args_chunk_spec "
    "(every one but ScheduleLoopedBFS)",
    "torch/distributed/pipelining/schedules.py: _PipelineSchedule: '# args_chunk_spec and kwargs_chunk_spec specify "
    "how to chunk inputs. They are used to convert batch to microbatches in `step(x)`'; PipelineScheduleSingle, "
    "ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble and ScheduleDualPipeV take it, "
    "ScheduleLoopedBFS.__init__ has no such parameter (its inputs split along dimension 0)")
NO_MICROBATCH_OF_PADDING_ALONE = Rule(
    "pipeline.no-microbatch-of-padding-alone",
    "microbatches split along the sequence take no padded tokens under a mean loss: a microbatch of later positions "
    "may hold padding alone (only a sequence's first token is never padding), and its mean over no token is nan "
    "in both systems, leaving nothing to compare",
    "torch/nn/functional.py: cross_entropy: ignore_index: 'Specifies a target value that is ignored and does not "
    "contribute to the input gradient. When size_average is True, the loss is averaged over non-ignored targets': "
    "a microbatch with no such target averages over none (0 / 0)")
REENTRANT_ONLY_IN_THE_FIRST_STAGE = Rule(
    "pipeline.reentrant-only-in-the-first-stage",
    "a reentrant activation checkpoint only inside the first stage, and only under a schedule that runs a full "
    "backward (not interleaved_zero_bubble, zbv, dualpipev): every other stage's input gradients, and the "
    "split-backward schedules' input and weight steps, are taken with torch.autograd.grad",
    "torch/utils/checkpoint.py: checkpoint: 'The reentrant checkpoint only supports the torch.autograd.backward API "
    "for the backward pass without its `inputs` argument'; torch/distributed/pipelining/stage.py: PipelineStage: "
    "'Dynamic mode: Metadata is inferred from the first microbatch at runtime' (_backward_metadata_inference takes a "
    "stage's input gradients with torch.autograd.grad); _backward.py: stage_backward_input and stage_backward_weight "
    "call torch.autograd.grad (stage_backward, the full backward, torch.autograd.backward)")
CHECKPOINT_FLATTENS_THE_OPTIMIZER = Rule(
    "pipeline.checkpoint-flattens-the-optimizer",
    "a checkpoint a pipelined system saves or loads takes its optimizer state dicts flattened "
    "(flatten_optimizer_state_dict=True on both sides): each rank's optimizer names only its stages' parameters, so "
    "the ranks' param_groups lists differ, and DCP keeps one copy of a non-tensor value saved under one key",
    "torch/distributed/checkpoint/state_dict.py: _flatten_optim_state_dict: 'This API flattens the optimizer "
    "state_dict to support optimizer resharding for MPMD, e.g., pipeline parallelism' (the option "
    "StateDictOptions.flatten_optimizer_state_dict; torchtitan's pipelined checkpoints set it)")
CHECKPOINT_EVERY_RANK_HOLDS_PARAMETERS = Rule(
    "pipeline.checkpoint-every-rank-holds-parameters",
    "a checkpoint a pipelined system saves or loads leaves no pipeline rank without parameters (a stage of "
    "activations alone): get_state_dict and set_state_dict refuse an empty model or optimizer state dict",
    "torch/distributed/checkpoint/state_dict.py: _verify_state_dict: 'This API should give the users an explicit "
    "error message to debug or report': 'The option indicates that model state_dict is required to save or load, "
    "but model state_dict is empty' (unless strict=False, ignore_frozen_params, full_state_dict with cpu_offload "
    "or broadcast_from_rank0), and '... but optim state_dict is empty' (composable/b262cbba: a stage of one ReLU)")
CHECKPOINT_NOT_RANK0_ONLY = Rule(
    "pipeline.checkpoint-not-rank0-only",
    "a pipelined system's save does not gather to rank 0 alone (full_state_dict with cpu_offload): rank 0 holds "
    "its own stages only",
    "torch/distributed/checkpoint/state_dict.py: StateDictOptions: 'cpu_offload: offload all the tensors to cpu. "
    "To prevent CPU OOM, if full_state_dict is also true, then only the rank0 will get the state_dict and all "
    "other ranks will get empty state_dict'")
