"""set_model_state_dict(full_state_dict=True) into FSDP1 on the dp sub-mesh of a tensor-parallel mesh raises on
every rank, even given get_model_state_dict(full_state_dict=True)'s own full state dict: "aten.copy_.default got
mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor before calling distributed operators!",
where set_model_state_dict is "the counterpart of get_model_state_dict".

    torchrun --nproc-per-node=4 fsdp1-tp-set-full-model-state-dict.py   (CPU, gloo)

Mesh (dp=2, tp=2): Sequential(Linear(4, 8), Linear(8, 4)) with ColwiseParallel / RowwiseParallel, FSDP1 on the dp
sub-mesh (FULL_SHARD, use_orig_params=True), one Adam step; then set_model_state_dict(model, get_model_state_dict(
model, full_state_dict=True), full_state_dict=True) in memory (no file, no DCP).  Rank 0 prints what
get_model_state_dict returned for 0.weight and which ranks raised.  (DSD's _distribute_state_dict copies each full
tensor as a plain tensor, as FSDP1's sharded original parameters are plain; FSDP1's FULL_STATE_DICT load hook
unshards, DTensorExtensions.post_unflatten_transform makes the unsharded views TP DTensors, and
nn.Module._load_from_state_dict copies the plain tensor into them.)
Exit 1: set_model_state_dict raised on some rank (the bug); exit 0: it loaded.
Variants run: mesh (dp=2, tp=1) on 2 processes, DTensor parameters without tp sharding (exit 1, both ranks raise);
with the former fsdp1-tp-full-state-dict script (last session): no tensor parallelism (plain FSDP1, 2 processes;
exit 0), use_orig_params=False (exit 1).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
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

options = StateDictOptions(full_state_dict=True)
model_sd = get_model_state_dict(model, options=options)
w = model_sd["0.weight"]
try:
    set_model_state_dict(model, model_sd, options=options)
    outcome = "loaded"
except RuntimeError as e:
    outcome = f"raised RuntimeError: {str(e).splitlines()[1].strip()}"  # its first parameter's error
outcomes = [None] * world
dist.all_gather_object(outcomes, outcome)
bug = any(o != "loaded" for o in outcomes)
if rank == 0:
    print(f"get_model_state_dict(full_state_dict=True) 0.weight: {type(w).__name__} {tuple(w.shape)}")
    print(f"set_model_state_dict of it on rank 0: {outcome}{'   <-- BUG' if outcome != 'loaded' else ''}")
    print(f"ranks that raised: {[r for r, o in enumerate(outcomes) if o != 'loaded']}")
    print(f"torch {torch.__version__}: " + ("BUG: set_model_state_dict cannot load FSDP1 + TP's full state dict"
                                             if bug else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
