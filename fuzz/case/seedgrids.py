"""The hand-written grids of PyTorch's own tests (the seeds parityfuzz grew from), as grids of feature tags, and
how much of each a run covered.

A grid is the product of its axes; an axis value is a feature tag a case must have (``reshard=True``), a
prefix ending in ``*`` (``ckpt=composable/*``), tags joined by ``&`` that must all be there, or ``""``: none of the
axis's other values.  A drawn case of the grid's family lands on every point whose values it has (a case with
two wraps, one resharding and one not, lands on both).  Torch-free and pure: the run's statistics call
:func:`coverage` with their feature combinations.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Iterable

def flag(name: str, tag: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A boolean axis: ``True`` where a case has ``tag``, ``False`` where it has not."""
    return name, (("True", tag), ("False", ""))


@dataclass(frozen=True)
class Grid:
    """One ``run_subtests``/``@parametrize`` grid of a seed test: its source, the family whose cases it is
    about, and its axes ``(name, ((label, tag pattern), ...))``."""

    source: str
    family: str
    axes: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]

    def points(self) -> list[tuple[str, ...]]:
        return list(product(*[[label for label, _ in values] for _, values in self.axes]))

    def label(self, point: tuple[str, ...]) -> str:
        return ", ".join(f"{name}={value}" for (name, _), value in zip(self.axes, point))


def grids() -> tuple[Grid, ...]:
    """Every registered family's seed grids (:attr:`parityfuzz.families.Family.seed_grids`)."""
    from parityfuzz import families

    return tuple(g for f in families.records() for g in f.seed_grids)


def _has(tags: frozenset[str], pattern: str) -> bool:
    return all(any(t.startswith(p[:-1]) for t in tags) if p.endswith("*") else p in tags for p in pattern.split("&"))


def _values(tags: frozenset[str], values: tuple[tuple[str, str], ...]) -> list[str]:
    """The labels of an axis a case with ``tags`` has."""
    found = [label for label, pattern in values if pattern and _has(tags, pattern)]
    return found or [label for label, pattern in values if not pattern]


def coverage(grid: Grid, combinations: Iterable[tuple[frozenset[str], int]]) -> dict:
    """How many drawn cases landed on each point of ``grid``: ``{"points", "covered", "counts": {label: n},
    "missing": [label, ...]}``; ``combinations`` are (feature set, number of cases) pairs."""
    counts = {point: 0 for point in grid.points()}
    for tags, n in combinations:
        if f"family={grid.family}" not in tags:
            continue
        for point in product(*[_values(tags, values) for _, values in grid.axes]):
            counts[point] += n
    return {"family": grid.family, "points": len(counts), "covered": sum(1 for n in counts.values() if n),
            "counts": {grid.label(p): n for p, n in counts.items()},
            "missing": [grid.label(p) for p, n in counts.items() if not n]}
