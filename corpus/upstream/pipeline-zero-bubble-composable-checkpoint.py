"""The composable checkpoint (torch.distributed._composable.checkpoint) fails on a second backward over its retained
graph: AttributeError "'_GeneratorContextManager' object has no attribute 'args'" in recompute_fn, because its
recompute context (_no_hook, a @contextmanager object) is made once per forward and re-entered on each recompute.
torch.utils.checkpoint(use_reentrant=False) "supports all ways of performing the backward pass" and runs both.
ScheduleInterleavedZeroBubble's split backward is such a second backward (input step with retain_graph=True, then
the weight step), so a stage holding a composable-checkpointed module fails there; ScheduleInterleaved1F1B trains.

    torchrun --nproc-per-node=1 pipeline-zero-bubble-composable-checkpoint.py   (CPU, gloo)

Part 1 (plain autograd): out.backward(retain_graph=True); out.backward() through a checkpointed Linear(4, 4).
Part 2 (pipelining): two stages on one rank, stage 1 holds a Linear(4, 4) under the composable checkpoint; one step()
over 2 microbatches, gradients compared with a plain backward of the same model. One line per check.
Exit 1: the composable checkpoint raises in either part (the bug); exit 0: every check trains.
Variants run (each changes one part; the other part still fails, so each exits 1): part 1 with a single backward
(part 1 ok); part 2 with checkpoint_wrapper in place of the composable API (part 2 ok); part 2 with one microbatch
(part 2 still fails). Also torch.utils.checkpoint(use_reentrant=False, context_fn=lambda: (nullcontext(), cm()))
with cm a @contextmanager function fails the second backward the same way: the recompute context is made once per
forward and re-entered per recompute, which only a reusable context manager survives.
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed._composable import checkpoint
from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble
from torch.utils.checkpoint import checkpoint as utils_checkpoint

dist.init_process_group("gloo")
torch.manual_seed(0)
x, y = torch.randn(4, 4), torch.randn(4, 4)
bug = False


def report(name, fn):
    global bug
    try:
        fn()
        print(f"{name:62s}: ok")
    except (AttributeError, RuntimeError) as e:
        cause = e.__cause__ or e
        print(f"{name:62s}: {type(cause).__name__}: {cause}   <-- BUG")
        bug = True


def twice(composable):
    lin = nn.Linear(4, 4)
    if composable:
        checkpoint(lin)
        out = lin(x).sum()
    else:
        out = utils_checkpoint(lin, x, use_reentrant=False).sum()
    out.backward(retain_graph=True)
    out.backward()


report("part 1 torch.utils.checkpoint(use_reentrant=False), 2 backwards", lambda: twice(False))
report("part 1 composable checkpoint, 2 backwards", lambda: twice(True))

model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
F.mse_loss(model(x), y).backward()  # the reference: plain autograd


def pipeline(schedule_cls):
    copies = [copy.deepcopy(m) for m in model]
    for m in copies:
        m.zero_grad(set_to_none=True)
    checkpoint(copies[1])
    stages = [PipelineStage(m, i, 2, torch.device("cpu")) for i, m in enumerate(copies)]
    schedule_cls(stages, n_microbatches=2, loss_fn=F.mse_loss).step(x, target=y)
    if not all(torch.allclose(p.grad, r.grad, atol=1e-6)
               for p, r in zip(copies[1].parameters(), model[1].parameters())):
        raise RuntimeError("gradients differ from plain autograd")


report("part 2 ScheduleInterleaved1F1B, composable checkpoint", lambda: pipeline(ScheduleInterleaved1F1B))
report("part 2 ScheduleInterleavedZeroBubble, composable checkpoint", lambda: pipeline(ScheduleInterleavedZeroBubble))
print(f"torch {torch.__version__}: " + ("BUG: the composable checkpoint cannot recompute twice" if bug
                                        else "ok: the composable checkpoint supports a second backward"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
