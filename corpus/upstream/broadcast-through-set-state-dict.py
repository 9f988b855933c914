"""set_state_dict(..., StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)), with rank 0 passing the full
state dicts and the other ranks empty ones (as the option documents), does not load the model on the other ranks:
it decides optim_only = not model_state_dict per rank, so they skip the model while rank 0 broadcasts it.

    torchrun --nproc-per-node=2 broadcast-through-set-state-dict.py   (CPU, gloo)

A Linear(4, 4) under fully_shard trains one step with Adam and is saved with get_state_dict(full_state_dict=True); a
fresh copy then loads it with broadcast_from_rank0=True (rank 0: the full dicts, the others: {}). Every rank compares
its local weight shard with the saved weight (each rank trained the same model, so needs no collective for the check).
Prints per rank whether its shard was loaded and whether the call raised (rank 0 waits in broadcast_object_list for
ranks that have left the load: the process group's 15 s timeout or their exit ends it).
Exit 1: some rank was not loaded or the load raised (the bug); exit 0: every rank holds the saved weights.
Variants run: set_model_state_dict then set_optimizer_state_dict with the same options and dicts (exit 0); a plain
Linear without fully_shard (exit 1); 4 ranks (exit 1); SGD(momentum=0.9) in place of Adam (exit 1; plain SGD
fails earlier, loading the optimizer: see the record full-load-into-a-stateless-optimizer).
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo", timeout=timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()


def build():
    torch.manual_seed(0)
    model = fully_shard(nn.Linear(4, 4))
    return model, torch.optim.Adam(model.parameters(), lr=0.1)


model, optim = build()
model(torch.randn(2, 4)).sum().backward()
optim.step()
model_sd, optim_sd = get_state_dict(model, optim, options=StateDictOptions(full_state_dict=True))
saved = model_sd["weight"].chunk(world)[rank]

model2, optim2 = build()
options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
error = None
try:
    set_state_dict(model2, optim2, model_state_dict=model_sd if rank == 0 else {},
                   optim_state_dict=optim_sd if rank == 0 else {}, options=options)
except Exception as e:  # rank 0: the broadcast of the model's keys finds no peer
    error = f"{type(e).__name__}: {str(e).split('] ')[-1].splitlines()[0][:60]}"
loaded = torch.equal(model2.weight.to_local(), saved)
bug = error is not None or not loaded
print(f"rank {rank}: weight shard {'loaded' if loaded else 'NOT loaded (still the initial weights)'}"
      f"{', set_state_dict raised ' + error if error else ''}{'   <-- BUG' if bug else ''}", flush=True)
sys.stdout.flush()
os._exit(1 if bug else 0)  # not sys.exit: rank 0's process group is broken, its teardown can abort
