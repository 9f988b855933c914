"""FSDP2's meshes: 1-D ``(dp_shard,)`` over all ranks, or HSDP's 2-D ``(dp_replicate, dp_shard)`` over any
factorization of the world size, the degenerate ``(n, 1)`` and ``(1, n)`` included.  World size 1 and meshes
whose shard axis is 1 (nothing sharded) together make about 10% of cases at the default world sizes, and at
world size 4 the 2x2 HSDP mesh is the most common.

Shrinking: the 1-D mesh comes first, then the replicate-only one, then the 2-D ones that shard most.
"""

from __future__ import annotations

from hypothesis import strategies as st

from parityfuzz.case import MeshSpec
from parityfuzz.strategies.meshes import weighted

HSDP = ("dp_replicate", "dp_shard")


def mesh_weights(world_size: int) -> dict[MeshSpec, int]:
    """Every mesh of ``world_size`` ranks with its weight, in shrinking order."""
    flat = MeshSpec((world_size,), ("dp_shard",))
    if world_size == 1:
        return {flat: 1}
    weights = {flat: 8, MeshSpec((world_size, 1), HSDP): 1}  # replicate only (shards nothing): rare, not last
    for shard in range(world_size, 1, -1):  # more sharding first
        if world_size % shard == 0:
            replicas = world_size // shard
            weights[MeshSpec((replicas, shard), HSDP)] = 10 if replicas > 1 else 4
    return weights


def meshes(world_size: int) -> st.SearchStrategy[MeshSpec]:
    """A 1-D ``(dp_shard,)`` mesh over all ranks, or a 2-D ``(dp_replicate, dp_shard)`` one, weighted by
    :func:`mesh_weights`."""
    return st.sampled_from(weighted(mesh_weights(world_size)))

