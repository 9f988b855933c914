"""replicate_with_fsdp's ``replicate`` on the root over a module that the DDP-based composable ``replicate`` manages:
both take the module's parameters, and from the second step on its gradient includes the previous steps' gradients
(DDP over the same model, or a local computation, gives each step's own gradient).

    torchrun --nproc-per-node=2 replicate-in-replicate-fsdp-nested.py   (CPU, gloo)

The model is Sequential(Linear, Linear): the DDP-based replicate on model[0], then replicate_with_fsdp on the root.
replicate_with_fsdp does not skip a module the DDP-based replicate manages (its state is not a replicate_with_fsdp
state), and the DDP-based replicate initialises lazily inside the root's first forward, after replicate_with_fsdp has
registered its unsharded parameters: its DistributedDataParallel holds those. After each backward the unsharded
weight keeps a .grad (observed: it holds the sum of all steps' gradients so far) that optimizer.zero_grad() on the
model's (sharded) parameters never clears, and the next backward accumulates into it. Each step compares model[0]'s gradient with the gradient of
a local model averaged over the ranks' inputs.
Prints per step max |gradient - reference|. Exit 1: a step differs (the bug); exit 0: every step matches.
Variants run: without the DDP-based replicate on model[0]: exit 0; fully_shard on the root instead of
replicate_with_fsdp: exit 0; one process: exit 1.
"""
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed._composable.replicate import replicate as ddp_replicate
from torch.distributed._composable.replicate_with_fsdp import replicate

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
ref = copy.deepcopy(model)
ddp_replicate(model[0])
replicate(model)
optim, ref_optim = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))

bug = False
for step in range(3):
    x = [torch.randn(2, 4, generator=torch.Generator().manual_seed(10 * step + r)) for r in range(world)]
    model(x[rank]).sum().backward()
    for r in range(world):
        (ref(x[r]).sum() / world).backward()
    grad = model[0].weight.grad
    grad = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
    diff = (grad - ref[0].weight.grad).abs().max().item()
    bug |= diff > 1e-5
    if rank == 0:
        print(f"step {step}: model[0].weight.grad: max |replicate_with_fsdp(replicate) - reference| = {diff:.4f}"
              f"{'   <-- BUG' if diff > 1e-5 else ''}")
    optim.step(), ref_optim.step(), optim.zero_grad(), ref_optim.zero_grad()
flag = torch.tensor([int(bug)])
dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank exits alike
bug = bool(flag.item())
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: the nested module's gradient carries earlier steps'" if bug
                                             else "ok: every step's gradient matches"))
del model, optim  # the DDP object before its process group
dist.destroy_process_group()
sys.stdout.flush()
os._exit(1 if bug else 0)  # not sys.exit: a gloo thread can abort the interpreter's teardown on this build
