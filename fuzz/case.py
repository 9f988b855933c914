"""Parity cases as plain data.

A :class:`Case` fully determines one parity run: the model tree, the device
mesh, the per-module parallel plan, the training settings, the seed, the world
size and the (reference, system under test) pair.  It round-trips through JSON
(with a ``schema`` version) and :meth:`Case.validate` raises :class:`CaseError`
naming the offending field.

This module imports neither torch nor hypothesis: cases are data, and the
strategies, the builder and the executor are the only places that give them
meaning.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Iterator, Union

from fuzz import dtypes
from fuzz.dtypes import MP_DTYPES

SCHEMA = 1


class CaseError(ValueError):
    """A case (or its JSON) is malformed.  ``field`` is a dotted path into the case."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


# --------------------------------------------------------------------------- model

#: Leaf kinds and the widths they need.  Containers hold ``children``.
LEAF_KINDS = ("linear", "act", "layernorm", "mlp", "attention", "dropout", "scale")
CONTAINER_KINDS = ("seq", "block", "residual", "twice", "gate")
ACTIVATIONS = ("relu", "gelu", "tanh", "silu")


@dataclass(frozen=True)
class Node:
    """One module of the model body.

    The input width of a node is implied by what feeds it; only what a kind
    needs beyond that is stored:

    - ``linear``: ``out`` features, ``bias``.
    - ``act``: ``fn``, one of :data:`ACTIVATIONS`.
    - ``layernorm``: nothing (normalises the incoming width).
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
        if self.kind in ("linear", "layernorm", "mlp", "attention", "scale"):
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
PARAM_KINDS = ("linear", "layernorm", "scale", "embedding")


def under(path: str, prefixes) -> bool:
    """Whether the module at ``path`` is one of the module paths in ``prefixes`` or inside one."""
    return any(path == p or path.startswith(p + ".") or p == "" for p in prefixes)


def _trains(node: Node, path: str, frozen) -> bool:
    """Whether a forward of ``node`` always uses a parameter outside the ``frozen`` module paths."""
    if under(path, frozen):
        return False
    if node.kind in ("linear", "layernorm", "scale"):
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

    def param_modules(self) -> list[str]:
        """Paths of the modules that hold parameters of their own (a tied head holds none)."""
        return [path for path, kind in self.module_paths()
                if kind in PARAM_KINDS and not (path == "head" and self.tie_head)]

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


# --------------------------------------------------------------------------- parallelism


#: Supported mesh layouts: FSDP over all ranks, or HSDP (replicate across groups, shard within).
MESH_NAMES = (("shard",), ("replicate", "shard"))


@dataclass(frozen=True)
class MeshSpec:
    """Device mesh shape and dimension names: ``("shard",)`` or HSDP's ``("replicate", "shard")``."""

    shape: tuple[int, ...]
    names: tuple[str, ...] = ("shard",)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass(frozen=True)
class Wrap:
    """``fully_shard`` applied to the module at ``path`` (``""`` is the root).

    ``offload``: ``CPUOffloadPolicy`` (``pin_memory`` only where there is an accelerator).
    ``param_dtype``, ``reduce_dtype``, ``output_dtype``, ``cast_forward_inputs``:
    the module's ``MixedPrecisionPolicy`` (dtype names from :data:`MP_DTYPES`,
    ``""`` for ``None``).
    """

    path: str
    reshard_after_forward: Union[bool, int] = True
    offload: bool = False
    param_dtype: str = ""
    reduce_dtype: str = ""
    output_dtype: str = ""
    cast_forward_inputs: bool = True

    def mixed_precision(self) -> bool:
        """Whether this module has a non-default ``MixedPrecisionPolicy``."""
        return bool(self.param_dtype or self.reduce_dtype or self.output_dtype) or not self.cast_forward_inputs


CHECKPOINT_APIS = ("composable", "wrapper", "apply")


@dataclass(frozen=True)
class Checkpoint:
    """Activation checkpointing of the module at ``path``.

    ``api``: ``composable`` (``torch.distributed._composable.checkpoint``) or
    ``wrapper`` (``checkpoint_wrapper``, which inserts a ``CheckpointWrapper``
    into the module tree; not for the root) or ``apply``
    (``apply_activation_checkpointing`` selecting this module; not for the root).  ``before``: applied before
    ``fully_shard`` (else after).
    """

    path: str
    api: str = "composable"
    before: bool = True


