"""get_state_dict of an FSDP1 model (use_orig_params=False) whose process group does not contain global rank 0
raises "Global rank 0 is not part of group" on the ranks outside rank 0's group (where not caught, the other ranks
wait for them: a hang), instead of returning "the model state_dict and optimizers state_dict".

    torchrun --nproc-per-node=2 fsdp1-optimizer-state-dict-over-a-group-without-rank-0.py   (CPU, gloo)

A Linear(4, 4) wrapped in FSDP1 with HYBRID_SHARD over a (replicate=2, shard=1) mesh, i.e. shard groups {0} and
{1} (FSDP1 runs a one-rank group as NO_SHARD), use_orig_params=False; one SGD step (momentum), then
get_state_dict(model, optim).  Rank 0 prints each rank's outcome.  (get_state_dict passes the FSDP process group to
FSDP.optim_state_dict; _map_param_key_to_optim_keys then calls dist.broadcast_object_list(..., src=0, group=group)
with src a global rank, where the group's first rank is meant.)  The process group has a 30 s timeout, so a rank
left waiting raises too instead of hanging.
Exit 1: get_state_dict raised on some rank (the bug); exit 0: it returned on every rank.
Variants run: use_orig_params=True (exit 0); FULL_SHARD over both ranks (exit 0); FSDP.optim_state_dict(model,
optim) without DSD (world group by default; exit 0), and with group=model.process_group (exit 1);
FSDP1 FULL_SHARD on the dp sub-mesh of a (dp=2, tp=2) mesh with ColwiseParallel on 4 processes (dp groups {0, 2},
{1, 3}; exit 1: ranks 1 and 3 raise, and the run ends on the 30 s timeout).
"""
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy

dist.init_process_group("gloo", timeout=timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world, 1), mesh_dim_names=("replicate", "shard"))
torch.manual_seed(0)
model = FSDP(nn.Linear(4, 4), device_mesh=mesh, sharding_strategy=ShardingStrategy.HYBRID_SHARD,
             use_orig_params=False, device_id=torch.device("cpu"))
optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.randn(2, 4)).sum().backward()
optim.step()
try:
    model_sd, optim_sd = get_state_dict(model, optim)
    outcome = f"returned ({len(optim_sd['state'])} optimizer states)"
except Exception as e:  # noqa: BLE001
    outcome = f"raised {type(e).__name__}: {str(e).split(' <')[0]}   <-- BUG"
outcomes = [None] * world
dist.all_gather_object(outcomes, outcome)
bug = any("BUG" in o for o in outcomes)
if rank == 0:
    for r, o in enumerate(outcomes):
        print(f"rank {r}: get_state_dict {o}")
    print(f"torch {torch.__version__}: " + ("BUG: get_state_dict fails where the FSDP group lacks global rank 0"
                                             if bug else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
