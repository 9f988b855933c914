"""The ``fsdp1`` family: ``FullyShardedDataParallel`` (FSDP1) around the whole model, with one of its five
sharding strategies and a wrapping (nested instances by hand, or an auto-wrap policy), trained like DDP.

FSDP1 is one wrapper call with a policy, not a ``fully_shard`` per module: the plan holds that call's
arguments.  Meshes: ``(dp_shard,)`` for ``FULL_SHARD``, ``SHARD_GRAD_OP`` and ``NO_SHARD``;
``(dp_replicate, dp_shard)`` for the hybrid strategies, whose groups FSDP1 gets three ways
(``hybrid_via``): a 2-D ``device_mesh``, an ``(intra, inter)`` process-group pair, or neither (``auto``:
torch builds its own, one intra-node group per machine: a ``(world, 1)`` mesh on a CPU machine, where it
counts one device).

The reference is DDP; with ``ignored`` modules, DDP told to ignore the same parameters (FSDP1 neither shards
nor reduces them: each rank trains its own copy, and the trace records them per rank); under mixed precision
``ddp_mp_fsdp1``, replicated training that does what FSDP1's ``MixedPrecision`` promises.
"""

from __future__ import annotations

from dataclasses import dataclass

from parityfuzz.case.core import Case
from parityfuzz.case.errors import check
from parityfuzz.case.checkpoint import STATE_DICT_WAYS
from parityfuzz.families import Family, Registration
from parityfuzz.families.fsdp1 import grids
from parityfuzz.parts.activation_checkpoint import rules as checkpointing
from parityfuzz.parts.fsdp1 import (CHECKPOINT_WAYS, HYBRID, MESHES, SHARDINGS, UNSUPPORTED, FSDP1WrapPlan, describe, expected_error,
                                    features, precision, promise, validate_plan)
from parityfuzz.parts.fsdp1 import rules as fsdp1_rules


@dataclass(frozen=True)
class FSDP1Plan(FSDP1WrapPlan):
    """The FSDP1 part's plan (:class:`~parityfuzz.parts.fsdp1.FSDP1WrapPlan`), alone."""

    family = "fsdp1"


def reference(case: Case) -> str:
    """DDP; DDP ignoring the ignored modules' parameters where the plan has some; under mixed precision the
    reference that emulates FSDP1's ``MixedPrecision``."""
    return "ddp_mp_fsdp1" if case.mixed_precision() else "ddp_ignoring" if case.plan.ignored else "ddp"


def validate(case: Case) -> None:
    plan, mesh = case.plan, case.mesh
    check(plan.sharding in SHARDINGS, "plan.sharding", f"must be one of {SHARDINGS}, got {plan.sharding!r}")
    hybrid = plan.sharding in HYBRID
    check(mesh.names == (MESHES[1] if hybrid else MESHES[0]), "mesh.names",
          f"{plan.sharding} runs on a {MESHES[1] if hybrid else MESHES[0]} mesh, got {mesh.names}")
    validate_plan(case)


FAMILY = Family(
    name="fsdp1",
    unsupported=UNSUPPORTED,
    plan_type=FSDP1Plan,
    meshes=MESHES,
    view_parameters=True,
    system="fsdp1",
    strategy="parityfuzz.families.fsdp1.strategy",
    reference=reference,
    validate=validate,
    features=features,
    describe=describe,
    promise=promise,
    precision=precision,
    expected_error=expected_error,
    target=(
        "FSDP1 (``FullyShardedDataParallel``) with any sharding strategy and wrapping must train exactly like "
        "DDP."
    ),
    systems={
        "fsdp1": "parityfuzz.parts.fsdp1.system:FSDP1System",
        "ddp_ignoring": Registration("parityfuzz.parts.fsdp1.system:DDPIgnoringSystem", rank_local=True),
        "ddp_mp_fsdp1": Registration("parityfuzz.parts.fsdp1.reference:FSDP1MixedPrecisionReference", plain=True),
    },
    export="parityfuzz.parts.fsdp1.export",
    patchable=(
        "torch.distributed.fsdp",
        "torch.distributed.fsdp._runtime_utils",
    ),
    compiles=("blocks_after", "blocks_before", "model"),
    checkpoint_ways={**STATE_DICT_WAYS, **CHECKPOINT_WAYS},
    seed_grids=grids.GRIDS,
    rules=fsdp1_rules.RULES + checkpointing.RULES,
)