@dataclass(frozen=True)
class Prefetch:
    """Explicit prefetching set on the wrapped module at ``path``: other wrapped modules to unshard early."""

    path: str
    forward: tuple[str, ...] = ()
    backward: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlanSpec:
    """Which modules get which parallel API; ``fully_shard`` is applied children before parents."""

    wraps: tuple[Wrap, ...] = (Wrap(""),)
    checkpoints: tuple[Checkpoint, ...] = ()
    prefetch: tuple[Prefetch, ...] = ()
    #: ``set_reduce_scatter_unused_params(True)`` on every wrapped module: zero gradients for parameters a
    #: rank did not use, so the ranks' reduce-scatters match (needed by per-rank control flow).
    reduce_scatter_unused: bool = False

    def owner(self, path: str) -> str:
        """The wrapped module whose FSDP group holds the module at ``path``: itself or its nearest wrapped
        ancestor (the root, ``""``, is always wrapped)."""
        wrapped = {w.path for w in self.wraps}
        while path and path not in wrapped:
            path = path.rpartition(".")[0]
        return path


DELAY_POINTS = ("all_gather", "reduce_scatter", "after_forward", "before_step")


@dataclass(frozen=True)
class Delay:
    """``ms`` of sleep on ``rank`` in the system under test, at ``where`` (every time it is reached)."""

    rank: int
    where: str
    ms: int = 5


# --------------------------------------------------------------------------- training

OPTIMIZERS = ("sgd", "adam", "adamw")
ZERO_GRAD_MODES = ("none", "zeros", "alternate")
LOSSES = ("sum", "mean")
#: LR schedulers stepped after every optimizer step: StepLR(step_size=2, gamma=0.5), LinearLR(1.0 -> 0.1).
SCHEDULERS = ("", "step", "linear")
DTYPES = ("float64", "float32")


@dataclass(frozen=True)
class TrainSpec:
    """Training loop settings.

    ``zero_grad``: ``none`` = ``set_to_none=True`` every step, ``zeros`` =
    ``set_to_none=False``, ``alternate`` = as PyTorch's tests do
    (``set_to_none=(step % 2 == 0)``).  Inputs differ per rank unless
    ``same_input``.  ``nonroot``: after each step, a second one whose forward and
    backward run through only the wrapped non-root module at this path (fed
    inputs of the width and dtype it sees inside the model).
    """

    steps: int = 1
    optimizer: str = "sgd"
    lr: float = 0.01
    foreach: bool = False
    zero_grad: str = "none"
    batch: int = 1
    seq_len: int = 1
    loss: str = "sum"
    dtype: str = "float64"
    same_input: bool = False
    microbatches: int = 1
    no_sync: tuple[str, ...] = ()
    is_last_backward: bool = False
    reshard_after_backward: bool = True
    unshard_first: bool = False
    to_float64: bool = False
    forward_method: bool = False
    no_all_reduce: bool = False
    nonroot: str = ""
    momentum: float = 0.0
    weight_decay: float = 0.0
    groups: tuple[ParamGroup, ...] = ()
    clip: float = 0.0
    scheduler: str = ""
    frozen: tuple[Freeze, ...] = ()
    eval: bool = False

    def group_of(self, param: str) -> int | None:
        """The index in ``groups`` of the parameter group that takes the parameter named ``param`` (the first
        whose paths hold its module), or None for the default group."""
        module = param.rpartition(".")[0]
        return next((i for i, g in enumerate(self.groups) if under(module, g.paths)), None)

    def frozen_at(self, param: str, step: int) -> bool:
        """Whether the parameter named ``param`` has ``requires_grad=False`` during ``step``."""
        module = param.rpartition(".")[0]
        return any(under(module, (f.path,)) and (f.until == 0 or step < f.until) for f in self.frozen)

    def unfreezes_at(self, step: int) -> bool:
        return any(f.until == step for f in self.frozen)


@dataclass(frozen=True)
class ParamGroup:
    """An optimizer parameter group: the parameters of the modules at ``paths`` (and inside them), at
    ``lr_scale`` times the case's learning rate, with their own weight decay."""

    paths: tuple[str, ...]
    lr_scale: float = 1.0
    weight_decay: float = 0.0


@dataclass(frozen=True)
class Freeze:
    """The parameters of the module at ``path`` (and inside it) get ``requires_grad=False`` before the
    parallel API is applied, and ``requires_grad=True`` again at the start of step ``until`` (fine-tuning
    schedules); ``until=0``: frozen for the whole run."""

    path: str
    until: int = 0


