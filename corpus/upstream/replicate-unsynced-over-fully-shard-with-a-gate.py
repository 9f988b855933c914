"""The DDP-based composable ``replicate`` with ``set_requires_gradient_sync(False)`` on the first microbatch raises
DDP's internal "Encountered gradient which is undefined, but still allreduced by DDP reducer. This indicates a bug in
DDP implementation" in the first backward of the second step, when none of its parameters was used on the synced
microbatch of the first step (a gate). Gradient accumulation documented for ``no_sync`` should train.

    torchrun --nproc-per-node=2 replicate-unsynced-over-fully-shard-with-a-gate.py   (CPU, gloo)

The model is Sequential(Gate(Linear), Linear) with replicate(find_unused_parameters=True) on the Gate only; each step
has two microbatches: 0 (sync off) runs the gated Linear, 1 (sync on) skips it. Step 0's synced forward hands the
reducer a backward in which none of its parameters takes part: no reducer hook fires, the iteration is never
finalized, and the first hook of step 1 (in its unsynced microbatch 0) meets that state.
Prints each step's outcome. Exit 1: a backward raises (the bug); exit 0: both steps train.
Variants run: fully_shard(model[1]) with replicate on the root instead (the corpus form, whose fully_shard only keeps
the other Linear out of the reducer): exit 1; no fully_shard or second data-parallel call at all (this script): exit 1;
public DistributedDataParallel over the Gate with no_sync(): exit 1 (not replicate-specific); one process: exit 1;
find_unused_parameters=False: exit 0 (no error; step 0's gradients still differ across ranks); gradient sync on both
microbatches: exit 0; the gated Linear used on the synced microbatch instead: exit 0; replicate on the whole model:
exit 0; one step: exit 0 (but see replicate-unsynced-with-a-gate.py: that step's gradient is never all-reduced).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed._composable.replicate import replicate


class Gate(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.on = inner, True

    def forward(self, x):
        return self.inner(x) if self.on else x


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(Gate(nn.Linear(4, 4)), nn.Linear(4, 4))
replicate(model[0], find_unused_parameters=True)  # all of its DDP's parameters sit under the gate
optim = torch.optim.SGD(model.parameters(), lr=0.1)

bug = False
for step in range(2):
    try:
        for i, (on, sync) in enumerate(((True, False), (False, True))):
            model[0].on = on
            model[0].set_requires_gradient_sync(sync)
            model(torch.randn(2, 4)).sum().backward()
        optim.step()
        optim.zero_grad()
        msg = "trains"
    except RuntimeError as e:
        bug, msg = True, f"microbatch {i} backward raised RuntimeError: {str(e).splitlines()[0]}   <-- BUG"
    if rank == 0:
        print(f"step {step}: {msg}")
    if bug:
        break
flag = torch.tensor([int(bug)])
dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank exits alike
bug = bool(flag.item())
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: DDP's reducer fails after a synced pass that used none of its "
                                             "parameters" if bug else "ok: gradient accumulation trains"))
del model, optim  # the DDP object before its process group
dist.destroy_process_group()
sys.stdout.flush()
os._exit(1 if bug else 0)  # not sys.exit: a gloo thread can abort the interpreter's teardown on this build
