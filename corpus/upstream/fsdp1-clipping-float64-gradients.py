"""FullyShardedDataParallel.clip_grad_norm_ raises on a float64 model under a sharded strategy, where its docstring
promises the norm "over all parameters' gradients" in "the 'largest' dtype across all parameters/gradients":
_get_grad_norm takes each gradient's norm with torch.linalg.vector_norm(grad, dtype=torch.float32), which refuses a
float64 input as narrowing.

    torchrun --nproc-per-node=2 fsdp1-clipping-float64-gradients.py   (CPU, gloo)

One backward of a float64 Linear(4, 4) wrapped in FSDP1 (FULL_SHARD), then model.clip_grad_norm_(1.0); the reference
is torch.nn.utils.clip_grad_norm_(1.0) on a local copy (every rank has the same input).  Rank 0 prints both norms, or
the error FSDP1 raised.
Exit 1: clip_grad_norm_ raises or its norm differs from the reference (the bug); exit 0: it matches.
Variants run: float32 model (exit 0); NO_SHARD (clip_grad_norm_ then delegates to torch.nn.utils.clip_grad_norm_;
exit 0); one process (FSDP1 then switches to NO_SHARD; exit 0); use_orig_params=True and SHARD_GRAD_OP fail the same
(exit 1).
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy

dist.init_process_group("gloo")
torch.manual_seed(0)  # the same model and input on every rank
model = nn.Linear(4, 4).double()
x = torch.randn(2, 4, dtype=torch.float64)

ref = copy.deepcopy(model)
ref(x).sum().backward()
ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)

model = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD, device_id=torch.device("cpu"))
model(x).sum().backward()
try:
    norm, error = model.clip_grad_norm_(1.0), None
except RuntimeError as e:
    norm, error = None, e
bug = norm is None or not torch.allclose(norm.double(), ref_norm)
if dist.get_rank() == 0:
    print(f"torch.nn.utils.clip_grad_norm_: total norm {ref_norm.item():.6f} ({ref_norm.dtype})")
    print("FSDP.clip_grad_norm_:           " + (f"RuntimeError: {error}   <-- BUG" if error else
                                                 f"total norm {norm.item():.6f} ({norm.dtype})"))
    print(f"torch {torch.__version__}: " + ("BUG: FSDP1 cannot clip float64 gradients" if bug else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
