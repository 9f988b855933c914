"""Build what a case describes: the ``nn.Module`` and each rank's inputs.

Every rank builds the same initial weights (seeded from ``case.seed``); inputs
differ per data-parallel rank and step (unless ``train.same_input``: the ranks of
one tensor-parallel group always share theirs) and never depend on the global
RNG, so the reference and the system under test see identical data.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from parityfuzz.case import dtypes
from parityfuzz.case import Case, ModelSpec, Node, child_names
from parityfuzz.run.record import torch_dtype
from parityfuzz.run.seeds import data_key


_ACTS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "silu": nn.SiLU}


class Block(nn.Module):
    """A generic module whose named children run in registration order."""

    def __init__(self, named: list[tuple[str, nn.Module]]):
        super().__init__()
        for name, mod in named:
            self.add_module(name, mod)

    def forward(self, x):
        for mod in self.children():
            x = mod(x)
        return x


class Residual(nn.Module):
    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return x + self.inner(x)


class Twice(nn.Module):
    """Calls the same child twice in one forward."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(self.inner(x))


class Scale(nn.Module):
    """``x * gain * w.sum(0)``: a constant (non-BatchNorm) buffer and a 3-D parameter ``(n, 1, width)``."""

    def __init__(self, width: int, n: int):
        super().__init__()
        self.register_buffer("gain", 0.5 + torch.rand(width))
        self.w = nn.Parameter(1.0 / n + 0.1 * torch.randn(n, 1, width))

    def forward(self, x):
        return x * self.gain.to(x.dtype) * self.w.sum(0)


class ForwardClock:
    """Which forward of the run comes next (``step * microbatches + microbatch``): the trainer that owns a
    model sets it before each forward, and the model's gates read it."""

    def __init__(self):
        self.index = 0

    def set(self, step: int, micro: int, microbatches: int) -> None:
        self.index = step * microbatches + micro


class Gate(nn.Module):
    """Runs its child only on forwards whose index is a multiple of ``period`` (the same on every rank), or with
    ``offset`` (the rank's data-parallel index) on those where ``index + offset`` is (control flow that
    differs per rank)."""

    def __init__(self, inner: nn.Module, period: int, clock: ForwardClock, offset: int = 0):
        super().__init__()
        self.inner = inner
        self.period = period
        self.clock = clock
        self.offset = offset

    def forward(self, x):
        return self.inner(x) if (self.clock.index + self.offset) % self.period == 0 else x


class MLP(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Attention(nn.Module):
    """Small multi-head self-attention over ``(batch, seq, width)``, written out by hand."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(width, width) for _ in range(4))

    def forward(self, x):
        d = x.shape[-1] // self.heads
        q, k, v = self.q(x), self.k(x), self.v(x)
        b, s = q.shape[0], q.shape[1]  # (x may hold a shard of the sequence that q/k/v gather)
        h = q.shape[-1] // d  # the heads this rank holds: all of them, or its share under tensor parallelism

        def split(t):
            return t.view(b, s, h, d).transpose(1, 2)

        q, k, v = split(q), split(k), split(v)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)
        return self.o((att @ v).transpose(1, 2).reshape(b, s, h * d))


class Net(nn.Module):
    """The root: optional embedding ``inp``, the ``body`` tree, optional ``head``."""

    def __init__(self, spec: ModelSpec, clock: ForwardClock, dp_index: int = 0):
        super().__init__()
        if spec.input == "embedding":
            self.inp = nn.Embedding(spec.vocab, spec.in_dim)
        self.body = build_node(spec.body, spec.in_dim, clock, dp_index)
        if spec.input == "embedding":
            out = spec.body.out_width(spec.in_dim)
            self.head = nn.Linear(out, spec.vocab, bias=not spec.tie_head)
            if spec.tie_head:
                self.head.weight = self.inp.weight

    def forward(self, x):
        if hasattr(self, "inp"):
            x = self.inp(x)
        x = self.body(x)
        if hasattr(self, "head"):
            x = self.head(x)
        return x

    def forward_alt(self, x):
        """The same computation under another name (for ``register_fsdp_forward_method``)."""
        return self.forward(x)


def build_node(node: Node, width: int, clock: ForwardClock, dp_index: int = 0) -> nn.Module:
    k = node.kind
    if k == "linear":
        return nn.Linear(width, node.out, bias=node.bias)
    if k == "act":
        return _ACTS[node.fn]()
    if k == "layernorm":
        return nn.LayerNorm(width)
    if k == "rmsnorm":
        return nn.RMSNorm(width)
    if k == "dropout":
        return nn.Dropout(node.p)
    if k == "scale":
        return Scale(width, node.out)
    if k == "mlp":
        return MLP(width, node.hidden)
    if k == "attention":
        return Attention(width, node.heads)
    mods = []
    for child in node.children:
        mods.append(build_node(child, width, clock, dp_index))
        width = child.out_width(width)
    if k == "seq":
        return nn.Sequential(*mods)
    if k == "block":
        return Block(list(zip(child_names(node), mods)))
    if k == "residual":
        return Residual(mods[0])
    if k == "twice":
        return Twice(mods[0])
    if k == "gate":
        return Gate(mods[0], node.period, clock, dp_index if node.by_rank else 0)
    raise ValueError(f"unknown node kind {k!r}")


def build_model(case: Case, rank: int = 0, clock: ForwardClock | None = None) -> nn.Module:
    """The initial model, identical on every rank for a given case (``rank`` only steers per-rank gates, by
    its data-parallel index); its gates read ``clock`` (a fresh one if not given)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seed)
        model = Net(case.model, clock or ForwardClock(), case.mesh.dp_index(rank))
    return model.to(torch_dtype(case.train.dtype))


