"""fp16 loss scaling as the AMP recipe writes it (``TrainSpec.loss_scale``): the scaler, the loss a backward runs
on, and whether a step was skipped.  The systems call these; the exported script embeds them by source, so both
scale, spike and skip alike."""

from __future__ import annotations

import torch


def make_scaler(init_scale: float, device_type: str, sharded: bool):
    """The gradient scaler (``init_scale``; 0: None): ``ShardedGradScaler`` where the gradients are sharded,
    ``torch.amp.GradScaler`` otherwise (its default growth interval: no growth within a case)."""
    if not init_scale:
        return None
    if sharded:
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(device=device_type, init_scale=init_scale)
    return torch.amp.GradScaler(device_type, init_scale=init_scale)


def backward_loss(scaler, loss: torch.Tensor, spike: float) -> torch.Tensor:
    """What a backward runs on: ``loss``, or ``scaler.scale(loss * spike)`` (``spike``: ``TrainSpec.spike``)."""
    if scaler is None:
        return loss
    return scaler.scale(loss * spike if spike != 1 else loss)


def step_skipped(scaler, optim) -> bool:
    """After ``scaler.unscale_(optim)``: whether ``scaler.step`` will skip the step, from the infs and NaNs it
    found (``ShardedGradScaler`` sums them over the ranks), read where its ``step`` reads them
    (``GradScaler._maybe_opt_step``: ``_found_inf_per_device``)."""
    return sum(v.item() for v in scaler._found_inf_per_device(optim).values()) > 0


def any_rank(flag: bool, device) -> bool:
    """Whether ``flag`` holds on some rank (a MAX all-reduce over the world).  What the harness records after a step
    (gathered gradients) must be the same collectives on every rank, whichever ranks' scalers skipped it: where they
    disagree, a finding of its own (the oracle's ``skipped_step``), not a hang of the harness's recording."""
    import torch.distributed as dist

    t = torch.tensor([float(bool(flag))], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def spike_output(module, spike: float):
    """Where the overflow happens in one place (``TrainSpec.overflow_in``): a forward hook on ``module`` (the one at
    that path, wrappers looked through) that multiplies the gradient reaching its output's first feature by
    ``spike``; the hook's handle, to remove after the pass.  A forward under no_grad (a reentrant checkpoint's first) is left
    alone: its recompute's output is the one that gets the gradient."""
    def hook(module, args, output):
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(lambda grad: torch.cat((grad[..., :1] * spike, grad[..., 1:]), dim=-1))

    return module.register_forward_hook(hook)
