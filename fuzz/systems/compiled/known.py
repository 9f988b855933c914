"""Preconditions of the known torch bugs of ``torch.compile`` in any family (``corpus/known_bugs.toml`` names them
``compile:<function>``): what the shrunk cases of each bug needed.  Each takes a case and says whether the bug can
show in it.  Torch-free."""

from __future__ import annotations

from parityfuzz.case import Case, under
from parityfuzz.case.model import child_names


def checkpointed_paths(case: Case, composable_only: bool = False) -> list[str]:
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
    c, paths = case.compile, checkpointed_paths(case, composable_only=True)
    if not c or not paths:
        return False
    if c.form == "model":
        return True
    return any(p != q and under(p, (q,)) for p in paths for q in c.paths)


#: Node kinds the builder makes a bare ``torch.nn`` module (``nn.Linear``, an activation, a norm, ``nn.Dropout``):
#: compiled on its own, Dynamo skips its frame (``torch/nn`` code) and compiles no graph, so it runs eagerly.
_BUILTIN_LEAVES = ("linear", "act", "layernorm", "rmsnorm", "dropout")


def outputs_of(nodes: dict, path: str) -> set[str]:
    """The module paths whose output is the output of the module at ``path``, unchanged."""
    node, out = nodes.get(path), {path}
    if node is None:
        return out
    if node.kind == "mlp":
        return out | {f"{path}.fc2"}
    if node.kind == "attention":
        return out | {f"{path}.o"}
    if node.kind in ("seq", "block", "twice") and node.children:
        return out | outputs_of(nodes, f"{path}.{child_names(node)[-1]}")
    return out


def _inputs(case: Case, nodes: dict, path: str) -> set[str]:
    """The module paths whose output is the input of the module at ``path``, unchanged."""
    if path == "body":
        return {"inp"} if case.model.input == "embedding" else set()
    if path == "head":
        return outputs_of(nodes, "body")
    parent, _, name = path.rpartition(".")
    node = nodes[parent]
    if node.kind in ("seq", "block"):
        names = child_names(node)
        i = names.index(name)
        return _inputs(case, nodes, parent) if i == 0 else outputs_of(nodes, f"{parent}.{names[i - 1]}")
    first = {"mlp": ("fc1",), "attention": ("q", "k", "v")}.get(node.kind, ("inner",))
    if name in first:  # an MLP's fc1, an attention's q, k and v, a residual's, twice's or gate's inner
        return _inputs(case, nodes, parent)
    return set()


def local_outputs_handed_on(case: Case) -> set[str]:
    """The tensor-parallel modules that reduce their output and hand it on as a local tensor (the asynchronous
    collective's ``AsyncCollectiveTensor``): ``RowwiseParallel`` or ``PrepareModuleOutput`` with
    ``use_local_output=True``; also a ``ColwiseParallel`` Linear gathering its output (``output_layouts=Replicate()``:
    fsdp1_tp/8156fdbf, also with TP alone), and such an embedding in a pipeline stage (outside one it trains)."""
    def handed_on(p) -> bool:
        return p.use_local_output and (p.style in ("rowwise", "prepare_output") or (
            p.style == "colwise" and p.output_layout == "replicate" and (case.family == "pipeline" or p.path != "inp")))

    return {p.path for p in getattr(case.plan, "tp", ()) if handed_on(p)}


def tp_local_output_into_a_compiled_block(case: Case) -> bool:
    """A compiled block (not the whole model, nor a bare ``torch.nn`` module, which Dynamo leaves eager) whose
    input is, with no eager op in between, the output of a tensor-parallel module outside it that reduces its
    output and hands it on as a local tensor (``RowwiseParallel`` or ``PrepareModuleOutput`` with
    ``use_local_output=True``): the asynchronous collective's ``AsyncCollectiveTensor`` is then the compiled
    graph's input; also a ``ColwiseParallel`` Linear whose output is gathered (``output_layouts=Replicate()``), and
    in a pipeline stage such an embedding."""
    c = case.compile
    if not c or c.form == "model":
        return False
    nodes = dict(case.model.body.walk("body"))
    sources = local_outputs_handed_on(case)
    return any(nodes[q].kind not in _BUILTIN_LEAVES and any(s in _inputs(case, nodes, q) and not under(s, (q,))
                                                            for s in sources)
               for q in c.paths if q in nodes)


def rng_recompute_beside_a_saved_device_mesh(case: Case) -> bool:
    """The model compiled with ``aot_eager`` (inductor trains), a tensor-parallel parameter (a DTensor: its
    gradient's flattened form saves the DeviceMesh, an opaque object) and an activation checkpoint (not the
    composable one, which fails otherwise) on a module holding a dropout: ``functionalize_rng_ops`` appends the
    saved RNG state after the saved opaque objects, so the runtime takes the mesh for a saved tensor.  Blocks
    compiled alone are left out: not measured."""
    c = case.compile
    if not c or c.backend != "aot_eager" or c.form != "model":
        return False
    if not any(p.style in ("colwise", "rowwise") for p in getattr(case.plan, "tp", ())):
        return False
    dropouts = [q for q, node in case.model.body.walk("body") if node.kind == "dropout"]
    composable = set(checkpointed_paths(case, composable_only=True))
    paths = [p for p in checkpointed_paths(case) if p not in composable]
    return any(under(q, (p,)) for p in paths for q in dropouts)
