"""fully_shard over a tensor-parallel parameter whose tp-local shard is empty (Shard follows torch.chunk: "the last few
shards ... might be empty") fails in the backward's reduce-scatter with RuntimeError '_chunk_cat expects non-empty
tensor' on the ranks holding the empty piece; tensor parallelism alone trains the same layer.

    torchrun --nproc-per-node=2 fsdp2-over-an-empty-tensor-parallel-shard.py   (CPU, gloo)

Mesh (dp=1, tp=2); a Linear(4 -> 1) is ColwiseParallel(output_layouts=Replicate()) over tp, so tp rank 1 holds an
empty (0, 4) weight and (0,) bias; fully_shard over the dp sub-mesh.  One forward/backward; the gradient is compared
with a single-process Linear(4, 1).  (On larger meshes the ranks that did not raise block in their next collective.)
Prints, for TP alone and for TP + FSDP2, whether the backward succeeds and the weight gradient matches.
Exit 1: TP + FSDP2 fails (the bug); exit 0: both match.
Variants run: Linear(4 -> 2) (no empty shard; exit 0); 4 ranks, mesh (dp=2, tp=2) (exit 1); Linear(4 -> 3) over
tp=4 on 4 ranks (chunks 1, 1, 1, 0; exit 1).
"""
import copy
import gc
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

OUT = 1


def main():
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (1, dist.get_world_size()), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    ref = nn.Linear(4, OUT)
    x = torch.randn(2, 4)
    ref(x).sum().backward()
    results = {}
    for name, use_fsdp in (("TP alone", False), ("TP + fully_shard", True)):
        model = copy.deepcopy(ref)
        model.zero_grad(set_to_none=True)
        parallelize_module(model, mesh["tp"], ColwiseParallel(output_layouts=Replicate()))
        if use_fsdp:
            fully_shard(model, mesh=mesh["dp"])
        try:
            model(x).sum().backward()
            error = None
        except RuntimeError as e:
            error = f"RuntimeError {e}"
        errors = [None] * dist.get_world_size()
        dist.all_gather_object(errors, error)  # every rank learns which ranks raised
        raised = {r: e for r, e in enumerate(errors) if e is not None}
        if raised:
            ok, msg = False, f"backward raised on ranks {sorted(raised)}: {next(iter(raised.values()))}"
        else:
            ok = torch.allclose(model.weight.grad.full_tensor(), ref.weight.grad)
            msg = f"weight gradient matches single-process: {ok}"
        results[name] = ok
        if rank == 0:
            print(f"{name:16s}: {msg}{'' if ok else '   <-- BUG'}")
    bug = not results["TP + fully_shard"]
    return bug


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    gc.collect()  # frees the process groups the models and meshes hold, before the teardown (else gloo may abort)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if bug else 0)
