"""Faults inside FSDP1 (its reductions, refusals, sharded grad scaler) and FSDP1 over tensor parallelism."""

from __future__ import annotations

from parityfuzz.parts.fsdp1.system import FSDP1System
from parityfuzz.families.fsdp1_tp.system import FSDP1TPSystem

from tests.faults.injection import _Injected, _all_reduce_skipped_in, _collective_replaced_in, _patch_once


# --------------------------------------------------------------------------- faults inside FSDP1 itself


class _InsideFSDP1(_Injected, FSDP1System):
    """A fault inside FSDP1's internals."""


class NoShardOrigParamsGradUnreduced(_InsideFSDP1):
    """Under ``NO_SHARD`` with ``use_orig_params=True``, FSDP1 skips its gradient all-reduce: each rank keeps
    its own (pre-divided) gradient."""

    def inject(self):
        _all_reduce_skipped_in("_reduce_grad_no_shard", lambda state, handle: handle._use_orig_params)


class HybridSkipsInterAllReduce(_InsideFSDP1):
    """Under ``HYBRID_SHARD`` (not ``_HYBRID_SHARD_ZERO2``), FSDP1 reduce-scatters within the shard group but
    skips the all-reduce across replicas."""

    def inject(self):
        from torch.distributed.fsdp._flat_param import HandleShardingStrategy

        _all_reduce_skipped_in("_reduce_grad",
                               lambda state, handle: handle._sharding_strategy == HandleShardingStrategy.HYBRID_SHARD)


class ReducesInParamDtype(FSDP1System):
    """FSDP1's flat-parameter handles forget a ``reduce_dtype`` that differs from ``param_dtype`` and reduce
    gradients in ``param_dtype`` (the special case of ``_init_param_reduce_dtypes`` taken for every policy):
    wrong only under mixed precision with both dtypes given and different."""

    def wrap(self, model):
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        model = super().wrap(model)
        for module in model.modules():
            if isinstance(module, FSDP) and module._handle is not None:
                module._handle._reduce_dtype = module._handle._fwd_bwd_param_dtype
        return model


class RefusalSuppressed(FSDP1System):
    """FSDP1 quietly drops ``cpu_offload`` and ``sync_module_states`` where it cannot honour them (no
    accelerator) instead of raising: a case torch documents refusing then trains."""

    def names(self, model):
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        def quiet(module, **kwargs):
            kwargs.pop("cpu_offload", None)
            return FSDP(module, **{**kwargs, "sync_module_states": False})

        return {**super().names(model), "FSDP": quiet}


class TensorParallelShardNotReduced(_Injected, FSDP1TPSystem):
    """FSDP1 given a device mesh (its DTensor extension on) skips the reduce-scatter over the data-parallel
    group: each rank keeps its own chunk of its local gradient.  Wrong only with tensor parallelism on a mesh
    whose data-parallel axis has several ranks."""

    def inject(self):
        import torch.distributed as dist
        from torch.distributed.fsdp import _runtime_utils

        def keep_own_chunk(real):
            def reduce_scatter(output, input, *args, group=None, **kwargs):
                output.copy_(input.chunk(dist.get_world_size(group))[dist.get_rank(group)])
            return reduce_scatter

        _collective_replaced_in(_runtime_utils, "_reduce_grad", "reduce_scatter_single", keep_own_chunk,
                                lambda state, handle: state._fsdp_extension is not None and state.world_size > 1)

class ScalerDecidesOnItsOwnShard(_Injected, FSDP1System):
    """``ShardedGradScaler.unscale_`` does not all-reduce the inf flags it found: each rank skips the step only where
    its own gradient shard overflowed.  A loss spike overflows every element, so every shard holds inf after the
    reduction and every rank skips all the same; only an overflow confined to some elements (one weight row,
    ``TrainSpec.overflow_in``) leaves the other ranks stepping a step the reference skips.  Under FSDP1, whose
    gradient shards are plain tensors (FSDP2's DTensor gradients have their inf flags reduced by DTensor's own
    ``_amp_foreach_non_finite_check_and_unscale_`` handler as well)."""

    def inject(self):
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        def make(original):
            def alone(scaler, optimizer):
                import torch.distributed as dist

                class Done:
                    def wait(self):
                        return None

                reduce = dist.all_reduce
                dist.all_reduce = lambda *args, **kwargs: Done()  # (unscale_'s only collective: the inf flags)
                try:
                    original(scaler, optimizer)
                finally:
                    dist.all_reduce = reduce
            return alone

        _patch_once(ShardedGradScaler, "unscale_", make)
