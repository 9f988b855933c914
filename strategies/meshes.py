"""World sizes and device meshes, weighted toward cases that shard something.

A mesh is 1-D (FSDP over all ranks) or an HSDP 2-D ``(replicate, shard)`` mesh over any factorization of the
world size, the degenerate ``(n, 1)`` and ``(1, n)`` included.  Cases spend themselves where bugs live:
world size 1 and meshes whose shard dimension is 1 (nothing sharded) together make about 10% of cases at the
default world sizes, and at world size 4 the 2x2 HSDP mesh is the most common.  World size 3 (uneven and
empty shards in non-power-of-two groups) is drawn when a user allows it (``--world-sizes=1,2,3,4``).

Shrinking: world size 2 comes first (the smallest size that can show a parity bug), then 1, 4, 3 and 8;
the 1-D mesh comes first, then the replicate-only one, then the 2-D ones that shard most.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fuzz.case import MeshSpec

#: World sizes in shrinking order, with their weights.  Hypothesis draws the ends of a list more often than
#: its middle, so the rare size 1 sits in the middle.
WORLD_SIZE_WEIGHTS = {2: 10, 1: 1, 4: 10, 3: 6, 8: 4}


def _weighted(weights: dict) -> list:
    """A list in which each key appears ``weight`` times, keys in the dict's order (index 0 shrinks first)."""
    return [key for key, weight in weights.items() for _ in range(weight)]


def world_sizes(allowed: tuple[int, ...] = (1, 2, 4)) -> st.SearchStrategy[int]:
    """One of ``allowed``, weighted by :data:`WORLD_SIZE_WEIGHTS` (unknown sizes get weight 1)."""
    if not allowed or any(not isinstance(w, int) or w < 1 for w in allowed):
        raise ValueError(f"world sizes must be positive integers, got {allowed!r}")
    weights = {w: WORLD_SIZE_WEIGHTS[w] for w in WORLD_SIZE_WEIGHTS if w in allowed}
    weights.update({w: 1 for w in sorted(set(allowed) - set(WORLD_SIZE_WEIGHTS))})
    return st.sampled_from(_weighted(weights))


def mesh_weights(world_size: int) -> dict[MeshSpec, int]:
    """Every mesh of ``world_size`` ranks with its weight, in shrinking order."""
    hsdp = ("replicate", "shard")
    flat = MeshSpec((world_size,), ("shard",))
    if world_size == 1:
        return {flat: 1}
    weights = {flat: 8, MeshSpec((world_size, 1), hsdp): 1}  # replicate only (shards nothing): rare, not last
    for shard in range(world_size, 1, -1):  # more sharding first
        if world_size % shard == 0:
            replicas = world_size // shard
            weights[MeshSpec((replicas, shard), hsdp)] = 10 if replicas > 1 else 4
    return weights


def meshes(world_size: int) -> st.SearchStrategy[MeshSpec]:
    """A 1-D ``("shard",)`` mesh over all ranks, or a 2-D ``("replicate", "shard")`` one, weighted by
    :func:`mesh_weights`."""
    return st.sampled_from(_weighted(mesh_weights(world_size)))

