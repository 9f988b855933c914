"""Model trees.

Shrinking: every choice lists its simplest option first, so Hypothesis moves a
failing tree toward fewer children (lists shrink toward their minimum length),
shallower nesting (leaves come before containers), ``linear`` leaves of width 4
with bias, a dense input and no tied head.

Beyond layers: ``dropout`` (p 0.5, 0.1, 0.9), ``scale`` (a constant buffer and
a 3-D parameter whose dim-0 of 1-3 is below the shard count) and ``gate``
(a child used only on every 2nd or 3rd forward: SPMD-consistent control flow; or, on a rare case-level coin,
on the forwards where ``forward index + rank`` is a multiple of the period: control flow that differs per
rank, as DDP's ``find_unused_parameters`` allows).  A minimal failure therefore keeps
only the modules and widths that matter.
"""

from __future__ import annotations

from hypothesis import strategies as st

from parityfuzz.case import ACTIVATIONS, ModelSpec, Node
from parityfuzz.case.model import CONTAINER_KINDS

#: Widths, simplest first.  3, 5, 17 do not divide 2 or 4 (uneven shards); 1 and 2
#: give a dim-0 smaller than the shard count.
WIDTHS = (4, 16, 3, 17, 8, 1, 2, 5)
VOCABS = (8, 17, 3, 16)
LEAVES = ("linear", "act", "layernorm", "mlp", "attention", "dropout", "scale")
CONTAINERS = CONTAINER_KINDS


def _node(draw, width: int, depth: int, rank_period: int = 0, leaves: tuple[str, ...] = LEAVES) -> Node:
    kinds = leaves + (CONTAINERS if depth > 0 else ())
    kind = draw(st.sampled_from(kinds))
    if kind == "linear":
        return Node("linear", out=draw(st.sampled_from(WIDTHS)), bias=not draw(st.booleans()))
    if kind == "act":
        return Node("act", fn=draw(st.sampled_from(ACTIVATIONS)))
    if kind in ("layernorm", "rmsnorm"):
        return Node(kind)
    if kind == "mlp":
        return Node("mlp", hidden=draw(st.sampled_from(WIDTHS)))
    if kind == "dropout":
        return Node("dropout", p=draw(st.sampled_from((0.5, 0.1, 0.9))))
    if kind == "scale":
        return Node("scale", out=draw(st.sampled_from((1, 2, 3))))
    if kind == "attention":
        return Node("attention", heads=draw(st.sampled_from([h for h in (1, 2, 4) if width % h == 0])))
    if kind in ("seq", "block"):
        return Node(kind, children=_chain(draw, width, depth - 1, max_len=3, rank_period=rank_period, leaves=leaves))
    # residual / twice / gate: the child must keep the width; project back when it does not.
    child = _node(draw, width, depth - 1, rank_period, leaves)
    if child.out_width(width) != width:
        child = Node("seq", children=(child, Node("linear", out=width)))
    if kind != "gate":
        return Node(kind, children=(child,))
    period = draw(st.sampled_from((2, 3)))
    if rank_period:  # per-rank control flow: some rank must use the child on every forward
        return Node(kind, children=(child,), period=min(period, rank_period), by_rank=True)
    return Node(kind, children=(child,), period=period)


def _chain(draw, width: int, depth: int, max_len: int, rank_period: int = 0,
           leaves: tuple[str, ...] = LEAVES) -> tuple[Node, ...]:
    n = draw(st.integers(1, max_len))
    children = []
    for _ in range(n):
        child = _node(draw, width, depth, rank_period, leaves)
        width = child.out_width(width)
        children.append(child)
    return tuple(children)


@st.composite
def bodies(draw, in_width: int = 4, max_depth: int = 2, end_width: int | None = None, rank_period: int = 0,
           leaves: tuple[str, ...] = LEAVES) -> Node:
    """A ``seq`` body of 1-4 subtrees, nested up to ``max_depth``.

    It ends at ``end_width`` if given (else where its last child leaves it) and
    always has parameters: a final Linear is appended when needed.  With ``rank_period`` every gate is a
    per-rank gate of period at most that.  ``leaves``: the leaf kinds to draw from.
    """
    children = _chain(draw, in_width, max_depth, max_len=4, rank_period=rank_period, leaves=leaves)
    body = Node("seq", children=children)
    if (end_width is not None and body.out_width(in_width) != end_width) or not body.has_params():
        out = end_width if end_width is not None else body.out_width(in_width)
        body = Node("seq", children=children + (Node("linear", out=out),))
    return body


@st.composite
def models(draw, max_depth: int = 2, rank_period: int = 0, leaves: tuple[str, ...] = LEAVES,
           tie: bool = True) -> ModelSpec:
    """A dense or embedding-input model; an embedding model has an LM-style head, sometimes tied (never with
    ``tie=False``).  With ``rank_period`` (at most the world size) its gates are per-rank gates; ``leaves``:
    the leaf kinds to draw from."""
    kind = draw(st.sampled_from(("dense", "embedding")))
    in_dim = draw(st.sampled_from(WIDTHS))
    if kind == "dense":
        return ModelSpec(body=draw(bodies(in_dim, max_depth, rank_period=rank_period, leaves=leaves)),
                         input="dense", in_dim=in_dim)
    vocab = draw(st.sampled_from(VOCABS))
    tie = draw(st.booleans()) and tie
    body = draw(bodies(in_dim, max_depth, end_width=in_dim if tie else None, rank_period=rank_period,
                       leaves=leaves))
    return ModelSpec(body=body, input="embedding", in_dim=in_dim, vocab=vocab, tie_head=tie)
