"""FSDP1 NO_SHARD with use_orig_params=True: after a backward that reaches a unit's output but gives its parameters no
gradient (a gated module that did not run), the unit's original parameters are left as plain tensors: they vanish from
named_parameters() (documented: "FSDP exposes those original parameters to the user via nn.Module.named_parameters"),
and from the next forward on the module computes with tensors the optimizer does not hold, so it stops training.

    torchrun --nproc-per-node=2 fsdp1-no-shard-unit-unused.py   (CPU, gloo)

Sequential(Linear, FSDP(Gate(Linear))) under a root FSDP1, NO_SHARD, use_orig_params=True; the Gate returns its input
when off.  Three SGD steps: the gated Linear is used in steps 0 and 2, not in step 1.  The reference is the same
training of a local copy (every rank has the same inputs).  Rank 0 prints the parameter names after each step and the
gated weight after the last step, local and FSDP1.
(_catch_all_reshard's "already resharded" test, flat_param.data_ptr() == _local_shard.data_ptr(), is always true under
NO_SHARD, so the unit whose post-backward hook did not fire is never resharded.)
Exit 1: parameters missing or the gated weight differs from the local model (the bug); exit 0: both match.
Variants run: FULL_SHARD (exit 0); use_orig_params=False, checking the weights only (exit 0); the gate on in every
step (exit 0); one process under FULL_SHARD (FSDP1 then runs NO_SHARD; exit 1); the Gate returning x * 1, a new
tensor, when off (exit 1).
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


dist.init_process_group("gloo")
rank = dist.get_rank()
kw = dict(sharding_strategy=ShardingStrategy.NO_SHARD, use_orig_params=True, device_id=torch.device("cpu"))
torch.manual_seed(0)
ref = nn.Sequential(nn.Linear(4, 4), Gate(nn.Linear(4, 4)))
model = copy.deepcopy(ref)
model[1] = FSDP(model[1], **kw)
model = FSDP(model, **kw)
gate = model.module[1].module
want_names = [n for n, _ in ref.named_parameters()]
bug = False
optims = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, model)]
for step, on in enumerate((True, False, True)):
    for m, g, optim in ((ref, ref[1], optims[0]), (model, gate, optims[1])):
        optim.zero_grad()
        g.on = on
        m(torch.randn(2, 4, generator=torch.Generator().manual_seed(step))).sum().backward()
        optim.step()
    names = [n.replace("_fsdp_wrapped_module.", "") for n, _ in model.named_parameters()]
    missing = sorted(set(want_names) - set(names))
    bug |= bool(missing)
    if rank == 0:
        print(f"after step {step} (gate {'on' if on else 'off'}): FSDP1 named_parameters() misses {missing}"
              f"{'   <-- BUG' if missing else ''}")
with FSDP.summon_full_params(model):
    got = gate.inner.weight.detach().clone()
close = torch.allclose(got, ref[1].inner.weight)
bug |= not close
if rank == 0:
    print(f"after step 2: gated weight[0] local {[round(v, 4) for v in ref[1].inner.weight[0].tolist()]}, "
          f"FSDP1 {[round(v, 4) for v in got[0].tolist()]}{'' if close else '   <-- BUG'}")
    print(f"torch {torch.__version__}: " + ("BUG: the unit's parameters are left unregistered" if bug else "ok"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
