"""set_state_dict(..., StateDictOptions(full_state_dict=True)) cannot load the full state dict get_state_dict gave for
an FSDP2 + tensor-parallel model whose colwise Linear's rows do not split evenly over the (dp, tp) mesh: it raises a
bare AssertionError in _StridedShard._shard_tensor (distribute_tensor with the parameter's placements).

    torchrun --nproc-per-node=4 full-optimizer-load-into-uneven-strided-shards.py   (CPU, gloo)

A Linear(4, out) is parallelized ColwiseParallel over tp=2 and then fully_shard over dp=2 (a (2, 2) mesh, so its
weight is placed (_StridedShard(0), Shard(0))), trains one step with SGD(momentum=0.9), is saved with
get_state_dict(full_state_dict=True) and loaded with set_state_dict(full_state_dict=True) into a fresh copy.
Prints, on rank 0, for out = 4 (even), 2 and 6 (uneven), whether the load worked and, if so, whether it restored the
saved weight. Exit 1: an uneven size does not load (the bug); exit 0: every size loads its saved weight.
Variants run: the sharded way, full_state_dict=False (exit 0); out=17 (exit 1); set_model_state_dict alone, no
optimizer (the weight raises the same; exit 1); tp only, without fully_shard (exit 0); fully_shard over 4 ranks
without tp, Shard(0) uneven (exit 0). (SGD without momentum fails earlier for every size, on the record
full-load-into-a-stateless-optimizer.)
"""
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
options = StateDictOptions(full_state_dict=True)


def build(out):
    torch.manual_seed(0)
    model = parallelize_module(nn.Linear(4, out), mesh["tp"], ColwiseParallel())
    fully_shard(model, mesh=mesh["dp"])
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


bug = False
for out in (4, 2, 6):
    model, optim = build(out)
    model(torch.randn(2, 4)).sum().backward()
    optim.step()
    model_sd, optim_sd = get_state_dict(model, optim, options=options)
    saved = model_sd["weight"].clone()
    model2, optim2 = build(out)
    try:
        set_state_dict(model2, optim2, model_state_dict=model_sd, optim_state_dict=optim_sd, options=options)
        ok = torch.equal(model2.weight.full_tensor(), saved)
        result = "loads" if ok else "loads a weight that differs from the saved one"
    except AssertionError as e:
        ok, result = False, f"bare AssertionError({e}) in {traceback.extract_tb(e.__traceback__)[-1].name}"
    bug |= not ok
    if rank == 0:
        print(f"Linear(4, {out}) placements {tuple(model.weight.placements)}: {result}{'' if ok else '   <-- BUG'}")
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: a full state dict does not load into uneven FSDP2+TP shards" if bug
                                             else "ok: every size loads"))
dist.destroy_process_group()
sys.exit(1 if bug else 0)