# --------------------------------------------------------------------------- case


@dataclass(frozen=True)
class Case:
    """One parity case: run ``reference`` and ``system`` on ``world_size`` ranks and compare.

    ``system`` and ``reference`` name registered systems (``fsdp2``, ``ddp``) or
    give an importable ``module:attribute``.
    """

    seed: int
    world_size: int
    model: ModelSpec
    mesh: MeshSpec
    plan: PlanSpec = field(default_factory=PlanSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    delays: tuple[Delay, ...] = ()
    reference: str = "ddp"
    system: str = "fsdp2"
    schema: int = SCHEMA

    # ---- JSON
    def to_dict(self) -> dict:
        return _to_jsonable(self)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=indent is not None)

    @classmethod
    def from_dict(cls, data: Any) -> Case:
        case = _from_jsonable(cls, data, "")
        if case.schema != SCHEMA:
            raise CaseError("schema", f"unsupported schema {case.schema} (this parityfuzz reads {SCHEMA})")
        return case

    @classmethod
    def from_json(cls, text: str) -> Case:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise CaseError("", f"not valid JSON: {e}") from None
        return cls.from_dict(data)

    def case_id(self) -> str:
        """Stable content hash (16 hex digits) of the canonical JSON."""
        canon = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    # ---- validation
    def validate(self) -> Case:
        """Raise :class:`CaseError` naming the first offending field; return self."""
        _check(self.schema == SCHEMA, "schema", f"must be {SCHEMA}")
        _check(0 <= self.seed < 2**32, "seed", f"must be in [0, 2**32), got {self.seed}")
        _check(self.world_size >= 1, "world_size", f"must be >= 1, got {self.world_size}")
        _check(bool(self.reference), "reference", "must name a system")
        _check(bool(self.system), "system", "must name a system")
        _validate_model(self.model)
        _validate_mesh(self.mesh, self.world_size)
        _validate_plan(self.plan, self.model, self.mesh)
        _validate_train(self.train, self.plan, self.mesh, self.model)
        _check(not self.mixed_precision() or self.reference != "ddp", "reference",
               "plain DDP cannot model mixed precision: use the emulating reference 'ddp_mp'")
        inconsistent = dtypes.check_consistent(self)
        if inconsistent:
            raise CaseError(*inconsistent)
        _validate_rank_gates(self)
        for i, d in enumerate(self.delays):
            _check(0 <= d.rank < self.world_size, f"delays[{i}].rank", f"must be a rank < {self.world_size}, got {d.rank}")
            _check(d.where in DELAY_POINTS, f"delays[{i}].where", f"must be one of {DELAY_POINTS}, got {d.where!r}")
            _check(0 <= d.ms <= 1000, f"delays[{i}].ms", f"must be in [0, 1000], got {d.ms}")
        return self

    def mixed_precision(self) -> bool:
        return any(w.mixed_precision() for w in self.plan.wraps)

    def features(self) -> frozenset[str]:
        """Feature tags of this case (for coverage counts and Hypothesis ``event()``)."""
        tags = {f"ws={self.world_size}", "mesh=" + "x".join(map(str, self.mesh.shape)), f"opt={self.train.optimizer}", f"dtype={self.train.dtype}",
                f"loss={self.train.loss}", f"zero_grad={self.train.zero_grad}", f"input={self.model.input}"}
        if self.mesh.shape[-1] == 1:
            tags.add("unsharded")  # world size 1, or a shard dimension of 1: every rank holds whole parameters
        if self.train.foreach:
            tags.add("foreach")
        if self.model.tie_head:
            tags.add("tied")
        kinds = {node.kind for _, node in self.model.body.walk("body")}
        tags.update(f"has:{k}" for k in kinds if k not in ("seq", "act", "linear"))
        if self.plan.reduce_scatter_unused:
            tags.add("rank_flow")  # control flow that differs per rank
        if any(node.kind == "linear" and node.out % self.world_size for _, node in self.model.body.walk("body")):
            tags.add("uneven_shard")
        wrapped = [w for w in self.plan.wraps if w.path]
        tags.add(f"wrapped={min(len(wrapped), 3)}{'+' if len(wrapped) > 3 else ''}")
        for w in self.plan.wraps:
            raf = w.reshard_after_forward
            tags.add("reshard=int" if not isinstance(raf, bool) else f"reshard={raf}")
            if w.offload:
                tags.add("offload")
        if self.mixed_precision():
            tags.add(f"precision={dtypes.precision(self)}")
            param_dtypes = {w.param_dtype or self.train.dtype for w in self.plan.wraps}
            tags.add("mp=mixed" if len(param_dtypes) > 1 else "mp=uniform")
            if any(w.reduce_dtype for w in self.plan.wraps):
                tags.add("mp_reduce_dtype")
            if any(w.output_dtype for w in self.plan.wraps):
                tags.add("mp_output_dtype")
            if not all(w.cast_forward_inputs for w in self.plan.wraps):
                tags.add("mp_no_input_cast")
        tags.update(f"ckpt={c.api}/{'before' if c.before else 'after'}" for c in self.plan.checkpoints)
        if any(p.forward for p in self.plan.prefetch):
            tags.add("prefetch=forward")
        if any(p.backward for p in self.plan.prefetch):
            tags.add("prefetch=backward")
        t = self.train
        if t.microbatches > 1:
            tags.add(f"micro={t.microbatches}")
            wrapped = {w.path for w in self.plan.wraps}
            tags.add("no_sync=" + ("none" if not t.no_sync else "all" if set(t.no_sync) == wrapped
                                   else "root" if t.no_sync == ("",) else "subset"))
        for flag in ("is_last_backward", "unshard_first", "to_float64", "forward_method", "no_all_reduce"):
            if getattr(t, flag):
                tags.add(flag)
        if not t.reshard_after_backward:
            tags.add("reshard_after_backward=False")
        if t.nonroot:
            tags.add("nonroot")
        if t.momentum:
            tags.add("momentum")
        if t.weight_decay or any(g.weight_decay for g in t.groups):
            tags.add("weight_decay")
        if t.groups:
            tags.add(f"param_groups={len(t.groups) + 1}")
        if t.clip:
            tags.add("clip")
        if t.scheduler:
            tags.add(f"scheduler={t.scheduler}")
        if t.frozen:
            tags.add("frozen")
        if any(f.until for f in t.frozen):
            tags.add("unfrozen_later")
        if t.eval:
            tags.add("eval")
        tags.update(f"delay={d.where}" for d in self.delays)
        return frozenset(tags)


