"""FSDP2 leaves a module's parameters registered as plain unsharded tensors after the backward (not the sharded
DTensors; reshard_after_backward is True by default) when the module is inside a reentrant checkpoint that the
forward calls twice (a weight-shared block).

    torchrun --nproc-per-node=2 fsdp2-reentrant-checkpoint-called-twice.py   (CPU, gloo)

mlp = Sequential(Linear(4, 4), GELU(), Linear(4, 4)); fully_shard(mlp[0]); model = Sequential(LayerNorm(4),
Twice(checkpoint_wrapper(mlp, checkpoint_impl=REENTRANT))); fully_shard(model); one forward/backward.  Prints, for the
reentrant and the non-reentrant checkpoint, the type of mlp[0].weight after the backward, whether the optimizer's
parameter is still the one the module uses, and whether the gradients match an unsharded model's.
Exit 1: a parameter is not a sharded DTensor after the reentrant backward (the bug); exit 0: all are resharded.
Variants run: mlp called once (exit 0); CheckpointImpl.NO_REENTRANT (printed, ok); 1 rank (exit 1); without
fully_shard(mlp[0]) (exit 1: the root's parameters inside the twice-called checkpoint stay unsharded too).
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor


class Twice(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(self.inner(x))


dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
mlp = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 4))
x = torch.randn(2, 4)
bug = False
for impl in (CheckpointImpl.REENTRANT, CheckpointImpl.NO_REENTRANT):
    inner = copy.deepcopy(mlp)
    model = nn.Sequential(nn.LayerNorm(4), Twice(checkpoint_wrapper(inner, checkpoint_impl=impl)))
    ref = copy.deepcopy(model)
    ref(x).sum().backward()
    fully_shard(inner[0], mesh=mesh)
    fully_shard(model, mesh=mesh)
    registered = list(model.parameters())  # what an optimizer holds: the sharded DTensors
    model(x).sum().backward()
    plain = [n for n, p in model.named_parameters() if not isinstance(p, DTensor)]
    same = all(p is q for p, q in zip(model.parameters(), registered))
    grads = all(p.grad is not None and torch.allclose(p.grad.full_tensor(), q.grad) for p, q in
                zip(registered, ref.parameters()))
    bug |= bool(plain)
    if rank == 0:
        print(f"{impl.name:12s}: mlp[0].weight is {type(inner[0].weight).__name__}; parameters not sharded DTensors "
              f"after backward: {plain or 'none'}; optimizer's parameters still the module's: {same}; "
              f"gradients match: {grads}{'   <-- BUG' if plain else ''}")
dist.barrier()  # lets every rank finish its sends before the group is torn down
dist.destroy_process_group()
sys.exit(1 if bug else 0)
