"""Named N-D device meshes.

A mesh's axes come from one vocabulary, in one outer-to-inner order (:data:`AXES`): pipeline stages,
data-parallel replicas (HSDP's replicate dimension), data-parallel shards, tensor-parallel ranks.  Ranks are
laid out row-major over the axes, as ``init_device_mesh`` lays them out, so every rank knows its coordinates
without asking torch.  Data-parallel ranks see different batches; the ranks of one tensor-parallel group
(equal coordinates on every other axis) see the same one: inputs and random streams are keyed by
:meth:`MeshSpec.dp_index`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from parityfuzz.case.errors import check

#: The world sizes a run draws unless told otherwise (``--world-sizes``; 3 and 8 only when asked).
DEFAULT_WORLD_SIZES = (1, 2, 4)

#: Every axis a mesh may have, outermost first.
AXES = ("pp", "dp_replicate", "dp_shard", "tp")
#: Axes whose ranks see different data.
DATA_PARALLEL_AXES = ("dp_replicate", "dp_shard")
#: Axes along which parameters are split (a mesh whose sharding axes all have size 1 shards nothing).
SHARDING_AXES = ("dp_shard", "tp")


@dataclass(frozen=True)
class MeshSpec:
    """A device mesh: ``shape[i]`` ranks along the axis ``names[i]`` (names from :data:`AXES`, in its order)."""

    shape: tuple[int, ...]
    names: tuple[str, ...] = ("dp_shard",)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def axis_size(self, axis: str) -> int:
        """The number of ranks along ``axis`` (1 for an axis the mesh does not have)."""
        return self.shape[self.names.index(axis)] if axis in self.names else 1

    def coords(self, rank: int) -> dict[str, int]:
        """``rank``'s coordinate on every axis of the mesh (row-major, as ``init_device_mesh``)."""
        out = {}
        for name, size in zip(reversed(self.names), reversed(self.shape)):
            rank, out[name] = divmod(rank, size)
        return {name: out[name] for name in self.names}

    def index_over(self, rank: int, axes) -> int:
        """``rank``'s position in the sub-mesh of ``axes`` (row-major over those axes, in mesh order)."""
        coords = self.coords(rank)
        index = 0
        for name in self.names:
            if name in axes:
                index = index * self.axis_size(name) + coords[name]
        return index

    def dp_size(self) -> int:
        """The number of data-parallel ranks: distinct batches per step."""
        n = 1
        for axis in DATA_PARALLEL_AXES:
            n *= self.axis_size(axis)
        return n

    def dp_index(self, rank: int) -> int:
        """Which batch ``rank`` trains on: its position among the data-parallel ranks."""
        return self.index_over(rank, DATA_PARALLEL_AXES)

    def shards(self) -> bool:
        """Whether some axis splits parameters over more than one rank."""
        return any(self.axis_size(a) > 1 for a in SHARDING_AXES)

    def label(self) -> str:
        """``dp_replicate=2,dp_shard=2``: the mesh as a feature tag value."""
        return ",".join(f"{n}={s}" for n, s in zip(self.names, self.shape))


def validate_mesh(mesh: MeshSpec, world_size: int, allowed: tuple[tuple[str, ...], ...]) -> None:
    """Check the mesh's shape and names against the world size and the family's ``allowed`` axis sets."""
    check(len(mesh.shape) == len(mesh.names) and len(mesh.shape) >= 1, "mesh.names",
          f"need one name per mesh dimension, got shape {list(mesh.shape)} and names {list(mesh.names)}")
    check(all(n in AXES for n in mesh.names), "mesh.names",
          f"axes must come from {list(AXES)}, got {list(mesh.names)}")
    check(list(mesh.names) == sorted(set(mesh.names), key=AXES.index), "mesh.names",
          f"axes must be distinct and in the order {list(AXES)}, got {list(mesh.names)}")
    check(all(s >= 1 for s in mesh.shape), "mesh.shape", f"sizes must be >= 1, got {list(mesh.shape)}")
    check(mesh.size == world_size, "mesh.shape",
          f"mesh {list(mesh.shape)} has {mesh.size} ranks but world_size is {world_size}")
    check(mesh.names in allowed, "mesh.names",
          f"this family takes meshes with axes {' or '.join(str(list(a)) for a in allowed)}, got {list(mesh.names)}")


def chunk_leaves_a_rank_empty(n: int, parts: int) -> bool:
    """Whether a dimension of ``n`` split over ``parts`` ranks as ``torch.chunk`` splits it (pieces of
    ceil(n / parts)) leaves some rank nothing: 1 over 2, and also 5 over 4 (2, 2, 1, 0).  DTensor's ``Shard``
    and FSDP1's sharded state dicts split this way."""
    return n < parts or math.ceil(n / math.ceil(n / parts)) < parts
