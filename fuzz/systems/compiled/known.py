"""Preconditions of the known torch bugs of ``torch.compile`` in any family (``corpus/known_bugs.toml`` names them
``compile:<function>``): what the shrunk cases of each bug needed.  Each takes a case and says whether the bug can
show in it.  Torch-free."""

from __future__ import annotations

from parityfuzz.case import Case, under
from parityfuzz.case.model import PARAM_KINDS


def _checkpoints(case: Case, composable_only: bool = False) -> list[str]:
    """The paths an activation checkpoint is applied to, whatever the plan calls it: a plan's ``checkpoints`` (only
    those with ``torch.distributed._composable.checkpoint`` where ``composable_only``), a composable plan's
    ``applies`` of ``checkpoint``."""
    plan = case.plan
    paths = [c.path for c in getattr(plan, "checkpoints", ())
             if not composable_only or getattr(c, "api", "") == "composable"]
    return paths + [a.path for a in getattr(plan, "applies", ()) if getattr(a, "api", "") == "checkpoint"]


def composable_checkpoint_inside_a_compiled_region(case: Case) -> bool:
    """The composable ``checkpoint`` on a module that a compiled region holds strictly inside it: the whole model
    compiled, or a compiled block above the module (compiling the checkpointed module itself trains)."""
    c, paths = case.compile, _checkpoints(case, composable_only=True)
    if not c or not paths:
        return False
    if c.form == "model":
        return True
    return any(p != q and under(p, (q,)) for p in paths for q in c.paths)


def tp_local_output_into_a_compiled_block(case: Case) -> bool:
    """A compiled block (not the whole model) and, outside every compiled block, a tensor-parallel module whose
    output is reduced and handed on as a local tensor (``RowwiseParallel`` or ``PrepareModuleOutput`` with
    ``use_local_output=True``): the asynchronous collective's local tensor is what a compiled block may take.  In a
    pipeline stage also a ``ColwiseParallel`` module whose output is gathered (``output_layouts=Replicate()``), which
    trains outside a pipeline."""
    c = case.compile
    if not c or c.form == "model":
        return False

    def handed_on(p) -> bool:
        return p.style in ("rowwise", "prepare_output") or (
            case.family == "pipeline" and p.style == "colwise" and p.output_layout == "replicate")

    return any(handed_on(p) and p.use_local_output and not under(p.path, c.paths) for p in getattr(case.plan, "tp", ()))


def checkpointed_dropout_compiled_as_an_inference_graph(case: Case) -> bool:
    """The model compiled, and an activation checkpoint (any API) on a module that holds a dropout and no parameter:
    where its compiled graph takes only inputs that need no gradient (the model's input, a graph break before it),
    AOTAutograd compiles it for inference, whose activation-checkpoint pass refuses RNG ops."""
    if not case.compile:
        return False
    nodes = list(case.model.body.walk("body"))

    def holds(path: str, kinds) -> bool:
        return any(node.kind in kinds for q, node in nodes if under(q, (path,)))

    return any(holds(p, ("dropout",)) and not holds(p, (*PARAM_KINDS, "mlp", "attention")) for p in _checkpoints(case))
