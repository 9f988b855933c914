"""GradScaler.unscale_ (and ShardedGradScaler's, which "works like GradScaler") raises AttributeError "'Tensor' object
has no attribute 'placements'" when one device-and-dtype group of gradients holds plain tensors and DTensors and
starts with a plain one: DTensor's found_inf_reduce_handler reads placements and mesh from the group's first gradient.

    torchrun --nproc-per-node=2 grad-scaler-over-plain-and-dtensor-gradients.py   (CPU, gloo)

Part 1: a partly tensor-parallel model, Sequential(Linear(4, 4) plain, Linear(4, 4) RowwiseParallel(input_layouts=
Replicate()) over tp=2), its loss scaled by torch.amp.GradScaler("cpu"), unscale_ and step under implicit_replication()
(DTensor's documented way to mix plain tensors and DTensors).  Part 2: replicate() (DDP-based composable API, plain
gradients) on a LayerNorm and fully_shard on the root Linear (DTensor gradients), ShardedGradScaler("cpu").
Each part is run with the plain parameter first in the optimizer (the bug) and with the DTensor first, and compared
with an unscaled single-process step.  Prints one line per run.  Exit 1: a plain-first run raises or differs (the
bug); exit 0: every run matches.
Variants run: DTensor parameter first (printed: ok in both parts); without implicit_replication (exit 1 another
way: in both parts and both orders unscale_ raises 'got mixed torch.Tensor and DTensor').
"""
import copy
import gc
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed._composable.replicate import replicate
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.experimental import implicit_replication
from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module


def part1(model, mesh):
    parallelize_module(model, mesh, {"1": RowwiseParallel(input_layouts=Replicate())})
    return torch.amp.GradScaler("cpu", init_scale=256.0), model[0], model[1]  # plain, DTensor


def part2(model, mesh):
    replicate(model[0], device_mesh=mesh)
    fully_shard(model, mesh=mesh)
    return ShardedGradScaler("cpu", init_scale=256.0), model[0], model[1]


def main():
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(0))  # same data on every rank
    bug = False
    for name, apply, first in (("1 GradScaler, TP", part1, lambda: nn.Linear(4, 4)),
                               ("2 ShardedGradScaler, replicate+fully_shard", part2, lambda: nn.LayerNorm(4))):
        torch.manual_seed(0)  # the same initial model on every rank
        ref = nn.Sequential(first(), nn.Linear(4, 4))
        expected = copy.deepcopy(ref)
        expected(x).sum().backward()
        torch.optim.SGD(expected.parameters(), lr=0.1).step()
        for plain_first in (True, False):
            model = copy.deepcopy(ref)
            scaler, plain, dtensor = apply(model, mesh)
            params = [*plain.parameters(), *dtensor.parameters()] if plain_first else \
                [*dtensor.parameters(), *plain.parameters()]
            opt = torch.optim.SGD(params, lr=0.1)
            try:
                scaler.scale(model(x).sum()).backward()
                with implicit_replication():
                    scaler.unscale_(opt)
                    scaler.step(opt)
                ok = all([torch.allclose(p.full_tensor() if hasattr(p, "full_tensor") else p, q)
                          for p, q in zip(model.parameters(), expected.parameters())])  # a list: all ranks gather
                msg = f"parameters match an unscaled step: {ok}"
            except AttributeError as e:
                ok, msg = False, f"AttributeError {e}"
            bug |= not ok
            if rank == 0:
                print(f"part {name}, {'plain' if plain_first else 'DTensor'} parameter first: {msg}"
                      f"{'' if ok else '   <-- BUG'}")
    return bug


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    gc.collect()  # frees the process groups the models and meshes hold, before the teardown (else gloo may abort)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if bug else 0)
