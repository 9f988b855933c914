"""FSDP1's documented SHARDED checkpoint recipe (FSDP.optim_state_dict, dcp.save; dcp.load,
load_sharded_optimizer_state_dict, FSDP.optim_state_dict_to_load) loads wrong optimizer state when the FSDP process
group is smaller than the world (here HYBRID_SHARD): "the current recommended way to checkpoint FSDP" corrupts the
optimizer state silently.

    torchrun --nproc-per-node=4 fsdp1-sharded-recipe-over-a-group-smaller-than-the-world.py   (CPU, gloo)

Linear(4, 8) in FSDP1 HYBRID_SHARD over a (replicate=2, shard=2) mesh, SGD with momentum, one step; the recipe of
load_sharded_optimizer_state_dict's docstring saves the model and optimizer under SHARDED_STATE_DICT and loads them
straight back into the same model and optimizer.  Rank 0 prints, per rank, how many elements of the local momentum
buffer differ from before the round trip.  (load_sharded_optimizer_state_dict chunks every optimizer tensor over the
whole world, 4 ranks; optim_state_dict_to_load all-gathers it over the 2-rank shard group as if chunked over that
group, zero-padding each rank's quarter to a half.)
Exit 1: a momentum buffer changed (the bug); exit 0: the round trip restores it.
Variants run: FULL_SHARD over the 4 ranks (exit 0); the same checkpoint loaded with get_state_dict + dcp.load +
set_state_dict (exit 0); use_orig_params=True (exit 1); 2 processes, HYBRID_SHARD over a (2, 1) mesh (one-rank shard
groups, run as NO_SHARD; exit 1); 2 processes, FSDP1 on the dp sub-mesh of a (dp=1, tp=2) mesh without any
tensor-parallel style (exit 1).
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.optimizer import load_sharded_optimizer_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy, StateDictType

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("replicate", "shard"))
torch.manual_seed(0)
model = FSDP(nn.Linear(4, 8), device_mesh=mesh, sharding_strategy=ShardingStrategy.HYBRID_SHARD,
             use_orig_params=False, device_id=torch.device("cpu"))
optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.randn(2, 4, generator=torch.Generator().manual_seed(rank))).pow(2).sum().backward()
optim.step()
before = [s["momentum_buffer"].clone() for s in optim.state.values()]

path = [tempfile.mkdtemp() if rank == 0 else None]
dist.broadcast_object_list(path)
ckpt = os.path.join(path[0], "ckpt")
with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):  # save
    dcp.save({"model": model.state_dict(), "optim": FSDP.optim_state_dict(model, optim)}, checkpoint_id=ckpt)
with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):  # load
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=ckpt)
    model.load_state_dict(state["model"])
    osd = load_sharded_optimizer_state_dict(state["model"], "optim", dcp.FileSystemReader(ckpt))
    optim.load_state_dict(FSDP.optim_state_dict_to_load(model, optim, osd["optim"]))

after = [s["momentum_buffer"] for s in optim.state.values()]
wrong = sum((a != b).sum().item() for a, b in zip(after, before))
report = [None] * world
dist.all_gather_object(report, (wrong, sum(b.numel() for b in before)))
bug = any(w for w, _ in report)
if rank == 0:
    for r, (w, n) in enumerate(report):
        print(f"rank {r}: momentum buffer elements changed by the round trip: {w} of {n}{'   <-- BUG' if w else ''}")
    print(f"torch {torch.__version__}: " + ("BUG: the SHARDED recipe loads wrong optimizer state" if bug
                                             else "ok: the recipe restores the optimizer state"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
