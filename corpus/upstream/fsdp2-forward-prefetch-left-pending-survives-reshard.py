"""FSDP2 keeps an explicit forward prefetch's all-gather that no later hook consumed, through ``reshard()`` and
through changes to the sharded parameters, and copies it out on the module's next forward.

    torchrun --nproc-per-node=4 fsdp2-forward-prefetch-left-pending-survives-reshard.py   (CPU, gloo)

model[1].set_modules_to_forward_prefetch([model[0]]) names a module whose forward has already run, so in a forward
under no_grad (an evaluation) the prefetched all-gather of model[0] is left pending: no backward consumes it.
Part 1 (reshard_after_forward=2): after model[0].reshard(), the next forward copies the all-gather issued over the
post-forward group of 2 ranks out with the split sizes of the 4-rank group: RuntimeError split_with_sizes.
Part 2 (reshard_after_forward=True): the sharded parameters are changed after the evaluation (as a checkpoint load
or any in-place update between iterations does); the next forward computes with the values of before the change.
Exit 1 when either part shows the bug; exit 0 when both behave as without the prefetch.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def build(mesh, reshard_after_forward):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    fully_shard(model[0], mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model[1], mesh=mesh)
    fully_shard(model, mesh=mesh)
    model[1].set_modules_to_forward_prefetch([model[0]])
    return model


def main():
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    x = torch.randn(2, 4)
    failed = False

    model = build(mesh, reshard_after_forward=2)
    model(x).sum().backward()
    with torch.no_grad():
        model(x)  # leaves model[0]'s prefetched all-gather (over 2 ranks) pending
    model[0].reshard()
    try:
        model(x).sum().backward()
    except RuntimeError as e:
        print(f"rank {dist.get_rank()} part 1: {e}")
        failed = True

    model = build(mesh, reshard_after_forward=True)
    model(x).sum().backward()
    with torch.no_grad():
        model(x)  # leaves model[0]'s prefetched all-gather pending
        for p in model[0].parameters():
            p.zero_()  # the sharded parameters, registered after the evaluation
        out = model[0](x)
    if out.abs().max().item() != 0.0:
        print(f"rank {dist.get_rank()} part 2: model[0] computed with its parameters of before they were zeroed "
              f"(max |output| {out.abs().max().item():.4f}, expected 0)")
        failed = True
    dist.destroy_process_group()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
