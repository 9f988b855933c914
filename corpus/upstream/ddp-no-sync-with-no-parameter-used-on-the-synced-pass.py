"""DistributedDataParallel with gradient accumulation under ``no_sync()``: when none of the DDP's parameters is used on
the synced pass that exits the context, no reducer hook fires, so the gradients accumulated under ``no_sync()`` are
never all-reduced (each rank keeps its own: the replicas drift) and the iteration is never finalized, so the next
step's backward raises DDP's internal "Encountered gradient which is undefined, but still allreduced by DDP reducer.
This indicates a bug in DDP implementation". ``no_sync`` documents that the accumulated gradients "will later be
synchronized in the first forward-backward pass exiting the context".

    torchrun --nproc-per-node=2 ddp-no-sync-with-no-parameter-used-on-the-synced-pass.py   (CPU, gloo)

The model is Sequential(Gate(Linear), Linear) with DDP(find_unused_parameters=True) on the Gate only (in a training
framework: one DDP per submodule, or the composable replicate(), which builds the same DDP). Each step has two
microbatches: 0 (under no_sync()) runs the gated Linear, 1 (synced) skips it. Step 0's synced forward hands the
reducer a backward in which none of its parameters takes part.
Prints whether step 0's gated gradient is equal on both ranks and equal to the gradient averaged over ranks (a local
computation), and whether step 1 trains. Exit 1: either fails (the bug); exit 0: both hold.
Variants run: torch.distributed._composable.replicate(model[0], find_unused_parameters=True) with
set_requires_gradient_sync(False) instead of DDP and no_sync(): exit 1, both effects (found there first, also with a
fully_shard or a second replicate beside or around it); find_unused_parameters=False: exit 1 (step 0's gradients
differ; step 1 trains); one process: exit 1 (step 1 raises); the gated Linear used on the synced microbatch instead:
exit 0; used on both: exit 0; DDP over the whole model (the other Linear, used on every microbatch, joins the
reducer): exit 0; no no_sync() (both microbatches synced): exit 0.
"""
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Gate(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.on = inner, True

    def forward(self, x):
        return self.inner(x) if self.on else x


def batch(rank, step, i):
    return torch.randn(2, 4, generator=torch.Generator().manual_seed(100 * step + 10 * rank + i))


def microbatches(model, step, rank):
    model[0].module.on = True
    with model[0].no_sync():  # microbatch 0: accumulate locally, runs the gated Linear
        model(batch(rank, step, 0)).sum().backward()
    model[0].module.on = False  # microbatch 1: synced, skips the gated Linear
    model(batch(rank, step, 1)).sum().backward()


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(Gate(nn.Linear(4, 4)), nn.Linear(4, 4))
ref = copy.deepcopy(model)
model[0] = DDP(model[0], find_unused_parameters=True)  # all of this DDP's parameters sit under the gate

microbatches(model, 0, rank)
for r in range(world):  # reference: every rank's microbatches on a local model, averaged
    for i, on in enumerate((True, False)):
        ref[0].on = on
        (ref(batch(r, 0, i)).sum() / world).backward()
grad = model[0].module.inner.weight.grad
grads = [torch.empty_like(grad) for _ in range(world)]
dist.all_gather(grads, grad)
same = all(torch.equal(grads[0], g) for g in grads)
averaged = torch.allclose(grad, ref[0].inner.weight.grad, atol=1e-6)

model.zero_grad()
try:
    microbatches(model, 1, rank)
    step1 = "trains"
except RuntimeError as e:
    step1 = f"raises: {str(e).splitlines()[0][:110]}"
bug = not (same and averaged) or step1 != "trains"
flag = torch.tensor([int(bug)])
dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank exits alike
bug = bool(flag.item())
if rank == 0:
    print(f"step 0: gated Linear weight.grad equal on all ranks: {same}{'' if same else '   <-- BUG'}")
    print(f"step 0: gated Linear weight.grad equals the average over ranks: {averaged}{'' if averaged else '   <-- BUG'}")
    print(f"step 1: {step1}{'' if step1 == 'trains' else '   <-- BUG'}")
    print(f"torch {torch.__version__}: " + ("BUG: the gradient accumulated under no_sync() was not synchronized"
                                             if bug else "ok: no_sync() accumulation trains"))
del model  # the DDP object before its process group
dist.destroy_process_group()
sys.stdout.flush()
os._exit(1 if bug else 0)  # not sys.exit: a gloo thread can abort the interpreter's teardown on this build
