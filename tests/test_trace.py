"""Driver-side assembly of DTensor pieces: matches torch.chunk splitting, uneven and nested shards."""

import numpy as np
import pytest
import torch

from parityfuzz.run.trace import Rec, ShardInfo, assemble


def pieces(full: np.ndarray, placements, mesh_shape):
    """Split ``full`` the way DTensor does (torch.chunk per mesh dim, in mesh-dim order)."""
    out = []
    for coord in np.ndindex(*mesh_shape):
        local = torch.from_numpy(full)
        for dim, size, k in zip(placements, mesh_shape, coord):
            if dim >= 0:
                chunks = local.chunk(size, dim)
                local = chunks[k] if k < len(chunks) else local.narrow(dim, 0, 0)
        info = ShardInfo(tuple(full.shape), tuple(placements), tuple(mesh_shape), tuple(coord))
        out.append(Rec("float64", local.numpy().copy(), info))
    return out


@pytest.mark.parametrize("shape, placements, mesh", [
    ((4, 3), (0,), (2,)),
    ((3, 5), (0,), (2,)),     # uneven
    ((1, 4), (0,), (4,)),     # dim 0 smaller than the shard count: empty pieces
    ((17,), (0,), (4,)),
    ((5, 6), (-1, 0), (2, 2)),  # HSDP: replicate, shard
    ((5, 6), (0, 1), (2, 2)),   # two tensor dims
    ((9, 2), (0, 0), (2, 2)),   # the same dim sharded twice (nested)
    ((3, 3), (-1,), (4,)),
])
def test_assemble_inverts_dtensor_splitting(shape, placements, mesh):
    full = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    assert np.array_equal(assemble(pieces(full, placements, mesh)).value, full)


def test_piece_that_does_not_fit_is_an_error():
    bad = pieces(np.zeros((4, 2)), (0,), (2,))
    bad[1] = Rec("float64", np.zeros((3, 2)), bad[1].shard)
    assert not bad[0].misfit()
    assert bad[1].misfit().startswith("local tensor of shape [3, 2], where its placements (Shard(0)")
    with pytest.raises(ValueError, match=r"local tensor of shape \[3, 2\], where its placements .* give \[2, 2\]"):
        assemble(bad)
