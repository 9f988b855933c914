"""FSDP1 NO_SHARD with use_orig_params=True loses the no_sync() gradient of a parameter that was frozen in an earlier
step and is unfrozen now: the step ends with the synced microbatch's gradient alone, where no_sync() documents that
"gradients will be accumulated in module variables, which will later be synchronized".

    torchrun --nproc-per-node=2 fsdp1-no-shard-no-sync-unfrozen.py   (CPU, gloo)

Sequential(Linear, Linear) in one FSDP1 unit (NO_SHARD, use_orig_params=True, which supports mixing frozen and
non-frozen parameters); model[0].weight is frozen in step 0 and unfrozen before step 1.  Each step has two
microbatches, the first under model.no_sync().  The reference is the same training of a local copy (every rank has
the same inputs).  Rank 0 prints model[0].weight.grad before step 1's optimizer step, local and FSDP1.
(By reading the source: in step 0 the writeback marks the frozen parameter's gradient "logically None" in
FlatParameter._is_grad_none_mask, and only parameters that require grad have the mark cleared; after unfreezing, the
stale mark sets its .grad to None between the microbatches and the next writeback zeroes the accumulated slice.)
Exit 1: the gradient differs from the local model's (the bug); exit 0: it matches.
Variants run: FULL_SHARD (exit 0); one process under FULL_SHARD (FSDP1 then runs NO_SHARD; exit 1); never frozen
(exit 0); without no_sync() (exit 0); frozen already when FSDP1 wraps the model (exit 1), and frozen when wrapped but
unfrozen from step 0 on (exit 0): the state at wrapping does not matter; step 0 (frozen) with both microbatches
synchronized, no_sync() in step 1 only (exit 1); step 0 (frozen) with one microbatch (exit 0): what marks the
parameter is a second microbatch in a step while it is frozen, no_sync() or not.
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy

dist.init_process_group("gloo")
torch.manual_seed(0)
ref = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
model = FSDP(copy.deepcopy(ref), sharding_strategy=ShardingStrategy.NO_SHARD, use_orig_params=True,
             device_id=torch.device("cpu"))
grads = {}
for name, m in (("local", ref), ("FSDP1", model)):
    optim = torch.optim.SGD(m.parameters(), lr=0.1)
    inner = m.module if isinstance(m, FSDP) else m
    for step in range(2):
        inner[0].weight.requires_grad_(step == 1)  # frozen in step 0, unfrozen from step 1 on
        optim.zero_grad()
        for mb in range(2):
            x = torch.randn(2, 4, generator=torch.Generator().manual_seed(10 * step + mb))
            if mb == 0 and isinstance(m, FSDP):
                with m.no_sync():
                    m(x).sum().backward()
            else:
                m(x).sum().backward()
        if step == 1:  # the gradient the optimizer is about to step on
            with FSDP.summon_full_params(m, with_grads=True) if isinstance(m, FSDP) else torch.no_grad():
                g = inner[0].weight.grad
                grads[name] = None if g is None else g.clone()
        optim.step()
want, got = grads["local"], grads["FSDP1"]
bug = got is None or not torch.allclose(got, want)
if dist.get_rank() == 0:
    print(f"step 1, model[0].weight.grad[0]: local {[round(v, 4) for v in want[0].tolist()]}")
    print(f"step 1, model[0].weight.grad[0]: FSDP1 {None if got is None else [round(v, 4) for v in got[0].tolist()]}"
          f"{'   <-- BUG' if bug else ''}")
    print(f"torch {torch.__version__}: " + ("BUG: the no_sync microbatch's gradient is lost" if bug else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
