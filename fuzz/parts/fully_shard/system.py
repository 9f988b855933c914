"""System under test: FSDP2 ``fully_shard`` applied per the case's plan.

Activation checkpointing (composable, wrapper or
``apply_activation_checkpointing``, before or after ``fully_shard``), CPU
offload, mixed precision, explicit prefetching, a registered forward method,
``.to(torch.float64)`` after sharding and the gradient accumulation controls
(``set_requires_gradient_sync``, ``set_requires_all_reduce``,
``set_is_last_backward``, ``set_reshard_after_backward``, ``unshard``) come
from the case.  Invariants are checked after every forward and after each
step's last backward; on an accelerator the root is fed its inputs on the CPU
(FSDP2's root moves forward inputs to the model's device).
"""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn as nn
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from parityfuzz.parts.activation_checkpoint.apply import apply_checkpoint
from parityfuzz.parts.fully_shard import switch_calls
from parityfuzz.run import calls
from parityfuzz.systems.base import InvariantViolation, System, resolve


def torch_names() -> dict:
    """The torch names the fully_shard part's calls use (:func:`parityfuzz.parts.fully_shard.fully_shard_call`)."""
    from torch.distributed.fsdp import register_fsdp_forward_method

    return {"torch": torch, "fully_shard": fully_shard, "MixedPrecisionPolicy": MixedPrecisionPolicy,
            "CPUOffloadPolicy": CPUOffloadPolicy, "register_fsdp_forward_method": register_fsdp_forward_method}


def set_post_optim_event(root, device: torch.device) -> None:
    """``root.set_post_optim_event`` with an event just recorded on ``device``'s current stream (on CPU the device
    module's ``Event``, a stub: what torch gives there, see the fsdp2 family's ``post_optim_event``)."""
    event = torch.get_device_module(device.type).Event()
    event.record()
    root.set_post_optim_event(event)


def run_switches(system: System, first: list, every: list, index: int, last: bool) -> None:
    """The switch calls ``first`` (at microbatch ``index`` 0) and ``every`` on ``system``'s model (``last``: whether
    it is the step's last microbatch), as an exported script prints them (``switches_source``)."""
    calls.run((first if index == 0 else []) + every, {"model": system.model, "last": last, "DEVICE": system.ctx.device,
                                                      "set_post_optim_event": set_post_optim_event})


def check_resharded(named_parameters, when: str) -> None:
    """FSDP2's contract: with resharding after backward on, every managed parameter is registered sharded
    (exported scripts run this function too)."""
    from torch.distributed.tensor import DTensor

    unsharded = [n for n, p in named_parameters if not isinstance(p, DTensor)]
    if unsharded:
        raise InvariantViolation(f"{when}, parameters are not registered as sharded DTensors: "
                                 f"{', '.join(unsharded[:5])}")


class FSDP2System(System):
    name = "fsdp2"
    sharded_scaler = True
    converts_after_wrap = True  # train.to_float64: .to(torch.float64) on the sharded model
    checkpoint_kwargs: dict = {}  # passed to the checkpoint function of every activation checkpoint of the plan

    def data_parallel_mesh(self):
        """The mesh ``fully_shard`` takes: the case's whole mesh (1-D, or HSDP's 2-D)."""
        return self.ctx.mesh(self.case.mesh.shape, self.case.mesh.names)

    def names(self, model: nn.Module) -> dict:
        """What the plan's calls (:meth:`parityfuzz.parts.fully_shard.FullyShardPlan.calls`) name, bound."""
        return {**torch_names(), "model": model, "mesh": self.data_parallel_mesh() if self.case.plan.wraps else None,
                "apply_checkpoint": functools.partial(apply_checkpoint, **self.checkpoint_kwargs)}

    def wrap(self, model: nn.Module) -> nn.Module:
        calls.run(self.case.plan.calls(), self.names(model))
        self._ran: set[str] = set()  # wrapped modules whose forward ran in the current pass
        for w in self.case.plan.wraps:
            resolve(model, w.path).register_forward_pre_hook(lambda *_, path=w.path: self._ran.add(path))
        return model

    def forward(self, batch, module=None):
        self._ran.clear()
        if module is not None:
            out = module(batch)
        else:
            if batch.device.type != "cpu":  # invariant (accelerator runs): the root moves inputs to its device
                batch = batch.cpu()
            out = self.model.forward_alt(batch) if self.case.plan.forward_method else self.model(batch)
        self.check_resharded_after_forward()
        return out

    def forward_backward(self, batch, target, path=None):
        loss = super().forward_backward(batch, target, path)
        if self.last:
            self.check_resharded("after the last backward of a step")
        return loss

    def check_resharded(self, when: str) -> None:
        if self.case.plan.wraps:  # (tensor parallelism alone shards nothing)
            check_resharded(self.named_parameters(), when)

    def check_resharded_after_forward(self) -> None:
        """Invariant: after the forward, modules that ran and reshard after forward have their sharded DTensors
        registered.  (A module that did not run keeps whatever state the last backward left, e.g. unsharded
        under ``set_reshard_after_backward(False)``.)"""
        from torch.distributed.tensor import DTensor

        unsharded = []
        for w in self.case.plan.wraps:
            if w.reshard_after_forward is False or w.path not in self._ran:
                continue
            for group in resolve(self.model, w.path)._get_fsdp_state()._fsdp_param_groups:
                for fp in group.fsdp_params:
                    if not isinstance(getattr(fp._module_info.module, fp._module_info.param_name), DTensor):
                        unsharded.append(f"{w.path or '<root>'}:{fp._module_info.param_name}")
        if unsharded:
            raise InvariantViolation("after forward, parameters of modules with reshard_after_forward are not "
                                     f"registered as sharded DTensors: {', '.join(unsharded[:5])}")

    def accumulation(self, index: int, last: bool):
        run_switches(self, *switch_calls(self.case.plan, self.case.train.microbatches), index, last)
        return contextlib.nullcontext()
