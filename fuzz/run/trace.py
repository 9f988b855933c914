"""What a system's run leaves behind, as plain data (numpy arrays, no torch).

Each rank records what it holds, per pass of training: its loss, and every
gradient and parameter as its own piece (a plain tensor whole, a DTensor's
local shard with its placement).  The driver keeps every rank's records
(:class:`Trace`); the oracle asks it for one tensor's records across ranks,
for the groups of ranks that hold the same region (replicas, which must be
equal) and for the full tensor put together from one piece per region.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parityfuzz.run.arrays import Array, zeros


@dataclass(frozen=True)
class ShardInfo:
    """Where a rank's local piece of a DTensor sits in the global tensor.

    ``placements[i]`` is the tensor dim sharded over mesh dim ``i`` (DTensor's
    ``Shard(d)``, split like ``torch.chunk``) or -1 for ``Replicate``.
    """

    global_shape: tuple[int, ...]
    placements: tuple[int, ...]
    mesh_shape: tuple[int, ...]
    coord: tuple[int, ...]

    def region(self) -> tuple[slice, ...]:
        bounds = [[0, n] for n in self.global_shape]
        for dim, size, k in zip(self.placements, self.mesh_shape, self.coord):
            if dim < 0:
                continue
            lo, hi = bounds[dim]
            chunk = -(-(hi - lo) // size)
            bounds[dim] = [min(lo + k * chunk, hi), min(lo + (k + 1) * chunk, hi)]
        return tuple(slice(lo, hi) for lo, hi in bounds)


@dataclass
class Rec:
    """One recorded tensor on one rank: its dtype and its value as float64.

    With ``shard`` set, ``value`` is this rank's local piece of a DTensor;
    without, the whole tensor (a plain tensor, held whole by every rank).
    """

    dtype: str
    value: Array
    shard: ShardInfo | None = None

    def misfit(self) -> str:
        """Where this DTensor record's local piece does not have the shape its placements give: what it has and
        what they give ("" where it fits, or for a plain tensor)."""
        if self.shard is None:
            return ""
        want = tuple(s.stop - s.start for s in self.shard.region())
        got = tuple(self.value.shape)
        if got == want:
            return ""
        places = ", ".join("Replicate()" if d < 0 else f"Shard({d})" for d in self.shard.placements)
        return (f"local tensor of shape {list(got)}, where its placements ({places} on a mesh of shape "
                f"{list(self.shard.mesh_shape)}, coordinate {list(self.shard.coord)}) give {list(want)} of the global "
                f"{list(self.shard.global_shape)}")

    def region_key(self) -> tuple:
        """Which part of the global tensor this record holds (equal keys: replicas of one region)."""
        if self.shard is None:
            return ("whole",)
        return tuple((s.start, s.stop) for s in self.shard.region())


def assemble(pieces: list[Rec]) -> Rec:
    """The full tensor from every rank's local piece (for a region held by several ranks, the first one's)."""
    first = pieces[0]
    if first.shard is None:
        return Rec(first.dtype, first.value)
    out = zeros(first.shard.global_shape)
    written = set()
    for piece in pieces:
        key = piece.region_key()
        if key in written:
            continue
        written.add(key)
        misfit = piece.misfit()
        if misfit:  # (the oracle reports these first: check "local_shape")
            raise ValueError(f"a {misfit}")
        out[piece.shard.region()] = piece.value
    return Rec(first.dtype, out)


def module_of(name: str) -> str:
    """The module a recorded tensor belongs to (``body.0`` for ``body.0.weight``; buffers apart)."""
    return name.rpartition(".")[0]


def replica_groups(records: list[Rec]) -> list[list[int]]:
    """Indices of the records that hold the same region, for every region held more than once.

    Plain tensors are held whole by every rank, so all of them form one group.
    """
    groups: dict[tuple, list[int]] = {}
    for i, rec in enumerate(records):
        groups.setdefault(rec.region_key(), []).append(i)
    return [g for g in groups.values() if len(g) > 1]


#: ``{name: Rec, or None where the rank holds no gradient}``
Tensors = dict


#: A pass of training: ``(step, phase)``; phase ``""`` is the step's forward/backward through the root,
#: ``"non-root <path>"`` the one through only that submodule (``TrainSpec.nonroot``), ``"eval"`` a forward
#: under ``torch.no_grad()`` after the step (loss only).
Pass = tuple


#: What a pass records besides its loss.
TENSOR_KINDS = ("grad", "param")

#: Marks a tensor a rank did not record at all (as opposed to ``None``: recorded, no gradient).
ABSENT = "absent"
#: Marks a tensor a rank does not hold by design, because other ranks do (recorded by ownership: a pipeline stage's
#: parameters on the ranks of the other stages).  The oracle checks such a tensor on the ranks that hold it, and
#: that some rank does.
ELSEWHERE = "elsewhere"


@dataclass
class RankTrace:
    """One system's run on one rank: per pass, its loss and every gradient (taken before the optimizer step)
    and parameter (after it) this rank holds."""

    passes: list[Pass] = field(default_factory=list)
    losses: list[Rec] = field(default_factory=list)
    grads: list[Tensors] = field(default_factory=list)
    params: list[Tensors] = field(default_factory=list)
    #: Per pass, the collectives its forwards and backwards issued, ``{op: count}``
    #: (:class:`parityfuzz.run.collectives.CollectiveCounter`), for systems that count them; empty otherwise.
    collectives: list[dict] = field(default_factory=list)
    #: Per pass, the largest magnitude of each parameter's gradient as computed on this rank before any
    #: reduction across ranks (``{name: float}``), for reference systems; empty otherwise.
    local_grad_scales: list[dict] = field(default_factory=list)
    #: Per pass, whether the GradScaler skipped its optimizer step (an inf or NaN in the unscaled gradients);
    #: False where there is no scaler, or no step.
    skipped: list[bool] = field(default_factory=list)
    #: What a checkpoint event's save or load broke (:mod:`parityfuzz.checkpoint.invariants`): ``(pass index, kind,
    #: tensor, message, max_abs)``, at the last pass before the save or the pass right after the load.
    violations: list[tuple] = field(default_factory=list)
    #: Per pass, in a probed run (:mod:`parityfuzz.run.activations`), every module's forward output and output gradient
    #: in execution order (``{label: Rec}``); empty otherwise.
    activations: list[dict] = field(default_factory=list)
    #: For a compiled system under test (:mod:`parityfuzz.systems.compiled`), what the compiler captured on this
    #: rank, summed over the systems it built: ``{"graphs", "ops", "breaks", "cache_hits", "seconds"}``; empty
    #: otherwise.
    compiled: dict = field(default_factory=dict)
    #: Seconds this rank spent building the model and applying the system (``setup``, every build of the run) and
    #: recording gradients and parameters (``record``): where a case's time goes (the benchmark's ``--profile``).
    seconds: dict = field(default_factory=dict)

    def tensors(self, what: str) -> list[Tensors]:
        return {"grad": self.grads, "param": self.params}[what]


@dataclass
class Trace:
    """One system's run on every rank (``ranks[r]`` is rank ``r``'s record)."""

    ranks: list[RankTrace]

    @property
    def passes(self) -> list[Pass]:
        return [tuple(p) for p in self.ranks[0].passes]

    def index(self, step: int, phase: str = "") -> int | None:
        """The index of a pass, or None if this trace has none such."""
        try:
            return self.passes.index((step, phase))
        except ValueError:
            return None

    def losses(self, i: int) -> list[Rec]:
        """Every rank's loss in pass ``i``."""
        return [rt.losses[i] for rt in self.ranks]

    def names(self, i: int, what: str) -> list[str]:
        """Every tensor name some rank recorded in pass ``i`` (rank 0's order first)."""
        out: dict[str, None] = {}
        for rt in self.ranks:
            tensors = rt.tensors(what)
            if i < len(tensors):
                out.update(dict.fromkeys(tensors[i]))
        return list(out)

    def records(self, i: int, what: str, name: str) -> list:
        """Each rank's record of one tensor in pass ``i``: a :class:`Rec`, ``None`` (no gradient), :data:`ABSENT`
        or :data:`ELSEWHERE` (the very object, also where a rank sent an equal string)."""
        out = []
        for rt in self.ranks:
            tensors = rt.tensors(what)
            rec = tensors[i].get(name, ABSENT) if i < len(tensors) else ABSENT
            out.append(ELSEWHERE if rec == ELSEWHERE else rec)
        return out

    def held(self, i: int, what: str, name: str) -> dict:
        """``{rank: record}`` over the ranks that hold one tensor in pass ``i`` (every rank, unless some say
        :data:`ELSEWHERE`)."""
        return {r: rec for r, rec in enumerate(self.records(i, what, name)) if rec is not ELSEWHERE}

    def full(self, i: int, what: str, name: str) -> Rec | None:
        """The whole tensor from the ranks that hold it (None where no rank does, or it is absent or has no
        gradient on one that should)."""
        recs = list(self.held(i, what, name).values())
        if not recs or any(r is None or r is ABSENT for r in recs):
            return None
        return assemble(recs)

    def local_grad_scales(self, i: int) -> dict[str, float]:
        """Per parameter, the largest magnitude its gradient had on any rank before the reduction (pass ``i``)."""
        out: dict[str, float] = {}
        for rt in self.ranks:
            scales = rt.local_grad_scales[i] if i < len(rt.local_grad_scales) else {}
            for name, value in scales.items():
                out[name] = max(out.get(name, 0.0), value)
        return out

    def skipped(self, i: int) -> tuple[int, ...]:
        """The ranks whose GradScaler skipped the optimizer step of pass ``i``."""
        return tuple(r for r, rt in enumerate(self.ranks) if i < len(rt.skipped) and rt.skipped[i])

    @classmethod
    def merge(cls, per_rank: list[RankTrace]) -> Trace:
        return cls(list(per_rank))
