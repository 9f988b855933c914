"""The DDP-based composable ``replicate`` with ``set_requires_gradient_sync(False)`` (gradient accumulation) never
all-reduces the accumulated gradients when none of its parameters is used on the synced microbatch: each rank keeps
its own gradient and the replicas drift (``no_sync`` documents that the accumulated gradients "will later be
synchronized in the first forward-backward pass exiting the context").

    torchrun --nproc-per-node=2 replicate-unsynced-with-a-gate.py   (CPU, gloo)

The model is Sequential(Gate(Linear), Linear) with replicate(find_unused_parameters=True) on the Gate only (the
harness's form puts the other Linear under fully_shard; any placement outside this replicate does). Microbatch 0
(sync off) runs the gated Linear, microbatch 1 (sync on) skips it. On microbatch 1 no parameter of replicate's
DistributedDataParallel is in the autograd graph, so no reducer hook fires and nothing is all-reduced.
Prints whether the gated Linear's gradient is equal on both ranks and equal to the gradient averaged over ranks
(a local computation). Exit 1: it is not (the bug); exit 0: it is.
Variants run: public DistributedDataParallel over the Gate with no_sync() on microbatch 0: exit 1 (the same defect,
not replicate-specific); find_unused_parameters=False: exit 1; fully_shard(model[1]) and replicate on the root (the
corpus form): exit 1; a fully_shard root over it: exit 1; gradient sync on both microbatches: exit 0; the gated Linear
used on the synced microbatch instead (swapped): exit 0; used on both: exit 0; replicate on the whole model (the other
Linear, used on every microbatch, joins the reducer): exit 0. With a second step, the next backward raises (see
replicate-unsynced-over-fully-shard-with-a-gate.py, the same reducer state).
"""
import copy
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


def batch(rank, i):
    return torch.randn(2, 4, generator=torch.Generator().manual_seed(10 * rank + i))


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(Gate(nn.Linear(4, 4)), nn.Linear(4, 4))
ref = copy.deepcopy(model)
replicate(model[0], find_unused_parameters=True)  # all of its DDP's parameters sit under the gate

for i, (on, sync) in enumerate(((True, False), (False, True))):  # one step, two microbatches
    model[0].on = on
    model[0].set_requires_gradient_sync(sync)
    model(batch(rank, i)).sum().backward()
    for r in range(world):  # reference: every rank's microbatches on a local model, averaged
        ref[0].on = on
        (ref(batch(r, i)).sum() / world).backward()

grad = model[0].inner.weight.grad
grads = [torch.empty_like(grad) for _ in range(world)]
dist.all_gather(grads, grad)
same = all(torch.equal(grads[0], g) for g in grads)
averaged = torch.allclose(grad, ref[0].inner.weight.grad, atol=1e-6)
bug = not (same and averaged)
flag = torch.tensor([int(bug)])
dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank exits alike
bug = bool(flag.item())
if rank == 0:
    print(f"gated Linear weight.grad equal on all ranks: {same}{'' if same else '   <-- BUG'}")
    print(f"gated Linear weight.grad equals the average over ranks: {averaged}{'' if averaged else '   <-- BUG'}")
    print(f"torch {torch.__version__}: " + ("BUG: the accumulated gradient was never all-reduced" if bug
                                             else "ok: the accumulated gradient was all-reduced"))
del model  # the DDP object before its process group
dist.destroy_process_group()
sys.stdout.flush()
os._exit(1 if bug else 0)  # not sys.exit: a gloo thread can abort the interpreter's teardown on this build
