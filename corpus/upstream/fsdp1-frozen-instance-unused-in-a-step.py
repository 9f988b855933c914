"""FSDP1 raises in the backward of a step where a nested instance whose parameters are all frozen returns its input
unchanged (a gated module that skipped its child): "ValueError: expected to be in states [<TrainingState.IDLE: 1>] but
current state is TrainingState.FORWARD_BACKWARD", though FSDP1 documents that an instance may hold only frozen
parameters (and a local model trains it).

    torchrun --nproc-per-node=2 fsdp1-frozen-instance-unused-in-a-step.py   (CPU, gloo)

Sequential(Linear, FSDP(Gate(Linear))) under a root FSDP1 (use_orig_params=True), the gated Linear frozen; the Gate
returns its input tensor itself when off.  Two steps: step 0 runs the gated Linear, step 1 does not.  Rank 0 prints
each step's outcome.  (By reading the source: the frozen instance registers its reshard-only hook on its input; the
output is that same tensor, so its pre-backward hook runs after the reshard-only hook set FORWARD_BACKWARD.)
Exit 1: a backward raises (the bug); exit 0: both steps train.
Variants run: the gated Linear not frozen (exit 0); the gate on in both steps (exit 0); the Gate returning x * 1
(a new tensor) when off (exit 0); use_orig_params=False fails the same (exit 1); NO_SHARD (exit 1); one process
(exit 1).
"""
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


dist.init_process_group("gloo")
kw = dict(use_orig_params=True, device_id=torch.device("cpu"))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4), Gate(nn.Linear(4, 4)))
model[1].inner.requires_grad_(False)  # every parameter of the nested instance is frozen
model[1] = FSDP(model[1], **kw)
model = FSDP(model, **kw)
gate = model.module[1].module
optim = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
bug = False
for step, on in enumerate((True, False)):
    gate.on = on
    optim.zero_grad()
    try:
        model(torch.randn(2, 4)).sum().backward()
        optim.step()
        outcome = "trains"
    except ValueError as e:
        outcome, bug = f"backward raises ValueError: {e}   <-- BUG", True
    if dist.get_rank() == 0:
        print(f"step {step} (gate {'on' if on else 'off'}): {outcome}")
    if bug:
        break
if dist.get_rank() == 0:
    print(f"torch {torch.__version__}: " + ("BUG: the frozen instance fails its state check" if bug else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
