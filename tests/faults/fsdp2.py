"""Faults inside FSDP2 (its reductions, dtypes, resharding, state dicts) and inside one module's computation or the training loop's dimensions under FSDP2 (autocast, recompute, compile, loss scaling, live loads)."""

from __future__ import annotations

import torch

from parityfuzz.parts.fully_shard.system import FSDP2System

from tests.faults.injection import _Injected, _patch_once, _wrap_foreach_reduce


# --------------------------------------------------------------------------- faults inside FSDP2 itself
# These patch torch's FSDP2 internals in the rank (the rank's isolation snapshot undoes the patch after the
# case), as a real bug there would behave, and each is subtle: one replica, one dtype, a fraction of a
# percent, a late step.

class _InsideFSDP2(_Injected, FSDP2System):
    """A fault inside FSDP2's internals."""


class ReplicaNotAllReduced(_InsideFSDP2):
    """On HSDP meshes with several replicas, rank 0 takes part in FSDP2's all-reduce across replicas but keeps
    its own reduce-scattered gradient: its replica of a shard drifts from the others' (rank 2's on a 2x2 mesh),
    which hold the right value."""

    def inject(self):
        import sys

        import torch.distributed as dist

        if len(self.case.mesh.shape) < 2 or self.case.mesh.shape[0] < 2 or self.ctx.rank != 0:
            return
        original = dist.all_reduce

        def all_reduce(tensor, *args, **kwargs):
            if sys._getframe(1).f_code.co_name == "foreach_reduce":
                tensor = tensor.clone()  # the collective runs; its result never reaches FSDP2's gradient
            return original(tensor, *args, **kwargs)

        dist.all_reduce = all_reduce


class ReducesInBf16(_InsideFSDP2):
    """Where a policy asks to reduce low-precision gradients in float32, FSDP2 reduces them in bfloat16
    (a relative error of about 1e-3)."""

    def inject(self):
        def change(grads, group, reduce_dtype):
            if reduce_dtype == torch.float32 and grads and grads[0].dtype in (torch.bfloat16, torch.float16):
                return torch.bfloat16
            return reduce_dtype

        _wrap_foreach_reduce(change)


class UnevenShardGradOff(_InsideFSDP2):
    """The gradient of a parameter whose dim-0 does not divide the shard group (padded for the
    reduce-scatter) comes out 0.5% too large."""

    def inject(self):
        def change(grads, group, reduce_dtype):
            n = 1 if group is None else group.size()
            for i, g in enumerate(grads):
                if g.size(0) % n:
                    grads[i] = g * 1.005
            return reduce_dtype

        _wrap_foreach_reduce(change)


class LateGradDrift(_InsideFSDP2):
    """From step 3 on, in models with attention (which amplify rounding from step to step), FSDP2's reduced
    gradients come out 0.3% too large."""

    step = 0

    def zero_grad(self, step):
        self.step = step
        super().zero_grad(step)

    def inject(self):
        if not any(n.kind == "attention" for _, n in self.case.model.body.walk("body")):
            return

        def change(grads, group, reduce_dtype):
            if self.step >= 3:
                grads[:] = [g * 1.003 for g in grads]
            return reduce_dtype

        _wrap_foreach_reduce(change)


class OutputLeftInBf16(_InsideFSDP2):
    """A module whose policy casts its outputs to float32 leaves a bfloat16 output as it is."""

    def inject(self):
        from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

        original = FSDPState._cast_output_dtype

        def _cast_output_dtype(state, output):
            if state._mp_policy.output_dtype == torch.float32 and getattr(output, "dtype", None) == torch.bfloat16:
                return output
            return original(state, output)

        FSDPState._cast_output_dtype = _cast_output_dtype

