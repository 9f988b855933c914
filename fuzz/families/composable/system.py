"""System under test of the ``composable`` family: the plan's ``fully_shard``, ``replicate`` (DDP-based),
``replicate_with_fsdp.replicate`` and composable ``checkpoint`` calls, in the plan's order.

Invariants, checked after the calls and again after the first backward (the DDP-based ``replicate`` initialises
at the first forward; FSDP2 holds its parameters unsharded until the backward): parameter names are the unwrapped model's; each parameter is what its manager makes it (a DTensor
sharded on ``dp_shard`` under ``fully_shard``, a replicated DTensor under ``replicate_with_fsdp``, a plain tensor
under the DDP-based ``replicate``); and the DDP-based ``replicate`` holds exactly the parameters the plan gives it
(PyTorch's own test of the composition checks its ``_param_names``).

One optimizer takes every parameter, plain and DTensor alike.  ``foreach`` kernels and ``clip_grad_norm_``
refuse a list mixing plain tensors and DTensors (or DTensors of different meshes: pytorch#180346), a limitation
frameworks work around as this system does: with ``foreach`` each parameter group is split by the kind of
tensor it holds (an elementwise optimizer steps each parameter alike in any grouping), and the total norm is
summed from each kind's own norm.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

from parityfuzz.families.composable import ComposablePlan
from parityfuzz.run import calls
from parityfuzz.systems.base import System, case_name, optimizer_parts
from parityfuzz.systems.base import InvariantViolation
from parityfuzz.parts.fully_shard.system import run_switches


def _kind(t: torch.Tensor):
    """What ``foreach`` kernels and ``clip_grad_norm_`` need alike in one list: plain, or a DTensor's mesh."""
    mesh = getattr(t, "device_mesh", None)
    return ("plain",) if mesh is None else ("dtensor", id(mesh))


class ComposableSystem(System):
    name = "composable"
    sharded_scaler = True

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed._composable import checkpoint, replicate
        from torch.distributed._composable.replicate_with_fsdp import replicate as replicate_fsdp
        from torch.distributed.fsdp import fully_shard

        names = [n for n, _ in model.named_parameters()]
        mesh = self.ctx.mesh(self.case.mesh.shape, self.case.mesh.names)
        calls.run(self.case.plan.calls(bool(self.case.model.gates())),
                  {"model": model, "mesh": mesh, "flat": mesh if mesh.ndim == 1 else mesh._flatten(),
                   "fully_shard": fully_shard, "replicate": replicate, "replicate_fsdp": replicate_fsdp,
                   "checkpoint": checkpoint})
        after = [n for n, _ in model.named_parameters()]
        if after != names:
            raise InvariantViolation(f"parameter names changed by composing: {sorted(set(names) ^ set(after))[:5]} "
                                     f"(order kept: {sorted(names) == sorted(after)})")
        self.check_managed(model, "after the calls")
        self._initialised = False
        return model

    def forward_backward(self, batch, target, path=None):
        loss = super().forward_backward(batch, target, path)
        if not self._initialised:  # FSDP2 holds parameters unsharded from forward to backward
            self._initialised = True
            self.check_managed(self.model, "after the first backward", trainable_only=True)
        return loss

    def check_managed(self, model: nn.Module, when: str, trainable_only: bool = False) -> None:
        """Invariant: each parameter ``fully_shard`` manages is a DTensor sharded on dim-0, as its docstring
        promises ("This implementation represents the sharded parameters as DTensor s sharded on dim-0").  The
        private ``replicate`` APIs (``torch.distributed._composable``) promise no tensor type and no parameter
        list: their parameters are judged by training alone (an invariant on ``_param_names``, a private field
        PyTorch's own test reads, once blamed torch for a nesting that trains like DDP).

        ``trainable_only`` (after a backward): only parameters that require a gradient.  The docstring says
        "After gradient computation, FSDP frees the unsharded parameters"; a frozen module has no gradient
        computation, and under ``reshard_after_forward=False`` "the registered parameters are ... unsharded
        parameters" after its forward, with nothing documented to reshard them (the invariant once reported a
        frozen module under a ``replicate_with_fsdp`` root as a torch bug: corpus/composable/91af762ef102fadc)."""
        from torch.distributed.tensor import DTensor, Shard

        plan: ComposablePlan = self.case.plan
        managed = plan.data_parallel()
        wrong = []
        for name, p in model.named_parameters():
            name = case_name(name)  # (a model torch.compile'd whole names its parameters through _orig_mod)
            if managed[plan.manager(name.rpartition(".")[0])] != "fully_shard":
                continue
            if trainable_only and not p.requires_grad:
                continue
            if not (isinstance(p, DTensor) and isinstance(p.placements[-1], Shard)):
                kind = f"DTensor{tuple(p.placements)}" if isinstance(p, DTensor) else type(p).__name__
                wrong.append(f"{name} (fully_shard) is {kind}")
        if wrong:
            raise InvariantViolation(f"{when}, parameters are not what fully_shard makes them: "
                                     f"{'; '.join(wrong[:4])}")

    def zero_grad(self, step: int) -> None:
        """Under ``implicit_replication()``: ``zero_grad(set_to_none=False)`` with ``foreach`` groups every
        parameter group's gradients by device and dtype only, so the DDP-based ``replicate``'s plain gradients
        meet ``fully_shard``'s DTensors in one ``_foreach_zero_``, which DTensor refuses by design; the context is
        its documented remedy (treat the plain tensors, replicated in fact, as replicated DTensors), as PyTorch
        asks of a model only partly on DTensors (pytorch PR #134551).  The optimizer step runs in it too (its
        groups are split by kind of tensor: nothing mixes there), as the exported script's ``step_context``."""
        from torch.distributed.tensor.experimental import implicit_replication

        with implicit_replication():
            super().zero_grad(step)

    def optimizer_step(self) -> bool:
        from torch.distributed.tensor.experimental import implicit_replication

        with implicit_replication():
            return super().optimizer_step()

    def make_optimizer(self) -> torch.optim.Optimizer:
        cls, groups, kwargs = optimizer_parts(self.case.train, self.named_parameters())
        if kwargs.get("foreach"):
            split = []
            for group in groups:
                kinds: dict = {}
                for p in group["params"]:
                    kinds.setdefault(_kind(p), []).append(p)
                split += [{**group, "params": params} for params in kinds.values()]
            groups = split
        return cls(groups, **kwargs)

    def clip_gradients(self, max_norm: float) -> None:
        """``clip_grad_norm_``'s arithmetic over a list mixing kinds of tensors: each kind's norm as torch
        computes it, their 2-norm the total, every gradient scaled by ``max_norm / (total + 1e-6)`` clamped
        to 1."""
        kinds: dict = {}
        for _, p in self.named_parameters():
            if p.grad is not None:
                kinds.setdefault(_kind(p.grad), []).append(p.grad)
        if len(kinds) <= 1:
            return super().clip_gradients(max_norm)
        norms = []
        for grads in kinds.values():
            norm = torch.nn.utils.get_total_norm(grads)
            norms.append(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        total = torch.linalg.vector_norm(torch.stack(norms))
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for grads in kinds.values():
            for g in grads:
                g.mul_(coef.item())

    def accumulation(self, index: int, last: bool):
        run_switches(self, *self.case.plan.switch_calls(), index, last)
        return contextlib.nullcontext()