def _check(ok: bool, field_path: str, message: str) -> None:
    if not ok:
        raise CaseError(field_path, message)


def _validate_model(m: ModelSpec) -> None:
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


def _validate_rank_gates(case: Case) -> None:
    """Per-rank control flow: some rank uses the gated child on every forward, nothing inside it is wrapped
    (FSDP2 all-gathers a group on every rank), and the plan includes unused parameters in its reductions."""
    gates = [(path, node) for path, node in case.model.body.walk("body") if node.kind == "gate"]
    rank_gates = [path for path, node in gates if node.by_rank]
    for path, node in gates:
        if node.by_rank:
            _check(node.period <= case.world_size, "model.body", f"the per-rank gate at {path} needs a period <= "
                   f"world_size={case.world_size} (some rank must use its child), got {node.period}")
            for i, w in enumerate(case.plan.wraps):
                _check(not w.path.startswith(path + "."), f"plan.wraps[{i}].path",
                       f"{w.path!r} is inside the per-rank gate at {path}: ranks would all-gather it unevenly")
    _check(bool(rank_gates) == case.plan.reduce_scatter_unused, "plan.reduce_scatter_unused",
           "is exactly what per-rank gates need: set with them, not without (it gives unused parameters zero "
           "gradients where DDP gives none)")
    if rank_gates:
        _check(len(rank_gates) == len(gates), "model.body",
               "per-rank gates do not mix with step gates (a step gate's child unused on every rank would get a "
               "zero gradient from set_reduce_scatter_unused_params, none from DDP)")
        _check(not case.train.nonroot, "train.nonroot",
               "not with per-rank gates (set_reduce_scatter_unused_params zeroes every group's gradients in a "
               "non-root pass)")


def _validate_mesh(mesh: MeshSpec, world_size: int) -> None:
    _check(len(mesh.shape) == len(mesh.names) and len(mesh.shape) >= 1, "mesh.names",
           f"need one name per mesh dimension, got shape {list(mesh.shape)} and names {list(mesh.names)}")
    _check(all(s >= 1 for s in mesh.shape), "mesh.shape", f"sizes must be >= 1, got {list(mesh.shape)}")
    _check(mesh.size == world_size, "mesh.shape",
           f"mesh {list(mesh.shape)} has {mesh.size} ranks but world_size is {world_size}")
    _check(mesh.names in MESH_NAMES, "mesh.names",
           f"must be one of {[list(n) for n in MESH_NAMES]}, got {list(mesh.names)}")


