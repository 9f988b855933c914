"""Zero-bubble pipeline schedules over stages fully_shard'ed with reshard_after_forward=True (documented: a memory /
communication trade-off) silently leave no gradient on any parameter of a stage whose backward they split (all but
the first): stage_backward_input collects the stage's weights from submod.parameters() after the post-forward
reshard, i.e. the sharded DTensors, which the forward graph never used, so the weight step computes nothing.

    torchrun --nproc-per-node=4 pipeline-zero-bubble-fsdp-reshard-after-forward.py   (CPU, gloo)

pp 2 x dp_shard 2: four stages of Linear(4, 4), two per pp rank, each fully_shard'ed over its dp_shard pair with
reshard_after_forward=True; each dp rank has its own batch, one step() over one microbatch, mse_loss (mean). The
script prints, per schedule and stage, whether .grad.full_tensor() matches the dp average of plain backwards of the
same model ("None" where the gradient is missing, "wrong" where it differs).
Exit 1: a zero-bubble schedule leaves a stage's gradients None or wrong (the bug); exit 0: every schedule matches.
Variants run: reshard_after_forward=False (exit 0); 2 microbatches (exit 1: stages 1 and 2 present but wrong, stage 3
None, under both zero-bubble schedules); ScheduleDualPipeV with 4 microbatches in place of ScheduleZBVZeroBubble
(exit 1: DualPipeV's stage 3 gradients 38-42% off; with reshard_after_forward=False DualPipeV matches, exit 0).
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import (PipelineStage, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
                                          ScheduleZBVZeroBubble)

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
pp, dp = mesh["pp"].get_local_rank(), mesh["dp"].get_local_rank()
torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(4)])
xs, ys = torch.randn(2, 4, 4), torch.randn(2, 4, 4)  # one batch per dp rank
for d in range(2):  # the reference: the dp average of plain backwards
    (F.mse_loss(model(xs[d]), ys[d]) / 2).backward()

bug = False
for schedule_cls in (ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble):
    mine = [pp, 3 - pp] if schedule_cls is ScheduleZBVZeroBubble else [pp, pp + 2]
    copies = {s: fully_shard(copy.deepcopy(model[s]), mesh=mesh["dp"], reshard_after_forward=True) for s in mine}
    stages = [PipelineStage(copies[s], s, 4, torch.device("cpu"), group=mesh["pp"].get_group()) for s in mine]
    schedule = schedule_cls(stages, n_microbatches=1, loss_fn=F.mse_loss)
    schedule.step(xs[dp] if 0 in mine else None, target=ys[dp] if 3 in mine else None)
    report = {}
    for s in mine:
        grads = [(p.grad.full_tensor() if p.grad is not None else None, r.grad)
                 for p, r in zip(copies[s].parameters(), model[s].parameters())]
        ok = all(g is not None and torch.allclose(g, r, atol=1e-6) for g, r in grads)
        report[s] = "ok" if ok else ("None" if any(g is None for g, _ in grads) else "wrong")
    reports = [None] * 4
    dist.all_gather_object(reports, report)
    merged = {s: r for rep in reports for s, r in rep.items()}
    failed = any(r != "ok" for r in merged.values())
    bug |= failed
    if dist.get_rank() == 0:
        print(f"{schedule_cls.__name__:30s} grads: " + ", ".join(f"stage {s} {merged[s]}" for s in range(4))
              + ("   <-- BUG" if failed else ""))
if dist.get_rank() == 0:
    print(f"torch {torch.__version__}: " + ("BUG: zero-bubble schedules lose the gradients of resharded stages" if bug
                                            else "ok: every schedule gives plain autograd's gradients"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
