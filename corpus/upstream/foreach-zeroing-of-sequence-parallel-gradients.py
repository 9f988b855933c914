"""optimizer.zero_grad(set_to_none=False) ("Reset the gradients of all optimized tensors") with a foreach optimizer
raises on a sequence-parallel norm's gradient under tensor parallelism alone: the weight's gradient is a Partial(sum)
DTensor, and DTensor's _foreach_zero_ refuses an in-place op on a Partial operand, though zero_ on it is accepted.

    torchrun --nproc-per-node=2 foreach-zeroing-of-sequence-parallel-gradients.py   (CPU, gloo)

A LayerNorm(4) under SequenceParallel() over tp=2, the input sharded on the sequence dimension; one backward, one
Adam(foreach=True) step, then zero_grad(set_to_none=False).  Prints the gradients' placements, the result of
zero_grad with foreach=True and with foreach=False (the per-tensor p.grad.zero_() path).  Exit 1: the foreach
zero_grad raises or leaves a non-zero gradient (the bug); exit 0: both zero the gradients.
Variants run: set_to_none=True (exit 0); fully_shard over a (dp=1, tp=2) mesh added (FSDP2 redistributes the
gradient; exit 0); SGD(foreach=True) in place of Adam (exit 1); no optimizer step before zero_grad (exit 1).
"""
import gc
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module


def main():
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    bug = False
    for foreach in (True, False):
        torch.manual_seed(0)
        norm = parallelize_module(nn.LayerNorm(4), mesh, SequenceParallel(use_local_output=True))
        x = torch.randn(2, 2, 4, generator=torch.Generator().manual_seed(rank))  # this rank's sequence shard
        norm(x).pow(2).sum().backward()
        placements = {n: p.grad.placements for n, p in norm.named_parameters()}
        opt = torch.optim.Adam(norm.parameters(), lr=0.1, foreach=foreach)
        opt.step()
        try:
            opt.zero_grad(set_to_none=False)
            ok = all([p.grad.full_tensor().abs().max().item() == 0 for p in norm.parameters()])
            msg = f"gradients zeroed: {ok}"
        except RuntimeError as e:
            ok, msg = False, f"RuntimeError {str(e).split('. ')[0]}"
        bug |= foreach and not ok
        if rank == 0:
            print(f"grad placements {placements}; zero_grad(set_to_none=False), foreach={foreach}: {msg}"
                  f"{'' if ok else '   <-- BUG'}")
    return bug


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    gc.collect()  # frees the process groups the models and meshes hold, before the teardown (else gloo may abort)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if bug else 0)
