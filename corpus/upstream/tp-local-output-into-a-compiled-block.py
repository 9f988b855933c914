"""A block compiled on its own (block.compile(), as torchtitan compiles each transformer block) whose input is the
local output of a RowwiseParallel module (use_local_output=True, the default) breaks the backward to the layers
before it: with the block frozen its output does not require grad (the embedding silently gets no gradient); with it
trainable the backward raises AttributeError "'Tensor' object has no attribute '_local_tensor'" in the redistribute's
backward.  The same model in eager mode trains.

    torchrun --nproc-per-node=2 tp-local-output-into-a-compiled-block.py   (CPU, gloo)

Model: Embedding(8, 4) RowwiseParallel(input_layouts=Replicate()) over tp=2 -> Block (x + Linear(4, 4)(x)) -> sum; the
block
eager, or compiled with backend="aot_eager".  RowwiseParallel returns its all-reduced output as an
AsyncCollectiveTensor view; that is the compiled block's input.  Prints, per case, whether the embedding's gradient
matches a single-process run.  Exit 1: a compiled case differs or raises (the bug); exit 0: all match.
Variants run: backend="inductor" (exit 1, the same two outcomes); the whole model compiled, torch.compile(model),
instead of the block (exit 0); the block a bare nn.Linear(4, 4) (exit 0, but only because Dynamo compiles no graph
for a torch.nn module's own forward: nn.Linear, nn.LayerNorm and nn.GELU compiled alone give 0 graphs in one
process, so it runs eagerly); a user module whose forward is one op, self.lin(x), F.linear(x, w, b) or x * 2 with no
parameter (exit 1, the same two outcomes: x * 2 gives an output without requires_grad either way), or two,
self.lin2(self.lin(x)) or gelu(self.lin(x)) (exit 1); an eager GELU between the embedding and the block (exit 0);
the embedding's output passed through a forward hook returning output + 0 (exit 0);
RowwiseParallel(output_layouts=Replicate(), use_local_output=False) with a hook returning output.to_local() (exit 1).
So the trigger is the AsyncCollectiveTensor arriving as a traced graph's input, not the size of the block nor
use_local_output itself.
"""
import copy
import gc
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module


class Block(nn.Module):  # a residual block, as a transformer block is
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return x + self.lin(x)


def main():
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Embedding(8, 4), Block())
    tokens = torch.tensor([[1, 2, 5, 7]])
    ref(tokens).sum().backward()
    bug = False
    for frozen in (True, False):
        for compiled in (False, True):
            model = copy.deepcopy(ref)
            model.zero_grad(set_to_none=True)
            model[1].requires_grad_(not frozen)
            parallelize_module(model, mesh, {"0": RowwiseParallel(input_layouts=Replicate())})
            if compiled:
                torch._dynamo.reset()
                model[1].compile(backend="aot_eager")
            try:
                out = model(tokens)
                if out.requires_grad:  # False for the frozen compiled block: nothing to backpropagate
                    out.sum().backward()
                g = model[0].weight.grad
                ok = g is not None and torch.allclose(g.full_tensor(), ref[0].weight.grad)
                msg = (f"output requires_grad={out.requires_grad}, embedding gradient "
                       + ("None" if g is None else f"matches: {ok}"))
            except AttributeError as e:
                ok, msg = False, f"AttributeError {e}"
            bug |= not ok
            if rank == 0:
                print(f"block {'frozen   ' if frozen else 'trainable'} {'compiled' if compiled else 'eager   '}: {msg}"
                      f"{'' if ok else '   <-- BUG'}")
    return bug


if __name__ == "__main__":
    dist.init_process_group("gloo")
    bug = main()
    gc.collect()  # frees the process groups the models and meshes hold, before the teardown (else gloo may abort)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if bug else 0)
