"""FSDP1 on the dp sub-mesh of a tensor-parallel mesh: its full state dicts are not full and cannot be loaded back.
Under StateDictType.FULL_STATE_DICT the model and optimizer state dicts hold tensor-parallel-sharded DTensors (each
rank keeps only its tp shard, so rank 0's torch.save writes half of a colwise weight, and the optimizer's state dict
fails to pickle); get_state_dict(full_state_dict=True) does return full tensors, but set_model_state_dict of that
very state dict raises.

    torchrun --nproc-per-node=4 fsdp1-tp-full-state-dict.py   (CPU, gloo)

Mesh (dp=2, tp=2): Sequential(Linear(4, 8), Linear(8, 4)) with ColwiseParallel / RowwiseParallel, FSDP1 on the dp
sub-mesh (FULL_SHARD, use_orig_params=True), one Adam step.  Rank 0 prints:
1. FSDP1's FULL_STATE_DICT: the type, placements and local numel of model.state_dict()["0.weight"] and of its
   optimizer exp_avg in FSDP.optim_state_dict, and what torch.save of each state dict (rank 0, as for a full
   checkpoint) gives;
2. torch.distributed.checkpoint.state_dict with full_state_dict=True: set_model_state_dict(get_model_state_dict's
   full, plain tensors) on every rank.
Exit 1: a FULL_STATE_DICT value is still tp-sharded or a load/save raised (the bug); exit 0: full and loadable.
Variants run: no tensor parallelism (plain FSDP1, 2 processes; exit 0); mesh (dp=2, tp=1) on 2 processes, DTensor
parameters without tp sharding: the values hold every element, but the optimizer's torch.save and
set_model_state_dict fail the same (exit 1); use_orig_params=False (exit 1, the same three failures).
"""
import io
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

dist.init_process_group("gloo")
rank, world, tp = dist.get_rank(), dist.get_world_size(), 2
mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 4))
parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "1": RowwiseParallel()})
model = FSDP(model, device_mesh=mesh["dp"], use_orig_params=True, device_id=torch.device("cpu"))
optim = torch.optim.Adam(model.parameters(), lr=0.1)
model(torch.randn(2, 4)).pow(2).sum().backward()
optim.step()


def describe(t):  # type, placements, and the elements this rank's object really holds
    if isinstance(t, DTensor):
        sharded = t.to_local().numel() < t.numel()
        return sharded, f"DTensor {list(t.placements)}, holds {t.to_local().numel()} of {t.numel()} elements"
    return False, f"{type(t).__name__}, holds {t.numel()} of {t.numel()} elements"


bug, lines = False, []
with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
    full = {"model": model.state_dict(), "optimizer": FSDP.optim_state_dict(model, optim)}
for name, sd, value in [("model", full["model"], full["model"]["0.weight"]),
                        ("optimizer", full["optimizer"], full["optimizer"]["state"]["0.weight"]["exp_avg"])]:
    sharded, text = describe(value)
    try:
        torch.save(sd, io.BytesIO())
        saved = "torch.save ok"
    except RuntimeError as e:
        sharded, saved = True, f"torch.save raised RuntimeError: {e}"
    bug |= sharded
    lines.append(f"FULL_STATE_DICT {name} 0.weight: {text}; {saved}{'   <-- BUG' if sharded else ''}")

options = StateDictOptions(full_state_dict=True)
model_sd = get_model_state_dict(model, options=options)
_, text = describe(model_sd["0.weight"])
try:
    set_model_state_dict(model, model_sd, options=options)
    outcome = "loaded"
except RuntimeError as e:
    outcome = f"raised RuntimeError: {str(e).splitlines()[1].strip()}"  # its first parameter's error
failed = [None] * world
dist.all_gather_object(failed, outcome != "loaded")
bug |= any(failed)
lines.append(f"get_model_state_dict(full_state_dict=True) 0.weight: {text}")
lines.append(f"set_model_state_dict of it: {outcome}{'   <-- BUG' if outcome != 'loaded' else ''} "
             f"(ranks that raised: {[r for r, f in enumerate(failed) if f]})")
if rank == 0:
    print("\n".join(lines))
    print(f"torch {torch.__version__}: " + ("BUG: FSDP1 + TP full state dicts are not full / cannot be loaded back"
                                             if bug else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