class ShortShardLoadedAtWrongOffset(_InsideFSDP2):
    """Loading a full state dict into DTensors (``set_state_dict(full_state_dict=True)``, with or without
    ``broadcast_from_rank0``) copies a short last shard (dim 0 not divisible by the shard group) from one row too
    early; every other shard, and every other way to load, is right."""

    def inject(self):
        import torch.distributed._state_dict_utils as utils

        compute = utils.compute_local_shape_and_global_offset

        def short(global_shape, mesh, placements):
            shape, offset = compute(global_shape, mesh, placements)
            full_chunk = -(-global_shape[0] // mesh.size()) if global_shape else 0
            return (shape, offset) if global_shape and 0 < shape[0] < full_chunk and offset[0] > 0 else None

        def shift_offsets(original):
            def shifted(global_shape, mesh, placements, *args, **kwargs):
                found = short(global_shape, mesh, placements)
                if found is None:
                    return original(global_shape, mesh, placements, *args, **kwargs)
                shape, offset = found
                return shape, (offset[0] - 1, *offset[1:])
            return shifted

        def shift_copies(original):
            def distributed(tensor, mesh, placements, *args, **kwargs):
                out = original(tensor, mesh, placements, *args, **kwargs)
                found = short(tuple(tensor.shape), mesh, placements)
                if found is not None:
                    (rows, *_), (first, *_) = found
                    out.to_local().copy_(tensor[first - 1:first - 1 + rows].to(out.to_local().device))
                return out
            return distributed

        _patch_once(utils, "compute_local_shape_and_global_offset", shift_offsets)
        _patch_once(utils, "distribute_tensor", shift_copies)


class OptimizerStateOfRenamedParamSwapped(_InsideFSDP2):
    """Where ``set_state_dict`` maps the optimizer state's names back to parameters of a model whose names had a
    wrapper prefix taken out (``_checkpoint_wrapped_module``, normalised away in the saved names), the states of
    the first two parameters of one shape change places."""

    def inject(self):
        import torch.distributed.checkpoint.state_dict as sd

        def swap_states(original):
            def split(model, optim, optim_state_dict, info):
                out = original(model, optim, optim_state_dict, info)
                state = out.get("state", {})
                renamed = any("_checkpoint_wrapped_module" in n for n, _ in model.named_parameters())
                params = [p for g in optim.param_groups for p in g["params"]]
                fqn = {id(p): next(iter(info.fqn_param_mapping[p])) for p in params if p in info.fqn_param_mapping}
                held = [p for p in params if fqn.get(id(p)) in state]
                pair = next(((p, q) for i, p in enumerate(held) for q in held[i + 1:] if p.shape == q.shape), None)
                if renamed and pair is not None:
                    a, b = fqn[id(pair[0])], fqn[id(pair[1])]
                    state[a], state[b] = state[b], state[a]
                return out

            return split

        _patch_once(sd, "_split_optim_state_dict", swap_states)


# --------------------------------------------------------------------------- faults inside one module's computation
# Where a divergence begins must name the module (parityfuzz.judge.origin): one fault in a module's forward, one in its
# backward, both inside torch's functionals.


class LayerNormOutputOff(_Injected, FSDP2System):
    """``F.layer_norm``'s output comes out 0.2% too large: a forward kernel bug in the LayerNorms alone."""

    def inject(self):
        import torch.nn.functional as F

        original = F.layer_norm

        def layer_norm(*args, **kwargs):
            return original(*args, **kwargs) * 1.002

        F.layer_norm = layer_norm


class GeluBackwardOff(_Injected, FSDP2System):
    """``F.gelu``'s backward is 0.3% off (its forward is right): a backward kernel bug in the GELUs alone."""

    def inject(self):
        import torch.nn.functional as F

        original = F.gelu

        class Gelu(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, approximate):
                ctx.save_for_backward(x)
                ctx.approximate = approximate
                return original(x, approximate=approximate)

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                with torch.enable_grad():
                    x = x.detach().requires_grad_()
                    (dx,) = torch.autograd.grad(original(x, approximate=ctx.approximate), x, grad)
                return dx * 1.003, None

        F.gelu = lambda x, approximate="none": Gelu.apply(x, approximate)


class CompiledBackwardOff(_Injected, FSDP2System):
    """Dynamo's ``aot_eager`` backend compiles every backward graph to return its first floating-point gradient
    0.2% off (a miscompiled backward): only a system under ``torch.compile`` with that backend reaches it."""

    def inject(self):
        import torch._dynamo as dynamo

        def make(lookup):
            def faulty(name):
                if name != "aot_eager":
                    return lookup(name)
                from functorch.compile import make_boxed_func
                from torch._dynamo.backends.common import aot_autograd

                def forward(gm, example_inputs):
                    return make_boxed_func(gm.forward)

                def backward(gm, example_inputs):
                    def run(*args):
                        outs = list(gm.forward(*args))
                        first = next((i for i, o in enumerate(outs)
                                      if isinstance(o, torch.Tensor) and o.is_floating_point()), None)
                        if first is not None:
                            outs[first] = outs[first] * (1 + 2e-3)
                        return outs
                    return make_boxed_func(run)

                return aot_autograd(fw_compiler=forward, bw_compiler=backward)
            return faulty

        _patch_once(dynamo, "lookup_backend", make)


class RecomputeWithoutAutocast(_Injected, FSDP2System):
    """Activation checkpointing's recompute forgets the CPU autocast region the forward ran in
    (``torch.utils.checkpoint._get_autocast_kwargs`` reports it off): only a checkpointed module under autocast
    reaches it, where the recomputed activations come out in float32 instead of the autocast dtype."""

    def inject(self):
        import torch.utils.checkpoint as checkpoint

        def make(original):
            def forgetful(device_type="cuda"):
                device_kwargs, cpu_kwargs = original(device_type)
                if device_type == "cpu" and device_kwargs is not None:
                    device_kwargs = {**device_kwargs, "enabled": False}
                return device_kwargs, {**cpu_kwargs, "enabled": False}
            return forgetful

        _patch_once(checkpoint, "_get_autocast_kwargs", make)


class ReentrantRecomputeWithLaterRng(_Injected, FSDP2System):
    """The reentrant checkpoint's recompute restores the CPU RNG state of the backward's time instead of the one
    its forward saved (``torch.utils.checkpoint.CheckpointFunction.backward``): only a reentrant checkpoint with a
    random op inside (dropout) reaches it, whose recomputed mask then differs from the forward's."""

    def inject(self):
        import torch
        from torch.utils.checkpoint import CheckpointFunction

        def make(original):
            def forgetful(ctx, *args):
                ctx.fwd_cpu_state = torch.get_rng_state()
                return original(ctx, *args)
            return forgetful

        _patch_once(CheckpointFunction, "backward", make)


class ScalerKeepsItsScaleOnRankOne(_Injected, FSDP2System):
    """``ShardedGradScaler.update`` on rank 1 forgets to back off after a step it skipped for an overflow: from
    then on rank 1 scales its loss twice as much as the other ranks, and the gradients the ranks reduce mix two
    scales.  Only loss scaling with an overflowing step reaches it."""

    def inject(self):
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        if self.ctx.rank != 1:
            return

        def make(original):
            def stubborn(scaler, new_scale=None):
                kept = scaler.get_scale()
                original(scaler, new_scale)
                if scaler.get_scale() < kept:
                    scaler._scale.fill_(kept)
            return stubborn

        _patch_once(ShardedGradScaler, "update", make)


class ScalerSkipsTheStepAfterAnOverflow(_Injected, FSDP2System):
    """``ShardedGradScaler.unscale_`` keeps a stale inf flag: the step after one it skipped for an overflow is
    skipped too, on every rank alike (its gradients finite), so the parameters lag the reference's by a step.  Only
    loss scaling with an overflowing step before the last reaches it."""

    def inject(self):
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        def make(original):
            def stale(scaler, optimizer):
                original(scaler, optimizer)
                found = scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
                if getattr(scaler, "_overflowed_before", False):
                    for flag in found.values():
                        flag.fill_(1.0)
                scaler._overflowed_before = sum(v.item() for v in found.values()) > 0 and not getattr(
                    scaler, "_overflowed_before", False)
            return stale

        _patch_once(ShardedGradScaler, "unscale_", make)

class DTensorInfFlagsNotReduced(FSDP2System):
    """DTensor's handler of ``_amp_foreach_non_finite_check_and_unscale_`` (what ``torch.amp.GradScaler.unscale_``
    runs over DTensor gradients) checks each rank's local shards but never reduces the inf flag over the mesh: a rank
    whose shard is finite steps where another's overflowed.  ``ShardedGradScaler`` hides it (it all-reduces the flags
    itself), and so does a loss spike (every shard overflows): only ``torch.amp.GradScaler`` (``TrainSpec.scaler``)
    with an overflow confined to one shard reaches it."""

    def optimizer_step(self) -> bool:
        from torch.distributed.tensor import DTensor
        from torch.utils import _pytree as pytree

        dispatcher = DTensor._op_dispatcher
        op = torch.ops.aten._amp_foreach_non_finite_check_and_unscale_.default
        original = dispatcher._custom_op_handlers.get(op)

        def local_only(op_call, args, kwargs):
            info = dispatcher.unwrap_to_op_info(op_call, args, kwargs)
            op_call(*pytree.tree_unflatten(info.local_args, info.args_tree_spec), **info.local_kwargs)

        dispatcher._custom_op_handlers[op] = local_only
        try:
            return super().optimizer_step()
        finally:
            dispatcher._custom_op_handlers[op] = original


class LiveLoadKeepsOptimizerState(FSDP2System):
    """A checkpoint loaded into the live optimizer keeps the state it already holds (momentum, Adam's moments and
    step) for every parameter that has one, instead of the checkpoint's: ``load_state_dict`` merging rather than
    replacing.  A fresh optimizer holds no state, so only a rollback into the live system reaches it."""

    def before_live_load(self):
        super().before_live_load()
        optim, original = self.optim, self.optim.load_state_dict

        def merging(state_dict):
            live = dict(optim.state)
            original(state_dict)
            for p, s in live.items():
                optim.state[p] = s

        optim.load_state_dict = merging
