"""schedule.eval() (documented: "go through the microbatches, calling forward only") raises AssertionError "can't
steal_bwd_input if this stage doesn't have backward" on a rank holding two adjacent stages, while the other ranks wait
for it: the runtime still runs the schedule's backward actions, and the local hand-over of a stage's input gradient
to the previous stage on the same rank asserts that the stage has a backward. step() on the same stages trains.

    torchrun --nproc-per-node=2 pipeline-eval-with-adjacent-stages-on-one-rank.py   (CPU, gloo)

Four stages of Linear(4, 4), 4 microbatches. Control: ScheduleInterleaved1F1B (rank 0 holds stages 0 and 2, rank 1
stages 1 and 3) evaluates, and its loss is compared with a plain forward. Then ScheduleZBVZeroBubble ("V": rank 0
holds stages 0 and 3, rank 1 the adjacent stages 1 and 2) evaluates: the rank that raises prints its error; a rank
still waiting after 10 s prints that it timed out and exits 1.
Exit 1: eval raises or hangs (the bug); exit 0: both schedules evaluate to the plain forward's loss.
Variants run: schedule.step() in place of ZBV's eval (exit 0); ScheduleDualPipeV in place of ScheduleZBVZeroBubble
(exit 1); one rank holding two stages, eval under ScheduleLoopedBFS, ScheduleInterleaved1F1B,
ScheduleInterleavedZeroBubble or ScheduleZBVZeroBubble (AssertionError under each, exit 1).
"""
import copy
import os
import sys
import threading

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B, ScheduleZBVZeroBubble

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(4)])
x, y = torch.randn(8, 4), torch.randn(8, 4)
expected = F.mse_loss(model(x), y).item()  # the reference: a plain forward


def evaluate(schedule_cls, mine):
    stages = [PipelineStage(copy.deepcopy(model[s]), s, 4, torch.device("cpu")) for s in mine]
    schedule = schedule_cls(stages, n_microbatches=4, loss_fn=F.mse_loss)
    losses = []
    schedule.eval(x if 0 in mine else None, target=y if 3 in mine else None, losses=losses)
    return sum(losses).item() / 4 if losses else None


loss = evaluate(ScheduleInterleaved1F1B, [rank, rank + 2])
if loss is not None:
    print(f"rank {rank} ScheduleInterleaved1F1B.eval: loss {loss:.6f}, plain forward {expected:.6f}")


def timed_out():
    print(f"rank {rank}: no progress 10 s after ScheduleZBVZeroBubble.eval began (waits for a peer)   <-- BUG",
          flush=True)
    os._exit(1)


watchdog = threading.Timer(10, timed_out)
watchdog.start()
bug = loss is not None and abs(loss - expected) > 1e-5
try:
    loss = evaluate(ScheduleZBVZeroBubble, [rank, 3 - rank])
    if loss is not None:
        print(f"rank {rank} ScheduleZBVZeroBubble.eval: loss {loss:.6f}, plain forward {expected:.6f}")
        bug |= abs(loss - expected) > 1e-5
except AssertionError as e:
    print(f"rank {rank} ScheduleZBVZeroBubble.eval: AssertionError: {e}   <-- BUG", flush=True)
    bug = True
flag = torch.tensor([float(bug)])
dist.all_reduce(flag)  # a rank left waiting in eval never joins: its watchdog ends it
watchdog.cancel()
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: eval fails with adjacent stages on one rank" if flag.item()
                                            else "ok: eval runs forward only under both schedules"))
dist.destroy_process_group()
sys.exit(1 if flag.item() else 0)
