"""Zero-bubble pipeline schedules silently give no gradient to any parameter of a stage whose input does not require
grad (every module before it frozen or parameterless, e.g. a frozen embedding); ScheduleInterleaved1F1B trains it.

    torchrun --nproc-per-node=2 pipeline-zero-bubble-stage-input-without-grad.py   (CPU, gloo)

Four stages of Linear(4, 4), two per rank; stage 0 is frozen (requires_grad_(False)), so stage 1's input needs no
gradient. For each schedule the script runs one step() over 4 microbatches and prints, per stage, whether every
trainable parameter's .grad matches a plain single-process backward of the same model (mse_loss, mean).
Exit 1: a zero-bubble schedule leaves stage 1's weight and bias .grad None (the bug); exit 0: all schedules match.
Variants run: stage 0 trainable (exit 0); stage 0 a parameterless ReLU instead of the frozen Linear (exit 1); one
rank holding all four stages, without ZBV (exit 1); only ScheduleInterleaved1F1B (exit 0); ScheduleDualPipeV in place
of ScheduleZBVZeroBubble (exit 1: stage 1's gradients present but wrong).
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import (PipelineStage, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
                                          ScheduleZBVZeroBubble)

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(4)])
model[0].requires_grad_(False)  # a frozen first stage: stage 1's input does not require grad
x, y = torch.randn(8, 4), torch.randn(8, 4)
F.mse_loss(model(x), y).backward()  # the reference: plain autograd over the whole model

bug = False
for schedule_cls in (ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble):
    # interleaved: stage i on rank i % world; ZBV ("V" shape): rank r holds stages r and 3 - r
    if schedule_cls is ScheduleZBVZeroBubble:
        mine = [rank, 2 * world - 1 - rank]
    else:
        mine = [s for s in range(4) if s % world == rank]
    copies = {s: copy.deepcopy(model[s]) for s in mine}
    for m in copies.values():
        m.zero_grad(set_to_none=True)
    stages = [PipelineStage(copies[s], s, 4, torch.device("cpu")) for s in mine]
    schedule = schedule_cls(stages, n_microbatches=4, loss_fn=F.mse_loss)
    schedule.step(x if 0 in mine else None, target=y if 3 in mine else None)
    report = {}
    for s in mine:
        grads = [(p.grad, ref.grad) for p, ref in zip(copies[s].parameters(), model[s].parameters())
                 if ref.requires_grad]
        ok = all(g is not None and torch.allclose(g, r, atol=1e-6) for g, r in grads)
        report[s] = "ok" if ok else ("None   <-- BUG" if any(g is None for g, _ in grads) else "wrong   <-- BUG")
    reports = [None] * world
    dist.all_gather_object(reports, report)
    merged = {s: r for rep in reports for s, r in rep.items()}
    bug |= any(r != "ok" for r in merged.values())
    if rank == 0:
        for s in (1, 2, 3):
            print(f"{schedule_cls.__name__:30s} stage {s} grads: {merged[s]}")
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: zero-bubble schedules leave the stage after a frozen one without "
                                             "gradients" if bug else "ok: every schedule gives plain autograd's grads"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
