"""loss_parallel() ("one can use cross_entropy or CrossEntropyLoss as usual", input sharded on the class dimension)
fails when the vocabulary leaves a tp rank no classes (Shard follows torch.chunk: 3 classes over 4 ranks are 1, 1, 1,
0): the rank with the empty shard raises 'index 0 is out of bounds for dimension 1 with size 0' in _nll_loss_forward,
and the other ranks block in the loss's all-reduce.

    torchrun --nproc-per-node=4 loss-parallel-with-a-rank-holding-no-vocabulary.py   (CPU, gloo)

A Linear(4 -> 3) head is ColwiseParallel(use_local_output=False) over tp=4, so its logits are Shard(-1) DTensors;
F.cross_entropy under loss_parallel() is compared with the plain cross_entropy of the full logits.  The process
group has a 10 s timeout, so the blocked ranks raise instead of hanging.
Prints, per rank that failed, the error; then the verdict on rank 0.  Exit 1: some rank failed or the loss differs
(the bug); exit 0: the loss matches on every rank.
Variants run: vocabulary 4 over tp=4 (exit 0); vocabulary 3 over tp=2 (chunks 2, 1; exit 0); vocabulary 1 over tp=2
on 2 ranks (exit 1); the same logits without loss_parallel (cross_entropy of logits.full_tensor(); exit 0).
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, loss_parallel, parallelize_module

VOCAB = 3
dist.init_process_group("gloo", timeout=timedelta(seconds=10))
verdict_pg = dist.new_group(backend="gloo", timeout=timedelta(seconds=60))  # for the verdict only
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
torch.manual_seed(0)
head = nn.Linear(4, VOCAB)
x, target = torch.randn(2, 4), torch.tensor([0, VOCAB - 1])
expected = F.cross_entropy(head(x), target)
parallelize_module(head, mesh, ColwiseParallel(use_local_output=False))
failed = 0
try:
    logits = head(x)
    with loss_parallel():
        loss = F.cross_entropy(logits, target)
        loss.backward()
    loss = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
    failed = int(not torch.allclose(loss, expected))
except RuntimeError as e:
    reason = str(e).splitlines()[0].split("] ")[-1][:90]  # without gloo's source path
    print(f"rank {rank} (local logits {tuple(logits.to_local().shape)}): RuntimeError {reason}", flush=True)
    failed = 1
flags = torch.tensor([failed])
dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=verdict_pg)
bug = bool(flags.item())
if rank == 0:
    print(f"torch {torch.__version__}: " + ("BUG: loss_parallel cross_entropy fails with a rank holding no class" if bug
                                             else f"ok: loss matches plain cross_entropy ({expected.item():.4f})"))
dist.barrier(group=verdict_pg)
if bug:  # the default group may still hold the all-reduce the failing rank never joined: skip its teardown
    sys.stdout.flush()
    os._exit(1)
dist.destroy_process_group()
sys.exit(0)
