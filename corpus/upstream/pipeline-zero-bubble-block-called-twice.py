"""Zero-bubble pipeline schedules fail with "Trying to backward through the graph a second time" on a stage whose
forward calls one block (an MLP, Linear-GELU-Linear) twice; ScheduleInterleaved1F1B trains the same stages.

    torchrun --nproc-per-node=1 pipeline-zero-bubble-block-called-twice.py   (CPU, gloo)

Two stages on one rank: stage 0 a Linear(4, 4), stage 1 computes mlp(mlp(x)). For each schedule the script runs one
step() over 2 microbatches and prints whether stage 1's gradients match a plain backward of the same model, or the
error. The weight step (stage_backward_weight) runs one torch.autograd.grad per parameter group with
retain_graph=False; the fc1 group's grad, started at the second call's fc1 node, runs through the first call's fc2
node and frees it, so the fc2 group's grad then fails.
Exit 1: a zero-bubble schedule raises (the bug); exit 0: all schedules give plain autograd's gradients.
Variants run: stage 1 = mlp(x), the block called once (exit 0); stage 1 = a Linear called twice (one parameter
group, exit 0); one microbatch (exit 1); ScheduleDualPipeV in place of ScheduleZBVZeroBubble, 2 or 4 microbatches
(that line trains on one rank; the zero-bubble line still fails, exit 1).
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import (PipelineStage, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
                                          ScheduleZBVZeroBubble)


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 4))

    def forward(self, x):
        return self.mlp(self.mlp(x))


dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4), Twice())
x, y = torch.randn(4, 4), torch.randn(4, 4)
F.mse_loss(model(x), y).backward()  # the reference: plain autograd

bug = False
for schedule_cls in (ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble):
    copies = [copy.deepcopy(m) for m in model]
    for m in copies:
        m.zero_grad(set_to_none=True)
    stages = [PipelineStage(m, i, 2, torch.device("cpu")) for i, m in enumerate(copies)]
    schedule = schedule_cls(stages, n_microbatches=2, loss_fn=F.mse_loss)
    try:
        schedule.step(x, target=y)
        ok = all(p.grad is not None and torch.allclose(p.grad, r.grad, atol=1e-6)
                 for p, r in zip(copies[1].parameters(), model[1].parameters()))
        result = "grads match plain autograd" if ok else "grads differ from plain autograd   <-- BUG"
    except RuntimeError as e:
        ok = False
        cause = e.__cause__ or e
        result = f"{type(cause).__name__}: {str(cause).split('.')[0]}   <-- BUG"
    bug |= not ok
    print(f"{schedule_cls.__name__:30s}: {result}")
print(f"torch {torch.__version__}: " + ("BUG: zero-bubble schedules fail on a stage calling a block twice" if bug
                                        else "ok: every schedule trains the stage"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