def _validate_plan(plan: PlanSpec, model: ModelSpec, mesh: MeshSpec) -> None:
    kinds = dict(model.module_paths())
    seen = set()
    shard_size = mesh.shape[-1]
    for i, w in enumerate(plan.wraps):
        where = f"plan.wraps[{i}]"
        _check(w.path in kinds, f"{where}.path", f"no module at path {w.path!r}")
        _check(w.path not in seen, f"{where}.path", f"module {w.path!r} is wrapped twice")
        seen.add(w.path)
        raf = w.reshard_after_forward
        if not isinstance(raf, bool):
            _check(1 < raf < shard_size and shard_size % raf == 0, f"{where}.reshard_after_forward",
                   f"an int must be a non-trivial divisor of the shard group size {shard_size}, got {raf}")
        for key in ("param_dtype", "reduce_dtype", "output_dtype"):
            value = getattr(w, key)
            _check(value == "" or value in MP_DTYPES, f"{where}.{key}",
                   f"must be '' (None) or one of {MP_DTYPES}, got {value!r}")
        if model.tie_head:
            _check(w.path not in ("inp", "head"), f"{where}.path",
                   "tied embedding/head weights must stay in one group: do not wrap 'inp' or 'head' alone")
    _check("" in seen, "plan.wraps", "the root ('') must be wrapped")
    checkpointed = set()
    for i, c in enumerate(plan.checkpoints):
        where = f"plan.checkpoints[{i}]"
        _check(c.path in kinds, f"{where}.path", f"no module at path {c.path!r}")
        _check(c.path not in checkpointed, f"{where}.path", f"module {c.path!r} is checkpointed twice")
        checkpointed.add(c.path)
        _check(c.api in CHECKPOINT_APIS, f"{where}.api", f"must be one of {CHECKPOINT_APIS}, got {c.api!r}")
        _check(not (c.api != "composable" and c.path == ""), f"{where}.api",
               "only the composable API can checkpoint the root")
    for i, p in enumerate(plan.prefetch):
        where = f"plan.prefetch[{i}]"
        _check(p.path in seen, f"{where}.path", f"{p.path!r} is not a wrapped module")
        for key in ("forward", "backward"):
            for j, target in enumerate(getattr(p, key)):
                _check(target in seen, f"{where}.{key}[{j}]", f"{target!r} is not a wrapped module")


