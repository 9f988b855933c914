"""Tensor parallelism applied: the plan's styles on the ``tp`` mesh (the calls of
:func:`parityfuzz.parts.tensor_parallel.parallelize_calls`, which the export prints), and what it adds to a
system."""

from __future__ import annotations

import contextlib

import torch.nn as nn
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor import parallel as tp
from torch.distributed.tensor.experimental import implicit_replication
from torch.distributed.tensor.parallel import loss_parallel, parallelize_module

from parityfuzz.parts.tensor_parallel import CLASSES, parallelize_calls
from parityfuzz.run import calls


def torch_names() -> dict:
    """The torch names the calls of :func:`parityfuzz.parts.tensor_parallel.parallelize_calls` use (but the mesh)."""
    return {"parallelize_module": parallelize_module, "Replicate": Replicate, "Shard": Shard,
            **{name: getattr(tp, name) for name in CLASSES.values()}}


def apply_tensor_parallel(model: nn.Module, tp_mesh, styles) -> None:
    """``parallelize_module`` per plan entry (:class:`parityfuzz.parts.tensor_parallel.Parallelize`) on
    ``tp_mesh``."""
    calls.run(parallelize_calls(styles), {**torch_names(), "model": model, "tp_mesh": tp_mesh})


class TensorParallel:
    """What tensor parallelism adds to a system on a mesh with a ``tp`` axis (a mixin, before the system's
    class): the plan's styles applied on the ``tp`` sub-mesh, the loss under ``loss_parallel()``, and the
    optimizer and zeroing under ``implicit_replication()``."""

    def tp_mesh(self):
        return self.ctx.mesh(self.case.mesh.shape, self.case.mesh.names)["tp"]

    def _loss_context(self):
        return loss_parallel() if self.case.plan.loss_parallel else contextlib.nullcontext()

    def forward_backward(self, batch, target, path=None):
        with self._loss_context():
            return plain_loss(super().forward_backward(batch, target, path))

    def optimizer_step(self) -> bool:
        """Under ``implicit_replication()``, as PyTorch asks of a model that is only partly tensor parallel
        (pytorch PR #134551): its parameters mix plain tensors, 1-D (``dp``) and 2-D (``dp``, ``tp``) DTensors,
        which foreach optimizer steps otherwise refuse to combine."""
        with implicit_replication():
            return super().optimizer_step()

    def zero_grad(self, step: int) -> None:
        with implicit_replication():  # foreach zeroing of mixed gradients (set_to_none=False)
            super().zero_grad(step)

    def evaluate(self, batch, target):
        with self._loss_context():
            return plain_loss(super().evaluate(batch, target))


def expected_placement(style: str, kind: str, name: str):
    """The ``tp`` placement a style gives a parameter ``name`` of a module of ``kind`` (Linear, Embedding)."""
    if style == "colwise":
        return Shard(0)
    if style == "sequence":
        return Replicate()
    if kind == "Embedding":  # rowwise: the vocabulary is split
        return Shard(0)
    return Shard(1) if name == "weight" else Replicate()


def plain_loss(loss):
    """A loss computed on DTensors (vocabulary-sharded logits) as the plain tensor every rank holds."""
    return loss.full_tensor() if isinstance(loss, DTensor) else loss
