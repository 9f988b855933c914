"""World sizes and device meshes.

A mesh is 1-D (FSDP over all ranks) or an HSDP 2-D ``(replicate, shard)``
mesh over any factorization of the world size, the degenerate ``(n, 1)`` and
``(1, n)`` included.

Shrinking: world size 2 comes first (the smallest size that can show a parity
bug), then 1, then the larger sizes; the 1-D mesh comes before 2-D ones, and
among those more sharding before more replication.
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
    """A 1-D ``("shard",)`` mesh over all ranks, or a 2-D ``("replicate", "shard")`` one."""
    hsdp = [MeshSpec(shape=(world_size // s, s), names=("replicate", "shard"))
            for s in range(world_size, 0, -1) if world_size % s == 0]
    return st.sampled_from([MeshSpec(shape=(world_size,), names=("shard",))] + hsdp)
