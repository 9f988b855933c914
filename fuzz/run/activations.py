"""Rank side: each module's forward output and, in backward, the gradient that reaches its output and the one
its backward hands on to its input, for locating where a divergence begins (:mod:`parityfuzz.judge.origin`).

:class:`Probe` hooks every module of a system's (unwrapped) model: a forward hook records the module's output,
and a hook on that output records the gradient backward brings to it (what the module's own backward starts
from).  A forward pre-hook hands the module an alias (``view_as``) of its first input, whose gradient is what
the module's backward computed for that input alone (the input itself may feed other modules too: a residual
branch); a wrong backward inside a module shows there first.  Records are keyed by :func:`label` (module, call of the module within the pass, what) in the
order they happen on this rank: execution order.  Only the first forward of each call counts: forwards that
activation checkpointing re-runs inside backward are skipped, and so are those a pipeline stage runs on stand-in
tensors to infer its metadata.  The hooks read tensors and change nothing, so a
probed run trains exactly as an unprobed one.
"""

from __future__ import annotations

import sys

import torch
import torch.nn as nn

from parityfuzz.run.record import record_tensors

#: What a record holds: the module's forward output, the gradient backward brought to that output, the gradient
#: the module's backward gave its first input.
OUTPUT, OUTPUT_GRAD, INPUT_GRAD = "output", "output grad", "input grad"


def label(module: str, call: int, what: str) -> str:
    """How a record is named: ``body.1#0 output``, ``body.1#0 output grad`` (``#k``: the k-th call of the
    module in the pass; the root module is ``model``)."""
    return f"{module or 'model'}#{call} {what}"


def parse(name: str) -> tuple[str, int, str]:
    """``(module, call, what)`` of a :func:`label`."""
    head, _, what = name.partition(" ")
    module, _, call = head.rpartition("#")
    return module, int(call), what


def _first_tensor(output):
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)):
        return next((o for o in output if isinstance(o, torch.Tensor)), None)
    return None


def _in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


#: Functions of torch.distributed.pipelining that run a stage's module on stand-in tensors to infer the shapes and
#: dtypes its stage sends and receives (a PipelineStage's first step, "Dynamic mode: Metadata is inferred from the
#: first microbatch at runtime"): not the model's computation, so nothing a probe records.
METADATA_INFERENCE = frozenset({"_forward_metadata_inference", "_backward_metadata_inference", "_shape_inference"})


def _inferring_metadata(depth: int = 40) -> bool:
    """Whether a pipeline stage is inferring its metadata below this frame (:data:`METADATA_INFERENCE`)."""
    frame = sys._getframe(2)
    while frame is not None and depth:
        if frame.f_code.co_name in METADATA_INFERENCE:
            return True
        frame, depth = frame.f_back, depth - 1
    return False


class Probe:
    """Hooks on every module of ``model`` (named as the case names them: wrappers looked through) recording into
    :attr:`records`, which :meth:`take` hands over and empties at the end of each pass."""

    def __init__(self, model: nn.Module, ctx):
        from parityfuzz.systems.base import _wrapped, case_name

        self.ctx = ctx
        self.records: dict = {}
        self.calls: dict[str, int] = {}
        self.handles = []
        for name, module in model.named_modules():
            # A wrapper's output is its inner module's; a pipeline stage's run of some of the body's children
            # (``partial``) is no module of the model's, though named as the body.
            if _wrapped(module) is None and not getattr(module, "partial", False):
                self.handles.append(module.register_forward_pre_hook(self._pre_hook(case_name(name))))
                self.handles.append(module.register_forward_hook(self._forward_hook(case_name(name))))

    def _pre_hook(self, name: str):
        def hook(module, args):
            first = next((i for i, a in enumerate(args) if isinstance(a, torch.Tensor)), None)
            if first is None or not args[first].requires_grad or _inferring_metadata():
                return None
            alias = args[first].view_as(args[first])  # also when recomputing: the same graph as the forward's
            if not _in_backward():
                call = self.calls.get(name, -1) + 1  # the call the forward hook is about to count
                alias.register_hook(lambda grad: self._keep(label(name, call, INPUT_GRAD), grad))
            return (*args[:first], alias, *args[first + 1:])

        return hook

    def _forward_hook(self, name: str):
        def hook(module, args, output):
            if _in_backward() or _inferring_metadata():  # checkpointing recomputing the forward; a stage's shapes
                return
            out = _first_tensor(output)
            if out is None:
                return
            call = self.calls[name] = self.calls.get(name, -1) + 1
            self._keep(label(name, call, OUTPUT), out)
            if out.requires_grad:
                out.register_hook(lambda grad: self._keep(label(name, call, OUTPUT_GRAD), grad))

        return hook

    def _keep(self, key: str, t: torch.Tensor) -> None:
        if key not in self.records:  # a gradient reaching one output twice (a retained graph) counts once
            self.records.update(record_tensors({key: t.detach()}, self.ctx))

    def take(self) -> dict:
        """This pass's records, in execution order; the next pass starts counting calls afresh."""
        out, self.records, self.calls = self.records, {}, {}
        return out

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
