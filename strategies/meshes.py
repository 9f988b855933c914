"""World sizes and device meshes.

Shrinking: world size 2 comes first (the smallest size that can show a parity
bug), then 1, then the larger sizes; a 1-D mesh spans the whole world.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fuzz.case import MeshSpec

#: Preference order for shrinking.
WORLD_SIZE_ORDER = (2, 1, 4, 8)


def world_sizes(allowed: tuple[int, ...] = (1, 2, 4)) -> st.SearchStrategy[int]:
    ordered = [w for w in WORLD_SIZE_ORDER if w in allowed] + sorted(set(allowed) - set(WORLD_SIZE_ORDER))
    if not ordered:
        raise ValueError("no world size allowed")
    return st.sampled_from(ordered)


def meshes(world_size: int) -> st.SearchStrategy[MeshSpec]:
    """A 1-D ``("shard",)`` mesh over all ranks."""
    return st.just(MeshSpec(shape=(world_size,), names=("shard",)))
