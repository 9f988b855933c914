"""The ``fsdp1_tp`` family: tensor (and sequence) parallelism on the ``tp`` axis, then one FSDP1
``FullyShardedDataParallel`` call with ``device_mesh`` the ``dp_shard`` sub-mesh, as PyTorch's FSDP1 + TP tests
apply them (``parallelize_module``, then FSDP1, which flattens each rank's tensor-parallel shards).

Mesh ``(dp_shard, tp)``; the sharding strategies that take a 1-D mesh (``FULL_SHARD``, ``SHARD_GRAD_OP``,
``NO_SHARD``).  The plan is an FSDP1 plan plus the tensor-parallel styles of the ``fsdp2_tp`` family, checked
by the same rules (:func:`parityfuzz.parts.tensor_parallel.validate_styles`).  The reference is DDP over all ranks, the
ranks of one tensor-parallel group training on the same batch.

Not drawn (refused): hybrid strategies (a 3-D mesh), mixed precision (its FSDP1-emulating reference runs no
tensor parallelism), ignored modules, per-rank control flow.  Not drawn (valid, kept in the corpus): tensor-
parallel dimensions the ``tp`` axis does not divide (:func:`uneven_shards`), which FSDP1 refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

from parityfuzz.case.core import Case
from parityfuzz.case.errors import check
from parityfuzz.case.checkpoint import STATE_DICT_WAYS
from parityfuzz.families import Family
from parityfuzz.parts import fsdp1
from parityfuzz.parts.fsdp1 import CHECKPOINT_WAYS
from parityfuzz.parts.fsdp1 import rules as fsdp1_rules
from parityfuzz.families.fsdp1_tp import grids
from parityfuzz.parts.activation_checkpoint import rules as checkpointing
from parityfuzz.parts.tensor_parallel import Parallelize, describe_styles, style_features, validate_styles
from parityfuzz.parts.tensor_parallel import rules as tp_rules

SHARDINGS = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD")
MESHES = (("dp_shard", "tp"),)


@dataclass(frozen=True)
class FSDP1TPPlan(fsdp1.FSDP1WrapPlan):
    """Tensor parallelism (``tp``, ``loss_parallel``: :mod:`parityfuzz.parts.tensor_parallel`), then the FSDP1 call on
    the ``dp_shard`` sub-mesh."""

    family = "fsdp1_tp"

    tp: tuple[Parallelize, ...] = ()
    loss_parallel: bool = False


def reference(case: Case) -> str:
    return "ddp"


def validate(case: Case) -> None:
    plan, model = case.plan, case.model
    check(plan.sharding in SHARDINGS, "plan.sharding",
          f"must be one of {SHARDINGS} (FSDP1 takes the 1-D dp_shard sub-mesh here), got {plan.sharding!r}")
    check(not plan.mixed_precision(), "plan.precision",
          "not with tensor parallelism (the reference that emulates FSDP1's mixed precision runs no TP)")
    check(not plan.ignored, "plan.ignored", "not with tensor parallelism")
    check(not case.train.autocast, "train.autocast",
          "not with tensor parallelism: under autocast TP sums per-rank partial products rounded to the autocast "
          "dtype where DDP rounds a whole product once, and this family has no reference that does TP's arithmetic")
    check(not model.per_rank_flow(), "model.body", "per-rank control flow is not drawn with tensor parallelism")
    fsdp1.validate_plan(case)
    validate_styles(case)


def split_sizes(case: Case) -> dict[str, int]:
    """The size of the dimension each colwise or rowwise module splits over ``tp`` (a colwise Linear's output, a
    rowwise Linear's input, a rowwise Embedding's vocabulary), by module path."""
    model, out = case.model, {}
    for p in case.plan.tp:
        if p.style == "colwise":
            out[p.path] = model.output_width(p.path)
        elif p.style == "rowwise":
            out[p.path] = model.vocab if p.path == "inp" else model.input_width(p.path)
    return out


def uneven_shards(case: Case) -> list[str]:
    """Paths of the parallelized modules whose split dimension the ``tp`` axis does not divide: FSDP1's DTensor
    extension refuses such parameters ("Cannot flatten unevenly sharded tensor"), and where a rank's shard is
    empty it trips an internal assertion there instead (the others hang)."""
    tp = case.mesh.axis_size("tp")
    return [path for path, size in split_sizes(case).items() if size % tp]


def features(case: Case) -> set[str]:
    return fsdp1.features(case) | style_features(case)


def describe(case: Case) -> tuple[dict[str, str], list[str]]:
    notes, lines = fsdp1.describe(case)
    styles, style_lines = describe_styles(case)
    for path, applied in styles.items():
        notes[path] = ", then ".join([applied] + ([notes[path]] if notes.get(path) else []))
    notes[""] = notes[""].replace("FullyShardedDataParallel(", "FullyShardedDataParallel(device_mesh=mesh['dp_shard'], ", 1)
    return notes, lines + style_lines


#: The training-loop dimensions this family does not take (:attr:`parityfuzz.families.Family.unsupported`).
UNSUPPORTED = {
    "autocast": "the harness has no reference for it: under autocast TP sums per-rank partial products rounded to "
                "the autocast dtype where DDP rounds a whole product once, and only fsdp2_tp has a reference doing "
                "TP's arithmetic (ddp_mp_tp)",
    "loss_scale": "fp16 loss scaling runs under float16 autocast, which this family does not take (autocast)",
    "overflow": "an overflowing step needs fp16 loss scaling (loss_scale)",
    "nonroot": "a nested FullyShardedDataParallel instance runs only inside its root's forward (as fsdp1)",
    "post_optim_event": "set_post_optim_event is FSDP2's (FSDPModule); FSDP1 has no post-optimizer event",
}

FAMILY = Family(
    name="fsdp1_tp",
    unsupported=UNSUPPORTED,
    plan_type=FSDP1TPPlan,
    meshes=MESHES,
    view_parameters=True,
    system="fsdp1_tp",
    strategy="parityfuzz.families.fsdp1_tp.strategy",
    reference=reference,
    validate=validate,
    features=features,
    describe=describe,
    expected_error=fsdp1.expected_error,
    target=(
        "tensor parallelism, then FSDP1 (``FullyShardedDataParallel``) on the data-parallel sub-mesh, must "
        "train exactly like DDP."
    ),
    systems={
        "fsdp1_tp": "parityfuzz.families.fsdp1_tp.system:FSDP1TPSystem",
    },
    export="parityfuzz.families.fsdp1_tp.export",
    patchable=(
        "torch.distributed.fsdp",
        "torch.distributed.fsdp._runtime_utils",
    ),
    patchable_classes=(
        ("torch.distributed.tensor.parallel.style", "ColwiseParallel"),
        ("torch.distributed.tensor.parallel.style", "RowwiseParallel"),
        ("torch.distributed.tensor.parallel.style", "SequenceParallel"),
    ),
    compiles=("blocks_after", "blocks_before", "model"),
    checkpoint_ways={**STATE_DICT_WAYS, **CHECKPOINT_WAYS},
    seed_grids=grids.GRIDS,
    rules=tp_rules.RULES + checkpointing.RULES + fsdp1_rules.RULES,
)
