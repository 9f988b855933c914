"""FSDP1 with use_orig_params=True over tensor-parallel (DTensor) parameters cannot accumulate gradients with
no_sync(): the first forward after the no_sync() microbatch raises "Attempted to access the data pointer on an
invalid python storage", where no_sync documents that "gradients will be accumulated in module variables, which will
later be synchronized in the first forward-backward pass after exiting the context".

    torchrun --nproc-per-node=4 fsdp1-no-sync-tensor-parallel-orig-params.py   (CPU, gloo)

Mesh (dp=2, tp=2): Linear(4, 4) parallelized with ColwiseParallel(output_layouts=Replicate()), wrapped in FSDP1 on
the dp sub-mesh (FULL_SHARD, use_orig_params=True).  Microbatch 1 runs forward/backward under model.no_sync(),
microbatch 2 outside it, then one SGD step.  The reference is the same two microbatches accumulated on a local copy
(every rank has the same inputs).  Rank 0 prints each rank's error in the second forward, or the updated weight's
distance from the reference's.
(In the no_sync backward FSDP1 sets each parameter's .grad through `param.grad.data = <DTensor view>`, leaving a plain
tensor over the DTensor's invalid python storage; the next forward's _same_storage touches its data pointer.)
Exit 1: the second forward raised, or the weight differs from the reference (the bug); exit 0: it matches.
Variants run: use_orig_params=False (exit 0); no no_sync(), both microbatches synchronized (exit 0); mesh (dp=2,
tp=1) on 2 processes, DTensor parameters without tensor-parallel sharding (exit 1); mesh (dp=1, tp=2) on 2
processes, where FSDP1 runs NO_SHARD, fails before, at the no_sync() forward, with another error ("Cannot writeback
when the parameter shape changes", with or without no_sync(); exit 1).
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

dist.init_process_group("gloo")
rank, world, tp = dist.get_rank(), dist.get_world_size(), 2
mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
torch.manual_seed(0)  # the same model and inputs on every rank
model = nn.Sequential(nn.Linear(4, 4))
batches = [torch.randn(2, 4) for _ in range(2)]

ref = copy.deepcopy(model)  # the reference: both microbatches accumulated on one process
for x in batches:
    ref(x).pow(2).sum().backward()
torch.optim.SGD(ref.parameters(), lr=0.1).step()

parallelize_module(model[0], mesh["tp"], ColwiseParallel(output_layouts=Replicate()))
model = FSDP(model, device_mesh=mesh["dp"], use_orig_params=True, device_id=torch.device("cpu"))
optim = torch.optim.SGD(model.parameters(), lr=0.1)
with model.no_sync():
    model(batches[0]).pow(2).sum().backward()
try:
    out, error = model(batches[1]), None
except RuntimeError as e:
    out, error = None, f"RuntimeError: {e}"
errors = [None] * world
dist.all_gather_object(errors, error)
diff = None
if not any(errors):
    out.pow(2).sum().backward()
    optim.step()
    with FSDP.summon_full_params(model):
        diff = (model.module[0].weight.full_tensor() - ref[0].weight).abs().max().item()
bug = any(errors) or diff > 1e-6
if rank == 0:
    for r, e in enumerate(errors):
        print(f"rank {r}: forward after no_sync() " + (f"raised {e}   <-- BUG" if e else "ran"))
    if diff is not None:
        print(f"max |weight - reference| after the step {diff:.3e}{'   <-- BUG' if bug else ''}")
    print(f"torch {torch.__version__}: " + ("BUG: no_sync() over tensor-parallel parameters breaks FSDP1"
                                             if bug else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
