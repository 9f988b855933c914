"""FSDP2 gradient accumulation without communication (set_requires_gradient_sync(False)) under a MixedPrecisionPolicy
whose reduce_dtype differs from param_dtype raises AttributeError: 'FSDPParam' object has no attribute
'_unsharded_param' when a module with its own FSDP group has not run yet in the model's life (skipped on the first
microbatch of a fresh model, e.g. right after building it or loading a checkpoint into a new one).

    torchrun --nproc-per-node=2 fsdp2-accumulation-into-a-never-unsharded-param.py   (CPU, gloo)

model = Net(lin=Linear(4, 4), gate=Linear(4, 4)); fully_shard(model.gate) and fully_shard(model) with
MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32); two microbatches, gradient sync off on the first,
the gate skipped on the first.  In the first backward, FSDPParamGroup.post_backward (reduce_grads False) calls
to_accumulated_grad_if_needed on every parameter of the unused group, which reads _unsharded_param, created only at
a group's first unshard.  Prints the outcome on rank 0 and compares the gate's gradient with plain accumulation.
Exit 1: the accumulation raises or the gradient differs (the bug); exit 0: it matches.
Variants run: the gate run once before (one plain forward/backward, then the same accumulation; exit 0); no mixed
precision (exit 0); param_dtype=bfloat16 alone (reduce_dtype None; exit 0); reduce_dtype=float16 alone (exit 1);
gradient sync on for both microbatches (exit 0); 1 rank (exit 1); the gate in the root's group (no fully_shard of its
own: another error, 'FSDP reduce-scatter expects uniform gradient dtype', the mixed-dtype accumulation of #196996).
"""
import copy
import gc
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.gate = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, use_gate):
        x = self.lin(x)
        return self.gate(x) if use_gate else x


def main():
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    torch.manual_seed(0)
    ref = Net()
    xs = [torch.randn(2, 4, generator=torch.Generator().manual_seed(m)) for m in range(2)]  # same data on every rank
    for m, x in enumerate(xs):
        ref(x, use_gate=m == 1).float().sum().backward()
    model = copy.deepcopy(ref)
    model.zero_grad(set_to_none=True)
    fully_shard(model.gate, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    try:
        for m, x in enumerate(xs):
            model.set_requires_gradient_sync(m == 1)  # accumulate locally, reduce on the last microbatch
            model(x, use_gate=m == 1).float().sum().backward()
        err = (model.gate.weight.grad.full_tensor() - ref.gate.weight.grad).abs().max().item()
        ok = err < 0.05  # bfloat16 compute
        msg = f"gate weight gradient max |error| vs plain accumulation: {err:.4f}"
    except AttributeError as e:
        ok, msg = False, f"AttributeError {e}"
    if rank == 0:
        print(f"torch {torch.__version__}: {msg}{'' if ok else '   <-- BUG'}")
    return not ok


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    gc.collect()  # frees the process groups the models and meshes hold, before the teardown (else gloo may abort)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if bug else 0)
