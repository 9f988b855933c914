"""FSDP2 with control flow that differs per rank and several FSDP groups gives silently wrong gradients, even with
set_reduce_scatter_unused_params(True), which is documented for "different ranks use different parameters due to
conditional control flow ... Similar to DDP's find_unused_parameters".

    torchrun --nproc-per-node=2 rank-flow-with-several-groups.py   (CPU, gloo)

model = Net(a=Linear(4, 4), b=Linear(4, 4)); fully_shard(model.b); fully_shard(model) (root group: a); rank 0 runs a
then b, rank 1 runs b only.  The flag makes rank 1 reduce-scatter zeros for a, but the order of the groups' reductions
follows each rank's autograd graph: on rank 0 b's input needs a gradient, so b reduces mid-backward and a in the
final callback; on rank 1 b's input is the raw batch, so both reduce in the final callback, a first.  The two
same-sized reduce-scatters pair up crosswise: a's and b's gradients are mixed, without an error.
Prints, per parameter, whether its gradient matches the documented one (the mean of the ranks' local gradients, as
DDP gives).  Exit 1: a gradient differs (the bug); exit 0: all match.
Variants run: the same branch on both ranks (exit 0); one FSDP group (no fully_shard(model.b); exit 0); b's input
made to require grad on rank 1 as well (exit 0); b = Linear(4, 8), of another size than a: the crosswise
reduce-scatters do not fit and gloo aborts rank 1 ('op.preamble.length <= op.nbytes. 40 vs 20', SIGABRT: the crash
form); without set_reduce_scatter_unused_params(True) (hangs: the case the flag is documented for).
"""
import copy
import gc
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, rank):
        if rank == 0:  # per-rank control flow: only rank 0 runs a
            x = self.a(x)
        return self.b(x)


def main():
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    ref = Net()
    xs = [torch.randn(2, 4, generator=torch.Generator().manual_seed(r)) for r in range(world)]
    expected = {}
    for r in range(world):  # the documented result: each rank's local gradients, averaged (zeros where unused)
        ref.zero_grad(set_to_none=False)
        ref(xs[r], r).sum().backward()
        for n, p in ref.named_parameters():
            expected[n] = expected.get(n, 0) + p.grad / world
    model = copy.deepcopy(ref)
    mesh = init_device_mesh("cpu", (world,))
    fully_shard(model.b, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.set_reduce_scatter_unused_params(True)
    model(xs[rank], rank).sum().backward()
    bug = False
    for n, p in model.named_parameters():
        ok = p.grad is not None and torch.allclose(p.grad.full_tensor(), expected[n])
        bug |= not ok
        if rank == 0:
            print(f"{n:10s} gradient matches the mean of the ranks' gradients: {ok}{'' if ok else '   <-- BUG'}")
    return bug


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    gc.collect()  # frees the process groups the models and meshes hold, before the teardown (else gloo may abort)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if bug else 0)
