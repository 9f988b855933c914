"""Meshes of the ``fsdp2_tp`` family: ``(tp,)`` (tensor parallelism alone), ``(dp_shard, tp)`` and
``(dp_replicate, dp_shard, tp)`` over every factorization of the world size, degenerate axes of size 1
included.  A tp of 2 is the most common (the size PyTorch's own 2-D tests use), and meshes that shard on
both a data-parallel and the tensor-parallel axis come first.

Shrinking: toward ``(dp_shard, tp)`` with tp 2 where the world size allows it, then TP alone.
"""

from __future__ import annotations

from hypothesis import strategies as st

from parityfuzz.case import MeshSpec
from parityfuzz.strategies.meshes import weighted


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def mesh_weights(world_size: int) -> dict[MeshSpec, int]:
    """Every mesh of ``world_size`` ranks with its weight, in shrinking order."""
    weights: dict[MeshSpec, int] = {}
    for tp in sorted(_divisors(world_size), key=lambda t: (t != 2, -t)):  # tp 2 first, then larger
        dp = world_size // tp
        if tp == 1:  # nothing tensor parallel: the fsdp2 family's ground, kept rare
            weights[MeshSpec((dp, 1), ("dp_shard", "tp"))] = 1
            continue
        weights[MeshSpec((dp, tp), ("dp_shard", "tp"))] = 8 if dp > 1 else 3
        for replicate in _divisors(dp):  # HSDP replicas times shards; (1, dp, tp) is HSDP with one replica
            mesh = MeshSpec((replicate, dp // replicate, tp), ("dp_replicate", "dp_shard", "tp"))
            weights[mesh] = 4 if replicate > 1 else 1
        if dp == 1:
            weights[MeshSpec((tp,), ("tp",))] = 3
    return weights


def meshes(world_size: int) -> st.SearchStrategy[MeshSpec]:
    return st.sampled_from(weighted(mesh_weights(world_size)))
