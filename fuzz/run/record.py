"""Rank side: tensors as this rank holds them, as plain data (:class:`parityfuzz.run.trace.Rec`)."""

from __future__ import annotations

import torch

from parityfuzz.run.trace import Rec, ShardInfo


def numpy_of(t: torch.Tensor):
    return t.detach().to("cpu", torch.float64, copy=True).numpy()


def dtype_name(t: torch.Tensor | torch.dtype) -> str:
    """The name a case gives a tensor's dtype (or a dtype): ``float32``, ``bfloat16``."""
    return str(t if isinstance(t, torch.dtype) else t.dtype).removeprefix("torch.")


def torch_dtype(name: str) -> torch.dtype | None:
    """The torch dtype a case names (:data:`parityfuzz.case.dtypes.MP_DTYPES`); ``""`` is ``None``."""
    return getattr(torch, name) if name else None


def shard_info(t) -> ShardInfo | None:
    """Where a DTensor's local piece sits in the global tensor, for Shard and Replicate placements (None for any
    other: a piece the driver cannot place without a collective).  Exported scripts record with it too."""
    from torch.distributed.tensor import Replicate, Shard

    if not all(type(p) in (Shard, Replicate) for p in t.placements):
        return None
    return ShardInfo(global_shape=tuple(t.shape), placements=tuple(p.dim if isinstance(p, Shard) else -1
                                                                   for p in t.placements),
                     mesh_shape=tuple(t.device_mesh.shape), coord=tuple(t.device_mesh.get_coordinate()))


def record_tensors(tensors: dict, ctx=None, rank_local: frozenset[str] = frozenset()) -> dict:
    """Every tensor as this rank holds it: a plain tensor whole, a DTensor's local piece with its placement.

    Pieces of Shard/Replicate DTensors are put together by the driver (no collective); other placements are
    gathered here with ``full_tensor()`` (a collective every rank takes for that tensor).  A ``rank_local``
    tensor (a value of this rank's own, by design) is recorded as this rank's slice of a tensor stacked over the
    ranks: compared rank by rank, held by no two ranks.
    """
    from torch.distributed.tensor import DTensor

    out = {}
    for name, t in tensors.items():
        if t is None:
            out[name] = None
            continue
        if name in rank_local:
            info = ShardInfo(global_shape=(ctx.world_size, *t.shape), placements=(0,), mesh_shape=(ctx.world_size,),
                             coord=(ctx.rank,))
            out[name] = Rec(dtype_name(t), numpy_of(t)[None], info)
            continue
        if isinstance(t, DTensor):
            if (info := shard_info(t)) is not None:
                out[name] = Rec(dtype_name(t), numpy_of(t.to_local()), info)
                continue
            t = t.full_tensor()
        out[name] = Rec(dtype_name(t), numpy_of(t))
    return out
