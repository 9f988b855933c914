"""torch.optim.SGD with nesterov=True and foreach=True (the default where every tensor is on CUDA) adds the momentum
buffer into each parameter's .grad in place during step(): after the step .grad holds grad + momentum * buf instead
of the gradient. The for-loop implementation (foreach=False) leaves .grad alone, as the foreach optimizers were made
to ("[optim][foreach] Do NOT inplace modify gradients", pytorch#92706). Under ZeroRedundancyOptimizer each rank
steps only the parameters it owns, so after the step the data-parallel replicas of a gradient differ.

    torchrun --nproc-per-node=2 sgd-foreach-nesterov-modifies-gradients.py   (CPU, gloo)

Prints, for SGD(momentum=0.9, nesterov=True) with foreach=False and foreach=True, whether one step leaves .grad
unchanged (one process's computation, every rank alike); then, under DDP + ZeroRedundancyOptimizer(SGD, foreach=True,
nesterov=True), whether the ranks' .grad copies of each parameter are still equal after the step.
Exit 1: foreach=True changes .grad, or the replicas differ (the bug); exit 0: neither.
Variants run: nesterov=False (exit 0: device_grads = bufs, no in-place add); weight_decay=0.01 (exit 0: the foreach
path adds the decay out of place first, so the in-place add hits a copy); maximize=True (exit 0: _foreach_neg copies);
the second step and later alike (the first step's buffer is a clone of the gradient: 1.9x the gradient after it).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP


def grad_after_step(foreach):
    torch.manual_seed(0)
    p = nn.Parameter(torch.randn(4))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True, foreach=foreach)
    p.grad = torch.ones(4)
    opt.step()
    return torch.equal(p.grad, torch.ones(4)), p.grad


def main():
    rank, world = dist.get_rank(), dist.get_world_size()
    bug = False
    for foreach in (False, True):
        same, grad = grad_after_step(foreach)
        bug |= not same
        if rank == 0:
            print(f"SGD(nesterov=True, foreach={foreach}): .grad unchanged by step(): {same}"
                  f"{'' if same else f'   <-- BUG (grad of ones is now {grad.tolist()})'}")
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1)))
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1, momentum=0.9,
                                  nesterov=True, foreach=True)
    torch.manual_seed(rank)
    model(torch.randn(3, 4)).sum().backward()  # DDP all-reduces: every rank holds the same gradients
    opt.step()  # each rank steps the parameters it owns
    for name, p in model.named_parameters():
        copies = [torch.empty_like(p.grad) for _ in range(world)]
        dist.all_gather(copies, p.grad)
        equal = all(torch.equal(copies[0], c) for c in copies)
        bug |= not equal
        if rank == 0:
            print(f"ZeroRedundancyOptimizer: {name}.grad equal on every rank after step(): {equal}"
                  f"{'' if equal else '   <-- BUG'}")
    return bug


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if bug else 0)
