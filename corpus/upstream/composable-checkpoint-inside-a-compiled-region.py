"""The composable activation checkpoint (torch.distributed._composable.checkpoint) on a module inside a
torch.compile'd region fails at the first backward, though the same model trains eagerly: CheckpointError
'Recomputed values for the following tensors have different metadata than during the forward pass'; where the
checkpointed module's input requires grad the gradients come out silently wrong instead.  No process group needed.

    torchrun --nproc-per-node=1 composable-checkpoint-inside-a-compiled-region.py   (CPU; no process group)

Case A: Net(body=LayerNorm(4), head=Linear(4, 2)), checkpoint(net.body), torch.compile(net, backend="aot_eager"),
net(x).sum().backward().  Case B: Residual (x + inner(x), inner=Linear(4, 4)), checkpoint(m.inner), compiled alike,
the input requiring grad, m(x).pow(2).sum().backward().  Each is compared with the eager run of the same model.
Prints one line per case.  Exit 1: a compiled case raises or its gradients differ (the bug); exit 0: both match.
Variants run: no checkpoint (exit 0); checkpoint_wrapper(module) in place of checkpoint(module) (exit 0);
inner.compile() on the checkpointed module itself instead of the parent (exit 0); backend="inductor" (case A
CheckpointError, case B AssertionError from the compiled graph's stride check; exit 1).
"""
import copy
import sys

import torch
import torch.nn as nn
from torch.distributed._composable import checkpoint


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = nn.LayerNorm(4), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.body(x))


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x):
        return x + self.inner(x)


def run(model, x, loss_fn, compiled):
    model = copy.deepcopy(model)
    checkpoint(model.body if hasattr(model, "body") else model.inner)
    x = x.detach().clone().requires_grad_(x.requires_grad)
    torch._dynamo.reset()
    fn = torch.compile(model, backend="aot_eager") if compiled else model
    loss_fn(fn(x)).backward()
    return [p.grad for p in model.parameters()] + ([x.grad] if x.requires_grad else [])


torch.manual_seed(0)
cases = {"A LayerNorm checkpointed, compiled parent": (Net(), torch.randn(3, 4), lambda y: y.sum()),
         "B Linear in a residual, input requires grad": (Residual(), torch.randn(2, 2, 4, requires_grad=True),
                                                         lambda y: y.pow(2).sum())}
bug = False
for name, (model, x, loss_fn) in cases.items():
    eager = run(model, x, loss_fn, compiled=False)
    try:
        got = run(model, x, loss_fn, compiled=True)
        err = max((g - e).abs().max().item() for g, e in zip(got, eager))
        ok, msg = err < 1e-5, f"max |gradient error| vs eager {err:.3g}"
    except Exception as e:  # torch.utils.checkpoint.CheckpointError, or the backend's error
        ok, msg = False, f"{type(e).__name__}: {str(e).splitlines()[0].split(': ')[-1][:100]}"
    bug |= not ok
    print(f"case {name}: {msg}{'' if ok else '   <-- BUG'}")
sys.exit(1 if bug else 0)
