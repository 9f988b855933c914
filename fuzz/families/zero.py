"""The ``zero`` family: ``ZeroRedundancyOptimizer`` (ZeRO stage 1: each rank steps the optimizer for its
partition of the parameters and broadcasts them) around the case's optimizer, on a model under
DistributedDataParallel, against DDP with the same optimizer held whole on every rank.

Mesh ``(dp_shard,)`` over all ranks (ZeRO shards optimizer state over the data-parallel ranks; world sizes 1
to 4, 3 included where asked).  The plan holds ZeRO's ``parameters_as_bucket_view`` and DDP's
``gradient_as_bucket_view`` and ``static_graph``.  The optimizer, its parameter groups, learning-rate scheduler,
weight decay and ``foreach`` are the generic training spec's.
"""

from __future__ import annotations

from dataclasses import dataclass

from fuzz.case.core import Case, Plan
from fuzz.case.errors import check
from fuzz.families import Family


@dataclass(frozen=True)
class ZeroPlan(Plan):
    """``ZeroRedundancyOptimizer(params, optimizer_class, parameters_as_bucket_view=...)`` over a DDP model
    built with ``gradient_as_bucket_view`` and ``static_graph``."""

    family = "zero"

    parameters_as_bucket_view: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False


MESHES = (("dp_shard",),)


def reference(case: Case) -> str:
    return "ddp"


def validate(case: Case) -> None:
    plan, model, t = case.plan, case.model, case.train
    gated = any(node.kind == "gate" for _, node in model.body.walk("body"))
    check(not (plan.static_graph and gated), "plan.static_graph",
          "not with gates: a static graph is the same every iteration (DDP documents it)")
    check(not (plan.static_graph and t.frozen and any(f.until for f in t.frozen)), "plan.static_graph",
          "not with parameters unfrozen mid-training (the graph changes)")
    check(not t.nonroot, "train.nonroot", "not drawn for ZeRO (a pass through one module bypasses DDP)")


def features(case: Case) -> set[str]:
    plan = case.plan
    return {f"zero:{flag}" for flag in ("parameters_as_bucket_view", "gradient_as_bucket_view", "static_graph")
            if getattr(plan, flag)} | {f"zero:ws={case.world_size}"}


def describe(case: Case) -> tuple[dict[str, str], list[str]]:
    plan = case.plan
    ddp = [f"{k}=True" for k in ("gradient_as_bucket_view", "static_graph") if getattr(plan, k)]
    notes = {"": f"DistributedDataParallel({', '.join(ddp)})"}
    bucket = ", parameters_as_bucket_view=True" if plan.parameters_as_bucket_view else ""
    return notes, [f"optimizer: ZeroRedundancyOptimizer(optimizer_class={case.train.optimizer}{bucket})"]


FAMILY = Family(name="zero", plan_type=ZeroPlan, meshes=MESHES, system="zero", strategy="strategies.zero",
                reference=reference, validate=validate, features=features, describe=describe)
