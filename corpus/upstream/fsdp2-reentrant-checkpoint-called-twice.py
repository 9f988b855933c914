"""FSDP2 with a reentrant activation checkpoint that the forward calls twice (a weight-shared block) leaves the
module's parameters registered as plain unsharded tensors after the backward (reshard_after_backward is True by
default), and one call's gradient is never reduce-scattered: the sharded gradient the optimizer steps on misses it
(it stays in .grad of the unsharded parameter).

    torchrun --nproc-per-node=2 fsdp2-reentrant-checkpoint-called-twice.py   (CPU, gloo)

mlp = Sequential(Linear(4, 4), GELU(), Linear(4, 4)); fully_shard(mlp[0]); model = Sequential(LayerNorm(4),
Twice(checkpoint_wrapper(mlp, checkpoint_impl=...))); fully_shard(model); one forward/backward, the same data on every
rank.  Prints, for REENTRANT and NO_REENTRANT, the type of mlp[0].weight after the backward, the parameters that are
not DTensors, whether the optimizer's (sharded) parameters are still the module's, and whether their gradients match
an unsharded model's.  Exit 1: a parameter is left unsharded or a gradient differs (the bug); exit 0: neither.
Variants run: mlp called once (exit 0); NO_REENTRANT (printed, ok); 1 rank (exit 1); fully_shard(mlp) in place of
fully_shard(mlp[0]) (exit 1); no fully_shard inside the checkpoint, mlp's parameters in the root's group (exit 0).
By reading (FSDPState._pre_forward/_post_forward): in PRE_BACKWARD state they only unshard and register no hooks,
relying on hooks of the original forward, which the reentrant checkpoint ran under no_grad; so only the first
recompute registers post-backward, and the second recompute's unshard is never resharded nor reduced.
"""
import copy
import gc
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


def main():
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
        grads = all([p.grad is not None and torch.allclose(p.grad.full_tensor(), q.grad) for p, q in
                     zip(registered, ref.parameters())])
        bug |= bool(plain) or not grads
        if rank == 0:
            print(f"{impl.name:12s}: mlp[0].weight is {type(inner[0].weight).__name__}; not sharded DTensors "
                  f"after backward: {plain or 'none'}; optimizer's parameters still the module's: {same}; "
                  f"their gradients match: {grads}{'   <-- BUG' if plain or not grads else ''}")
    return bug


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    gc.collect()  # frees the process groups the models and meshes hold, before the teardown (else gloo may abort)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if bug else 0)
