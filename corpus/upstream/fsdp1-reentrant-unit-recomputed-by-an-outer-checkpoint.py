"""FSDP1 drops the gradient of a unit whose own module is reentrant-checkpointed when a non-reentrant checkpoint
around the unit recomputes it in the backward, under MixedPrecision(param_dtype) below the parameters' dtype.

    torchrun --nproc-per-node=1 fsdp1-reentrant-unit-recomputed-by-an-outer-checkpoint.py   (CPU, gloo)

Exit 1: q.weight.grad is None after backward (the bug); exit 0: it matches plain training.  It trains without
mixed precision, without the outer checkpoint, with a non-reentrant inner checkpoint, or with the default
backward_prefetch=BACKWARD_PRE (the root's pre-backward then unshards q's unit before the outer recompute).
"""
import copy
import functools
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl, apply_activation_checkpointing, checkpoint_wrapper)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        return torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2), dim=-1) @ self.v(x)


dist.init_process_group("gloo")
torch.manual_seed(0)  # the same model and input on every rank
model = nn.Sequential(nn.Linear(4, 4), Attention(4))
x = torch.randn(1, 2, 4)
ref = copy.deepcopy(model)
ref(x).sum().backward()  # the reference: plain training

model[1] = checkpoint_wrapper(model[1], checkpoint_impl=CheckpointImpl.NO_REENTRANT)  # recomputes q's unit in backward
attn = model[1]._checkpoint_wrapped_module
kwargs = dict(device_id=torch.device("cpu"), use_orig_params=True, backward_prefetch=None,
              mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
attn.q = FSDP(attn.q, **kwargs)  # q in its own unit
model = FSDP(model, **kwargs)
q = attn.q.module
apply_activation_checkpointing(model, check_fn=lambda m: m is q, checkpoint_wrapper_fn=functools.partial(
    checkpoint_wrapper, checkpoint_impl=CheckpointImpl.REENTRANT))  # q's own module, inside its unit

before = q.weight.detach().clone()  # (one rank: the whole weight)
optim = torch.optim.SGD(model.parameters(), lr=0.1)
model(x).sum().backward()  # one training step
optim.step()
with FSDP.summon_full_params(model, with_grads=True):
    got = None if q.weight.grad is None else q.weight.grad.clone()
want = ref[1].q.weight.grad
if dist.get_rank() == 0:
    print(f"torch {torch.__version__}, world size {dist.get_world_size()}")
    print(f"reference q.weight.grad: {want.flatten()[:4].tolist()} ...")
    print(f"FSDP1     q.weight.grad: {got if got is None else got.flatten()[:4].tolist()}")
    if dist.get_world_size() == 1:
        print(f"q.weight changed by optim.step(): {not torch.equal(before, q.weight.detach())}")
bug = got is None or not torch.allclose(got.float(), want, rtol=0.05, atol=0.05)
if dist.get_rank() == 0:
    print("BUG: the gradient of the unit is lost" if bug else "ok: the gradient matches plain training")
dist.barrier()
dist.destroy_process_group()
sys.exit(1 if bug else 0)
