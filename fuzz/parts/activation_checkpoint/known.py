"""Preconditions of the known torch bugs of activation checkpointing in any family (``corpus/known_bugs.toml`` names
them ``activation_checkpoint:<function>``): what the shrunk cases of each bug needed.  Each takes a case and says
whether the bug can show in it.  Torch-free."""

from __future__ import annotations

from parityfuzz.case import Case
from parityfuzz.case.model import Node, child_names

_CONTAINERS = ("seq", "block", "residual", "twice", "gate")


def float32_inputs(case: Case) -> set[str]:
    """The body's module paths whose input may be float32 under autocast (any input is, without it): the model's
    input and an embedding's output are; a Linear, an MLP and an attention give the autocast dtype; a norm gives
    float32 (CUDA's autocast casts its input up; CPU's keeps the input's dtype: this counts the wider case); a
    ``scale`` multiplies by a float32 parameter (type promotion: float32); an activation and dropout keep their
    input's dtype; a residual adds its input back (float32 if that was); a gate's output is its child's on some
    forwards and its input on others."""
    found: set[str] = set()

    def walk(node: Node, path: str, f32: bool) -> bool:
        """Record ``path`` if its input ``f32``; whether its output may be float32."""
        if f32:
            found.add(path)
        if node.kind in ("linear", "mlp", "attention"):
            return False
        if node.kind in ("layernorm", "rmsnorm", "scale"):
            return True
        if node.kind in ("act", "dropout") or not node.children:
            return f32
        names = child_names(node)
        if node.kind in ("seq", "block"):
            out = f32
            for name, child in zip(names, node.children):
                out = walk(child, f"{path}.{name}", out)
            return out
        inner = walk(node.children[0], f"{path}.{names[0]}", f32)
        if node.kind == "twice":
            return walk(node.children[0], f"{path}.{names[0]}", inner)
        return inner or f32  # residual (float32 + low precision promotes), gate (either)

    walk(case.model.body, "body", True)
    return found


def reentrant_input_cast_cached_under_autocast(case: Case) -> bool:
    """Autocast, and a reentrant checkpoint on a module whose input may be float32 (:func:`float32_inputs`) and is
    read first by an attention: its ``q``, ``k`` and ``v`` Linears each cast that same tensor (an activation, a
    norm or dropout would read it into a new tensor first; an MLP or a Linear casts it once).  At least two of them
    left out of the tensor-parallel plan, which hands each of its Linears (and a module it prepares) a new tensor.
    Validity already asks a reentrant checkpoint's input to require grad."""
    if not case.train.autocast:
        return False
    nodes = dict(case.model.body.walk("body"))
    tp = {p.path for p in getattr(case.plan, "tp", ())}

    def first_reader(path: str) -> str | None:
        node = nodes[path]
        if path in tp:
            return None
        if node.kind == "attention":
            return path
        if node.kind in _CONTAINERS and node.children:
            return first_reader(f"{path}.{child_names(node)[0]}")
        return None

    f32 = float32_inputs(case)
    return any(c.reentrant and c.path in f32 and (attention := first_reader(c.path))
               and sum(f"{attention}.{p}" not in tp for p in "qkv") >= 2 for c in case.plan.checkpoints)
