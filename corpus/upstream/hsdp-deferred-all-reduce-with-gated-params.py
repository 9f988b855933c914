"""FSDP2 HSDP gradient accumulation with set_requires_all_reduce(False) ("gradient accumulation with only
reduce-scatter but not all-reduce for HSDP") breaks when a parameter is used on some microbatches only: the held
partial reduce-scatter output follows the parameters that had a gradient, so it no longer lines up.

    torchrun --nproc-per-node=2 hsdp-deferred-all-reduce-with-gated-params.py   (CPU, gloo)

HSDP mesh (replicate=1, shard=2); two microbatches, set_requires_all_reduce(False) on the first; `gate` (a Linear(4, 4))
runs on microbatch 0 only.  Expected: the gradients of plain two-microbatch accumulation (as DDP would give).
Part 1 (one FSDP group over the model): microbatch 1 reduces fewer parameters than microbatch 0 held:
RuntimeError 'The size of tensor a (..) must match the size of tensor b (..)' in foreach_reduce.
Part 2 (`gate` its own FSDP group): the group has no gradient on the all-reducing microbatch, so its held sum is never
reduced: gate.weight.grad is None after the step (expected: microbatch 0's gradient).
Prints one line per part on rank 0.  Exit 1: either part shows the bug; exit 0: both match plain accumulation.
Variants run: without set_requires_all_reduce(False) (exit 0); with model.set_reduce_scatter_unused_params(True)
(every FSDP module; exit 0); a 1-D mesh with set_requires_gradient_sync(False) in its place (exit 0); gate used on
both microbatches (exit 0); 4 ranks, mesh (2, 2) (exit 1).
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
        self.lin, self.gate = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, use_gate):
        x = self.lin(x)
        return self.gate(x) if use_gate else x


def main():
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (1, dist.get_world_size()), mesh_dim_names=("replicate", "shard"))
    torch.manual_seed(0)
    ref = Net()
    xs = [torch.randn(2, 4, generator=torch.Generator().manual_seed(10 * m)) for m in range(2)]
    for m, x in enumerate(xs):
        ref(x, use_gate=m == 0).sum().backward()  # identical data on every rank: plain accumulation is the reference
    bug = False
    for part, own_group in ((1, False), (2, True)):
        model = copy.deepcopy(ref)
        model.zero_grad(set_to_none=True)
        if own_group:
            fully_shard(model.gate, mesh=mesh)
        fully_shard(model, mesh=mesh)
        try:
            for m, x in enumerate(xs):
                model.set_requires_all_reduce(m == 1)  # all-reduce on the last microbatch only
                model(x, use_gate=m == 0).sum().backward()
            g = model.gate.weight.grad
            ok = g is not None and torch.allclose(g.full_tensor(), ref.gate.weight.grad)
            msg = "gate.weight.grad is None" if g is None else f"gate.weight.grad matches plain accumulation: {ok}"
        except RuntimeError as e:
            ok, msg = False, f"RuntimeError {e}"
        bug |= not ok
        if rank == 0:
            where = "gate its own group" if own_group else "one group"
            print(f"part {part} ({where}): {msg}{'' if ok else '   <-- BUG'}")
    return bug


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    gc.collect()  # frees the process groups the models and meshes hold, before the teardown (else gloo may abort)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if bug else 0)