def _validate_train(t: TrainSpec, plan: PlanSpec, mesh: MeshSpec, model: ModelSpec) -> None:
    _check(1 <= t.steps <= 50, "train.steps", f"must be in [1, 50], got {t.steps}")
    _check(t.optimizer in OPTIMIZERS, "train.optimizer", f"must be one of {OPTIMIZERS}, got {t.optimizer!r}")
    _check(0 < t.lr <= 1, "train.lr", f"must be in (0, 1], got {t.lr}")
    _check(t.zero_grad in ZERO_GRAD_MODES, "train.zero_grad", f"must be one of {ZERO_GRAD_MODES}, got {t.zero_grad!r}")
    _check(t.batch >= 1, "train.batch", f"must be >= 1, got {t.batch}")
    _check(t.seq_len >= 1, "train.seq_len", f"must be >= 1, got {t.seq_len}")
    _check(t.loss in LOSSES, "train.loss", f"must be one of {LOSSES}, got {t.loss!r}")
    _check(t.dtype in DTYPES, "train.dtype", f"must be one of {DTYPES}, got {t.dtype!r}")
    _check(1 <= t.microbatches <= 8, "train.microbatches", f"must be in [1, 8], got {t.microbatches}")
    if t.no_all_reduce:
        _check(mesh.names == ("replicate", "shard") and t.microbatches > 1, "train.no_all_reduce",
               "needs an HSDP mesh and more than one microbatch")
    if t.to_float64:
        _check(t.dtype == "float32", "train.to_float64", "converts a float32 model: needs dtype 'float32'")
        _check(not any(w.mixed_precision() for w in plan.wraps), "train.to_float64",
               "not combined with mixed precision (the policy's dtypes are relative to the model's)")
    wrapped = {w.path for w in plan.wraps}
    for i, path in enumerate(t.no_sync):
        _check(path in wrapped, f"train.no_sync[{i}]", f"{path!r} is not a wrapped module")
    _check(t.momentum == 0 or (0 < t.momentum < 1 and t.optimizer == "sgd"), "train.momentum",
           f"must be 0, or in (0, 1) with sgd, got {t.momentum}")
    _check(0 <= t.weight_decay < 1, "train.weight_decay", f"must be in [0, 1), got {t.weight_decay}")
    _check(t.clip >= 0, "train.clip", f"must be >= 0 (0: no clipping), got {t.clip}")
    _check(t.scheduler in SCHEDULERS, "train.scheduler", f"must be one of {SCHEDULERS}, got {t.scheduler!r}")
    paths = {p for p, _ in model.module_paths()}
    owners = model.param_modules()
    claimed: set[str] = set()
    for i, g in enumerate(t.groups):
        where = f"train.groups[{i}]"
        _check(bool(g.paths), f"{where}.paths", "must name at least one module")
        for j, path in enumerate(g.paths):
            _check(path in paths and path != "", f"{where}.paths[{j}]", f"no non-root module at path {path!r}")
        mine = {m for m in owners if under(m, g.paths)} - claimed
        _check(bool(mine), f"{where}.paths", "holds no parameter an earlier group does not take")
        claimed |= mine
        _check(0 < g.lr_scale <= 10, f"{where}.lr_scale", f"must be in (0, 10], got {g.lr_scale}")
        _check(0 <= g.weight_decay < 1, f"{where}.weight_decay", f"must be in [0, 1), got {g.weight_decay}")
    for i, f in enumerate(t.frozen):
        where = f"train.frozen[{i}]"
        _check(f.path in paths and f.path != "", f"{where}.path", f"no non-root module at path {f.path!r}")
        _check(any(under(m, (f.path,)) for m in owners), f"{where}.path", f"{f.path!r} holds no parameter")
        _check(0 <= f.until < t.steps, f"{where}.until", f"must be in [0, steps={t.steps}), got {f.until}")
    frozen = frozenset(f.path for f in t.frozen)
    if frozen:
        _check(model.uses_params("", frozen), "train.frozen",
               "leaves no trainable parameter that every forward uses (backward needs a graph)")
    if t.nonroot:
        _check(t.nonroot in wrapped - {""}, "train.nonroot", f"{t.nonroot!r} is not a wrapped non-root module")
        _check(model.uses_params(t.nonroot, frozen), "train.nonroot",
               f"{t.nonroot!r} has no trainable parameters every forward uses: a backward through it alone "
               "has no graph")


# --------------------------------------------------------------------------- strict JSON mapping


def _to_jsonable(obj: Any) -> Any:
    """Dataclasses become dicts without fields left at their defaults (readable corpus files)."""
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
            if f.name != "schema" and default is not dataclasses.MISSING and value == default \
                    and type(value) is type(default):
                continue
            out[f.name] = _to_jsonable(value)
        return out
    if isinstance(obj, tuple):
        return [_to_jsonable(v) for v in obj]
    return obj


def _from_jsonable(tp: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise CaseError(where, f"expected an object, got {type(data).__name__}")
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise CaseError(_join(where, unknown[0]), f"unknown field (known: {', '.join(sorted(names))})")
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in data:
                kwargs[f.name] = _from_jsonable(hints[f.name], data[f.name], _join(where, f.name))
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise CaseError(_join(where, f.name), "missing required field")
        return tp(**kwargs)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(data, list):
            raise CaseError(where, f"expected a list, got {type(data).__name__}")
        return tuple(_from_jsonable(args[0], v, f"{where}[{i}]") for i, v in enumerate(data))
    if origin in (Union, types.UnionType):
        # Union[bool, int]: bool first so that JSON true stays a bool.
        for arg in typing.get_args(tp):
            if _scalar_ok(arg, data):
                return data
        names = " or ".join(a.__name__ for a in typing.get_args(tp))
        raise CaseError(where, f"expected {names}, got {json.dumps(data)}")
    if _scalar_ok(tp, data):
        return float(data) if tp is float else data
    raise CaseError(where, f"expected {tp.__name__}, got {json.dumps(data)}")


def _scalar_ok(tp: Any, data: Any) -> bool:
    if tp is bool:
        return isinstance(data, bool)
    if tp is int:
        return isinstance(data, int) and not isinstance(data, bool)
    if tp is float:
        return isinstance(data, (int, float)) and not isinstance(data, bool)
    if tp is str:
        return isinstance(data, str)
    return False


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name
