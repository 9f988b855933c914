"""FSDP1 with use_orig_params=True shows a zero gradient for a parameter that a step does not use (a gated module)
while its unit's other parameters got gradients, where a local model leaves its .grad None after
zero_grad(set_to_none=True): SGD with momentum (or weight decay) then moves it in that step, where the local model
does not.

    torchrun --nproc-per-node=2 fsdp1-orig-params-unused-in-a-step.py   (CPU, gloo)

Sequential(Linear, Gate(Linear)) in one FSDP1 unit (FULL_SHARD, use_orig_params=True); the Gate returns its input
when off.  Two steps of SGD(momentum=0.9) with zero_grad() (set_to_none=True) before each: step 0 uses the gated
Linear, step 1 does not.  The reference is the same training of a local copy (every rank has the same inputs).
Rank 0 prints the gated weight's .grad in step 1 (under FSDP1 on each rank: rank 1's shard holds it) and the weight
after step 1, local and FSDP1.
(FlatParamHandle._reset_is_grad_none clears the "logically None" mask, FlatParameter._is_grad_none_mask, of every
parameter that requires grad: "it should receive a meaningful gradient (even if the gradient happens to be zeros)".)
Exit 1: the gated weight's step-1 gradient is not None or the weight moved (the bug); exit 0: both match.
Variants run: the gated Linear in its own FSDP1 unit (its FlatParameter then gets no gradient; exit 0); momentum=0
(the weight then matches, but its step-1 .grad is still zeros; exit 1); NO_SHARD (exit 1); one process (exit 1);
use_orig_params=False (exit 1: fsdp1-flat-params-unused-in-a-step).
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


class Gate(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.on = inner, True

    def forward(self, x):
        return self.inner(x) if self.on else x


def train(model, gate):
    optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step, on in enumerate((True, False)):  # the gated Linear is used in step 0 only
        optim.zero_grad()  # set_to_none=True
        gate.on = on
        model(torch.randn(2, 4, generator=torch.Generator().manual_seed(step))).sum().backward()
        w = gate.inner.weight  # under FSDP1: this rank's shard of it
        grad = "not in this rank's shard" if not w.numel() else "None" if w.grad is None else \
            "zeros" if not w.grad.any() else "nonzero"
        optim.step()
    with FSDP.summon_full_params(model) if isinstance(model, FSDP) else torch.no_grad():
        return grad, gate.inner.weight.detach().clone()


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
ref = nn.Sequential(nn.Linear(4, 4), Gate(nn.Linear(4, 4)))
model = FSDP(copy.deepcopy(ref), use_orig_params=True, device_id=torch.device("cpu"))
want_grad, want = train(ref, ref[1])
grad, got = train(model, model.module[1])
grads = [None] * world
dist.all_gather_object(grads, grad)
bug = any(g not in ("None", "not in this rank's shard") for g in grads) or not torch.allclose(got, want)
if rank == 0:
    print(f"step 1: gated weight.grad local: {want_grad}; FSDP1 per rank: {grads}")
    print(f"after step 1: gated weight[0] local {[round(v, 4) for v in want[0].tolist()]}, "
          f"FSDP1 {[round(v, 4) for v in got[0].tolist()]}{'   <-- BUG' if bug else ''}")
    print(f"torch {torch.__version__}: " + ("BUG: the unused parameter gets a zero gradient and is stepped" if bug
                                             else "ok: matches the local model"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
