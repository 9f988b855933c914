"""The ``fsdp2_tp`` family: tensor (and sequence) parallelism on the ``tp`` axis, then FSDP2 ``fully_shard`` on the
data-parallel axes, as torchtitan and PyTorch's 2-D tests apply them; or tensor parallelism alone.

Meshes: ``(tp,)`` (TP alone: no ``fully_shard``), ``(dp_shard, tp)`` and ``(dp_replicate, dp_shard, tp)``.
The plan is an FSDP2 plan (its wraps apply to the data-parallel sub-mesh) plus one parallel style per
module (``parallelize_module``), and whether the loss is computed on vocabulary-sharded logits under
``loss_parallel()``.  The reference is DDP over all ranks, where the ranks of one tensor-parallel group
train on the same batch: the same gradients as DDP over the data-parallel ranks.

Which styles make a model compute what it computed before (the strategy draws only such plans; see
``strategies/fsdp2_tp``):

- a Linear ``colwise`` with its output gathered (``output_layout="replicate"``), or ``rowwise`` with its input
  replicated (``input_layout="replicate"``): self-contained;
- a ``colwise`` Linear feeding a ``rowwise`` one through elementwise activations only (local shards of the
  hidden width), as in an MLP block (``fc1``/``fc2``) and attention (``q``/``k``/``v`` then ``o``, heads split
  over ``tp``);
- sequence parallelism: a rowwise module reduce-scatters its output over the sequence
  (``output_layout="shard_seq"``), a LayerNorm/RMSNorm runs ``sequence`` parallel, and the colwise module after
  it gathers its input (``input_layout="shard_seq"``);
  — or, instead of the colwise inputs, ``prepare_input`` on the MLP or attention block that holds them
  (``PrepareModuleInput`` from ``shard_seq`` to ``replicate``, as torchtitan does), and where no colwise module
  follows the norm, ``prepare_output`` on the norm (``PrepareModuleOutput`` from ``shard_seq`` to ``replicate``,
  a second entry for the norm's path);
- the embedding ``rowwise`` (a replicated token input), the head ``colwise`` with its output gathered or, under
  ``loss_parallel``, left sharded over the vocabulary for the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

from parityfuzz.case.core import Case
from parityfuzz.case.errors import check
from parityfuzz.case.checkpoint import STATE_DICT_WAYS
from parityfuzz.families import Family
from parityfuzz.parts import fully_shard
from parityfuzz.parts.activation_checkpoint import rules as checkpointing
from parityfuzz.parts.fully_shard import FullyShardPlan
from parityfuzz.parts.tensor_parallel import (PREPARE, Parallelize, connections, describe_styles, holds_whole_or_none,
                                              style_features, validate_styles)
from parityfuzz.parts.tensor_parallel import rules as tp_rules

@dataclass(frozen=True)
class FSDP2TPPlan(FullyShardPlan):
    """Tensor parallelism (``tp``), then the FSDP2 plan on the data-parallel sub-mesh (no wraps: TP alone)."""

    family = "fsdp2_tp"

    tp: tuple[Parallelize, ...] = ()
    loss_parallel: bool = False


MESHES = (("tp",), ("dp_shard", "tp"), ("dp_replicate", "dp_shard", "tp"))


def reference(case: Case) -> str:
    """DDP, or under mixed precision or autocast the emulating reference on the same tensor-parallel model (TP's
    own arithmetic is what DDP checks in full precision; in low precision TP sums per-rank partial products
    rounded to that precision, where DDP rounds a whole product once: the reference does the same low-precision TP
    collectives, so FSDP2 is checked bit for bit on top)."""
    return "ddp_mp_tp" if case.mixed_precision() or case.train.autocast else "ddp"


def validate(case: Case) -> None:
    plan, model, mesh = case.plan, case.model, case.mesh
    dp = tuple(a for a in mesh.names if a != "tp")
    if dp:
        fully_shard.validate(case)
    else:
        check(not plan.wraps, "plan.wraps", "TP alone (a mesh with only a 'tp' axis) wraps nothing")
        check(not case.train.autocast, "train.autocast",
              "not with TP alone: under autocast TP sums per-rank partial products rounded to the autocast dtype, "
              "DDP rounds a whole product once, and the reference that does TP's arithmetic would be the system")
        for flag in ("prefetch", "no_sync", "reduce_scatter_unused", "is_last_backward", "unshard_first",
                     "no_all_reduce", "forward_method", "post_optim_event"):
            check(not getattr(plan, flag), f"plan.{flag}", "needs fully_shard (a data-parallel axis)")
        checkpointing.check_rules(case)
        check(plan.reshard_after_backward, "plan.reshard_after_backward", "needs fully_shard")
        check(not case.train.nonroot, "train.nonroot", "a non-root pass runs through a wrapped module")
        check(not model.per_rank_flow(), "model.body",
              "per-rank gates need a data-parallel axis (ranks of one tp group follow the same control flow)")
    validate_styles(case)
    for i, w in enumerate(plan.wraps):
        if not isinstance(w.reshard_after_forward, bool):
            owned = [p.path for p in plan.tp if p.style not in PREPARE and plan.owner(p.path) == w.path]
            check(not owned, f"plan.wraps[{i}].reshard_after_forward", "an int (resharding to a smaller mesh after "
                  f"forward) is not supported by FSDP2 for tensor-parallel parameters ({owned[0]!r} is in this group)"
                  if owned else "")
    if case.train.nonroot:
        for group in connections(plan):
            check(holds_whole_or_none(case.train.nonroot, group), "train.nonroot",
                  f"{case.train.nonroot!r} cuts through tensor-parallel styles that pass sharded activations "
                  f"between {sorted(group)}: run alone on a full input, it would compute something else")


def nonroot_paths(plan: FSDP2TPPlan) -> tuple[str, ...]:
    """The wrapped non-root modules a non-root pass may run through under the plan's tensor parallelism."""
    groups = connections(plan)
    return tuple(w.path for w in plan.wraps
                 if w.path and all(holds_whole_or_none(w.path, g) for g in groups))


