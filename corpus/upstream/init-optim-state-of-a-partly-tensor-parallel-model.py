"""get_state_dict on a fresh foreach optimizer of a partly tensor-parallel model (plain and DTensor parameters in one
parameter group) raises "got mixed torch.Tensor and DTensor": it first steps the optimizer with zero gradients
(_init_optim_state, which set_state_dict calls too) outside implicit_replication(), under which the model's own
steps run.

    torchrun --nproc-per-node=2 init-optim-state-of-a-partly-tensor-parallel-model.py   (CPU, gloo)

nn.Sequential(Linear(4, 4), Linear(4, 4)) with only the first Linear ColwiseParallel (output Replicate) over tp=2, and
SGD(lr=0.1, foreach=True). Prints, on rank 0: get_state_dict on a fresh optimizer, a training step under
implicit_replication() (works), and get_state_dict after that step (SGD without momentum keeps no state, so
_init_optim_state steps it again). Exit 1: get_state_dict raises (the bug); exit 0: it returns.
Variants run: foreach=False (exit 0); every Linear tensor parallel (exit 0); get_state_dict itself wrapped in
implicit_replication() (exit 0: the workaround); SGD(momentum=0.9), whose step leaves state: fresh optimizer fails,
after the training step works (exit 1); Adam (the same as momentum; exit 1); the training step without
implicit_replication() raises the same RuntimeError (so the user's own step needs the context manager too).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.experimental import implicit_replication
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
parallelize_module(model, mesh, {"0": ColwiseParallel(output_layouts=Replicate())})  # model[1] stays plain


def check(name, fn):
    try:
        fn()
        result, ok = "works", True
    except RuntimeError as e:
        result, ok = f"RuntimeError: {str(e).splitlines()[0][:90]}   <-- BUG", False
    if rank == 0:
        print(f"{name:52s} {result}")
    return ok


def train_step():
    model(torch.randn(2, 4)).sum().backward()
    with implicit_replication():  # as PyTorch asks for a partly tensor-parallel model
        optim.step()
    optim.zero_grad()


optim = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
bug = not check("get_state_dict on a fresh optimizer", lambda: get_state_dict(model, optim))
optim = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
check("training step under implicit_replication()", train_step)
bug |= not check("get_state_dict after the training step", lambda: get_state_dict(model, optim))
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: get_state_dict steps the optimizer outside implicit_replication"
                                             if bug else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
