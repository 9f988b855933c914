"""dcp.load of get_state_dict's state dict into FSDP1 fails when a rank holds no piece of some parameter (FSDP1's
SHARDED_STATE_DICT chunks each parameter along dim 0 with torch.chunk, so a dim 0 smaller than the group leaves the
last ranks an empty ShardedTensor): "Missing key in checkpoint state_dict: optim.param_groups", for a checkpoint
that the same get_state_dict + dcp.save just wrote.

    torchrun --nproc-per-node=2 dcp-load-into-fsdp1-where-a-rank-holds-no-piece-of-a-parameter.py   (CPU, gloo)

Linear(4, 1) in FSDP1 (FULL_SHARD, 2 ranks: rank 1 holds no piece of the (1, 4) weight nor of the (1,) bias), SGD
with momentum, one step; then get_state_dict + dcp.save, and get_state_dict + dcp.load from that checkpoint, on the
same ranks (no resharding).  Rank 0 prints the load's outcome.  (On the rank with the empty ShardedTensor the load
planner's _flatten_sharded_tensors drops that entry; the planner then takes the key missing from the state dict for
a checkpoint from before torch 2.4 and flattens the state dict the old way, keeping optim.param_groups whole.)
Exit 1: dcp.load raised (the bug); exit 0: it loaded.
Variants run: Linear(4, 2), a row per rank (exit 0); NO_SHARD (exit 1: the model state is full but the optimizer's
is still chunked over the ranks); FSDP1's own recipe, load_sharded_optimizer_state_dict +
FSDP.optim_state_dict_to_load, on the same checkpoint (exit 0); use_orig_params=True (exit 1); the model state
dict alone, without the optimizer's (exit 0).
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = FSDP(nn.Linear(4, 1), device_id=torch.device("cpu"))
optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.randn(2, 4)).sum().backward()
optim.step()

path = [tempfile.mkdtemp() if rank == 0 else None]
dist.broadcast_object_list(path)
ckpt = os.path.join(path[0], "ckpt")
model_sd, optim_sd = get_state_dict(model, optim)
dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=ckpt)
model_sd, optim_sd = get_state_dict(model, optim)
try:
    dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=ckpt)
    outcome = "loaded"
except dcp.CheckpointException as e:  # a BaseException; e.failures: rank -> (exception, traceback)
    failures = {r: f"{type(f[0]).__name__}: {f[0]}" for r, f in e.failures.items()}
    outcome = f"raised CheckpointException, failures {failures}   <-- BUG"
bug = "BUG" in outcome
if rank == 0:
    print(f"dcp.load {outcome}")
    print(f"torch {torch.__version__}: " + ("BUG: dcp.load fails where a rank holds no piece of a parameter" if bug
                                             else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
