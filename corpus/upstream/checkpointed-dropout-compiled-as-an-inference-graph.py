"""A compiled model whose checkpointed Dropout lands in a graph of its own whose inputs need no gradient (here the
model input, before a graph break) fails at the first forward: AOTAutograd compiles that graph as an inference
graph, and its activation-checkpoint pass raises 'Activation checkpoint rematerialization in `forward-loss-backward`
graph does not support RNG ops in recompute regions', though the graph has no backward to recompute for.
torch.utils.checkpoint documents that under torch.compile the RNG state is always preserved (a checkpointed dropout
is supported).  No process group needed.

    torchrun --nproc-per-node=1 checkpointed-dropout-compiled-as-an-inference-graph.py   (CPU; no process group)

Sequential(Dropout(0.5), GraphBreak(), Linear(4, 1)), the Dropout wrapped by apply_activation_checkpointing
(checkpoint_wrapper, non-reentrant), torch.compile(backend="aot_eager"), one forward and backward.
Prints the outcome with and without the checkpoint.  Exit 1: the checkpointed model raises (the bug); exit 0: both
train.
Variants run: without the graph break (one graph, whose parameters need gradients; exit 0); the input requiring grad
(exit 0); Dropout without the checkpoint (printed, ok); torch.utils.checkpoint.checkpoint(dropout, x,
use_reentrant=False) called in the model's forward in place of the wrapper (exit 1); backend="inductor" (exit 1).
"""
import sys

import torch
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing


class GraphBreak(nn.Module):  # stands for any module Dynamo cannot trace (FSDP1's forward, in the original case)
    def forward(self, x):
        torch._dynamo.graph_break()
        return x


bug = False
for checkpointed in (False, True):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Dropout(0.5), GraphBreak(), nn.Linear(4, 1))
    if checkpointed:
        apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, nn.Dropout))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager")
    try:
        compiled(torch.randn(2, 4)).sum().backward()
        ok, msg = model[2].weight.grad is not None, "forward and backward ok"
    except Exception as e:  # torch._dynamo.exc.BackendCompilerFailed
        lines = str(e).splitlines()
        reason = next((line for line in lines if line.startswith("RuntimeError")), lines[0]).split(". ")[0]
        ok, msg = False, f"{type(e).__name__}: {reason}"
    bug |= not ok
    print(f"Dropout {'checkpointed' if checkpointed else 'plain       '}: {msg}{'' if ok else '   <-- BUG'}")
sys.exit(1 if bug else 0)
