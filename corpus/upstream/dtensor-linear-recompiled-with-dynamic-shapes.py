"""torch.compile of F.linear over DTensors whose graph is (re)compiled with dynamic shapes fails in AOTAutograd's
joint trace with RecursionError (BackendCompilerFailed).  FSDP1 (use_orig_params=True) over a tensor-parallel MLP
meets it under module.compile(): FSDP1's unshard graph-breaks (a stream context on CPU), so nn.Linear.forward is
compiled as a frame of its own, first for the ColwiseParallel fc1, then recompiled for the RowwiseParallel fc2, and
automatic dynamic shapes makes that recompile dynamic.  The same models train eagerly and with dynamic=False.

    torchrun --nproc-per-node=4 dtensor-linear-recompiled-with-dynamic-shapes.py   (CPU, gloo)

Cases: "linear": F.linear compiled alone (no FSDP), called with the MLP's fc1 then fc2 DTensors (weights need
grad), backward each; "fsdp1": the MLP, TP over tp=2, each Linear FSDP1-wrapped over dp=2, mlp.compile(backend=
"aot_eager"), one forward/backward.  Each with automatic dynamic (default) and dynamic=False; prints ok or the error.
Exit 1: a default-dynamic case raises (the bug); exit 0: all pass.  Variants run: backend="eager" in both cases
(exit 0); with the helper's probe scripts: backend "inductor" (same error), plain tensors (train), F.linear over a
3-D input on 1 rank, mesh (1,), dynamic=True (same error; without grad: trains), the whole FSDP1 model compiled
(same error), use_orig_params=False, FSDP1 at the root only, or no TP in the MLP (train).
Cause: the joint trace registers a SymInt whose expression is a bare symbol (s17 = 0 + (1 + (s17' - 1))) in
proxy_tensor's sympy_expr_tracker; its lazy proxy needs an untracked SymInt with the same expression (DTensor
metadata), which get_proxy_slot resolves through sympy_expr_tracker to that same thunk: Thunk.force never ends.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def linear_case(tp, dyn):
    f = torch.compile(lambda x, w, b: F.linear(x, w, b), backend="aot_eager", dynamic=dyn)
    for fi, fo, wp, xp, bp in ((4, 16, Shard(0), Replicate(), Shard(0)), (16, 4, Shard(1), Shard(2), Replicate())):
        dt = lambda t, p: DTensor.from_local(t, tp, [p], run_check=False)  # noqa: E731
        w = dt(torch.randn(fo // 2 if wp == Shard(0) else fo, fi // 2 if wp == Shard(1) else fi, requires_grad=True), wp)
        b = dt(torch.randn(fo // 2 if bp == Shard(0) else fo, requires_grad=True), bp)
        x = dt(torch.randn(2, 1, fi // 2 if xp == Shard(2) else fi), xp)
        f(x, w, b).to_local().sum().backward()


def fsdp1_case(mesh, dyn):
    mlp = MLP()
    parallelize_module(mlp, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    mlp.fc1 = FSDP(mlp.fc1, device_mesh=mesh["dp"], use_orig_params=True, device_id=torch.device("cpu"))
    mlp.fc2 = FSDP(mlp.fc2, device_mesh=mesh["dp"], use_orig_params=True, device_id=torch.device("cpu"))
    mlp.compile(backend="aot_eager", dynamic=dyn)
    mlp(torch.randn(2, 1, 4)).sum().backward()


def main():
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    bug = False
    for name in ("linear", "fsdp1"):
        for dyn in (None, False):
            torch._dynamo.reset()
            torch.manual_seed(0)
            try:
                linear_case(mesh["tp"], dyn) if name == "linear" else fsdp1_case(mesh, dyn)
                msg = "ok"
            except Exception as e:  # BackendCompilerFailed: RecursionError
                msg = f"{type(e).__name__}: {' '.join(str(e).split())[:90]}"
            bad = msg != "ok"
            bug |= bad and dyn is None
            if dist.get_rank() == 0:
                print(f"{name:6} dynamic={str(dyn):5}: {msg}{'   <-- BUG' if bad else ''}", flush=True)
    return bug


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if bug else 0)
