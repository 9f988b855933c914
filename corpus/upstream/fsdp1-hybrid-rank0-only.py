"""FSDP1 under HYBRID_SHARD with FullStateDictConfig(rank0_only=True) returns the full model state dict on the first
rank of every shard group (every replica group holds a copy), where the config documents "only rank 0 saves the full
state dict, and nonzero ranks save an empty dict"; FSDP.optim_state_dict under FullOptimStateDictConfig(rank0_only=True)
is on global rank 0 alone.

    torchrun --nproc-per-node=4 fsdp1-hybrid-rank0-only.py   (CPU, gloo)

A Linear(4, 4) wrapped in FSDP1 (HYBRID_SHARD over a 2 x 2 mesh: 2 replica groups of 2 shards), one SGD step, then
model.state_dict() and FSDP.optim_state_dict(model, optim) under state_dict_type(FULL_STATE_DICT, rank0_only=True).
Rank 0 prints which global ranks got a non-empty model / optimizer state dict.
(_common_unshard_post_state_dict_hook tests fsdp_state.rank, the rank in the shard group, against 0.)
Exit 1: a global rank other than 0 got a non-empty model state dict (the bug); exit 0: rank 0 alone.
Variants run: FULL_SHARD over the 4 ranks (exit 0); HYBRID_SHARD over a 1 x 4 mesh, one replica group (exit 0);
_HYBRID_SHARD_ZERO2 fails the same (exit 1); HYBRID_SHARD over a 4 x 1 mesh, shard groups of one rank, which FSDP1
runs as NO_SHARD, puts it on all 4 ranks (exit 1; see also fsdp1-no-shard-rank0-only).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import (
    FullOptimStateDictConfig, FullStateDictConfig, FullyShardedDataParallel as FSDP, ShardingStrategy, StateDictType)

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("replicate", "shard"))
torch.manual_seed(0)
model = FSDP(nn.Linear(4, 4), device_mesh=mesh, sharding_strategy=ShardingStrategy.HYBRID_SHARD,
             device_id=torch.device("cpu"))
optim = torch.optim.Adam(model.parameters(), lr=0.1)
model(torch.randn(2, 4)).sum().backward()
optim.step()
with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=True),
                          FullOptimStateDictConfig(rank0_only=True)):
    sd, osd = model.state_dict(), FSDP.optim_state_dict(model, optim)
got = [None] * world
dist.all_gather_object(got, (len(sd) > 0, len(osd.get("state", {})) > 0))
model_ranks = [r for r, (m, _) in enumerate(got) if m]
optim_ranks = [r for r, (_, o) in enumerate(got) if o]
bug = model_ranks != [0]
if rank == 0:
    print(f"ranks with a model state dict:     {model_ranks}{'   <-- BUG' if bug else ''}")
    print(f"ranks with an optimizer state dict: {optim_ranks}")
    print(f"torch {torch.__version__}: " + ("BUG: rank0_only state dicts land on every replica group" if bug
                                             else "ok: rank 0 alone"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
