"""Tensor-parallel plans that keep the model computing what it computed (see :mod:`parityfuzz.families.fsdp2_tp`).

Walks the model and, on a coin per candidate, parallelizes:

- an MLP block: ``fc1`` colwise, ``fc2`` rowwise (the hidden activations stay local shards; on a rare coin,
  and where ``tp`` does not divide the hidden width, ``fc1``'s output stays a DTensor through the GELU);
- attention whose heads ``tp`` divides: ``q``/``k``/``v`` colwise, ``o`` rowwise;
- two Linears of one chain with only activations between: colwise, then rowwise;
- any other Linear: colwise with its output gathered, or rowwise on a replicated input;
- sequence parallelism where a norm follows a module ending rowwise (and the sequence length divides by
  ``tp``): the rowwise output reduce-scattered over the sequence, the norm ``SequenceParallel``, then the
  sequence all-gathered again: by the colwise modules that follow (their input layout), by a
  ``PrepareModuleInput`` on the MLP or attention block holding them, or, where no colwise module follows, by a
  ``PrepareModuleOutput`` on the norm;
- an embedding model's ``inp`` rowwise and ``head`` colwise, its logits gathered or, two times in three, left
  sharded over the vocabulary for the loss (``loss_parallel``: torchtitan's default wherever it applies tensor
  parallelism, ``parallelism.disable_loss_parallel=False``).

Widths ``tp`` does not divide are kept (uneven DTensor shards).

Shrinking: every coin toward "not parallelized", so a minimal failing case keeps only the styles it needs.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from parityfuzz.case import ModelSpec, Node, TrainSpec, child_names, under
from parityfuzz.parts.tensor_parallel import PREPARE, Parallelize
from parityfuzz.strategies.coins import OFTEN, RARE
from parityfuzz.strategies.models import VOCABS, WIDTHS

NORMS = ("layernorm", "rmsnorm")


@dataclasses.dataclass(frozen=True)
class _Unit:
    """Parallel styles drawn for one child of a chain: the modules its input reaches first (colwise) and the
    one its output leaves (rowwise), for sequence parallelism to hook onto."""

    styles: dict
    heads: tuple[str, ...] = ()
    tail: str = ""
    block: str = ""  # the MLP or attention block holding ``heads``


def tp_training(train: TrainSpec, loss_parallel: bool, low_precision: bool) -> TrainSpec:
    """``train`` as a tensor-parallel case may take it: no label smoothing under ``loss_parallel()`` (torch
    documents it as not supported: ``tp.loss-parallel-smoothing``), and without ``low_precision`` no autocast nor
    loss scaling (TP's partial products rounded to the autocast dtype have no reference there)."""
    if loss_parallel:
        train = dataclasses.replace(train, label_smoothing=0.0)
    if not low_precision:
        train = dataclasses.replace(train.unscaled(), autocast="")
    return train


def overflow_outside(train: TrainSpec, styles) -> TrainSpec:
    """``train`` with its overflow in the loss where the module it happens in (``overflow_in``) is tensor parallel (its
    output sharded over tp: rule of :func:`parityfuzz.families.fsdp2_tp.validate_styles`)."""
    hit = train.overflow_in
    if hit and any(under(hit, (p.path,)) or under(p.path, (hit,)) for p in styles):
        return dataclasses.replace(train, overflow_in="")
    return train


@st.composite
def sequence_for_tp(draw, train: TrainSpec, tp: int) -> TrainSpec:
    """``train`` with its sequence made a multiple of ``tp`` on a coin, where it is not (sequence parallelism
    splits the sequence over tp)."""
    if train.seq_len % tp and draw(OFTEN):
        return dataclasses.replace(train, seq_len=tp * draw(st.integers(1, 2)))
    return train


@st.composite
def tp_plans(draw, model: ModelSpec, tp: int, seq_len: int) -> tuple[tuple[Parallelize, ...], bool]:
    """``(styles, loss_parallel)`` for ``model`` on a ``tp``-rank axis with sequences of ``seq_len``."""
    styles: dict[tuple[str, str], Parallelize] = {}  # by (path, style): a prepare_* entry may share a path
    _chain(draw, model.body, "body", tp, seq_len, styles)
    loss_parallel = False
    if model.input == "embedding":
        if draw(OFTEN):
            _add(styles, Parallelize("inp", "rowwise", input_layout="replicate"))
        if draw(OFTEN):
            loss_parallel = draw(OFTEN)  # torchtitan's default under tensor parallelism
            _add(styles, Parallelize("head", "colwise", output_layout="shard_last", use_local_output=False)
                 if loss_parallel else Parallelize("head", "colwise", output_layout="replicate"))
    order = [path for path, _ in model.module_paths()]
    return tuple(sorted(styles.values(), key=lambda p: (order.index(p.path), p.style in PREPARE))), loss_parallel


def _add(styles: dict, *entries: Parallelize) -> None:
    for p in entries:
        styles[p.path, p.style] = p


def _chain(draw, node: Node, path: str, tp: int, seq_len: int, styles: dict) -> _Unit:
    """Draw styles for the subtree at ``path``; in a chain (``seq``/``block``) also pairs and sequence
    parallelism between siblings.  Returns what a leaf offers sequence parallelism (nothing for others)."""
    if node.kind not in ("seq", "block"):
        unit = _unit(draw, node, path, tp, styles)
        for name, child in zip(child_names(node), node.children):
            _chain(draw, child, f"{path}.{name}", tp, seq_len, styles)
        return unit
    names = [f"{path}.{name}" for name in child_names(node)]
    units: list[_Unit | None] = [None] * len(node.children)
    i = 0
    while i < len(node.children):  # colwise-then-rowwise pairs of Linears with only activations between
        j = i + 1
        while j < len(node.children) and node.children[j].kind == "act":
            j += 1
        if (node.children[i].kind == "linear" and j < len(node.children) and node.children[j].kind == "linear"
                and draw(OFTEN)):
            dtensor = _dtensor_hidden(draw, node.children[i].out, tp)
            units[i] = _Unit({names[i]: Parallelize(names[i], "colwise", use_local_output=not dtensor)},
                             heads=(names[i],))
            units[j] = _Unit({names[j]: Parallelize(names[j], "rowwise")}, tail=names[j])
            _add(styles, *units[i].styles.values(), *units[j].styles.values())
            i = j + 1
        else:
            i += 1
    for k, (child, name) in enumerate(zip(node.children, names)):
        if units[k] is None:
            units[k] = _chain(draw, child, name, tp, seq_len, styles)
    if seq_len % tp == 0:
        for k in range(1, len(node.children)):  # sequence parallelism: rowwise -> norm -> (colwise)
            before, after = units[k - 1], units[k + 1] if k + 1 < len(node.children) else _Unit({})
            if node.children[k].kind in NORMS and before.tail and draw(OFTEN):
                _sequence_parallel(draw, before, names[k], after, styles)
    return _Unit({})


def _sequence_parallel(draw, before: _Unit, norm: str, after: _Unit, styles: dict) -> None:
    """Shard the sequence from the rowwise end of ``before`` through the norm, and gather it again where
    ``after`` starts (see the module docstring)."""
    tail = styles[before.tail, "rowwise"]
    _add(styles, dataclasses.replace(tail, output_layout="shard_seq"), Parallelize(norm, "sequence"))
    if not after.heads:  # a plain tensor for what follows (modules not parallelized refuse DTensors)
        _add(styles, Parallelize(norm, "prepare_output", output_layout="shard_seq", desired_layout="replicate"))
    elif after.block and draw(OFTEN):  # the block's colwise modules take a DTensor or a local tensor
        _add(styles, Parallelize(after.block, "prepare_input", input_layout="shard_seq", desired_layout="replicate",
                                 use_local_output=not draw(RARE)))
    else:
        for head in after.heads:
            _add(styles, dataclasses.replace(styles[head, "colwise"], input_layout="shard_seq"))


def _unit(draw, node: Node, path: str, tp: int, styles: dict) -> _Unit:
    """Styles for a leaf on its own (added to ``styles``); what it offers sequence parallelism."""
    unit = _Unit({})
    if node.kind == "mlp" and draw(OFTEN):
        dtensor = _dtensor_hidden(draw, node.hidden, tp)
        unit = _Unit({f"{path}.fc1": Parallelize(f"{path}.fc1", "colwise", use_local_output=not dtensor),
                      f"{path}.fc2": Parallelize(f"{path}.fc2", "rowwise")},
                     heads=(f"{path}.fc1",), tail=f"{path}.fc2", block=path)
    elif node.kind == "attention" and node.heads % tp == 0 and draw(OFTEN):
        qkv = tuple(f"{path}.{x}" for x in "qkv")
        unit = _Unit({**{p: Parallelize(p, "colwise") for p in qkv}, f"{path}.o": Parallelize(f"{path}.o", "rowwise")},
                     heads=qkv, tail=f"{path}.o", block=path)
    elif node.kind == "linear":
        choice = draw(st.sampled_from(("", "colwise", "rowwise")))
        if choice == "colwise":
            unit = _Unit({path: Parallelize(path, "colwise", output_layout="replicate")}, heads=(path,))
        elif choice == "rowwise":
            unit = _Unit({path: Parallelize(path, "rowwise", input_layout="replicate")}, tail=path)
    _add(styles, *unit.styles.values())
    return unit


def _dtensor_hidden(draw, hidden: int, tp: int) -> bool:
    """Whether the hidden activations between a colwise and a rowwise module stay a DTensor (not its local
    shard): on a rare coin, and always where ``tp`` does not divide the hidden width — a rowwise module
    takes a local input as an even shard (``DTensor.from_local`` without a shape), so only the DTensor carries
    uneven shards across."""
    return draw(RARE) or hidden % tp != 0


@st.composite
def transformer_models(draw) -> ModelSpec:
    """A transformer-shaped stack, where tensor and sequence parallelism have the most to do: 2-3 blocks, each
    an MLP, attention or two Linears around an activation, followed by a LayerNorm or RMSNorm (so a norm sits
    between a module that ends rowwise and one that starts colwise); dense or token input."""
    width = draw(st.sampled_from((4, 8, 6, 16)))
    children: list[Node] = []
    for _ in range(draw(st.integers(2, 3))):
        kind = draw(st.sampled_from(("mlp", "attention", "pair")))
        if kind == "mlp":
            children.append(Node("mlp", hidden=draw(st.sampled_from(WIDTHS))))
        elif kind == "attention":
            children.append(Node("attention", heads=draw(st.sampled_from([h for h in (2, 4, 1) if width % h == 0]))))
        else:
            children += [Node("linear", out=draw(st.sampled_from(WIDTHS))), Node("act", fn="gelu"),
                         Node("linear", out=width)]
        children.append(Node(draw(st.sampled_from(("rmsnorm", "layernorm")))))
    body = Node("seq", children=tuple(children))
    if draw(st.booleans()):
        return ModelSpec(body=body, input="dense", in_dim=width)
    return ModelSpec(body=body, input="embedding", in_dim=width, vocab=draw(st.sampled_from(VOCABS)))
