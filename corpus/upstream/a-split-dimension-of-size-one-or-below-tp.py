"""Tensor parallelism over a feature dimension of size 1 (an MLP of hidden width 1: ColwiseParallel Linear(4 -> 1),
GELU, RowwiseParallel Linear(1 -> 4); the colwise output kept a DTensor) meets two DTensor faults; plain tensors train the same model.
(1) Sequence length 1, any tp size: the rowwise Linear's view of its (b, 1, 1) input, sharded on dim 2, to (b, 1) is
refused ('would remove or reshape sharded dimension 2'): the view rule pairs the size-1 dims so that it drops the
sharded one.  Shown here on a tp axis of size 1 (mesh (dp=2, tp=1)), where nothing is unevenly sharded.
(2) tp=2 (tp rank 1 holds no row of the colwise weight), sequence length 2: the forward and backward run, but the
colwise weight's gradient comes back Replicate while the weight is Shard(0), and SGD's in-place param.add_(grad) is
refused ('in-place operations that require placement changes are not supported').

    torchrun --nproc-per-node=2 a-split-dimension-of-size-one-or-below-tp.py   (CPU, gloo)

Prints one line per part on rank 0.  Exit 1: either part raises (the bug); exit 0: both train one SGD step.
Variants run: part 1 with sequence length 2 (exit 0); part 1 over tp=2 (the same view error; exit 1); part 2 with
hidden width 2 (no empty rank; exit 0); part 2 on a tp axis of size 1 (exit 0, so (2) needs the empty rank).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def one_step(tp_mesh, seq_len):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(4, 1), nn.GELU(), nn.Linear(1, 4))
    parallelize_module(mlp, tp_mesh, {"0": ColwiseParallel(use_local_output=False), "2": RowwiseParallel()})
    opt = torch.optim.SGD(mlp.parameters(), lr=0.1)
    mlp(torch.randn(2, seq_len, 4)).sum().backward()
    grad = mlp[0].weight.grad
    opt.step()
    return f"weight {mlp[0].weight.placements}, its gradient {grad.placements}: one SGD step ok"


dist.init_process_group("gloo")
world = dist.get_world_size()
parts = {
    "(1) tp=1, seq 1": (init_device_mesh("cpu", (world, 1), mesh_dim_names=("dp", "tp"))["tp"], 1),
    "(2) tp=2, seq 2": (init_device_mesh("cpu", (world,), mesh_dim_names=("tp",)), 2),
}
bug = False
for name, (tp_mesh, seq_len) in parts.items():
    try:
        msg, ok = one_step(tp_mesh, seq_len), True
    except RuntimeError as e:
        msg, ok = f"RuntimeError {str(e).splitlines()[0][:110]}", False
    bug |= not ok
    if dist.get_rank() == 0:
        print(f"part {name}: {msg}{'' if ok else '   <-- BUG'}")
dist.barrier()  # lets every rank finish its sends before the group is torn down
dist.destroy_process_group()
sys.exit(1 if bug else 0)
