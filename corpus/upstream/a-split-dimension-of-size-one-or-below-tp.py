"""Tensor parallelism over a feature dimension of size 1 (an MLP of hidden width 1: ColwiseParallel Linear(4 -> 1)
with a DTensor output, GELU, RowwiseParallel Linear(1 -> 4)) meets two DTensor faults; plain tensors train it.
(1) A view that drops a size-1 dimension next to the sharded size-1 one is refused ('would remove or reshape sharded
dimension N'): the view rule pairs the size-1 dims so that it drops the sharded one.  With sequence length 1 the
rowwise Linear's forward view (b, 1, 1) Shard(2) -> (b, 1) fails at any tp size; on a tp axis of size 1 (shown here,
mesh (dp=2, tp=1): nothing is unevenly sharded) the backward's view (1, 1) Shard(1) -> (1,) fails at any length.
(2) tp=2 (tp rank 1 holds no row of the colwise weight), sequence length 2: the forward and backward run, but the
colwise weight's gradient comes back Replicate while the weight is Shard(0), and SGD's in-place param.add_(grad) is
refused ('in-place operations that require placement changes are not supported').

    torchrun --nproc-per-node=2 a-split-dimension-of-size-one-or-below-tp.py   (CPU, gloo)

Prints one line per part on rank 0.  Exit 1: either part raises (the bug); exit 0: both train one SGD step.
Variants run: hidden width 2 in both parts (exit 0); part 1 with sequence length 2 (exit 1: the backward's view,
'sharded dimension 1'); part 1 over tp=2 (exit 1: the forward's view); part 2 on a tp axis of size 1 (exit 1, by fault
(1) in the backward); ColwiseParallel() with its default local output (exit 1; part 2 then fails another way, in
RowwiseParallel's from_local of the uneven shard: 'a and b must have same reduction dim').
"""
import gc
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


def main():
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
    return bug


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    gc.collect()  # frees the process groups the models and meshes hold, before the teardown (else gloo may abort)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if bug else 0)