def _generator(case: Case, rank: int, step: int, micro: int, salt: int) -> torch.Generator:
    """A generator keyed by the case, the rank's data (its data-parallel index; all ranks alike under
    ``train.same_input``), the step, the microbatch and what is drawn: independent of any global RNG state."""
    data = 0 if case.train.same_input else case.mesh.dp_index(rank) + 1
    return torch.Generator().manual_seed(data_key(case.seed, data, step, micro, salt))


def batch_for(case: Case, rank: int, step: int, device: torch.device | str = "cpu", micro: int = 0,
              path: str = "") -> torch.Tensor:
    """This rank's input for microbatch ``micro`` of ``step``.

    ``path`` names the module it is for: the root, or the non-root module of a ``train.nonroot`` pass, which
    gets what it sees inside the model (token ids, or activations of its input width and dtype).
    """
    t = case.train
    g = _generator(case, rank, step, micro, salt=0)
    shape = (t.batch, t.seq_len)
    width = case.model.input_width(path)
    if width is None:
        x = torch.randint(0, case.model.vocab, shape, generator=g)
    else:
        dtype = torch_dtype(dtypes.activation_dtype(case, path))
        x = torch.randn(shape + (width,), generator=g, dtype=torch.float64).to(dtype)
    return x.to(device)


#: ``F.cross_entropy``'s default ``ignore_index``: the padding of token targets.
IGNORE_INDEX = -100


def padded(y: torch.Tensor, share: float, everywhere: bool, g: torch.Generator) -> torch.Tensor:
    """Token targets ``y`` with padding (:data:`IGNORE_INDEX`): everywhere, or at each position but a sequence's
    first with probability ``share`` (drawn from ``g`` after ``y``: without padding ``y`` is what it was)."""
    if everywhere:
        return torch.full_like(y, IGNORE_INDEX)
    if not share:
        return y
    mask = torch.rand(y.shape, generator=g) < share
    mask[:, 0] = False
    return torch.where(mask, IGNORE_INDEX, y)


def target_for(case: Case, rank: int, step: int, device: torch.device | str = "cpu", micro: int = 0,
               path: str = "") -> torch.Tensor:
    """What the output of the module at ``path`` is trained toward, for this rank, step and microbatch:
    token ids for an embedding model's logits (cross-entropy), else float64 values of the output's shape
    (mean squared error; the loss casts them to the output's dtype).  A loss with a minimum keeps training
    bounded, so every step stays comparable."""
    t = case.train
    g = _generator(case, rank, step, micro, salt=1)
    shape = (t.batch, t.seq_len)
    if not path and case.model.input == "embedding":
        y = torch.randint(0, case.model.vocab, shape, generator=g)
        y = padded(y, t.pad, t.pad_all_dp0 and micro == 0 and case.mesh.dp_index(rank) == 0, g)
    else:
        y = torch.randn(shape + (case.model.output_width(path),), generator=g, dtype=torch.float64)
    return y.to(device)
