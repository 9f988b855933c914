"""World sizes, weighted toward those that show bugs; each family draws its meshes over them.

Cases spend themselves where bugs live: world size 1 (nothing sharded) is rare, 2 and 4 common.  World size 3
(uneven and empty shards in non-power-of-two groups) is drawn when a user allows it
(``--world-sizes=1,2,3,4``).

Shrinking: world size 2 comes first (the smallest size that can show a parity bug), then 1, 4, 3 and 8.
"""

from __future__ import annotations

from hypothesis import strategies as st

from parityfuzz.case.mesh import DEFAULT_WORLD_SIZES


#: World sizes in shrinking order, with their weights.  Hypothesis draws the ends of a list more often than
#: its middle, so the rare size 1 sits in the middle.
WORLD_SIZE_WEIGHTS = {2: 10, 1: 1, 4: 10, 3: 6, 8: 4}


def weighted(weights: dict) -> list:
    """A list in which each key appears ``weight`` times, keys in the dict's order (index 0 shrinks first)."""
    return [key for key, weight in weights.items() for _ in range(weight)]


def world_sizes(allowed: tuple[int, ...] = DEFAULT_WORLD_SIZES) -> st.SearchStrategy[int]:
    """One of ``allowed``, weighted by :data:`WORLD_SIZE_WEIGHTS` (unknown sizes get weight 1)."""
    if not allowed or any(not isinstance(w, int) or w < 1 for w in allowed):
        raise ValueError(f"world sizes must be positive integers, got {allowed!r}")
    weights = {w: WORLD_SIZE_WEIGHTS[w] for w in WORLD_SIZE_WEIGHTS if w in allowed}
    weights.update({w: 1 for w in sorted(set(allowed) - set(WORLD_SIZE_WEIGHTS))})
    return st.sampled_from(weighted(weights))
