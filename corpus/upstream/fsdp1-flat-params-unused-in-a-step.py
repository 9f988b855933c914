"""FSDP1 with use_orig_params=False gives a parameter that a step does not use (a gated module) a zero slice in its
unit's FlatParameter gradient, where a local model leaves its gradient None: SGD with momentum (or weight decay)
then moves it in that step, where the local model leaves it alone.  (FlatParameter's own docstring says the flat
gradient "must use zeros to approximate those original None gradients": internal design, not in the user docs.)

    torchrun --nproc-per-node=2 fsdp1-flat-params-unused-in-a-step.py   (CPU, gloo)

Sequential(Linear, Gate(Linear)) in one FSDP1 unit (FULL_SHARD); the Gate returns its input when off.  Two steps of
SGD(momentum=0.9) with zero_grad() (set_to_none=True) before each: step 0 uses the gated Linear, step 1 does not.
The reference is the same training of a local copy (every rank has the same inputs, so the averaged gradient equals
the local one); there step 1 leaves the gated weight's .grad None and the weight where step 0 left it.
Rank 0 prints the gated weight after each step, local and FSDP1.
Exit 1: the gated weight moved in step 1 under FSDP1 (the bug); exit 0: it matches the local model.
Variants run: the gated Linear in its own FSDP1 unit (its FlatParameter then gets no gradient at all; exit 0);
momentum=0 (plain SGD: a zero gradient does not move the weight; exit 0); weight_decay=0.1 in place of momentum
(exit 1); NO_SHARD (exit 1); one process (exit 1); use_orig_params=True (exit 1, a zero .grad on the original
parameter: fsdp1-orig-params-unused-in-a-step).
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
    weights = []
    for step, on in enumerate((True, False)):  # the gated Linear is used in step 0 only
        optim.zero_grad()  # set_to_none=True
        gate.on = on
        model(torch.randn(2, 4, generator=torch.Generator().manual_seed(step))).sum().backward()
        optim.step()
        with FSDP.summon_full_params(model) if isinstance(model, FSDP) else torch.no_grad():
            weights.append(gate.inner.weight.detach().clone())
    return weights


dist.init_process_group("gloo")
torch.manual_seed(0)
ref = nn.Sequential(nn.Linear(4, 4), Gate(nn.Linear(4, 4)))
model = FSDP(copy.deepcopy(ref), use_orig_params=False, device_id=torch.device("cpu"))
want = train(ref, ref[1])
got = train(model, model.module[1])
bug = any(not torch.allclose(g, w) for g, w in zip(got, want))
if dist.get_rank() == 0:
    for step in range(2):
        print(f"after step {step}: gated weight[0] local {[round(v, 4) for v in want[step][0].tolist()]}, "
              f"FSDP1 {[round(v, 4) for v in got[step][0].tolist()]}"
              f"{'   <-- BUG' if not torch.allclose(got[step], want[step]) else ''}")
    print(f"torch {torch.__version__}: " + ("BUG: the unused parameter is stepped with a zero gradient" if bug
                                             else "ok: matches the local model"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
