"""DTensor refuses a view that drops a size-1 dimension next to a sharded dimension of size 1 ('This operation would
remove or reshape sharded dimension N'): its view rule pairs the size-1 dimensions so that the sharded one is the one
dropped.  Tensor parallelism over a feature dimension of size 1 meets it, on a tp axis of size 1 too, where nothing
is unevenly sharded; plain tensors compute the same model.

    torchrun --nproc-per-node=2 a-view-of-a-sharded-dimension-of-size-one.py   (CPU, gloo)

Mesh (dp=2, tp=1); one forward, backward and SGD step, input (2, seq, in) as transformers take it.  Two parts:
(1) RowwiseParallel Linear(1, 4) (input Replicate, split to Shard(-1)) at sequence length 1: the forward's F.linear
views its (2, 1, 1) Shard(2) input to (2, 1) and is refused ('sharded dimension 2');
(2) ColwiseParallel(output_layouts=Replicate()) Linear(4, 1) at sequence length 2: the backward views the bias
gradient (1, 1) Shard(1) to (1,) and is refused ('sharded dimension 1').
Prints one line per part on rank 0.  Exit 1: either part raises (the bug); exit 0: both train one step.
Variants run: part (1) at sequence length 2 (trains); part (2) with Linear(4, 1, bias=False) (trains); part (2) with
Linear(4, 2) (trains); part (2) at sequence length 1 (refused the same); part (1) on tp=2 (refused the same, in the
forward).  On tp=2 part (2) gets past the backward and fails the record a-split-dimension-smaller-than-tp instead.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def one_step(tp_mesh, module, style, seq_len):
    torch.manual_seed(0)
    parallelize_module(module, tp_mesh, style)
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    module(torch.randn(2, seq_len, module.in_features)).sum().backward()
    opt.step()
    return f"weight {module.weight.placements}: one SGD step ok"


def main():
    tp_mesh = init_device_mesh("cpu", (dist.get_world_size(), 1), mesh_dim_names=("dp", "tp"))["tp"]
    parts = {
        "(1) rowwise Linear(1, 4), seq 1": (nn.Linear(1, 4), RowwiseParallel(input_layouts=Replicate()), 1),
        "(2) colwise Linear(4, 1), seq 2": (nn.Linear(4, 1), ColwiseParallel(output_layouts=Replicate()), 2),
    }
    bug = False
    for name, (module, style, seq_len) in parts.items():
        try:
            msg, ok = one_step(tp_mesh, module, style, seq_len), True
        except RuntimeError as e:
            msg, ok = f"RuntimeError {str(e).splitlines()[0][:100]}", False
        bug |= not ok
        if dist.get_rank() == 0:
            print(f"tp=1, part {name}: {msg}{'' if ok else '   <-- BUG'}")
    return bug


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    if dist.get_rank() == 0:
        print(f"torch {torch.__version__}: " + ("BUG: a view of a sharded size-1 dimension is refused" if bug
                                                 else "ok: both parts train"))
    sys.stdout.flush()
    os._exit(1 if bug else 0)  # not sys.exit: a gloo thread still releasing a collective can abort the teardown
