"""Tensor (and sequence) parallelism as a plan entry (``plan.tp``: one ``parallelize_module`` style per module,
``plan.loss_parallel``), for every family that applies it before its data-parallel API (fsdp2_tp, fsdp1_tp,
pipeline).

Spec, checks, tags and printout here (torch- and Hypothesis-free), with :func:`style_call`, the one
representation of a style's constructor call that :mod:`.apply` executes and :mod:`.export` prints; validity
rules in :mod:`.rules`, the plan strategy in :mod:`.strategy`.
"""

from __future__ import annotations

from dataclasses import dataclass

from parityfuzz.case.core import Case
from parityfuzz.case.errors import check
from parityfuzz.case.model import check_paths, under
from parityfuzz.parts.tensor_parallel import rules as tp_rules
from parityfuzz.run.calls import At, Call, Name, keywords

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


def holds_whole_or_none(root: str, group: frozenset[str]) -> bool:
    """Whether the module at ``root`` holds every module of a connected ``group`` or none of them."""
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


def connections(plan) -> list[frozenset[str]]:
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


def describe_styles(case: Case) -> tuple[dict[str, str], list[str]]:
    """``(the styles applied to each module path, lines)`` for the printout (every family that applies them)."""
    styles: dict[str, list[str]] = {}  # per path, in the order parallelize_module applies them
    for p in case.plan.tp:
        args = [f"{k}={getattr(p, k)}" for k in ("input_layout", "output_layout", "desired_layout") if getattr(p, k)]
        if p.use_local_output != TORCH_LOCAL_OUTPUT[p.style]:
            args.append(f"use_local_output={p.use_local_output}")
        styles.setdefault(p.path, []).append(f"{CLASSES[p.style]}({', '.join(args)})")
    lines = ["cross-entropy on vocabulary-sharded logits under loss_parallel()"] if case.plan.loss_parallel else []
    return {path: ", then ".join(applied) for path, applied in styles.items()}, lines


#: The torch class of each style (``torch.distributed.tensor.parallel``).
CLASSES = {"colwise": "ColwiseParallel", "rowwise": "RowwiseParallel", "sequence": "SequenceParallel",
           "prepare_input": "PrepareModuleInput", "prepare_output": "PrepareModuleOutput"}
#: Each layout name's placement, as a call.
PLACEMENTS = {"replicate": Call("Replicate"), "shard_seq": Call("Shard", (1,)), "shard_last": Call("Shard", (-1,))}


def style_call(p: Parallelize) -> Call:
    """The constructor call of the style a plan entry names (layouts left out take the style's defaults)."""
    kwargs: dict = {}
    if p.style == "prepare_input":
        kwargs = {"input_layouts": p.input_layout, "desired_input_layouts": p.desired_layout}
    elif p.style == "prepare_output":
        kwargs = {"output_layouts": p.output_layout, "desired_output_layouts": p.desired_layout}
    elif p.style != "sequence":
        kwargs = {k: v for k, v in (("input_layouts", p.input_layout), ("output_layouts", p.output_layout)) if v}
    return Call(CLASSES[p.style], kwargs=keywords(**{k: PLACEMENTS[v] for k, v in kwargs.items()},
                                                  use_local_output=p.use_local_output))


def parallelize_calls(styles, mesh: str = "tp_mesh") -> list[Call]:
    """The calls that apply a plan's styles (:mod:`parityfuzz.run.calls`), ``parallelize_module`` on the mesh the
    backend binds as ``mesh``, in the plan's order: what the systems run and the export prints."""
    return [Call("parallelize_module", (At(p.path), Name(mesh), style_call(p))) for p in styles]