def features(case: Case) -> set[str]:
    return (fully_shard.features(case) if case.plan.wraps else {"tp_only"}) | style_features(case)


def describe(case: Case) -> tuple[dict[str, str], list[str]]:
    notes, lines = fully_shard.describe(case)
    styles, more = describe_styles(case)
    for path, applied in styles.items():
        notes[path] = ", then ".join([applied] + ([notes[path]] if notes.get(path) else []))
    return notes, lines + more


FAMILY = Family(
    name="fsdp2_tp",
    amp_scaler=True,
    plan_type=FSDP2TPPlan,
    meshes=MESHES,
    system="fsdp2_tp",
    strategy="parityfuzz.families.fsdp2_tp.strategy",
    reference=reference,
    validate=validate,
    features=features,
    describe=describe,
    target=(
        "tensor (and sequence) parallelism, then FSDP2, must train exactly like DDP over the data-parallel "
        "ranks."
    ),
    systems={
        "fsdp2_tp": "parityfuzz.families.fsdp2_tp.system:FSDP2TPSystem",
        "ddp_mp_tp": "parityfuzz.families.fsdp2_tp.system:MixedPrecisionTPReference",
    },
    export="parityfuzz.families.fsdp2_tp.export",
    patchable=("torch.distributed.tensor.parallel.loss",),
    patchable_classes=(
        ("torch.distributed.tensor.parallel.style", "ColwiseParallel"),
        ("torch.distributed.tensor.parallel.style", "RowwiseParallel"),
        ("torch.distributed.tensor.parallel.style", "SequenceParallel"),
    ),
    compiles=("blocks_after", "blocks_before", "model"),
    checkpoint_ways=STATE_DICT_WAYS,
    rules=tp_rules.RULES + checkpointing.RULES,
    missing={"seed_grids": "PyTorch's tensor-parallel tests' grids are not transcribed yet"},
)
