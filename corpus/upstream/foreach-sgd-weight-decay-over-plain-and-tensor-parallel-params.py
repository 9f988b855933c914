"""foreach SGD (momentum, weight decay) over a partly tensor-parallel model, stepped under implicit_replication() as
DTensor documents for mixing plain tensors and DTensors, raises a bare AssertionError once a parameter's momentum
buffer starts later than the others' (a layer unfrozen after the first step).  The single-tensor SGD trains it.

    torchrun --nproc-per-node=2 foreach-sgd-weight-decay-over-plain-and-tensor-parallel-params.py   (CPU, gloo)

Model: Linear a (plain) -> Linear b (ColwiseParallel(output_layouts=Replicate()) over tp=2); b is frozen for step 0,
so at step 1 only a has a momentum buffer.  SGD's _multi_tensor_sgd then adds the weight decay with one
_foreach_add over [a, b] (under implicit_replication a's results come back as DTensors) and, a buffer being
missing, falls back to per-tensor buf.mul_().add_(grad): a's plain buffer plus a DTensor gradient fails in DTensor's
dispatch.  Each run is compared with the same training of the plain model in one process.
Prints, for foreach=True and foreach=False, whether two steps succeed and the parameters match.
Exit 1: foreach=True fails or differs (the bug); exit 0: both match.
Variants run: weight_decay=0 (exit 0); momentum=0 (exit 0); nothing frozen (exit 0); a (the plain layer) frozen
instead of b (exit 0: the late buffer must sit beside a plain parameter's existing one); without implicit_replication
(exit 1 another way: foreach=True raises 'got mixed torch.Tensor and DTensor' at the first step, foreach=False trains).
"""
import copy
import gc
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.experimental import implicit_replication
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module


def train(model, foreach, tp):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1, foreach=foreach)
    for step in range(2):
        model[1].requires_grad_(step > 0)  # b frozen at step 0, trained from step 1
        opt.zero_grad(set_to_none=True)
        model(torch.randn(2, 4, generator=torch.Generator().manual_seed(step))).sum().backward()
        if tp:
            with implicit_replication():
                opt.step()
        else:
            opt.step()


def main():
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    bug = False
    for foreach in (True, False):
        expected = copy.deepcopy(ref)
        train(expected, foreach, tp=False)
        model = copy.deepcopy(ref)
        parallelize_module(model, mesh, {"1": ColwiseParallel(output_layouts=Replicate())})
        try:
            train(model, foreach, tp=True)
            ok = all([torch.allclose(p.full_tensor() if hasattr(p, "full_tensor") else p, q)
                      for p, q in zip(model.parameters(), expected.parameters())])
            msg = f"parameters after 2 steps match the plain model's: {ok}"
        except AssertionError as e:
            ok, msg = False, f"AssertionError {e!r}"
        bug |= foreach and not ok
        if rank == 0:
            print(f"SGD(momentum=0.9, weight_decay=0.1, foreach={foreach}): {msg}{'' if ok else '   <-- BUG'}")
    return bug


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    gc.collect()  # frees the process groups the models and meshes hold, before the teardown (else gloo may abort)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if bug else 0)
