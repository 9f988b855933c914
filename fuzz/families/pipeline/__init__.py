"""The ``pipeline`` family: ``torch.distributed.pipelining``.  The model is split into stages at its top-level
modules (the input embedding, each child of the body, the head), each stage a ``PipelineStage`` on the ``pp`` axis,
and a schedule runs the batch as microbatches; over a ``(pp, dp_shard)`` mesh each stage's module is also
``fully_shard``-ed over its ``dp_shard`` group, as torchtitan composes them; over a mesh with a ``tp`` axis each stage's
modules get the plan's tensor-parallel styles first (the fsdp2_tp family's, drawn over the whole model, applied to
the modules each stage holds: an activation sharded over ``tp`` may cross a stage boundary, as a plain local shard or
as a DTensor, which ``PipelineStage`` rebuilds on the receiving rank from its ``get_mesh`` callback).  Modules inside a stage may be
activation-checkpointed (the shared part :mod:`parityfuzz.parts.activation_checkpoint`: composable, wrapper or apply API, before or
after ``fully_shard``, reentrant or not), which changes what is kept, never what is computed; modules of the whole
model may be compiled before the split (``torch.compile``'s ``blocks_before`` form: the stages hold the same, compiled
module objects), as torchtitan compiles each block before it splits a model.

Reference: the unsplit model under DDP over all ranks (the ranks of one pipeline see the same batch: inputs are keyed
by the data-parallel index), fed the same microbatches one after another, each one's loss backpropagated on its own,
and each ``step()``'s share of the gradients divided by its microbatch count where ``scale_grads`` (what the
schedules document: "Gradients are scaled by num_microbatches depending on the `scale_grads` argument", matching
"a loss_fn which may either average losses (scale_grads=True) or sum losses"). The training loop's gradient
accumulation (``train.microbatches``) is several ``step()`` calls before one optimizer step.  Each rank records the
parameters and gradients of the stages it holds, and says the others are held elsewhere
(:data:`parityfuzz.run.trace.ELSEWHERE`); the loss is the last stage's sum of microbatch losses, which every rank of
the pipeline reports.

Layouts: a single-stage schedule (``gpipe``, ``1f1b``) gives rank ``r`` of the pipeline stage ``r``; the looped ones
(``looped_bfs``, ``interleaved_1f1b``, ``interleaved_zero_bubble``) stages ``r, r + pp, ...``; the V-shaped ones
(``zbv``, ``dualpipev``) stages ``r`` and ``2 pp - 1 - r``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from parityfuzz.case.core import Case, ExpectedError, Plan
from parityfuzz.case.errors import check
from parityfuzz.case.model import ModelSpec, child_names, under
from parityfuzz.case.checkpoint import STATE_DICT_WAYS
from parityfuzz.families import Family, Registration
from parityfuzz.parts.tensor_parallel import Parallelize, describe_styles, style_features, validate_styles
from parityfuzz.families.pipeline import grids
from parityfuzz.families.pipeline import precision as stage_mp
from parityfuzz.parts.fully_shard import Policy
from parityfuzz.families.pipeline.schedules import SCHEDULES, SPLIT_BACKWARD
from parityfuzz.parts.activation_checkpoint import CHECKPOINT_APIS, ActivationCheckpoint, checkpoint_tags
from parityfuzz.parts.activation_checkpoint import rules as checkpointing
from parityfuzz.families.pipeline import rules
from parityfuzz.rules import require

MESHES = (("pp",), ("pp", "dp_shard"), ("pp", "tp"), ("pp", "dp_shard", "tp"))


@dataclass(frozen=True)
class PipelinePlan(Plan):
    """A schedule over ``pp * stages_per_rank`` stages, cut at ``cuts`` (the index in :func:`units` at which each
    stage after the first begins), running ``microbatches`` per step; ``scale_grads`` is the schedules' argument;
    ``reshard_after_forward`` is ``fully_shard``'s on each stage where the mesh has a ``dp_shard`` axis;
    ``checkpoints`` are activation checkpoints of modules inside the stages (by the case's paths); ``tp`` the
    tensor-parallel styles of modules inside the stages on the mesh's ``tp`` axis, and ``loss_parallel`` the loss
    on vocabulary-sharded logits under ``loss_parallel()`` around ``schedule.step`` (as torchtitan's train context
    holds it); ``precision`` the ``MixedPrecisionPolicy`` of every stage's ``fully_shard``
    (:mod:`parityfuzz.families.pipeline.precision`).  ``shard_units``: as torchtitan composes them, ``fully_shard``
    first on each top-level module of the stage (its blocks, ``unit_reshard_after_forward``), then on the stage.
    ``split_dim``: the input dimension the schedule splits into microbatches (``args_chunk_spec=
    (TensorChunkSpec(split_dim),)``): 0 the batch, 1 the sequence; the schedules split a target along its dimension 0
    whatever the input's spec (``_TARGET_CHUNK_SPEC``), so the target goes in with that dimension moved first and the
    loss moves it back (:func:`parityfuzz.families.pipeline.system.chunk_loss`)."""

    family = "pipeline"

    schedule: str = "gpipe"
    microbatches: int = 1
    stages_per_rank: int = 1
    cuts: tuple[int, ...] = ()
    scale_grads: bool = True
    reshard_after_forward: bool = True
    shard_units: bool = False
    unit_reshard_after_forward: bool = True
    checkpoints: tuple[ActivationCheckpoint, ...] = ()
    tp: tuple[Parallelize, ...] = ()
    loss_parallel: bool = False
    precision: Policy = Policy()
    split_dim: int = 0

    def mixed_precision(self) -> bool:
        return self.precision.active()

    def layout(self) -> str:
        return SCHEDULES[self.schedule][1]

    def num_stages(self, pp: int) -> int:
        return pp * self.stages_per_rank

    def stages_of(self, pp: int, pp_rank: int) -> list[int]:
        """The stages pipeline rank ``pp_rank`` holds, ascending (:data:`rules.STAGE_LAYOUT`)."""
        if self.layout() == "v":
            return sorted({pp_rank, 2 * pp - 1 - pp_rank})
        return [pp_rank + k * pp for k in range(self.stages_per_rank)]

    def stage_units(self, model: ModelSpec) -> list[list[str]]:
        """Each stage's top-level modules (paths from :func:`units`)."""
        names = units(model)
        bounds = (0, *self.cuts, len(names))
        return [names[a:b] for a, b in zip(bounds, bounds[1:])]


def units(model: ModelSpec) -> list[str]:
    """The modules a stage boundary may fall between, in execution order: ``inp``, each child of a ``seq`` or
    ``block`` body (the body whole otherwise), ``head``."""
    body = model.body
    inner = [f"body.{n}" for n in child_names(body)] if body.kind in ("seq", "block") else ["body"]
    tokens = model.input == "embedding"
    return (["inp"] if tokens else []) + inner + (["head"] if tokens else [])


def reference(case: Case) -> str:
    """The unsplit model under DDP fed the same microbatches; under mixed precision the same, through the emulation
    of FSDP2's policy with one group per stage."""
    return "pipeline_mp_reference" if case.mixed_precision() else "pipeline_reference"


def min_microbatches(case: Case) -> tuple[int, str] | None:
    """``(n, message pattern)``: the least microbatch count the case's schedule takes where it checks one."""
    plan, pp = case.plan, case.mesh.axis_size("pp")
    stages = plan.num_stages(pp)
    if plan.schedule == "1f1b":
        return stages, r"Number of microbatches \(\d+\) must be greater than\s*or equal to the number of stages"
    if plan.schedule == "dualpipev":
        return stages, "DualPipeV requires at least as many microbatches as stages"
    return None


def expected_error(case: Case, device_type: str) -> ExpectedError | None:
    """The schedules' own checks of the microbatch count (torch/distributed/pipelining/schedules.py), and of
    torch.compile under the schedules that split the backward (``_check_torch_compile_compatibility``: 'The
    {schedule} schedule is not supported with stage modules that have used torch.compile'; its comment: 'we dont
    support input/weight backward split with torch.compile')."""
    plan, pp = case.plan, case.mesh.axis_size("pp")
    least = min_microbatches(case)
    if least and plan.microbatches < least[0]:
        return ExpectedError("ValueError", least[1])
    if plan.schedule in ("interleaved_1f1b", "interleaved_zero_bubble"):
        rounds = max(1, plan.microbatches // pp)
        if plan.microbatches % rounds:
            what = "Interleaved 1F1B" if plan.schedule == "interleaved_1f1b" else "Zero bubble"
            return ExpectedError("ValueError", f"{what} requires the number of microbatches to be a multiple of the "
                                              "number of rounds")
    if plan.schedule in SPLIT_BACKWARD and case.compile:  # (after the microbatch checks: torch reaches them, its
        # compile check missing blocks compiled in place: known bug zero-bubble-compile-check-misses-...)
        return ExpectedError("RuntimeError", "schedule is not supported with stage modules that have used "
                                             r"torch\.compile")
    return None


def validate(case: Case) -> None:
    plan, model, t, mesh = case.plan, case.model, case.train, case.mesh
    check(plan.schedule in SCHEDULES, "plan.schedule", f"must be one of {sorted(SCHEDULES)}, got {plan.schedule!r}")
    layout = plan.layout()
    require(plan.stages_per_rank == 1 if layout == "single" else
            plan.stages_per_rank == 2 if layout == "v" else plan.stages_per_rank >= 1,
            rules.STAGES_PER_RANK, "plan.stages_per_rank",
            f"{plan.schedule} with {plan.stages_per_rank} stages per rank")
    check(plan.microbatches >= 1, "plan.microbatches", f"must be >= 1, got {plan.microbatches}")
    check(plan.split_dim in (0, 1), "plan.split_dim", f"must be 0 (the batch) or 1 (the sequence), got {plan.split_dim}")
    require(plan.split_dim == 0 or plan.schedule != "looped_bfs", rules.SPLIT_SPEC_SCHEDULES, "plan.split_dim",
            f"split along dimension {plan.split_dim} under {plan.schedule}")
    split = (t.batch, "batch") if plan.split_dim == 0 else (t.seq_len, "sequence")
    require(split[0] % plan.microbatches == 0, rules.EVEN_MICROBATCHES, "plan.microbatches",
            f"a {split[1]} of {split[0]} in {plan.microbatches} microbatches")
    require(plan.split_dim == 0 or not t.pad or t.loss == "sum", rules.NO_MICROBATCH_OF_PADDING_ALONE, "train.pad",
            f"padded tokens with a {t.loss} loss over microbatches split along the sequence")
    check(not plan.shard_units or "dp_shard" in mesh.names, "plan.shard_units", "needs a 'dp_shard' mesh axis")
    names = units(model)
    stages = plan.num_stages(mesh.axis_size("pp"))
    require(len(plan.cuts) == stages - 1 and all(a < b for a, b in zip((0, *plan.cuts), plan.cuts))
            and all(c < len(names) for c in plan.cuts), rules.STAGES_SPLIT_THE_MODEL, "plan.cuts",
            f"{stages} stages over the {len(names)} modules {names} need {stages - 1} increasing cuts in "
            f"[1, {len(names) - 1}], got {list(plan.cuts)}")
    require(not model.tie_head or stages == 1, rules.NO_PARAMETER_SHARED_ACROSS_STAGES, "model.tie_head",
            f"the tied embedding and head would sit in stages 0 and {stages - 1}")
    _validate_checkpoints(case)
    stage_mp.validate_precision(case)
    check(not case.mixed_precision() or case.reference_name() == "pipeline_mp_reference", "reference",
          "plain DDP cannot model mixed precision: use the emulating reference 'pipeline_mp_reference'")
    if case.compile:  # (the blocks_before form: compiled in the whole model, before the split)
        bare = [r for r, held in enumerate(rank_modules(case)) if not any(under(path, held)
                                                                          for path in case.compile.paths)]
        check(not bare, "compile.paths", f"pipeline ranks {bare} hold no compiled module: a compiled case proves on "
                                         "every rank that it compiled")
    if "tp" in mesh.names:
        validate_styles(microbatch_view(case))
    else:
        check(not plan.tp and not plan.loss_parallel, "plan.tp", "tensor-parallel styles need a 'tp' mesh axis")
    for field, on, why in (
            ("nonroot", t.nonroot, "a schedule runs the whole pipeline"),
            ("autocast", t.autocast, "an autocast region around schedule.step would hold the backward too"),
            ("loss_scale", t.loss_scale, "the schedule runs the backward itself: no scaler can scale the loss"),
            ("to_float64", t.to_float64, "not drawn yet")):
        check(not on, f"train.{field}", f"not with pipelining: {why}")


def microbatch_view(case: Case) -> Case:
    """The case as each stage sees it: one microbatch at a time (the sequence a stage's tensor-parallel styles shard
    is the microbatch's, where the schedule splits along the sequence)."""
    plan, t = case.plan, case.train
    if plan.split_dim != 1:
        return case
    return dataclasses.replace(case, train=dataclasses.replace(t, seq_len=t.seq_len // plan.microbatches))


def check_checkpoint(c, case: Case, where: str = "") -> None:
    """What a checkpoint a pipelined system (``case``'s, ``where`` its fields' prefix) saves or loads needs: each rank
    holds its own stages, and some parameters."""
    require(c.flatten_optimizer, rules.CHECKPOINT_FLATTENS_THE_OPTIMIZER, "checkpoint.flatten_optimizer",
            "a pipelined system saves or loads without flatten_optimizer")
    require(not (c.full_state_dict and c.cpu_offload), rules.CHECKPOINT_NOT_RANK0_ONLY, "checkpoint.cpu_offload",
            "a pipelined system saves with full_state_dict and cpu_offload")
    owners = case.model.param_modules()
    for rank, held in enumerate(rank_modules(case)):
        require(any(under(m, held) for m in owners), rules.CHECKPOINT_EVERY_RANK_HOLDS_PARAMETERS,
                f"{where}plan.cuts", f"pipeline rank {rank} holds no parameter (its modules: {', '.join(held)})")


def rank_modules(case: Case) -> list[list[str]]:
    """The top-level modules each pipeline rank holds (its stages'), by pipeline rank."""
    plan, pp = case.plan, case.mesh.axis_size("pp")
    stages = plan.stage_units(case.model)
    return [[name for s in plan.stages_of(pp, r) for name in stages[s]] for r in range(pp)]


def compile_groups(case: Case) -> list[list[str]]:
    """The modules ``torch.compile`` traces that each pipeline rank holds: a compiled case compiles one of each
    (every rank proves it compiled)."""
    from parityfuzz.case.compiled import compilable

    paths = compilable(case)
    return [[p for p in paths if under(p, held)] for held in rank_modules(case)]


def _validate_checkpoints(case: Case) -> None:
    """Checkpoints name modules of the model (not the root: no stage holds it), once each, with an API that has the
    asked form; a reentrant one sits in the first stage, takes an input that requires grad and runs under a full
    backward."""
    plan, model = case.plan, case.model
    paths = [c.path for c in plan.checkpoints]
    known = {path for path, _ in model.module_paths()} - {""}
    first = plan.stage_units(model)[0]
    for i, c in enumerate(plan.checkpoints):
        where = f"plan.checkpoints[{i}]"
        check(c.path in known, f"{where}.path", f"must name a module inside a stage, one of {sorted(known)}, "
                                               f"got {c.path!r}")
        check(paths.count(c.path) == 1, f"{where}.path", f"{c.path!r} is checkpointed twice")
        check(c.api in CHECKPOINT_APIS, f"{where}.api", f"must be one of {CHECKPOINT_APIS}, got {c.api!r}")
        check(not (c.reentrant and c.api == "composable"), f"{where}.reentrant",
              "the composable checkpoint has no reentrant form (checkpoint_wrapper's checkpoint_impl has)")
        require(not c.reentrant or (plan.schedule not in SPLIT_BACKWARD and under(c.path, first)),
                rules.REENTRANT_ONLY_IN_THE_FIRST_STAGE, f"{where}.reentrant",
                f"{c.path!r} under {plan.schedule}" + ("" if under(c.path, first) else
                                                       f", outside the first stage {first}"))
    checkpointing.check_rules(case)


def features(case: Case) -> set[str]:
    plan, mesh = case.plan, case.mesh
    stages = plan.num_stages(mesh.axis_size("pp"))
    tags = {f"pp:schedule={plan.schedule}", f"pp:stages={stages}", f"pp:stages_per_rank={plan.stages_per_rank}"}
    tags.add("pp:microbatches" + ("<stages" if plan.microbatches < stages else
                                  "=stages" if plan.microbatches == stages else
                                  ">stages" + ("" if plan.microbatches % stages else ",multiple")))
    if expected_error(case, "cpu"):
        tags.add("pp:refused")
    if not plan.scale_grads:
        tags.add("pp:sum_grads")
    if plan.split_dim:
        tags.add("pp:split=sequence")
    if mesh.axis_size("dp_shard") > 1:
        tags.add("pp:fully_shard" + ("" if plan.reshard_after_forward else ",no_reshard_after_forward"))
        if plan.shard_units:
            tags.add("pp:fully_shard_units" + ("" if plan.unit_reshard_after_forward else ",no_reshard_after_forward"))
    owners = case.model.param_modules()
    if any(not any(under(m, stage) for m in owners) for stage in plan.stage_units(case.model)):
        tags.add("pp:parameterless_stage")
    if "tp" in mesh.names:
        tags |= style_features(case)
    return tags | checkpoint_tags(plan.checkpoints) | stage_mp.precision_features(case)


def describe(case: Case) -> tuple[dict[str, str], list[str]]:
    plan, pp = case.plan, case.mesh.axis_size("pp")
    notes = {}
    for s, names in enumerate(plan.stage_units(case.model)):
        rank = next(r for r in range(pp) if s in plan.stages_of(pp, r))
        for name in names:
            notes[name] = f"stage {s} (pp rank {rank})"
    cls = SCHEDULES[plan.schedule][0]
    lines = [f"schedule: {cls}(stages, n_microbatches={plan.microbatches}"
             + ("" if plan.scale_grads else ", scale_grads=False")
             + (f", args_chunk_spec=(TensorChunkSpec({plan.split_dim}),)) (the target with dimension "
                f"{plan.split_dim} moved first, the loss moving it back)" if plan.split_dim else ")")]
    if "dp_shard" in case.mesh.names:
        policy = stage_mp.describe_precision(case)
        lines.append("each stage: fully_shard(stage, mesh=dp_shard"
                     + ("" if plan.reshard_after_forward else ", reshard_after_forward=False")
                     + (f", mp_policy={policy}" if policy else "") + ")"
                     + (", after fully_shard on each of its top-level modules"
                        + ("" if plan.unit_reshard_after_forward else " (reshard_after_forward=False)")
                        + (" with the same mp_policy" if policy else "")
                        if plan.shard_units else ""))
    for c in plan.checkpoints:
        when = ("before" if c.before else "after") + " fully_shard" if "dp_shard" in case.mesh.names else ""
        notes[c.path] = ", ".join(x for x in (notes.get(c.path, ""), f"checkpoint[{c.api}"
                                              + (", REENTRANT" if c.reentrant else "") + "]", when) if x)
    if "tp" in case.mesh.names:
        styles, more = describe_styles(case)
        for path, applied in styles.items():
            notes[path] = ", ".join(x for x in (notes.get(path, ""), applied) if x)
        lines.extend(more)
        lines.insert(1, "each stage: parallelize_module(module, mesh=tp) for the styles of its modules, first")
    return notes, lines


#: The training-loop dimensions this family does not take (:attr:`parityfuzz.families.Family.unsupported`).
UNSUPPORTED = {
    "autocast": "an autocast region around schedule.step would hold the backward too, which autocast's documentation "
                "advises against ('Backward passes under autocast are not recommended'); the schedules take no "
                "forward-only region",
    "loss_scale": "the schedule runs the backward itself (PipelineScheduleSingle.step): no GradScaler can scale "
                  "the loss",
    "overflow": "an overflowing step needs fp16 loss scaling (loss_scale)",
    "nonroot": "a schedule runs the whole pipeline: no module forwards alone",
    "to_float64": "not drawn yet (harness): the stages are split from the float32 model and would each be cast",
    "post_optim_event": "set_post_optim_event is the root FSDP module's; a pipeline's stages have no common root",
}

FAMILY = Family(
    name="pipeline",
    unsupported=UNSUPPORTED,
    plan_type=PipelinePlan,
    meshes=MESHES,
    system="pipeline",
    strategy="parityfuzz.families.pipeline.strategy",
    reference=reference,
    validate=validate,
    features=features,
    describe=describe,
    promise=stage_mp.promise,
    precision=stage_mp.precision,
    expected_error=expected_error,
    target="A pipeline schedule over stages of the model must train exactly like the unsplit model under DDP fed "
           "the same microbatches, with the loss scaling the schedules document.",
    systems={
        "pipeline": "parityfuzz.families.pipeline.system:PipelineSystem",
        "pipeline_reference": Registration("parityfuzz.families.pipeline.system:PipelineReference", plain=True,
                                           rolls_back=True),
        "pipeline_mp_reference": "parityfuzz.families.pipeline.system:PipelineMixedPrecisionReference",
    },
    patchable=(
        "torch.distributed.pipelining.schedules",
        "torch.distributed.pipelining.stage",
        "torch.distributed.pipelining._backward",
        "torch.distributed.pipelining.microbatch",
    ),
    patchable_classes=(
        ("torch.distributed.pipelining.stage", "_PipelineStageBase"),
        ("torch.distributed.pipelining.stage", "PipelineStage"),
        ("torch.distributed.fsdp._fully_shard._fsdp_param", "FSDPParam"),  # (FSDP2 inside the stages)
    ),
    seed_grids=grids.GRIDS,
    export="parityfuzz.families.pipeline.export",
    rules=(rules.STAGES_PER_RANK, rules.STAGE_LAYOUT, rules.STAGES_SPLIT_THE_MODEL,
           rules.NO_PARAMETER_SHARED_ACROSS_STAGES, rules.EVEN_MICROBATCHES, rules.REENTRANT_ONLY_IN_THE_FIRST_STAGE,
           rules.CHECKPOINT_FLATTENS_THE_OPTIMIZER, rules.CHECKPOINT_NOT_RANK0_ONLY,
           rules.CHECKPOINT_EVERY_RANK_HOLDS_PARAMETERS, *checkpointing.RULES),
    refused_leaves={"dropout": "each rank draws the masks of its own stages in schedule order, which one process "
                               "running every stage cannot reproduce (torch promises no random stream across stages)"},
    compiles=("blocks_before",),  # the stages hold the whole model's (compiled) modules; no module holds the
    # stages' names after the split, and the schedule calls each stage module itself (no "model" form)
    compile_groups=compile_groups,
    # DCP only: a full state dict of a rank's stages is that part of the model, which the 'full' way's one file
    # of rank 0's would not hold.
    checkpoint_ways={"dcp": STATE_DICT_WAYS["dcp"]},
    partial_state=True,
    check_checkpoint=check_checkpoint,
    resume="parityfuzz.families.pipeline.strategy:resumed",
)
