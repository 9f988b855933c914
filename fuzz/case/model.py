"""The model a case trains, as plain data: an input stage, a tree of modules, an optional head.

Torch-free: :mod:`parityfuzz.run.build` gives it meaning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from parityfuzz.case.errors import check as _check

#: Leaf kinds and the widths they need.  Containers hold ``children``.
LEAF_KINDS = ("linear", "act", "layernorm", "rmsnorm", "mlp", "attention", "dropout", "scale")
CONTAINER_KINDS = ("seq", "block", "residual", "twice", "gate")
ACTIVATIONS = ("relu", "gelu", "tanh", "silu")


@dataclass(frozen=True)
class Node:
    """One module of the model body.

    The input width of a node is implied by what feeds it; only what a kind
    needs beyond that is stored:

    - ``linear``: ``out`` features, ``bias``.
    - ``act``: ``fn``, one of :data:`ACTIVATIONS`.
    - ``layernorm``, ``rmsnorm``: nothing (normalise the incoming width).
    - ``mlp``: ``hidden`` width of a Linear-GELU-Linear block (width-preserving).
    - ``attention``: ``heads`` of a small self-attention block (width-preserving;
      the incoming width must be divisible by ``heads``).
    - ``seq``: an ``nn.Sequential`` of ``children`` (children named 0, 1, ...).
    - ``block``: a generic module whose named children run in order.
    - ``residual``: ``x + child(x)`` over its single child (width-preserving).
    - ``twice``: ``child(child(x))``: one module called twice in a forward.
    - ``dropout``: ``nn.Dropout(p)``; the trainer seeds the RNG per rank, step
      and microbatch identically in both systems, so masks match.
    - ``scale``: ``x * gain * w.sum(0)`` with a constant buffer ``gain`` and a
      3-D parameter ``w`` of shape ``(out, 1, width)`` (``out`` small: a dim-0
      below the shard count).
    - ``gate``: ``child(x)`` on the forwards whose index (``step *
      microbatches + microbatch``) is a multiple of ``period``, else ``x``: a
      submodule used on some steps or microbatches only, alike on every rank.
      With ``by_rank``, on the forwards where ``index + rank`` is a multiple of
      ``period``: control flow that differs per rank (some rank uses the child
      on every forward, since ``period`` is at most the world size).
    """

    kind: str
    children: tuple[Node, ...] = ()
    out: int = 0
    bias: bool = True
    fn: str = ""
    hidden: int = 0
    heads: int = 0
    p: float = 0.0
    period: int = 0
    by_rank: bool = False

    def walk(self, path: str) -> Iterator[tuple[str, Node]]:
        """Yield ``(module path, node)`` pairs, this node first (pre-order)."""
        yield path, self
        for name, child in zip(child_names(self), self.children):
            yield from child.walk(f"{path}.{name}")

    def walk_widths(self, path: str, width: int) -> Iterator[tuple[str, Node, int]]:
        """Like :meth:`walk`, with the width of the input reaching each node when this one gets ``width``."""
        yield path, self, width
        for name, child in zip(child_names(self), self.children):
            yield from child.walk_widths(f"{path}.{name}", width)
            if self.kind in ("seq", "block"):
                width = child.out_width(width)

    def has_params(self) -> bool:
        """Whether some parameter is used on every forward (a gate's child is not)."""
        if self.kind in ("linear", "layernorm", "rmsnorm", "mlp", "attention", "scale"):
            return True
        return self.kind != "gate" and any(child.has_params() for child in self.children)

    def out_width(self, width: int) -> int:
        if self.kind == "linear":
            return self.out
        if self.kind in ("seq", "block"):
            for child in self.children:
                width = child.out_width(width)
        return width


def child_names(node: Node) -> list[str]:
    """Attribute names the builder gives a node's children (stable: they form module paths)."""
    if node.kind == "seq":
        return [str(i) for i in range(len(node.children))]
    if node.kind == "block":
        return [f"{c.kind}{i}" for i, c in enumerate(node.children)]
    if node.kind in ("residual", "twice", "gate"):
        return ["inner"]
    return []


#: Submodule names inside the leaf blocks the builder creates.
LEAF_SUBMODULES = {"mlp": ("fc1", "fc2"), "attention": ("q", "k", "v", "o")}
#: Module kinds (as ``ModelSpec.module_paths`` names them) that hold parameters of their own.
PARAM_KINDS = ("linear", "layernorm", "rmsnorm", "scale", "embedding")


def under(path: str, prefixes) -> bool:
    """Whether the module at ``path`` is one of the module paths in ``prefixes`` or inside one."""
    return any(path == p or path.startswith(p + ".") or p == "" for p in prefixes)


def _trains(node: Node, path: str, frozen) -> bool:
    """Whether a forward of ``node`` always uses a parameter outside the ``frozen`` module paths."""
    if under(path, frozen):
        return False
    if node.kind in ("linear", "layernorm", "rmsnorm", "scale"):
        return True
    if node.kind in LEAF_SUBMODULES:
        return any(not under(f"{path}.{sub}", frozen) for sub in LEAF_SUBMODULES[node.kind])
    return node.kind != "gate" and any(_trains(child, f"{path}.{name}", frozen)
                                       for name, child in zip(child_names(node), node.children))


@dataclass(frozen=True)
class ModelSpec:
    """The whole model: an input stage, the body tree, and an optional head.

    ``input="dense"`` feeds ``(batch, seq, in_dim)`` floats straight to the body.
    ``input="embedding"`` feeds ``(batch, seq)`` token ids through
    ``inp = Embedding(vocab, in_dim)`` and ends in ``head = Linear(out, vocab)``;
    with ``tie_head`` the head shares the embedding weight (the body must then
    end at width ``in_dim``).
    """

    body: Node
    input: str = "dense"
    in_dim: int = 4
    vocab: int = 0
    tie_head: bool = False

    def input_width(self, path: str) -> int | None:
        """The width of the activations that reach the module at ``path`` in a forward of the whole model;
        ``None`` where the module takes token ids (the root or ``inp`` of an embedding model)."""
        if path in ("", "inp"):
            return None if self.input == "embedding" else self.in_dim
        if path == "head":
            return self.body.out_width(self.in_dim)
        for p, node, width in self.body.walk_widths("body", self.in_dim):
            if p == path:
                return width
            if node.kind in LEAF_SUBMODULES and path.startswith(p + "."):  # mlp.fc1/fc2, attention.q/k/v/o
                return node.hidden if path == f"{p}.fc2" else width
        raise KeyError(path)

    def output_width(self, path: str) -> int:
        """The width of the output of the module at ``path`` (the root's: logits over the vocabulary for an
        embedding model)."""
        if path in ("", "head"):
            return self.vocab if self.input == "embedding" else self.body.out_width(self.in_dim)
        if path == "inp":
            return self.in_dim
        for p, node, width in self.body.walk_widths("body", self.in_dim):
            if p == path:
                return node.out_width(width)
            if node.kind in LEAF_SUBMODULES and path.startswith(p + "."):  # mlp.fc1/fc2, attention.q/k/v/o
                return node.hidden if path == f"{p}.fc1" else width
        raise KeyError(path)

    def uses_params(self, path: str, frozen: frozenset[str] = frozenset()) -> bool:
        """Whether the module at ``path`` has trainable parameters (outside the ``frozen`` module paths) that
        each of its forwards uses, so a backward through it alone has a graph."""
        if under(path, frozen):
            return False
        if path == "":
            embedding = self.input == "embedding" and not (under("inp", frozen) and
                                                          (self.tie_head or under("head", frozen)))
            return embedding or _trains(self.body, "body", frozen)
        if path in ("inp", "head"):
            return True
        node = dict(self.body.walk("body")).get(path)
        return node is None or _trains(node, path, frozen)  # a leaf block's Linears have parameters

    def input_requires_grad(self, path: str, frozen=(), root: str = "") -> bool:
        """Whether the activations reaching the module at ``path`` require grad on every forward, when the
        ``frozen`` module paths hold no trainable parameter: something before it on every path through the model
        trains.  ``root``: a forward of only the body module there, fed fresh inputs (a non-root pass).
        Conservative: False where that is not certain (the leaf blocks' inner Linears are judged by the block's
        input)."""
        if path in ("", "inp", root):
            return False
        grad = not root and self.input == "embedding" and not under("inp", frozen)
        if path == "head":
            return grad or _trains(self.body, "body", frozen)
        node, here = self.body, "body"
        if root:
            node = dict(self.body.walk("body"))[root]
            here = root
        while here != path:
            if node.kind in LEAF_SUBMODULES:
                return grad
            for name, child in zip(child_names(node), node.children):
                child_path = f"{here}.{name}"
                if under(path, (child_path,)):
                    node, here = child, child_path
                    break
                if node.kind in ("seq", "block"):
                    grad = grad or _trains(child, child_path, frozen)
            else:
                raise KeyError(path)
        return grad

    def gates(self) -> tuple[str, ...]:
        """Paths of the gates (modules that run on some forwards only, the identity on the others)."""
        return tuple(path for path, node in self.body.walk("body") if node.kind == "gate")

    def per_rank_flow(self) -> bool:
        """Whether control flow differs between data-parallel ranks (a gate with ``by_rank``)."""
        return bool(self.rank_gates())

    def rank_gates(self) -> tuple[str, ...]:
        """Paths of the per-rank gates (gates with ``by_rank``)."""
        return tuple(path for path, node in self.body.walk("body") if node.kind == "gate" and node.by_rank)

    def param_modules(self) -> list[str]:
        """Paths of the modules that hold parameters of their own (a tied head holds none)."""
        return [path for path, kind in self.module_paths()
                if kind in PARAM_KINDS and not (path == "head" and self.tie_head)]

    def needs_no_gradient(self, path: str, frozen: tuple[str, ...] = ()) -> bool:
        """Whether the module at ``path`` computes nothing that needs a gradient: a dense model input, no parameter
        in it and none in a module that runs before it (its ancestors, which hold it, do not count), parameters
        in the modules at or under ``frozen`` (their ``requires_grad`` off) not counted."""
        paths = [p for p, _ in self.module_paths()]
        held = {p for p in self.param_modules() if not under(p, frozen)}
        at = paths.index(path)
        return self.input == "dense" and not any(
            p in held and (under(p, (path,)) or i < at and not under(path, (p,))) for i, p in enumerate(paths))

    def module_paths(self) -> list[tuple[str, str]]:
        """``(path, kind)`` of every module of the built model, root (``""``) first."""
        out = [("", "root")]
        if self.input == "embedding":
            out.append(("inp", "embedding"))
        for path, node in self.body.walk("body"):
            out.append((path, node.kind))
            for sub in LEAF_SUBMODULES.get(node.kind, ()):
                out.append((f"{path}.{sub}", "linear"))
        if self.input == "embedding":
            out.append(("head", "linear"))
        return out


def children_first(items, path=lambda item: item) -> list:
    """``items`` (module paths, or things with one: ``path``) in the order wrapping applies to them: the deepest
    first, the root last; modules of one depth in the given order.  ``fully_shard`` "should be called bottom-up"
    (_fully_shard.py), and nested FSDP1 instances are made inside out."""
    return sorted(items, key=lambda item: -path(item).count(".") - (path(item) != ""))


def check_rank_gate_periods(m: ModelSpec, dp: int) -> None:
    """Every per-rank gate's child is used by some rank: its period is at most the data-parallel size ``dp``."""
    nodes = dict(m.body.walk("body"))
    for path in m.rank_gates():
        _check(nodes[path].period <= dp, "model.body", f"the per-rank gate at {path} needs a period <= the "
              f"data-parallel size {dp} (some rank must use its child), got {nodes[path].period}")


def validate_model(m: ModelSpec) -> None:
    _check(m.input in ("dense", "embedding"), "model.input", f"must be 'dense' or 'embedding', got {m.input!r}")
    _check(m.in_dim >= 1, "model.in_dim", f"must be >= 1, got {m.in_dim}")
    if m.input == "embedding":
        _check(m.vocab >= 1, "model.vocab", f"must be >= 1 for an embedding input, got {m.vocab}")
    else:
        _check(m.vocab == 0, "model.vocab", "only an embedding input has a vocabulary")
        _check(not m.tie_head, "model.tie_head", "only an embedding input has a head to tie")
    out = _validate_node(m.body, m.in_dim, "model.body")
    _check(m.input == "embedding" or m.body.has_params(), "model.body",
           "a dense model needs a module with parameters that every forward uses (backward needs a graph)")
    if m.tie_head:
        _check(out == m.in_dim, "model.tie_head",
               f"a tied head needs the body to end at width in_dim={m.in_dim}, it ends at {out}")


def _validate_node(node: Node, width: int, where: str) -> int:
    k = node.kind
    _check(k in LEAF_KINDS + CONTAINER_KINDS, f"{where}.kind",
           f"unknown kind {k!r} (known: {', '.join(LEAF_KINDS + CONTAINER_KINDS)})")
    if k in LEAF_KINDS:
        _check(not node.children, f"{where}.children", f"a {k} has no children")
    if k == "linear":
        _check(node.out >= 1, f"{where}.out", f"must be >= 1, got {node.out}")
        return node.out
    if k == "act":
        _check(node.fn in ACTIVATIONS, f"{where}.fn", f"must be one of {ACTIVATIONS}, got {node.fn!r}")
    elif k == "dropout":
        _check(0 < node.p < 1, f"{where}.p", f"must be in (0, 1), got {node.p}")
    elif k == "scale":
        _check(node.out >= 1, f"{where}.out", f"must be >= 1, got {node.out}")
    elif k == "mlp":
        _check(node.hidden >= 1, f"{where}.hidden", f"must be >= 1, got {node.hidden}")
    elif k == "attention":
        _check(node.heads >= 1 and width % node.heads == 0, f"{where}.heads",
               f"must be >= 1 and divide the incoming width {width}, got {node.heads}")
    elif k in ("seq", "block"):
        _check(len(node.children) >= 1, f"{where}.children", f"a {k} needs at least one child")
        for i, child in enumerate(node.children):
            width = _validate_node(child, width, f"{where}.children[{i}]")
    elif k in ("residual", "twice", "gate"):
        if k == "gate":
            _check(node.period >= 2, f"{where}.period", f"must be >= 2, got {node.period}")
        _check(len(node.children) == 1, f"{where}.children", f"a {k} has exactly one child")
        out = _validate_node(node.children[0], width, f"{where}.children[0]")
        _check(out == width, f"{where}.children[0]", f"a {k} child must keep the width {width}, it gives {out}")
    return width


def check_paths(paths, kinds: dict, where: str, verb: str) -> None:
    """Each of ``paths`` (the ``path`` of the entries of a plan list at ``where``) names a module of the model,
    and none twice (``verb``: what the plan does to it, for the message)."""
    seen = set()
    for i, path in enumerate(paths):
        _check(path in kinds, f"{where}[{i}].path", f"no module at path {path!r}")
        _check(path not in seen, f"{where}[{i}].path", f"module {path!r} is {verb} twice")
        seen.add(path)
