"""FSDP1 on the dp sub-mesh of a tensor-parallel mesh: its FULL_STATE_DICT state dicts are not full. Under
StateDictType.FULL_STATE_DICT the model and optimizer state dicts hold tensor-parallel-sharded DTensors (each rank
keeps only its tp shard, so rank 0's torch.save, the full checkpoint recipe, writes half of a colwise weight), and
torch.save of the optimizer's state dict raises.

    torchrun --nproc-per-node=4 fsdp1-tp-full-state-dict.py   (CPU, gloo)

Mesh (dp=2, tp=2): Sequential(Linear(4, 8), Linear(8, 4)) with ColwiseParallel / RowwiseParallel, FSDP1 on the dp
sub-mesh (FULL_SHARD, use_orig_params=True), one Adam step.  Rank 0 prints the type, placements and local numel of
model.state_dict()["0.weight"] and of its optimizer exp_avg in FSDP.optim_state_dict, and what torch.save of each
state dict gives.  (Model: the FULL post-state-dict hook clones the unsharded views, which
DTensorExtensions.post_unflatten_transform made TP DTensors; optimizer: _unflatten_orig_param_states calls
value.redistribute(placements=(Replicate(),)) and discards the result.)
Exit 1: a FULL_STATE_DICT value is still tp-sharded or torch.save raised (the bug); exit 0: full and saved.
Variants run: no tensor parallelism (plain FSDP1, 2 processes; exit 0); mesh (dp=2, tp=1) on 2 processes, DTensor
parameters without tp sharding: the values hold every element, but the optimizer's torch.save fails the same
(exit 1); use_orig_params=False (exit 1); float64 and Adam(foreach=False) as in the corpus case, torch.save to a
file on rank 0: torch.save raises the same (exit 1; the fuzzer's harness saved it, and the load then failed on the
ranks outside rank 0's tp group, "Could not resolve the process group registered under the name 3", a form this
script does not reach).  The load of get_model_state_dict(full_state_dict=True)'s full tensors is record
fsdp1-tp-set-full-model-state-dict.
"""
import io
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
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

if rank == 0:
    print("\n".join(lines))
    print(f"torch {torch.__version__}: " + ("BUG: FSDP1 + TP FULL_STATE_DICT state dicts are not full" if bug
                                             else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
