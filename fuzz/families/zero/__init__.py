"""The ``zero`` family: ``ZeroRedundancyOptimizer`` (ZeRO stage 1: each rank steps the optimizer for its
partition of the parameters and broadcasts them) around the case's optimizer, on a model under
DistributedDataParallel, against DDP with the same optimizer held whole on every rank.

Mesh ``(dp_shard,)`` over all ranks (ZeRO shards optimizer state over the data-parallel ranks; world sizes 1
to 4, 3 included where asked).  The plan holds ZeRO's ``parameters_as_bucket_view`` and DDP's
``gradient_as_bucket_view`` and ``static_graph``.  The optimizer, its parameter groups, learning-rate scheduler,
weight decay, ``foreach``, ``nesterov`` and ``maximize`` are the generic training spec's.

``overlap``: ``overlap_with_ddp=True`` with DDP's ``hook_with_zero_step`` (``"hook"``) or
``hook_with_zero_step_interleaved`` (``"interleaved"``) communication hook, ``shard_buckets`` drawn: the
optimizer steps inside the backward, once DDP has rebuilt its buckets, so the first two steps (three with
``static_graph``) update nothing, as torch documents; the reference skips those steps.  ``late_group``: the last
parameter group joins through ``add_param_group`` mid-training (in the reference too).  ``reload_at``: the
optimizer state is consolidated on one rank, saved and loaded into a fresh ZeRO, or the live one, mid-training (the
reference trains on uninterrupted).  Checkpoint events save and load ZeRO's own way (:mod:`parityfuzz.families.zero.checkpoint`):
into a fresh system, at the same or another world size, or into the live one (a rollback).  With
gloo (CPU ranks) torch refuses the hooks ("Gloo backend using Overlapping DDP with ZeRO may meet hangs"): an
expected error there.
"""

from __future__ import annotations

from dataclasses import dataclass

from parityfuzz.case.core import Case, ExpectedError, Plan
from parityfuzz.case.errors import check
from parityfuzz.case.checkpoint import Way
from parityfuzz.families import Family, Registration
from parityfuzz.families.zero import grids
from parityfuzz.run.calls import Call, Name, keywords

OVERLAPS = ("", "hook", "interleaved")


@dataclass(frozen=True)
class ZeroPlan(Plan):
    """``ZeroRedundancyOptimizer(params, optimizer_class, parameters_as_bucket_view=...)`` over a DDP model
    built with ``gradient_as_bucket_view`` and ``static_graph``; ``overlap`` and ``shard_buckets`` as the module
    says."""

    family = "zero"

    parameters_as_bucket_view: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    overlap: str = ""
    shard_buckets: bool = False
    #: The last of ``train.groups`` joins the optimizer through ``add_param_group`` at the start of this step
    #: (0: it is there from the start).
    late_group: int = 0
    #: At the start of this step (0: never) ``consolidate_state_dict(to=consolidate_to)``, ``state_dict()`` there,
    #: and a fresh ZeroRedundancyOptimizer on every rank loads it (``reload_live``: the live, already stepped one,
    #: as a job that reloads its last checkpoint into the optimizer it holds).
    reload_at: int = 0
    consolidate_to: int = 0
    reload_live: bool = False

    def ddp_options(self) -> dict:
        """The keyword arguments of the DDP model ZeRO's optimizer steps."""
        return {"gradient_as_bucket_view": self.gradient_as_bucket_view, "static_graph": self.static_graph}

    def optimizer_call(self) -> Call:
        """``ZeroRedundancyOptimizer`` around the case's optimizer (without ``overlap``), as a call
        (:mod:`parityfuzz.run.calls`) the system runs and an exported script prints: the backend binds ``groups``
        (the parameter groups), ``cls`` (the case's optimizer class) and ``kwargs`` (its other arguments)."""
        return Call("ZeroRedundancyOptimizer", (Name("groups"),),
                    keywords(optimizer_class=Name("cls"), parameters_as_bucket_view=self.parameters_as_bucket_view),
                    splat=Name("kwargs"))

    def warmup_steps(self) -> int:
        """The steps that update nothing under ``overlap`` (DDP's buckets are rebuilt, then ZeRO partitions
        them)."""
        return (3 if self.static_graph else 2) if self.overlap else 0


