"""What a system's run leaves behind, as plain data (numpy, no torch).

Each rank returns a :class:`RankTrace` per system; the driver merges them into
a :class:`Trace` that the oracle compares.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


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
    """One recorded tensor: its original dtype and its value as float64.

    With ``shard`` set, ``value`` is one rank's local piece; :func:`assemble`
    puts the pieces of all ranks together.
    """

    dtype: str
    value: np.ndarray
    shard: ShardInfo | None = None


def assemble(pieces: list[Rec]) -> Rec:
    """The full tensor from every rank's local piece (ranks holding a replica write the same region)."""
    first = pieces[0]
    out = np.zeros(first.shard.global_shape, dtype=np.float64)
    for piece in pieces:
        region = piece.shard.region()
        target = out[region]
        if target.shape != piece.value.shape:
            raise ValueError(f"local piece of shape {piece.value.shape} does not fit region {region} "
                             f"of {first.shard.global_shape} ({piece.shard})")
        out[region] = piece.value
    return Rec(first.dtype, out)


#: ``{parameter name: Rec or None (no gradient)}``
Tensors = dict


#: A pass of training: ``(step, phase)``; phase ``""`` is the step's forward/backward through the root,
#: ``"non-root <path>"`` the one through only that submodule (``TrainSpec.nonroot``).
Pass = tuple


@dataclass
class RankTrace:
    """One system's run on one rank.

    ``grads``/``params`` hold, per pass (an optimizer step each), rank 0's plain
    (full) tensors and every rank's local pieces of sharded ones; ``passes``
    says which step and phase each entry belongs to.
    """

    losses: list[float]
    loss_dtype: str
    grads: list[Tensors] = field(default_factory=list)
    params: list[Tensors] = field(default_factory=list)
    passes: list[Pass] = field(default_factory=list)


@dataclass
class Trace:
    """One system's run on all ranks: ``losses[i][rank]`` and full tensors per pass ``i``.

    ``passes[i]`` is pass ``i``'s ``(step, phase)``; left empty, pass ``i`` is step ``i``'s root pass.
    """

    losses: list[list[float]]
    loss_dtype: str
    grads: list[Tensors]
    params: list[Tensors]
    passes: list[Pass] = field(default_factory=list)

    def pass_at(self, i: int) -> Pass:
        return tuple(self.passes[i]) if self.passes else (i, "")

    def index(self, step: int, phase: str = "") -> int | None:
        """The index of a pass, or None if this trace has none such."""
        for i in range(len(self.losses)):
            if self.pass_at(i) == (step, phase):
                return i
        return None

    @classmethod
    def merge(cls, per_rank: list[RankTrace]) -> Trace:
        first = per_rank[0]
        steps = len(first.losses)
        return cls(
            losses=[[rt.losses[s] for rt in per_rank] for s in range(steps)],
            loss_dtype=first.loss_dtype,
            grads=[_merge_step([rt.grads[s] for rt in per_rank]) for s in range(len(first.grads))],
            params=[_merge_step([rt.params[s] for rt in per_rank]) for s in range(len(first.params))],
            passes=list(first.passes),
        )


def _merge_step(per_rank: list[Tensors]) -> Tensors:
    out = {}
    for name, rec in per_rank[0].items():
        out[name] = assemble([t[name] for t in per_rank]) if rec is not None and rec.shard else rec
    return out
