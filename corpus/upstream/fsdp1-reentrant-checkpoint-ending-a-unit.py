"""FSDP1 (sharded strategy) frees a unit's unsharded parameter in the middle of the backward when the unit's last module
is checkpointed with CheckpointImpl.REENTRANT: the checkpoint's nested backward (by reading the source) fires the
FlatParameter's post-backward hook, which reshards, and the outer backward then meets the freed storage of the other
modules' weights.  FSDP1 names reentrant activation checkpointing among the cases it supports, and the same model
trains with the non-reentrant implementation or under NO_SHARD.

    torchrun --nproc-per-node=2 fsdp1-reentrant-checkpoint-ending-a-unit.py   (CPU, gloo)

Sequential(Linear(4, 6), Linear(6, 6), Linear(6, 6)) with the last Linear in checkpoint_wrapper(REENTRANT), one FSDP1
unit (FULL_SHARD); one SGD step.  The reference is the same step of a local copy (every rank has the same input).
Rank 0 prints the error, or the largest difference of the updated weights from the reference's.
Exit 1: the backward raises or a weight differs (the bug); exit 0: it matches.
Variants run: CheckpointImpl.NO_REENTRANT (exit 0); NO_SHARD (exit 0); one process (FSDP1 then runs NO_SHARD;
exit 0); the reentrant checkpoint on the middle Linear instead (exit 0; presumably because after its nested backward
only model[0]'s weight gradient is left, which needs the input, not the freed weight); use_orig_params=True (exit 1);
SHARD_GRAD_OP (exit 1).
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy

dist.init_process_group("gloo")
torch.manual_seed(0)  # the same model and input on every rank
ref = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 6), nn.Linear(6, 6))
x = torch.randn(3, 4)
model = copy.deepcopy(ref)
ref(x).sum().backward()
torch.optim.SGD(ref.parameters(), lr=0.1).step()

model[2] = checkpoint_wrapper(model[2], checkpoint_impl=CheckpointImpl.REENTRANT)  # the unit's last module
model = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD, use_orig_params=False,
             device_id=torch.device("cpu"))
optim = torch.optim.SGD(model.parameters(), lr=0.1)
try:
    model(x).sum().backward()
    optim.step()
    with FSDP.summon_full_params(model):
        got = [t.detach().clone() for m in model.modules() if isinstance(m, nn.Linear) for t in (m.weight, m.bias)]
    diff = max((g - w).abs().max().item() for g, w in zip(got, [t for m in ref for t in (m.weight, m.bias)]))
    outcome, bug = f"max |weight - reference| after one SGD step {diff:.3e}", diff > 1e-5
except RuntimeError as e:
    outcome, bug = f"backward raises RuntimeError: {str(e).splitlines()[0]}", True
if dist.get_rank() == 0:
    print(f"FSDP1: {outcome}{'   <-- BUG' if bug else ''}")
    print(f"torch {torch.__version__}: " + ("BUG: the reentrant checkpoint reshards the unit mid-backward" if bug
                                             else "ok: matches the local model"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
