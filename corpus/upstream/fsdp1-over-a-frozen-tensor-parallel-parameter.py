"""FSDP1 with use_orig_params=True over tensor-parallel (DTensor) parameters unfreezes a parameter frozen before
wrapping: it reports requires_grad=True, gets a gradient and is trained, where FSDP1 documents that with
use_orig_params=True it "supports mixing frozen and non-frozen" parameters.

    torchrun --nproc-per-node=4 fsdp1-over-a-frozen-tensor-parallel-parameter.py   (CPU, gloo)

Mesh (dp=2, tp=2): Sequential(Linear(4, 4), Linear(4, 4)) with model[0] frozen (requires_grad_(False)), then
ColwiseParallel on model[0] and RowwiseParallel on model[1], then FSDP1 on the dp sub-mesh (FULL_SHARD,
use_orig_params=True), one SGD step over the parameters that require grad.  Rank 0 prints, for the frozen
model[0].weight: requires_grad after wrapping, whether it has a gradient after backward, and how far the step moved it.
(DTensorExtensions.pre_flatten_transform -> _flatten_tensor calls local_tensor.requires_grad_(), and FSDP1 re-creates
the original parameters from those local tensors with nn.Parameter(t), requires_grad=True.)
Exit 1: the frozen weight requires grad, gets a gradient or moves (the bug); exit 0: it stays frozen.
Variants run: no tensor parallelism (plain FSDP1 over the 4 ranks, exit 0); mesh (dp=2, tp=1) on 2 processes,
DTensor parameters without tensor-parallel sharding (exit 1); use_orig_params=False refuses this mixed unit with
"Must flatten tensors with uniform `requires_grad`" (exit 1, an expected refusal; it refuses it without TP too), and
with the frozen model[0] in its own FSDP unit keeps it frozen (exit 0).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

dist.init_process_group("gloo")
rank, world, tp = dist.get_rank(), dist.get_world_size(), 2
mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
model[0].requires_grad_(False)  # frozen before parallelize_module and FSDP
parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "1": RowwiseParallel()})
model = FSDP(model, device_mesh=mesh["dp"], use_orig_params=True, device_id=torch.device("cpu"))
frozen = lambda: model.module[0].weight  # noqa: E731 (FSDP1 may re-register the parameter)
full = lambda w: (w.full_tensor() if hasattr(w, "full_tensor") else w).detach().clone()  # noqa: E731
with FSDP.summon_full_params(model):
    before = full(frozen())
requires_grad = frozen().requires_grad
optim = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
model(torch.randn(2, 4)).pow(2).sum().backward()
has_grad = frozen().grad is not None
optim.step()
with FSDP.summon_full_params(model):
    moved = (full(frozen()) - before).abs().max().item()
bug = requires_grad or has_grad or moved != 0.0
if rank == 0:
    print(f"frozen model[0].weight: requires_grad after FSDP(...) {requires_grad} (set False)"
          f"{'   <-- BUG' if requires_grad else ''}")
    print(f"frozen model[0].weight: gradient after backward {has_grad} (expected False){'   <-- BUG' if has_grad else ''}")
    print(f"frozen model[0].weight: max change after the step {moved:.3e} (expected 0){'   <-- BUG' if moved else ''}")
    print(f"torch {torch.__version__}: " + ("BUG: FSDP1 trains a frozen tensor-parallel parameter" if bug else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
