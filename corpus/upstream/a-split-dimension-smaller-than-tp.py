"""A tensor-parallel weight whose split dimension is smaller than the tp axis (Shard(dim) of size 1 over tp=2, one rank
holding nothing) gets its gradient back Replicate while the weight is Shard, and the optimizer's in-place
param.add_(grad) is refused ('in-place operations that require placement changes are not supported').  DTensor's
Shard documents uneven sharding, the last shards possibly empty.

    torchrun --nproc-per-node=2 a-split-dimension-smaller-than-tp.py   (CPU, gloo)

Mesh (tp=2); one forward, backward and SGD step, input (2, 2, in).  Two parts: ColwiseParallel(output_layouts=
Replicate()) Linear(4, 1) (weight Shard(0), 1 row) and RowwiseParallel(input_layouts=Replicate()) Linear(1, 4)
(weight Shard(1), 1 column).  Prints, on rank 0, per part the weight's and its gradient's placements and whether the
step ran.  Exit 1: the gradient is not placed as the weight, or the step raises (the bug); exit 0: neither.
Variants run: Linear(4, 2) and Linear(2, 4) (exit 0); bias=False (exit 1); 4 ranks, tp=4, Linear(4, 3) (exit 1: 3 < 4)
and Linear(4, 5) (exit 0: 5 over 4 leaves rank 3 empty too, but DTensor shards a dimension at least as large as the
mesh); ColwiseParallel(use_local_output=False) Linear(4, 1), GELU, RowwiseParallel() Linear(1, 4) at sequence length
2 (exit 1, the same add_); with ColwiseParallel's default local output instead it fails earlier, in the rowwise
Linear's addmm ('a and b must have same reduction dim': from_local assumes even shards); at sequence length 1 that
model fails first in the forward's view (the record a-view-of-a-sharded-dimension-of-size-one).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def one_step(tp_mesh, module, style):
    torch.manual_seed(0)
    parallelize_module(module, tp_mesh, style)
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    module(torch.randn(2, 2, module.in_features)).sum().backward()
    w, g = module.weight.placements, module.weight.grad.placements
    try:
        opt.step()
        step = "SGD step ok"
    except RuntimeError as e:
        step = f"SGD step: RuntimeError {str(e).splitlines()[0][:90]}"
    return w == g and step == "SGD step ok", f"weight {w}, its gradient {g}; {step}"


def main():
    tp_mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    parts = {
        "colwise Linear(4, 1)": (nn.Linear(4, 1), ColwiseParallel(output_layouts=Replicate())),
        "rowwise Linear(1, 4)": (nn.Linear(1, 4), RowwiseParallel(input_layouts=Replicate())),
    }
    bug = False
    for name, (module, style) in parts.items():
        ok, msg = one_step(tp_mesh, module, style)
        bug |= not ok
        if dist.get_rank() == 0:
            print(f"tp={tp_mesh.size()}, {name}: {msg}{'' if ok else '   <-- BUG'}")
    return bug


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    if dist.get_rank() == 0:
        print(f"torch {torch.__version__}: " + ("BUG: the gradient of a weight split below tp comes back Replicate"
                                                 if bug else "ok: gradients keep the weights' placements"))
    sys.stdout.flush()
    os._exit(1 if bug else 0)  # not sys.exit: a gloo thread still releasing a collective can abort the teardown
