"""The ``fsdp2`` family: ``fully_shard`` applied per module on a 1-D ``(dp_shard,)`` or HSDP
``(dp_replicate, dp_shard)`` mesh, trained like DDP (or like the emulating reference under mixed precision).

Its plan is the fully_shard part's (:mod:`parityfuzz.parts.fully_shard`): the wraps (each with reshard, offload
and mixed-precision settings), activation checkpoints, explicit prefetching, and the switches FSDP2 adds to a
training loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from parityfuzz.case.core import Case
from parityfuzz.case.checkpoint import STATE_DICT_WAYS
from parityfuzz.families import Family, Registration
from parityfuzz.families.fsdp2 import grids
from parityfuzz.parts.activation_checkpoint import rules as checkpointing
from parityfuzz.parts.fully_shard import MESHES, FullyShardPlan, describe, features, validate


@dataclass(frozen=True)
class FSDP2Plan(FullyShardPlan):
    """The fully_shard part's plan (:class:`~parityfuzz.parts.fully_shard.FullyShardPlan`), alone."""

    family = "fsdp2"


def reference(case: Case) -> str:
    """DDP, or under mixed precision the reference that emulates FSDP2's low-precision arithmetic."""
    return "ddp_mp" if case.mixed_precision() else "ddp"


FAMILY = Family(
    name="fsdp2",
    amp_scaler=True,
    plan_type=FSDP2Plan,
    meshes=MESHES,
    system="fsdp2",
    strategy="parityfuzz.families.fsdp2.strategy",
    reference=reference,
    validate=validate,
    features=features,
    describe=describe,
    target="FSDP2 ``fully_shard`` must train exactly like DDP.",
    systems={
        "fsdp2": "parityfuzz.parts.fully_shard.system:FSDP2System",
        "ddp_mp": Registration("parityfuzz.parts.fully_shard.reference:MixedPrecisionReference", plain=True),
    },
    export="parityfuzz.parts.fully_shard.export",
    patchable=(
        "torch.distributed.fsdp",
        "torch.distributed.fsdp._fully_shard._fsdp_collectives",
        "torch.distributed.fsdp._fully_shard._fsdp_param_group",
        "torch.distributed.fsdp._fully_shard._fsdp_state",
        "torch.distributed.fsdp._fully_shard._fsdp_param",
    ),
    patchable_classes=(
        ("torch.distributed.fsdp._fully_shard._fsdp_state", "FSDPState"),
        ("torch.distributed.fsdp._fully_shard._fsdp_param_group", "FSDPParamGroup"),
        ("torch.distributed.fsdp._fully_shard._fsdp_param", "FSDPParam"),
    ),
    compiles=("blocks_after", "blocks_before", "model"),
    checkpoint_ways=STATE_DICT_WAYS,
    seed_grids=grids.GRIDS,
    rules=checkpointing.RULES,
    resume="parityfuzz.families.fsdp2.strategy:resumed",
)