MESHES = (("dp_shard",),)


def reference(case: Case) -> str:
    return "zero_reference"


def expected_error(case: Case, device_type: str) -> ExpectedError | None:
    if case.plan.overlap and device_type == "cpu":
        return ExpectedError("RuntimeError", "Gloo backend using Overlapping DDP with ZeRO may meet hangs")
    return None


def validate(case: Case) -> None:
    plan, model, t = case.plan, case.model, case.train
    gated = bool(model.gates())
    check(not (plan.static_graph and gated), "plan.static_graph",
          "not with gates: a static graph is the same every iteration (DDP documents it)")
    check(not (plan.static_graph and t.frozen and any(f.until for f in t.frozen)), "plan.static_graph",
          "not with parameters unfrozen mid-training (the graph changes)")
    check(not t.nonroot, "train.nonroot", "not drawn for ZeRO (a pass through one module bypasses DDP)")
    check(plan.overlap in OVERLAPS, "plan.overlap", f"must be one of {OVERLAPS}, got {plan.overlap!r}")
    check(not plan.shard_buckets or plan.overlap, "plan.shard_buckets", "is the overlap hooks' argument")
    check(not (plan.overlap and t.loss_scale), "train.loss_scale",
          "not with ZeRO's overlap (the step runs inside the backward: no scaler can unscale or skip it)")
    check(0 <= plan.late_group < t.steps, "plan.late_group", f"must be in [0, steps={t.steps}), got {plan.late_group}")
    if plan.late_group:
        check(bool(t.groups), "plan.late_group", "needs a parameter group in train.groups")
        last = len(t.groups) - 1
        check(any(t.group_of(m + ".weight") != last for m in model.param_modules()), "plan.late_group",
              "leaves the optimizer no parameter before the last group joins")
        check(not t.scheduler, "train.scheduler", "not with plan.late_group (schedulers do not follow a group "
              "added after them)")
        check(not t.frozen, "train.frozen", "not with plan.late_group (kept apart: both change what is trained)")
    check(0 <= plan.reload_at < t.steps, "plan.reload_at", f"must be in [0, steps={t.steps}), got {plan.reload_at}")
    check(0 <= plan.consolidate_to < case.world_size, "plan.consolidate_to",
          f"must be a rank < {case.world_size}, got {plan.consolidate_to}")
    check(not plan.consolidate_to or plan.reload_at, "plan.consolidate_to", "is plan.reload_at's")
    check(not plan.reload_live or plan.reload_at, "plan.reload_live", "is plan.reload_at's")
    check(not (plan.reload_at and plan.late_group), "plan.reload_at", "not with plan.late_group")
    if case.checkpoint:  # ZeRO's own way (parityfuzz.families.zero.checkpoint), into a fresh or the live optimizer
        for field, on, why in (
                ("overlap", plan.overlap, "a fresh ZeRO under overlap waits for DDP's rebuilt buckets again, which "
                 "the uninterrupted reference does not"),
                ("late_group", plan.late_group, "a fresh optimizer holds the late group back, so the saved state's "
                 "groups do not fit it"),
                ("reload_at", plan.reload_at, "the plan's own reload of the optimizer state is the other event")):
            check(not on, f"plan.{field}", f"not with a checkpoint event: {why}")
    if plan.overlap:
        check(not plan.late_group and not plan.reload_at, "plan.overlap",
              "not with plan.late_group or plan.reload_at (ZeRO's overlap has no param groups and loads no state "
              "before its warm-up)")
        # The step runs inside the backward: nothing can come between the gradients and the step.
        for field, bad in (("microbatches", t.microbatches > 1), ("clip", t.clip), ("scheduler", t.scheduler),
                           ("groups", t.groups), ("frozen", t.frozen), ("eval", t.eval)):
            check(not bad, f"train.{field}", "not with plan.overlap (the optimizer steps inside the backward)")
        check(not gated, "model.body", "not with plan.overlap (the hooks need every bucket every iteration)")
        check(not plan.parameters_as_bucket_view, "plan.parameters_as_bucket_view",
              "is ignored with plan.overlap (ZeRO takes DDP's buckets): leave it False")


