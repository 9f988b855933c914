"""FSDP2 without fully_shard on the root: a fully_shard(reshard_after_forward=False) module that is a root of its own
and that a later forward of the step skips (a gate) is never post-backwarded or resharded. It keeps exposing its
unsharded parameters, whose .grad is None (Tensor.backward: "This function accumulates gradients in the leaves"), and
the next forward computes with those unsharded values from before optimizer.step().

    torchrun --nproc-per-node=2 fully-shard-roots-of-their-own-unused-in-a-later-backward.py   (CPU, gloo)

The model is Sequential(Gate(Linear), Linear) with fully_shard on each child and none on the root, so each child is
an FSDP root of its own. Each step has two microbatches: 0 runs the gated Linear, 1 skips it (the Gate returns its
input, which needs no gradient, so no backward reaches the Gate). After the step, an evaluation forward with the gate
on is compared with a local model trained the same way (the gradient averaged over the ranks' inputs).
Prints per step the gated Linear's .grad as model.parameters() shows it, and the evaluation's difference.
Exit 1: .grad is None or the evaluation differs (the bug); exit 0: both match the local model.
Variants run: fully_shard(model) on the root as well: exit 0; reshard_after_forward=True on the Gate: exit 0; the
Gate second in the Sequential (its output then needs a gradient, so its pre-backward hook runs): exit 0; gated Linear
used on both microbatches: exit 0; replicate(model) from torch.distributed._composable.replicate_with_fsdp on the root
instead (its lazy init adopts only replicate states, so the Gate stays a root of its own): exit 1, the same numbers;
one process: exit 1.
"""
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard


class Gate(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.on = inner, True

    def forward(self, x):
        return self.inner(x) if self.on else x


def batch(rank, step, i):
    return torch.randn(2, 4, generator=torch.Generator().manual_seed(100 * step + 10 * rank + i))


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(Gate(nn.Linear(4, 4)), nn.Linear(4, 4))
ref = copy.deepcopy(model)
fully_shard(model[0], reshard_after_forward=False)
fully_shard(model[1])  # no fully_shard(model): each child is a root of its own
optim, ref_optim = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))

bug = False
for step in range(2):
    for i, on in enumerate((True, False)):  # microbatch 1 skips the gated Linear
        model[0].on = ref[0].on = on
        model(batch(rank, step, i)).sum().backward()
        for r in range(world):
            (ref(batch(r, step, i)).sum() / world).backward()
    grad = model[0].inner.weight.grad
    optim.step(), ref_optim.step(), optim.zero_grad(), ref_optim.zero_grad()
    model[0].on = ref[0].on = True
    with torch.no_grad():
        diff = (model(batch(rank, 9, 0)) - ref(batch(rank, 9, 0))).abs().max().item()
    bug |= grad is None or diff > 1e-5
    if rank == 0:
        print(f"step {step}: gated Linear weight.grad after the backwards: {'None   <-- BUG' if grad is None else 'set'}; "
              f"evaluation after optim.step(): max |FSDP - local| = {diff:.4f}{'   <-- BUG' if diff > 1e-5 else ''}")
flag = torch.tensor([int(bug)])
dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank exits alike
bug = bool(flag.item())
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: the skipped root stays unsharded with .grad None and stale values"
                                             if bug else "ok: matches the local model"))
dist.destroy_process_group()
sys.stdout.flush()
os._exit(1 if bug else 0)  # not sys.exit: a gloo thread can abort the interpreter's teardown on this build
