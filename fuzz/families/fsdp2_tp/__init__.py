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
from parityfuzz.case.model import check_paths, under
from parityfuzz.families import Family
from parityfuzz.families import fsdp2
from parityfuzz.parts.activation_checkpoint import rules as checkpointing
from parityfuzz.rules import tensor_parallel as tp_rules

STYLES = ("colwise", "rowwise", "sequence", "prepare_input", "prepare_output")
#: Styles that only convert a module's inputs or outputs: such an entry may share its path with one other.
PREPARE = ("prepare_input", "prepare_output")
#: torch's default ``use_local_output`` per style (the printout names it where the plan differs).
TORCH_LOCAL_OUTPUT = {"colwise": True, "rowwise": True, "sequence": False, "prepare_input": False,
                      "prepare_output": True}
#: Layout names: ``""`` the style's default; ``replicate``; ``shard_seq`` = ``Shard(1)``; ``shard_last`` =
#: ``Shard(-1)``.
LAYOUTS = ("", "replicate", "shard_seq", "shard_last")


@dataclass(frozen=True)
class Parallelize:
    """``parallelize_module`` of the module at ``path`` on the ``tp`` mesh with one parallel style
    (``ColwiseParallel``, ``RowwiseParallel``, ``SequenceParallel``, ``PrepareModuleInput`` from
    ``input_layout`` to ``desired_layout``, ``PrepareModuleOutput`` from ``output_layout`` to
    ``desired_layout``) and its layouts."""

    path: str
    style: str
    input_layout: str = ""
    output_layout: str = ""
    use_local_output: bool = True
    desired_layout: str = ""


@dataclass(frozen=True)
class FSDP2TPPlan(fsdp2.FSDP2Plan):
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
        fsdp2.validate(case)
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
            check(_holds_whole_or_none(case.train.nonroot, group), "train.nonroot",
                  f"{case.train.nonroot!r} cuts through tensor-parallel styles that pass sharded activations "
                  f"between {sorted(group)}: run alone on a full input, it would compute something else")


def validate_styles(case: Case) -> None:
    """The plan's tensor-parallel styles (``plan.tp``, ``plan.loss_parallel``) against the model and the ``tp``
    axis: what every family that applies them checks."""
    plan, model, mesh = case.plan, case.model, case.mesh
    check(not model.tie_head, "model.tie_head", "tied weights are not tensor parallel here")
    hit = case.train.overflow_in
    check(not any(under(hit, (p.path,)) or under(p.path, (hit,)) for p in plan.tp if hit), "train.overflow_in",
          f"{hit!r} is tensor parallel: its output is sharded over tp (the overflow's feature on one tp rank only)")
    kinds = dict(model.module_paths())
    tp = mesh.axis_size("tp")
    for i, p in enumerate(plan.tp):
        check(p.style in STYLES, f"plan.tp[{i}].style", f"must be one of {STYLES}, got {p.style!r}")
    check_paths([p.path for p in plan.tp if p.style not in PREPARE], kinds, "plan.tp", "parallelized")
    check_paths([p.path for p in plan.tp if p.style in PREPARE], kinds, "plan.tp", "prepared")
    seen = {p.path for p in plan.tp}
    for i, p in enumerate(plan.tp):
        where = f"plan.tp[{i}]"
        for key in ("input_layout", "output_layout", "desired_layout"):
            check(getattr(p, key) in LAYOUTS, f"{where}.{key}", f"must be one of {LAYOUTS}, got {getattr(p, key)!r}")
        kind = kinds[p.path]
        if p.style in PREPARE:
            source = "input_layout" if p.style == "prepare_input" else "output_layout"
            check(getattr(p, source) and p.desired_layout, f"{where}.{source}",
                  f"{p.style} needs {source} and desired_layout")
            check(not (p.input_layout if p.style == "prepare_output" else p.output_layout), f"{where}",
                  f"{p.style} converts only its {source.split('_')[0]}s")
        else:
            allowed = {"colwise": ("linear",), "rowwise": ("linear", "embedding"),
                       "sequence": ("layernorm", "rmsnorm")}
            check(kind in allowed[p.style], f"{where}.style", f"{p.style} does not apply to a {kind} ({p.path!r})")
            check(not p.desired_layout, f"{where}.desired_layout", "only prepare_input/prepare_output have one")
        if "shard_seq" in (p.input_layout, p.output_layout, p.desired_layout) or p.style == "sequence":
            check(case.train.seq_len % tp == 0, f"{where}", f"sequence sharding needs seq_len divisible by tp={tp}, "
                  f"got {case.train.seq_len}")
    for path, node in model.body.walk("body"):
        if node.kind == "attention" and f"{path}.q" in seen:
            check(node.heads % tp == 0, "plan.tp", f"attention at {path} splits {node.heads} heads over tp={tp}")
    tp_rules.check_rules(case)
    if plan.loss_parallel:
        head = next((p for p in plan.tp if p.path == "head"), None)
        check(model.input == "embedding" and head is not None and head.style == "colwise"
              and head.output_layout == "shard_last" and not head.use_local_output, "plan.loss_parallel",
              "needs a colwise head whose output stays a vocabulary-sharded DTensor")


def _holds_whole_or_none(root: str, group: frozenset[str]) -> bool:
    inside = [under(path, (root,)) for path in group]
    return all(inside) or not any(inside)


