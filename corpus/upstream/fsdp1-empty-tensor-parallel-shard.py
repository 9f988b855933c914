"""FSDP1 over a tensor-parallel parameter whose local shard is empty on some rank fails an
internal assertion on that rank only ("unsharded_start_idx: 0 unsharded_end_idx: -1"), leaving the other ranks to
hang in their next collective; an empty last shard is a valid DTensor layout ("the last few shards on the DeviceMesh
dimension might be empty when the tensor dimension is not evenly divisible", Shard's docstring).

    torchrun --nproc-per-node=2 fsdp1-empty-tensor-parallel-shard.py   (CPU, gloo)

Mesh (dp=1, tp=2): Linear(4, 1) parallelized with ColwiseParallel(output_layouts=Replicate()): tp rank 0 holds the
weight's one row, tp rank 1 an empty (0, 4) shard.  Then FSDP1 on the dp sub-mesh (use_orig_params=False; the dp
group of 1 makes it NO_SHARD).  Each rank prints whether FSDP(...) raised, and what; the ranks agree through an
all_gather_object before any FSDP collective, so the script ends instead of hanging in the forward.
Exit 1: FSDP(...) raised on some rank (the bug); exit 0: it built on every rank.
Variants run: Linear(4, 2), one row per tp rank (exit 0); Linear(4, 3), uneven but no empty shard (exit 0);
mesh (dp=2, tp=2) on 4 processes, FULL_SHARD: the same AssertionError on the two tp rank 1 ranks (exit 1);
use_orig_params=True: the same AssertionError (exit 1), on 2 processes and on 4 under FULL_SHARD, although with
Linear(4, 3) it refuses the uneven shard with a clear RuntimeError at the first forward ("Cannot flatten unevenly
sharded tensor"); Sequential(Linear(4, 1), Linear(1, 4)) with only the first parallelized, so the unit's
FlatParameter is not empty on any rank (exit 0): the assertion needs a unit whose parameters are all empty there.
"""
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
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 1))
parallelize_module(model[0], mesh["tp"], ColwiseParallel(output_layouts=Replicate()))
local_rows = model[0].weight.to_local().shape[0]
try:
    model = FSDP(model, device_mesh=mesh["dp"], use_orig_params=False, device_id=torch.device("cpu"))
    error = None
except Exception as e:  # noqa: BLE001
    error = f"{type(e).__name__}: {e}"
errors = [None] * dist.get_world_size()
dist.all_gather_object(errors, (local_rows, error))
if not any(e for _, e in errors):  # every rank built: one forward/backward to make sure it trains
    model(torch.randn(2, 4)).sum().backward()
bug = any(e for _, e in errors)
if rank == 0:
    for r, (rows, e) in enumerate(errors):
        print(f"rank {r}: local weight rows {rows}, FSDP(...) " + (f"raised {e}   <-- BUG" if e else "built"))
    print(f"torch {torch.__version__}: " + ("BUG: FSDP1 fails on the rank with an empty tensor-parallel shard "
                                             "(its peers would hang)" if bug else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
