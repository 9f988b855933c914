"""Faults inside ZeroRedundancyOptimizer (buckets, reload, overlap)."""

from __future__ import annotations

from parityfuzz.families.zero.system import ZeroSystem

from tests.faults.injection import _Injected, _collective_replaced_in, _patch_once


class ZeroBucketFromWrongRank(_Injected, ZeroSystem):
    """With ``parameters_as_bucket_view=True``, ZeRO broadcasts each rank's bucket of updated parameters from
    the next rank instead, which did not step them: every rank ends up with the same stale values.  Wrong only
    with bucket views on several ranks."""

    def inject(self):
        import torch.distributed as dist
        from torch.distributed.optim import ZeroRedundancyOptimizer

        def from_next(real):
            def broadcast(tensor, src, group=None, async_op=False):
                return real(tensor, src=(src + 1) % dist.get_world_size(), group=group, async_op=async_op)
            return broadcast

        _collective_replaced_in(ZeroRedundancyOptimizer, "_broadcast_params_from_rank", "broadcast", from_next,
                                lambda zero, rank: zero.parameters_as_bucket_view and zero.world_size > 1)

class ZeroLoadSkipsTheLastOfEachPartition(_Injected, ZeroSystem):
    """ZeRO's ``load_state_dict`` leaves out the last parameter of each rank's partition (an off-by-one in the
    partition's range): that parameter keeps what its local optimizer held, none in a fresh ZeRO, the state it
    trained on to in a live one.  Only the ``zero`` checkpoint way loads through it."""

    def inject(self):
        from torch.distributed.optim import ZeroRedundancyOptimizer

        def skipping_the_last(real):
            def load_state_dict(zero, state_dict):
                mine = [p for group in zero._partition_parameters()[zero.rank] for p in group["params"]]
                kept = zero.optim.state.get(mine[-1]) if mine else None
                real(zero, state_dict)
                if mine:
                    if kept is None:
                        zero.optim.state.pop(mine[-1], None)
                    else:
                        zero.optim.state[mine[-1]] = kept
            return load_state_dict

        _patch_once(ZeroRedundancyOptimizer, "load_state_dict", skipping_the_last)


class ZeroOverlapOnGloo(_Injected, ZeroSystem):
    """Not a fault: ZeRO's overlap with DDP with torch's gloo refusal taken out (``hook_with_zero_step`` sees the
    backend as NCCL), so that the warm-up the reference models can be checked on CPU ranks."""

    def inject(self):
        import types

        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks import ddp_zero_hook

        ddp_zero_hook.dist = types.SimpleNamespace(**{k: getattr(dist, k) for k in dir(dist) if not k.startswith("__")})
        ddp_zero_hook.dist.get_backend = lambda *args, **kwargs: "nccl"
