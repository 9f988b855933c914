"""FullyShardedDataParallel.clip_grad_norm_ over a tensor-parallel model leaves the other tp ranks' shards out of the
norm: each tp rank clips with (and returns) the norm of its own shard, not "the norm ... over all parameters'
gradients as viewed as a single vector".

    torchrun --nproc-per-node=2 fsdp1-clipping-tensor-parallel-parameters.py   (CPU, gloo)

Mesh (dp=1, tp=2): Linear(4, 4) parallelized with ColwiseParallel(output_layouts=Replicate()), then wrapped in FSDP1
on the dp sub-mesh (use_orig_params=False; a dp group of 1 makes FSDP1 use NO_SHARD, so clip_grad_norm_ runs
torch.nn.utils.clip_grad_norm_ over the FlatParameters, which hold only this tp rank's shard); one SGD step after
model.clip_grad_norm_(1.0).  The reference is the same step on a local copy with torch.nn.utils.clip_grad_norm_(1.0)
(every rank has the same inputs, so data parallelism changes nothing).  Each rank prints the total norm it got (its
own shard's: rank 0 and rank 1 differ, and their root-sum-square is the reference's) and the updated weight's
distance from the reference's.
Exit 1: a rank's total norm or updated weight differs from the reference (the bug); exit 0: all match.
Variants run: mesh (dp=2, tp=1), i.e. no tensor parallelism (exit 0); the same TP model without FSDP1, clipped with
torch.nn.utils.clip_grad_norm_ over its DTensor parameters (exit 0); 4 processes, mesh (dp=2, tp=2), where FULL_SHARD
stays sharded and the norm is all-reduced over the dp group only (exit 1).
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
rank, tp = dist.get_rank(), 2
mesh = init_device_mesh("cpu", (dist.get_world_size() // tp, tp), mesh_dim_names=("dp", "tp"))
torch.manual_seed(0)  # the same model and input on every rank
model = nn.Sequential(nn.Linear(4, 4))
x, y = torch.randn(2, 4), torch.randn(2, 4)

ref = copy.deepcopy(model)  # the reference: the same step on one process
(ref(x) - y).pow(2).sum().backward()
ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
torch.optim.SGD(ref.parameters(), lr=0.1).step()

parallelize_module(model[0], mesh["tp"], ColwiseParallel(output_layouts=Replicate()))
model = FSDP(model, device_mesh=mesh["dp"], use_orig_params=False, device_id=torch.device("cpu"))
optim = torch.optim.SGD(model.parameters(), lr=0.1)
(model(x) - y).pow(2).sum().backward()
norm = model.clip_grad_norm_(1.0)
optim.step()
with FSDP.summon_full_params(model):
    w = model.module[0].weight
    weight = (w.full_tensor() if hasattr(w, "full_tensor") else w).detach().clone()

diff = (weight - ref[0].weight).abs().max().item()
bug = not torch.allclose(norm, ref_norm) or diff > 1e-6
for r in range(dist.get_world_size()):
    if r == rank:
        print(f"rank {rank}: total norm {norm.item():.6f} (reference {ref_norm.item():.6f}), "
              f"max |weight - reference| after the step {diff:.3e}{'   <-- BUG' if bug else ''}", flush=True)
    dist.barrier()
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: the clip norm leaves the other tp shards out" if bug else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
