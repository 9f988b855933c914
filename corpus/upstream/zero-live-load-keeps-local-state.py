"""ZeroRedundancyOptimizer.load_state_dict into the live optimizer (a rollback) keeps the local optimizer's state of
every parameter the loaded state dict holds no state for; torch.optim.SGD.load_state_dict replaces the whole state.
In training: a module frozen when the checkpoint is taken and unfrozen after it (staged unfreezing) keeps the
momentum it got after the save, so the resumed run is not the one the checkpoint describes.

    torchrun --nproc-per-node=1 zero-live-load-keeps-local-state.py   (CPU, gloo; or plain python: one process)

Two Linears, the first frozen; SGD(momentum=0.9) plain and under ZeroRedundancyOptimizer: a step, the state dict
(consolidated for ZeRO), the first Linear unfrozen, a step, the state dict loaded back.  Prints whether the first
Linear's parameters hold a momentum buffer after the load (the saved state has none).  Exit 1: ZeRO keeps it while
SGD does not (the bug); exit 0: both drop it.
"""
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer


def step(model, optim):
    model(torch.randn(3, 4)).sum().backward()
    optim.step()
    optim.zero_grad(set_to_none=True)


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29551")
    dist.init_process_group("gloo", rank=int(os.environ.get("RANK", 0)), world_size=int(os.environ.get("WORLD_SIZE", 1)))
    torch.manual_seed(0)
    results = {}
    for kind in ("sgd", "zero"):
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
        model[0].requires_grad_(False)  # frozen when the checkpoint is taken (staged unfreezing)
        params = list(model.parameters())
        optim = (ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.SGD, lr=0.1, momentum=0.9)
                 if kind == "zero" else torch.optim.SGD(params, lr=0.1, momentum=0.9))
        step(model, optim)
        if kind == "zero":
            optim.consolidate_state_dict(to=0)
        saved = copy.deepcopy(optim.state_dict())  # no state for model[0]'s parameters
        model[0].requires_grad_(True)
        step(model, optim)  # model[0] gets a momentum buffer
        optim.load_state_dict(copy.deepcopy(saved))  # the rollback
        live = optim.optim.state if kind == "zero" else optim.state
        results[kind] = [p in live and "momentum_buffer" in live[p] for p in model[0].parameters()]
    print("state of model[0]'s parameters after the load (saved: none):", results)
    dist.destroy_process_group()
    return 0 if results["zero"] == results["sgd"] else 1


if __name__ == "__main__":
    sys.exit(main())
