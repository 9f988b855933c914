"""With scale_grads=True (the default), each schedule.step() divides every .grad of its stages by the microbatch
count, including the gradients earlier step() calls accumulated: under gradient accumulation over k step() calls
before one optimizer step, the first call's share is divided k times instead of once.

    torchrun --nproc-per-node=2 pipeline-scale-grads-over-accumulated-steps.py   (CPU, gloo)

ScheduleGPipe over two stages (Linear(4, 4) each, one per rank), 2 microbatches per step(), mse_loss (mean), and two
step() calls on two batches before comparing the gradients with plain autograd's accumulation of the two batches'
mean losses (documented: scale_grads "should match the configuration of your loss_fn"; a call's averaged loss scales
that call's gradients). Prints, per stage, the max error of .grad against that documented sum and against the
observed rule (call k's gradients divided by 2 once more per later call).
Exit 1: .grad equals g1 / 2 + g2, not g1 + g2 (the bug); exit 0: it equals g1 + g2.
Variants run: one step() call (exit 0); three step() calls (exit 1: g1 / 4 + g2 / 2 + g3); Schedule1F1B in place of
ScheduleGPipe (exit 1); scale_grads=False with the loss divided by the microbatch count (exit 0, torchtitan's
workaround); one microbatch per step() (exit 0: a factor of 1 divides nothing).
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
batches = [(torch.randn(4, 4), torch.randn(4, 4)) for _ in range(2)]

stage_module = copy.deepcopy(model[rank])
schedule = ScheduleGPipe(PipelineStage(stage_module, rank, 2, torch.device("cpu")), n_microbatches=2,
                         loss_fn=F.mse_loss)
for x, y in batches:  # gradient accumulation: several step() calls, no zero_grad in between
    if rank == 0:
        schedule.step(x)
    else:
        schedule.step(target=y)

per_batch = []  # the reference: plain autograd, one mean loss per batch
for x, y in batches:
    model.zero_grad()
    F.mse_loss(model(x), y).backward()
    per_batch.append([p.grad.clone() for p in model[rank].parameters()])
documented = [sum(gs) for gs in zip(*per_batch)]  # accumulation sums the calls' gradients
# what step() does: each call divides all of .grad by the microbatch count, so call k is divided K - k times more
observed = [sum(g / 2 ** (len(per_batch) - 1 - k) for k, g in enumerate(gs)) for gs in zip(*per_batch)]
err_sum = max((p.grad - g).abs().max().item() for p, g in zip(stage_module.parameters(), documented))
err_seen = max((p.grad - g).abs().max().item() for p, g in zip(stage_module.parameters(), observed))
flag = torch.tensor([float(err_sum > 1e-6)])
dist.all_reduce(flag)
lines = [None, None]
dist.all_gather_object(lines, f"stage {rank}: max |grad - sum of the calls' grads| = {err_sum:.2e} (documented), "
                              f"max |grad - sum of call k's grads / 2**(calls after k)| = {err_seen:.2e}")
bug = flag.item() > 0
if rank == 0:
    print("\n".join(lines))
    print(f"torch {torch.__version__}: " + ("BUG: scale_grads divided the first step() call's gradients twice" if bug
                                            else "ok: the accumulated gradients are the sum of the calls'"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