def features(case: Case) -> set[str]:
    plan = case.plan
    tags = {f"zero:{flag}" for flag in ("parameters_as_bucket_view", "gradient_as_bucket_view", "static_graph",
                                         "shard_buckets") if getattr(plan, flag)}
    if plan.overlap:
        tags.add(f"zero:overlap={plan.overlap}")
    if plan.late_group:
        tags.add("zero:add_param_group")
    if plan.reload_at:
        tags.add("zero:reload" + ("" if plan.consolidate_to == 0 else "_to_nonzero")
                 + ("_live" if plan.reload_live else ""))
    return tags | {f"zero:ws={case.world_size}"}


def describe(case: Case) -> tuple[dict[str, str], list[str]]:
    plan = case.plan
    ddp = [f"{k}=True" for k in ("gradient_as_bucket_view", "static_graph") if getattr(plan, k)]
    notes = {"": f"DistributedDataParallel({', '.join(ddp)})"}
    bucket = ", parameters_as_bucket_view=True" if plan.parameters_as_bucket_view else ""
    lines = [f"optimizer: ZeroRedundancyOptimizer(optimizer_class={case.train.optimizer}{bucket}"
             + (", overlap_with_ddp=True)" if plan.overlap else ")")]
    if plan.overlap:
        hook = "hook_with_zero_step" if plan.overlap == "hook" else "hook_with_zero_step_interleaved"
        lines.append(f"DDP comm hook: {hook}(allreduce_hook, ddp, zero"
                     + (", shard_buckets=True)" if plan.shard_buckets else ")")
                     + f"; the first {plan.warmup_steps()} steps update nothing")
    if plan.late_group:
        lines.append(f"the last parameter group joins through add_param_group at step {plan.late_group}")
    if plan.reload_at:
        lines.append(f"at step {plan.reload_at}: consolidate_state_dict(to={plan.consolidate_to}), state_dict(), "
                     + ("the live ZeroRedundancyOptimizer loads it" if plan.reload_live
                        else "a fresh ZeroRedundancyOptimizer loads it"))
    return notes, lines


#: The training-loop dimensions this family does not take (:attr:`parityfuzz.families.Family.unsupported`).
UNSUPPORTED = {
    "nonroot": "not drawn yet (harness): its strategy offers no module for a pass of its own",
    "reentrant": "its plan checkpoints no activations: ZeroRedundancyOptimizer shards optimizer state only",
    "post_optim_event": "set_post_optim_event is FSDP2's (FSDPModule); DDP and ZeroRedundancyOptimizer have none",
}

FAMILY = Family(
    name="zero",
    unsupported=UNSUPPORTED,
    plan_type=ZeroPlan,
    meshes=MESHES,
    system="zero",
    strategy="parityfuzz.families.zero.strategy",
    reference=reference,
    validate=validate,
    features=features,
    describe=describe,
    expected_error=expected_error,
    checkpoint_ways={"zero": Way("zero", "parityfuzz.families.zero.checkpoint")},
    target="ZeroRedundancyOptimizer over DDP must train exactly like DDP with the whole optimizer on every rank.",
    systems={
        "zero": "parityfuzz.families.zero.system:ZeroSystem",
        "zero_reference": Registration("parityfuzz.families.zero.system:ZeroReference", plain=True, rolls_back=True),
    },
    export="parityfuzz.families.zero.export",
    patchable=(
        "torch.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook",
    ),
    patchable_classes=(
        ("torch.distributed.optim.zero_redundancy_optimizer", "ZeroRedundancyOptimizer"),
    ),
    compiles=("blocks_after", "blocks_before", "model"),
    missing={"rules": "its plan's checks are field checks in validate(); no documented composition rule of its own "
                      "yet"},
    seed_grids=grids.GRIDS,
)
