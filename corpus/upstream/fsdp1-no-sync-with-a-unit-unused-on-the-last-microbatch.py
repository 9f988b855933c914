"""FSDP1 gradient accumulation with no_sync() breaks when the last (synced) microbatch does not reach a unit that
accumulated gradients under no_sync() (a gated module), where no_sync() documents that the accumulated gradients
"will later be synchronized in the first forward-backward pass after exiting the context": sharded, that backward
trips an internal assertion; under NO_SHARD the accumulated gradient is never all-reduced and the replicas diverge.

    torchrun --nproc-per-node=2 fsdp1-no-sync-with-a-unit-unused-on-the-last-microbatch.py   (CPU, gloo)

Sequential(Linear, FSDP(Gate(Linear))) under a root FSDP1 (use_orig_params=False); the Gate returns its input when
off.  One step of two microbatches: microbatch 0 under model.no_sync() with the gate on, microbatch 1 (synced) with
the gate off.  Each rank has its own inputs.  The reference is a local model trained on every rank's microbatches
(the average DDP computes), one SGD step after both microbatches.
Part 1 (FULL_SHARD): the second backward raises AssertionError ("All sharded parameters that received a gradient in
the post-backward should use `_saved_grad_shard`"); by reading the source, the unit's no_sync post-backward left
_post_backward_called set, and nothing in the synced backward reduces the unit's gradient.
Part 2 (NO_SHARD): the gated weight's gradient stays this rank's own, not the average: after SGD each rank holds a
different gated weight.
Rank 0 prints each part's outcome.
Exit 1: either part raises or differs from the reference (the bug); exit 0: both match.
Variants run: the gate on in microbatch 1 too (exit 0); the gate off in microbatch 0 and on in microbatch 1 (exit 0);
use_orig_params=True fails the same in both parts (exit 1); one process (nothing to synchronize; exit 0); without
no_sync() (both microbatches synced) part 2 matches, while part 1 leaves the unit's gradient None and does not step it
(exit 1: the known accumulation-outside-no_sync bug, not this one).
"""
import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy


class Gate(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.on = inner, True

    def forward(self, x):
        return self.inner(x) if self.on else x


def batch(rank, mb):
    return torch.randn(2, 4, generator=torch.Generator().manual_seed(10 * rank + mb))


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
gates = (True, False)  # the gated Linear is used by microbatch 0 (under no_sync) only
torch.manual_seed(0)
ref = nn.Sequential(nn.Linear(4, 4), Gate(nn.Linear(4, 4)))
for r in range(world):  # the reference: every rank's microbatches, averaged over the ranks
    for mb, on in enumerate(gates):
        ref[1].on = on
        (ref(batch(r, mb)).sum() / world).backward()
torch.optim.SGD(ref.parameters(), lr=0.1).step()
want = ref[1].inner.weight.detach()
bug = False
for part, strategy in ((1, ShardingStrategy.FULL_SHARD), (2, ShardingStrategy.NO_SHARD)):
    kw = dict(sharding_strategy=strategy, use_orig_params=False, device_id=torch.device("cpu"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), Gate(nn.Linear(4, 4)))
    model[1] = FSDP(model[1], **kw)
    model = FSDP(model, **kw)
    gate = model.module[1].module
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        for mb, on in enumerate(gates):
            gate.on = on
            if mb == 0:
                with model.no_sync():
                    model(batch(rank, mb)).sum().backward()
            else:
                model(batch(rank, mb)).sum().backward()
        optim.step()
        with FSDP.summon_full_params(model):
            got = gate.inner.weight.detach().clone()
        every = [torch.zeros_like(got) for _ in range(world)]
        dist.all_gather(every, got)
        ok = all(torch.allclose(g, want, atol=1e-6) for g in every)
        outcome = (f"updated gated weight[0, 0] per rank {[round(g[0, 0].item(), 4) for g in every]}, "
                   f"reference {want[0, 0].item():.4f}")
    except AssertionError as e:
        ok, outcome = False, f"AssertionError: {str(e).strip().splitlines()[0]}"
    bug |= not ok
    if rank == 0:
        print(f"part {part} ({strategy.name}): {outcome}{'' if ok else '   <-- BUG'}")
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: the no_sync gradient of the unit is not synchronized" if bug
                                             else "ok: matches the reference"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
