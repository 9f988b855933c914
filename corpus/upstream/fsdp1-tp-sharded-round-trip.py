"""set_state_dict into FSDP1 on the dp sub-mesh of a tensor-parallel mesh loads the optimizer state of the
tensor-parallel-sharded parameters wrongly: get_state_dict returns the right state, but set_state_dict of that very
state dict ("The counterpart of get_state_dict") changes the optimizer's state.

    torchrun --nproc-per-node=4 fsdp1-tp-sharded-round-trip.py   (CPU, gloo)

Mesh (dp=2, tp=2): Sequential(Linear(4, 8), Linear(8, 4)) with ColwiseParallel / RowwiseParallel, FSDP1 on the dp
sub-mesh (FULL_SHARD, use_orig_params=True), one Adam step (the same input on every rank); then
set_state_dict(model, optim, *get_state_dict(model, optim)).  Rank 0 prints whether get_state_dict's exp_avg matches
the same Adam step on a local copy, and, per rank, the local exp_avg elements the round trip changed.
(FSDP.optim_state_dict_to_load -> _shard_orig_param_state gathers each DTensor state to Replicate over every mesh
dim, tp included, then slices the full tensor's flattening with offsets into the tp-local flat parameter: tp rank 1
gets tp rank 0's elements for a Shard(0) parameter, and a Shard(1) parameter is wrong on tp rank 0 too.)
Exit 1: some exp_avg changed (the bug); exit 0: the round trip restores every state.
Variants run: through DCP (get_state_dict, dcp.save, dcp.load, set_state_dict; exit 1, the same elements); FSDP1's
own API, FSDP.optim_state_dict + FSDP.optim_state_dict_to_load under SHARDED_STATE_DICT, no DSD (exit 1, the same);
mesh (dp=2, tp=1) on 2 processes (exit 0); use_orig_params=False stops earlier, in get_state_dict ("Global rank 0 is
not part of group", record fsdp1-optimizer-state-dict-over-a-group-without-rank-0; exit 1).
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

dist.init_process_group("gloo")
rank, world, tp = dist.get_rank(), dist.get_world_size(), 2
mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
torch.manual_seed(0)  # the same model and input on every rank
model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 4))
x = torch.randn(2, 4)
ref = copy.deepcopy(model)  # the reference: the same Adam step on one process
ref_optim = torch.optim.Adam(ref.parameters(), lr=0.1)
ref(x).pow(2).sum().backward()
ref_optim.step()

parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "1": RowwiseParallel()})
model = FSDP(model, device_mesh=mesh["dp"], use_orig_params=True, device_id=torch.device("cpu"))
optim = torch.optim.Adam(model.parameters(), lr=0.1)
model(x).pow(2).sum().backward()
optim.step()
names = {p: n.replace("_fsdp_wrapped_module.", "") for n, p in model.named_parameters()}
before = {names[p]: s["exp_avg"].clone() for p, s in optim.state.items()}

model_sd, optim_sd = get_state_dict(model, optim)
saved_ok = all(torch.allclose(optim_sd["state"][n]["exp_avg"].full_tensor(), ref_optim.state[p]["exp_avg"])
               for n, p in ref.named_parameters())
set_state_dict(model, optim, model_state_dict=model_sd, optim_state_dict=optim_sd)
after = {names[p]: s["exp_avg"] for p, s in optim.state.items()}
wrong = {n: f"{(after[n] != before[n]).sum().item()} of {before[n].numel()}" for n in before
         if not torch.equal(after[n], before[n])}
report = [None] * world
dist.all_gather_object(report, wrong)
bug = any(report)
if rank == 0:
    print(f"get_state_dict's exp_avg matches the local Adam step: {saved_ok}")
    for r, w in enumerate(report):
        print(f"rank {r} (tp rank {r % tp}): local exp_avg elements changed by set_state_dict: "
              + (", ".join(f"{n} {c}" for n, c in w.items()) + "   <-- BUG" if w else "none"))
    print(f"torch {torch.__version__}: " + ("BUG: set_state_dict loads tp-sharded optimizer state wrongly" if bug
                                             else "ok: the round trip restores the optimizer state"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
