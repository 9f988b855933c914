"""FSDP1 MixedPrecision(keep_low_precision_grads=True) under a sharded strategy leaves the gradients in param_dtype,
not in "the dtype used for gradient reduction" (reduce_dtype) as documented; NO_SHARD keeps reduce_dtype.

    torchrun --nproc-per-node=2 fsdp1-keep-low-precision-grads-sharded.py   (CPU, gloo)

For each policy, the script trains one step of a Linear(4, 4) under FULL_SHARD and under NO_SHARD and prints the
dtype of the gradient the optimizer sees (use_orig_params=False: the FlatParameter's .grad).
Policy A: param_dtype=bf16, reduce_dtype=fp32 -> FULL_SHARD gives bf16 gradients, NO_SHARD fp32 (documented: fp32).
Policy B: reduce_dtype=bf16, no param_dtype  -> FULL_SHARD gives fp32 gradients, NO_SHARD bf16 (documented: bf16).
Exit 1: a sharded strategy's gradient dtype differs from reduce_dtype (the bug); exit 0: every dtype is reduce_dtype.
Variants run: NO_SHARD only (exit 0); keep_low_precision_grads=False, expecting the documented fp32 (exit 0); one
process (FSDP1 then switches FULL_SHARD to NO_SHARD; exit 0); SHARD_GRAD_OP in place of FULL_SHARD and
use_orig_params=True fail the same way (exit 1).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy

dist.init_process_group("gloo")
rank = dist.get_rank()
policies = {
    "A param_dtype=bf16 reduce_dtype=fp32": MixedPrecision(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32, keep_low_precision_grads=True),
    "B reduce_dtype=bf16 (no param_dtype)": MixedPrecision(
        reduce_dtype=torch.bfloat16, keep_low_precision_grads=True),
}
bug = False
for name, mp in policies.items():
    for strategy in (ShardingStrategy.FULL_SHARD, ShardingStrategy.NO_SHARD):
        torch.manual_seed(0)
        model = FSDP(nn.Linear(4, 4), sharding_strategy=strategy, mixed_precision=mp,
                     device_id=torch.device("cpu"), use_orig_params=False)
        optim = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(rank))
        model(x).sum().backward()
        grad_dtype = [p.grad.dtype for p in model.parameters() if p.grad is not None][0]
        optim.step()
        ok = grad_dtype == mp.reduce_dtype
        bug |= not ok
        if rank == 0:
            print(f"policy {name}, {strategy.name:10s}: grad dtype {grad_dtype}, documented {mp.reduce_dtype}"
                  f"{'' if ok else '   <-- BUG'}")
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: sharded gradients are in param_dtype, not reduce_dtype" if bug
                                             else "ok: gradients are kept in reduce_dtype"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
