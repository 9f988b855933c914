"""A test-only family, ``plain_ddp``: DistributedDataParallel with a drawn ``bucket_cap_mb`` and
``broadcast_buffers``, trained against plain DDP.  It lives outside the package and joins it by one registration
(``parityfuzz.families.register("plain_ddp", "tests.plain_ddp")``): tests/test_family_registration.py fuzzes,
replays and exports it with the code the real families go through.  The folder has one module per layer:
this record, :mod:`.strategy`, :mod:`.system`, :mod:`.export`."""

from __future__ import annotations

from dataclasses import dataclass

from parityfuzz.case.core import Case, Plan
from parityfuzz.case.errors import check
from parityfuzz.families import Family


@dataclass(frozen=True)
class PlainDDPPlan(Plan):
    family = "plain_ddp"

    bucket_cap_mb: int = 25
    broadcast_buffers: bool = True


def validate(case: Case) -> None:
    check(case.plan.bucket_cap_mb >= 1, "plan.bucket_cap_mb", "must be at least 1")
    check(not case.model.per_rank_flow(), "model.body", "per-rank control flow is not drawn for plain_ddp")


def features(case: Case) -> set[str]:
    return {f"bucket_cap_mb={case.plan.bucket_cap_mb}"} | ({"broadcast_buffers"} if case.plan.broadcast_buffers else set())


def describe(case: Case) -> tuple[dict[str, str], list[str]]:
    plan = case.plan
    return {"": f"DistributedDataParallel(bucket_cap_mb={plan.bucket_cap_mb}, "
                f"broadcast_buffers={plan.broadcast_buffers})"}, []


FAMILY = Family(
    name="plain_ddp",
    plan_type=PlainDDPPlan,
    meshes=(("dp_shard",),),
    system="plain_ddp",
    strategy="tests.plain_ddp.strategy",
    reference=lambda case: "ddp",
    validate=validate,
    features=features,
    describe=describe,
    target="DDP with any bucket size and buffer broadcast must train exactly like DDP with the defaults.",
    systems={"plain_ddp": "tests.plain_ddp.system:PlainDDPSystem"},
    export="tests.plain_ddp.export",
    missing={"patchable": "its system patches nothing in torch", "known": "no known bugs",
             "checkpoint": "not drawn for a test-only family", "rules": "one field check in validate()",
             "seed_grids": "no seed test", "compiles": "not drawn for a test-only family"},
)
