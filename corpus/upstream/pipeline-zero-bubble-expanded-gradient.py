"""Zero-bubble pipeline schedules fail on a parameter whose gradient is an expanded view (a parameter used through a
broadcast, x * w.sum(0)): the second microbatch's weight step adds in place into the expanded .grad the first one
stored, "more than one element of the written-to tensor refers to a single memory location"; plain autograd (whose
AccumulateGrad stores a dense copy) and ScheduleInterleaved1F1B train the same stages.

    torchrun --nproc-per-node=1 pipeline-zero-bubble-expanded-gradient.py   (CPU, gloo)

Two stages on one rank: stage 0 a Linear(4, 4), stage 1 computes x * w.sum(0) for w of shape (3, 4). For each
schedule the script runs one step() over 2 microbatches and prints whether w.grad matches a plain backward of the
same model, or the error.
Exit 1: a zero-bubble schedule raises (the bug); exit 0: all schedules give plain autograd's gradient.
Variants run: w used as x * w[0] (a dense gradient, exit 0); one microbatch (exit 0, but w.grad is left an expanded
view: torch.nn.utils.clip_grad_norm_(params, 0.1) after step() then fails the same way under both zero-bubble
schedules, exit 1); ScheduleDualPipeV in place of ScheduleZBVZeroBubble (that line trains on one rank; exit 1).
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import (PipelineStage, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
                                          ScheduleZBVZeroBubble)


class Broadcast(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 4))

    def forward(self, x):
        return x * self.w.sum(0)  # d/dw of w.sum(0) is an expanded (stride 0) tensor


dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4), Broadcast())
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
        ok = copies[1].w.grad is not None and torch.allclose(copies[1].w.grad, model[1].w.grad, atol=1e-6)
        result = "w.grad matches plain autograd" if ok else "w.grad differs from plain autograd   <-- BUG"
    except RuntimeError as e:
        ok = False
        cause = e.__cause__ or e
        result = f"{type(cause).__name__}: {str(cause).split('.')[0]}   <-- BUG"
    bug |= not ok
    print(f"{schedule_cls.__name__:30s}: {result}")
print(f"torch {torch.__version__}: " + ("BUG: zero-bubble schedules fail to accumulate an expanded weight gradient"
                                        if bug else "ok: every schedule trains the stage"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
