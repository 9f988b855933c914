"""FSDP1 use_orig_params=True with a tied weight (embedding and head) raises RuntimeError "attempting to assign a
gradient with dtype BFloat16 to a tensor with grad_dtype Float" whenever the gradient is left in MixedPrecision's
param_dtype: FlatParamHandle._use_sharded_grad_views gives the tied (shared) parameter its gradient with a plain
`param.grad = prim_param.grad`, where unshared parameters get it through the `.data` path meant "to side step the
check that parameter/gradient dtypes match".

    torchrun --nproc-per-node=2 fsdp1-tied-weight-low-precision-gradient.py   (CPU, gloo)

The model is Embedding(8, 4) -> Linear(4, 8, bias=False) with the head's weight tied to the embedding's, one FSDP1
unit, use_orig_params=True, MixedPrecision(param_dtype=torch.bfloat16).
Part 1 (NO_SHARD, gradient accumulation): microbatch 0 under model.no_sync() leaves a bf16 gradient; microbatch 1's
forward raises (no_sync documents that the gradients "will later be synchronized in the first forward-backward pass
after exiting the context").
Part 2 (FULL_SHARD, keep_low_precision_grads=True): the first backward raises.
Rank 0 prints each part's outcome.
Exit 1: either part raises (the bug); exit 0: both train.
Variants run (one element changed in both parts): without the tie (exit 0); use_orig_params=False (exit 0); without
MixedPrecision (exit 0).  Part 1 alone under FULL_SHARD (exit 0), and under FULL_SHARD on one process (FSDP1 then
runs NO_SHARD; exit 1).  Part 2 alone under NO_SHARD (exit 1), and without keep_low_precision_grads (exit 0).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision, ShardingStrategy


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.head = nn.Embedding(8, 4), nn.Linear(4, 8, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, ids):
        return self.head(self.emb(ids))


dist.init_process_group("gloo")
ids = torch.tensor([[1, 2, 3, 4]])
bug = False
parts = ((1, ShardingStrategy.NO_SHARD, False, True), (2, ShardingStrategy.FULL_SHARD, True, False))
for part, strategy, keep_low, accumulate in parts:
    torch.manual_seed(0)
    mp = MixedPrecision(param_dtype=torch.bfloat16, keep_low_precision_grads=keep_low)
    model = FSDP(TiedLM(), sharding_strategy=strategy, mixed_precision=mp, use_orig_params=True,
                 device_id=torch.device("cpu"))
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        if accumulate:
            with model.no_sync():
                model(ids).float().sum().backward()
        model(ids).float().sum().backward()
        optim.step()
        outcome = "trains"
    except RuntimeError as e:
        outcome, bug = f"RuntimeError: {e}   <-- BUG", True
    if dist.get_rank() == 0:
        print(f"part {part} ({strategy.name}, keep_low_precision_grads={keep_low}, "
              f"{'no_sync accumulation' if accumulate else 'one backward'}): {outcome}")
if dist.get_rank() == 0:
    print(f"torch {torch.__version__}: " + ("BUG: the tied weight's low-precision gradient is refused" if bug
                                             else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
