"""FSDP1 (use_orig_params=False, sharded strategy) leaves the FlatParameter gradient of a unit at None when the last
backward of a step runs the unit's pre-backward but gives its parameters no gradient (a gated module), dropping what
was there before that backward (a local model and DDP keep it).

    torchrun --nproc-per-node=2 fsdp1-flat-unit-unused-in-the-last-backward.py   (CPU, gloo)

The model is Sequential(Linear, Gate(Linear)); the Gate is its own FSDP unit; with gate.on False it returns its input,
so the unit runs (its output needs a gradient) but its Linear goes unused.
Part 1 (gradient accumulation outside no_sync(), which the FSDP docs support without CPU offload): microbatch 0 uses
the gated Linear, microbatch 1 does not; after both backwards the unit's gradient is None: optim.step() skips it and
microbatch 0's gradient is lost.
Part 2 (zero_grad(set_to_none=False) before each step): step 0 uses the gated Linear, step 1 does not; after step 1's
backward the unit's gradient is None instead of zeros, so SGD(momentum=0.9) skips the unit instead of applying momentum.
Each part compares the unit's gradient and updated weight with the same training of a plain local model (every rank
has the same model and inputs, so the averaged gradient equals the local one).
Exit 1: either part differs from the local model (the bug); exit 0: both match.
Variants run (exit 0 each): NO_SHARD; use_orig_params=True; the gated Linear used in the last backward instead of the
first (order of microbatches/steps swapped); one process (FSDP1 then switches to NO_SHARD); the Gate first in the
Sequential (its output then needs no gradient, so its pre-backward does not run). SHARD_GRAD_OP fails like FULL_SHARD.
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy


class Gate(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.on = inner, True

    def forward(self, x):
        return self.inner(x) if self.on else x


def train(model, gate, gates, one_step_each):
    optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for i, on in enumerate(gates):  # one backward each: microbatches of one step, or one step each
        if one_step_each:
            optim.zero_grad(set_to_none=False)
        gate.on = on
        model(torch.randn(2, 4, generator=torch.Generator().manual_seed(i))).sum().backward()
        if one_step_each or i == len(gates) - 1:
            optim.step()


dist.init_process_group("gloo")
kw = dict(device_id=torch.device("cpu"), use_orig_params=False, sharding_strategy=ShardingStrategy.FULL_SHARD)
gates = (True, False)  # the gated Linear is used in the first backward only
bug = False
for part, one_step_each in ((1, False), (2, True)):
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(4, 4), Gate(nn.Linear(4, 4)))
    model = copy.deepcopy(ref)
    unit = model[1] = FSDP(model[1], **kw)  # the gated unit; use_orig_params=False: one FlatParameter (a shard)
    model = FSDP(model, **kw)
    train(ref, ref[1], gates, one_step_each)
    train(model, unit.module, gates, one_step_each)
    grads = [p.grad for p in unit.parameters() if p.numel()]  # (this rank's shard)
    with FSDP.summon_full_params(model):
        weight = unit.module.inner.weight.detach().clone()
    ok = all(g is not None for g in grads) and torch.allclose(weight, ref[1].inner.weight)
    bug |= not ok
    if dist.get_rank() == 0:
        print(f"part {part}: local model: gated weight.grad sum {ref[1].inner.weight.grad.sum().item():+.4f}, "
              f"updated weight[0] {[round(v, 4) for v in ref[1].inner.weight[0].tolist()]}")
        print(f"part {part}: FSDP1:       unit FlatParameter.grad {['None' if g is None else 'set' for g in grads]}, "
              f"updated weight[0] {[round(v, 4) for v in weight[0].tolist()]}{'' if ok else '   <-- BUG'}")
if dist.get_rank() == 0:
    print(f"torch {torch.__version__}: " + ("BUG: the unit's gradient is dropped" if bug else "ok: matches"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