def _output(p: Parallelize) -> str:
    """What leaves a plan entry's module: ``replicate`` (a full tensor, as without TP) or a shard."""
    if p.style in PREPARE:
        return "shard" if p.desired_layout != "replicate" else "replicate"
    if p.style == "colwise":
        return "replicate" if p.output_layout == "replicate" else "shard"
    if p.style == "rowwise":
        return "shard" if p.output_layout in ("shard_seq", "shard_last") else "replicate"
    return "shard"  # a sequence-parallel norm keeps the sequence sharded


def connections(plan: FSDP2TPPlan) -> list[frozenset[str]]:
    """The groups of plan entries that pass sharded activations between their modules (a colwise module and
    the rowwise one after it; a rowwise output sharded over the sequence, the norm, and what gathers it again),
    as sets of module paths; ``""`` (the loss) where the model's output stays sharded (``loss_parallel``).

    Entries are in module order (the order the plan keeps), which is the order activations reach them: a group
    opens at an entry whose output is a shard and closes at the first entry after it that outputs a full
    tensor.  A module run on its own (a non-root pass) takes and gives full tensors, so it must hold each group
    whole or not at all."""
    groups, current = [], set()
    for p in plan.tp:
        if current or _output(p) == "shard":
            current.add(p.path)
        if current and _output(p) == "replicate":
            groups.append(frozenset(current))
            current = set()
    if current:
        groups.append(frozenset(current | {""}))
    return groups


def nonroot_paths(plan: FSDP2TPPlan) -> tuple[str, ...]:
    """The wrapped non-root modules a non-root pass may run through under the plan's tensor parallelism."""
    groups = connections(plan)
    return tuple(w.path for w in plan.wraps
                 if w.path and all(_holds_whole_or_none(w.path, g) for g in groups))


def features(case: Case) -> set[str]:
    return (fsdp2.features(case) if case.plan.wraps else {"tp_only"}) | style_features(case)


def style_features(case: Case) -> set[str]:
    """The tags of the plan's tensor-parallel styles (every family that applies them)."""
    plan = case.plan
    tags = {f"tp={case.mesh.axis_size('tp')}"}
    for p in plan.tp:
        tags.add(f"tp:{p.style}")
        if p.style == "sequence":
            tags.add("sequence_parallel")
        if not p.use_local_output:
            tags.add("tp:dtensor_output")
        if p.path in ("inp", "head"):
            tags.add(f"tp:{p.path}")
    if plan.loss_parallel:
        tags.add("loss_parallel")
    if not plan.tp:
        tags.add("tp:none")
    return tags


def describe(case: Case) -> tuple[dict[str, str], list[str]]:
    notes, lines = fsdp2.describe(case)
    styles, more = describe_styles(case)
    for path, applied in styles.items():
        notes[path] = ", then ".join([applied] + ([notes[path]] if notes.get(path) else []))
    return notes, lines + more


def describe_styles(case: Case) -> tuple[dict[str, str], list[str]]:
    """``(the styles applied to each module path, lines)`` for the printout (every family that applies them)."""
    styles: dict[str, list[str]] = {}  # per path, in the order parallelize_module applies them
    for p in case.plan.tp:
        args = [f"{k}={getattr(p, k)}" for k in ("input_layout", "output_layout", "desired_layout") if getattr(p, k)]
        if p.use_local_output != TORCH_LOCAL_OUTPUT[p.style]:
            args.append(f"use_local_output={p.use_local_output}")
        style = {"colwise": "ColwiseParallel", "rowwise": "RowwiseParallel", "sequence": "SequenceParallel",
                 "prepare_input": "PrepareModuleInput", "prepare_output": "PrepareModuleOutput"}[p.style]
        styles.setdefault(p.path, []).append(f"{style}({', '.join(args)})")
    lines = ["cross-entropy on vocabulary-sharded logits under loss_parallel()"] if case.plan.loss_parallel else []
    return {path: ", then ".join(applied) for path, applied in styles.items()}, lines


FAMILY = Family(
    name="fsdp2_tp",
    amp_scaler=True,
    plan_type=FSDP2TPPlan,
    meshes=MESHES,
    system="fsdp2_tp",
    strategy="parityfuzz.strategies.fsdp2_tp",
    reference=reference,
    validate=validate,
    features=features,
    describe=describe,
    target=(
        "tensor (and sequence) parallelism, then FSDP2, must train exactly like DDP over the data-parallel "
        "ranks."
    ),
    systems={
        "fsdp2_tp": "parityfuzz.systems.fsdp2_tp:FSDP2TPSystem",
        "ddp_mp_tp": "parityfuzz.systems.fsdp2_tp:MixedPrecisionTPReference",
    },
    export="parityfuzz.export.fsdp2_tp",
    patchable=("torch.distributed.tensor.parallel.loss",),
    patchable_classes=(
        ("torch.distributed.tensor.parallel.style", "ColwiseParallel"),
        ("torch.distributed.tensor.parallel.style", "RowwiseParallel"),
        ("torch.distributed.tensor.parallel.style", "SequenceParallel"),
    ),
    compiles=("blocks_after", "blocks_before", "model"),
    checkpoint_ways=("dcp", "full"),
    rules=tp_rules.RULES + checkpointing.RULES,
    missing={"seed_grids": "PyTorch's tensor-parallel tests' grids are not transcribed yet"},
)
