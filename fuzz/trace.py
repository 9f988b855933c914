"""What a system's run leaves behind, as plain data (numpy, no torch).

Each rank returns a :class:`RankTrace` per system; the driver merges them into
a :class:`Trace` that the oracle compares.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Rec:
    """One recorded tensor: its original dtype and its value as float64."""

    dtype: str
    value: np.ndarray


#: ``{parameter name: Rec or None (no gradient)}``
Tensors = dict


@dataclass
class RankTrace:
    """One system's run on one rank.  Full gradients and parameters are kept on rank 0 only."""

    losses: list[float]
    loss_dtype: str
    grads: list[Tensors] | None = None
    params: list[Tensors] | None = None


@dataclass
class Trace:
    """One system's run on all ranks: ``losses[step][rank]``, rank 0's full tensors per step."""

    losses: list[list[float]]
    loss_dtype: str
    grads: list[Tensors]
    params: list[Tensors]

    @classmethod
    def merge(cls, per_rank: list[RankTrace]) -> Trace:
        first = per_rank[0]
        steps = len(first.losses)
        return cls(
            losses=[[rt.losses[s] for rt in per_rank] for s in range(steps)],
            loss_dtype=first.loss_dtype,
            grads=first.grads or [],
            params=first.params or [],
        )
