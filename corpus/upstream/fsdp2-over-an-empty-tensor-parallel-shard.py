"""fully_shard over a tensor-parallel parameter whose tp-local shard is empty (Shard follows torch.chunk: "the last few
shards ... might be empty") fails in the backward's reduce-scatter with RuntimeError '_chunk_cat expects non-empty
tensor' on the ranks holding the empty piece; tensor parallelism alone trains the same layer.

    torchrun --nproc-per-node=2 fsdp2-over-an-empty-tensor-parallel-shard.py   (CPU, gloo)

Mesh (dp=1, tp=2); a Linear(4 -> 1) is ColwiseParallel(output_layouts=Replicate()) over tp, so tp rank 1 holds an
empty (0, 4) weight and (0,) bias; fully_shard over the dp sub-mesh.  One forward/backward; the gradient is compared
with a single-process Linear(4, 1).  (On larger meshes the ranks that did not raise block in their next collective.)
Prints, for TP alone and for TP + FSDP2, whether the backward succeeds and the weight gradient matches.
Then the frozen form (no gradient, so no reduce-scatter): a frozen Linear(1 -> 4) RowwiseParallel over tp (tp rank 1
holds an empty (4, 0) weight) under fully_shard: prints each rank's local weight shape under TP alone and under
TP + fully_shard, which turns the empty (4, 0) piece into (0, 0) (FSDPParam._init_sharded_param narrows an empty
shard to length 0 along the FSDP dimension); full_tensor() then returns (0, 1)-shaped garbage on that rank and the
others fail in the mismatched all-gather (not called here).
Exit 1: TP + FSDP2 fails or the frozen local shape differs (the bug); exit 0: both match.
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
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

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
    frozen_ok = frozen_form(mesh, rank)
    return not (results["TP + fully_shard"] and frozen_ok)


def frozen_form(mesh, rank):
    """A frozen RowwiseParallel Linear(1 -> 4): whether fully_shard keeps every rank's local weight shape."""
    torch.manual_seed(0)
    tp_only = nn.Linear(1, 4)
    tp_only.requires_grad_(False)
    both = copy.deepcopy(tp_only)
    for model in (tp_only, both):
        parallelize_module(model, mesh["tp"], RowwiseParallel(input_layouts=Replicate()))
    fully_shard(both, mesh=mesh["dp"])
    shapes = [None] * dist.get_world_size()
    dist.all_gather_object(shapes, (tuple(tp_only.weight.to_local().shape), tuple(both.weight.to_local().shape)))
    ok = all(alone == sharded for alone, sharded in shapes)
    if rank == 0:
        for r, (alone, sharded) in enumerate(shapes):
            print(f"frozen, rank {r}: local weight {alone} under TP alone, {sharded} under TP + fully_shard"
                  f"{'' if alone == sharded else '   <-- BUG'}")
    return ok


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    gc.collect()  # frees the process groups the models and meshes hold, before the teardown (else gloo may abort)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if bug else 0)
