"""The per-rank training loop that drives any system and records its trace."""

from __future__ import annotations

import torch

from fuzz.build import batch_for, build_model
from fuzz.case import Case
from fuzz.systems import RankContext, resolve
from fuzz.trace import Rec, RankTrace


def _record(tensors: dict) -> dict:
    return {n: None if t is None else Rec(str(t.dtype).removeprefix("torch."), t.detach().to("cpu", torch.float64, copy=True).numpy())
            for n, t in tensors.items()}


def reset_rank_state(seed: int) -> None:
    """Every system starts from the same process state."""
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)


def run_system(case: Case, role: str, ctx: RankContext) -> RankTrace:
    """Train ``case`` with its ``role`` system ("reference" or "system") on this rank."""
    cls = resolve(case.reference if role == "reference" else case.system)
    reset_rank_state(case.seed)
    system = cls(case, ctx)
    system.setup(build_model(case))
    keep = ctx.rank == 0
    trace = RankTrace(losses=[], loss_dtype="", grads=[] if keep else None, params=[] if keep else None)
    for step in range(case.train.steps):
        system.zero_grad(step)
        loss = system.forward_backward(batch_for(case, ctx.rank, step, ctx.device))
        trace.losses.append(float(loss))
        trace.loss_dtype = str(loss.dtype).removeprefix("torch.")
        grads = system.gradients()
        system.optimizer_step()
        params = system.parameters()
        if keep:
            trace.grads.append(_record(grads))
            trace.params.append(_record(params))
    return trace
