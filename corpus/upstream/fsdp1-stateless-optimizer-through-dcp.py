"""FSDP1's documented SHARDED checkpoint recipe cannot load the checkpoint of an optimizer without state tensors
(plain SGD, the optimizer of load_sharded_optimizer_state_dict's own example): dcp.save drops the empty "state", and
FSDP.optim_state_dict_to_load then raises ValueError ('`optim_state_dict` must have the keys "state"').

    torchrun --nproc-per-node=2 fsdp1-stateless-optimizer-through-dcp.py   (CPU, gloo)

Linear(4, 4) in FSDP1 (FULL_SHARD), torch.optim.SGD(lr=0.1) without momentum, one step; the recipe of
load_sharded_optimizer_state_dict's docstring saves the model and optimizer under SHARDED_STATE_DICT (dcp.save) and
loads them back (dcp.load, load_sharded_optimizer_state_dict, FSDP.optim_state_dict_to_load,
optim.load_state_dict).  Rank 0 prints the keys of the optimizer state dict saved and of the one loaded, and each
rank's load outcome.  (DCP's traverse_state_dict yields no entry for an empty Mapping, so "state": {} is not saved.)
Exit 1: the load raised on some rank (the bug); exit 0: it loaded.
Variants run: SGD with momentum=0.9, one state tensor per parameter (exit 0); world size 1 (exit 1); NO_SHARD
(exit 1); use_orig_params=True (exit 1).
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.optimizer import load_sharded_optimizer_state_dict
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = FSDP(nn.Linear(4, 4), device_id=torch.device("cpu"))
optim = torch.optim.SGD(model.parameters(), lr=0.1)  # plain SGD: no state tensors
model(torch.randn(2, 4)).sum().backward()
optim.step()

path = [tempfile.mkdtemp() if rank == 0 else None]
dist.broadcast_object_list(path)
ckpt = os.path.join(path[0], "ckpt")
with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):  # save
    saved = FSDP.optim_state_dict(model, optim)
    dcp.save({"model": model.state_dict(), "optim": saved}, checkpoint_id=ckpt)
with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):  # load
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=ckpt)
    model.load_state_dict(state["model"])
    loaded = load_sharded_optimizer_state_dict(state["model"], "optim", dcp.FileSystemReader(ckpt))["optim"]
    try:
        optim.load_state_dict(FSDP.optim_state_dict_to_load(model, optim, loaded))
        outcome = "loaded"
    except Exception as e:  # noqa: BLE001
        outcome = f"raised {type(e).__name__}: {e}   <-- BUG"
outcomes = [None] * world
dist.all_gather_object(outcomes, outcome)
bug = any("BUG" in o for o in outcomes)
if rank == 0:
    print(f"optimizer state dict saved: keys {sorted(saved)}; loaded: keys {sorted(loaded)}")
    for r, o in enumerate(outcomes):
        print(f"rank {r}: FSDP.optim_state_dict_to_load + optim.load_state_dict {o}")
    print(f"torch {torch.__version__}: " + ("BUG: the SHARDED recipe cannot load a stateless optimizer" if bug
                                             else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
