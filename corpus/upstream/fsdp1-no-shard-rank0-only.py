"""FSDP1 under NO_SHARD ignores FullStateDictConfig(rank0_only=True): model.state_dict() returns the full state dict
on every rank, where the config documents "only rank 0 saves the full state dict, and nonzero ranks save an empty
dict" (FULL_SHARD does leave rank 1 empty).

    torchrun --nproc-per-node=2 fsdp1-no-shard-rank0-only.py   (CPU, gloo)

A Linear(4, 4) wrapped in FSDP1 with each strategy; under state_dict_type(FULL_STATE_DICT,
FullStateDictConfig(rank0_only=True)) every rank takes model.state_dict(); rank 0 prints the keys each rank got.
(_replace_with_full_state_dict_type runs NO_SHARD's state-dict hooks under a default FullStateDictConfig().)
Exit 1: a nonzero rank got a non-empty state dict (the bug); exit 0: only rank 0 got one.
Variants run: FULL_SHARD alone (exit 0); SHARD_GRAD_OP alone (exit 0); use_orig_params=True fails the same (exit 1).
(FSDP.optim_state_dict under FullOptimStateDictConfig(rank0_only=True) keeps rank 1 empty under NO_SHARD.)
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import (
    FullStateDictConfig, FullyShardedDataParallel as FSDP, ShardingStrategy, StateDictType)

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
bug = False
for strategy in (ShardingStrategy.FULL_SHARD, ShardingStrategy.NO_SHARD):
    torch.manual_seed(0)
    model = FSDP(nn.Linear(4, 4), sharding_strategy=strategy, device_id=torch.device("cpu"))
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=True)):
        keys = sorted(model.state_dict())
    every = [None] * world
    dist.all_gather_object(every, keys)
    ok = all(not k for k in every[1:])
    bug |= not ok
    if rank == 0:
        print(f"{strategy.name:10s}: state_dict keys per rank {every}{'' if ok else '   <-- BUG'}")
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: NO_SHARD ignores rank0_only" if bug else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
