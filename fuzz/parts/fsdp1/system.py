"""System under test of the ``fsdp1`` family: ``FullyShardedDataParallel`` (FSDP1), and its reference DDP
told to ignore FSDP1's ignored modules.

Applied in this order: per-rank weights for ``sync_module_states`` (FSDP1 must broadcast rank 0's),
checkpointing before wrapping, the manual nested instances (children first), the root instance with the
plan's auto-wrap policy, checkpointing after wrapping (``apply_activation_checkpointing`` reaching into the
FSDP1 wrappers, as torchtune applies it).  Clipping goes through ``FullyShardedDataParallel.clip_grad_norm_``.

What the trace records: FSDP1 leaves each rank a flat shard, so the full values are gathered.  Parameters come
from FSDP1's own API, ``summon_full_params``.  For gradients FSDP1 offers ``summon_full_params(with_grads=True)``
only with ``use_orig_params=True``, and its maintainers call it experimental (it aborts gloo with a collective
mismatch on a float64 unit whose shard on some rank is alignment padding only: a torch bug found here, in the
issue note); so gradients are read, for both settings, from each instance's ``FlatParameter`` gradient,
all-gathered over its shard group and split by the flat parameter's own layout (``_fqns``, ``_shapes``,
``_numels_with_padding``, ``_is_padding_mask``: private attributes, those FSDP1's state-dict code reads).
"""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import (BackwardPrefetch, CPUOffload, FullyShardedDataParallel as FSDP,
                                    MixedPrecision, ShardingStrategy)
from torch.distributed.fsdp.wrap import ModuleWrapPolicy, lambda_auto_wrap_policy, size_based_auto_wrap_policy

from parityfuzz.parts.fsdp1 import HYBRID, calls as plan_calls
from parityfuzz.run import build, calls
from parityfuzz.systems.base import System, case_name, holder, resolve
from parityfuzz.systems.ddp import DDPSystem
from parityfuzz.parts.activation_checkpoint.apply import apply_checkpoint
from parityfuzz.systems.base import InvariantViolation

#: The names of the module classes the plan's calls may name (``torch.nn``, the model's own).
MODEL_CLASSES = {"nn": nn, **{name: getattr(build, name) for name in plan_calls.KIND_CLASSES.values()
                              if "." not in name}}
#: The class of each module kind ``ModuleWrapPolicy`` may name (see ``parityfuzz.run.build``).
KIND_CLASSES = {kind: calls.lookup(name, MODEL_CLASSES) for kind, name in plan_calls.KIND_CLASSES.items()}


def wrap_at(model: nn.Module, path: str, wrapper, **kwargs) -> None:
    """Replace the module at ``path`` (not the root) by ``wrapper(module, **kwargs)`` in its parent."""
    owner, attr = holder(model, path)
    setattr(owner, attr, wrapper(getattr(owner, attr), **kwargs))


def one_of(*modules):
    """A ``lambda_auto_wrap_policy`` predicate: whether a module is one of ``modules``."""
    return lambda module: any(module is m for m in modules)


def parameters_of(*modules) -> list:
    """The parameters of ``modules`` (FSDP1's ``ignored_states``)."""
    return [p for m in modules for p in m.parameters()]


def ignored_names(model: nn.Module, paths) -> frozenset[str]:
    """Case names of the parameters and buffers of the modules at ``paths`` (``buffer:`` for buffers)."""
    names = set()
    for path in paths:
        module = resolve(model, path)
        names.update(f"{path}.{case_name(n)}" for n, _ in module.named_parameters())
        names.update(f"buffer:{path}.{case_name(n)}" for n, _ in module.named_buffers())
    return frozenset(names)


class FSDP1System(System):
    """The optimizer takes what the base's ``named_parameters`` gives on the wrapped model: the original
    parameters (their local views) with ``use_orig_params=True``, else FSDP1's flat parameters (and the ignored
    modules' own)."""

    name = "fsdp1"
    sharded_scaler = True

    #: The name of the ``device_mesh`` every instance takes, which :meth:`names` binds (``""``: the case's mesh
    #: where a hybrid plan takes one).
    device_mesh = ""

    def names(self, model: nn.Module) -> dict:
        """What the plan's calls (:func:`parityfuzz.parts.fsdp1.calls.wrap_calls`) name, bound."""
        plan = self.case.plan
        mesh = (self.ctx.mesh(self.case.mesh.shape, self.case.mesh.names)
                if plan.sharding in HYBRID and plan.hybrid_via != "auto" else None)
        return {"torch": torch, "functools": functools, "dict": dict, "model": model, "device": self.ctx.device,
                "mesh": mesh, "FSDP": FSDP, "ShardingStrategy": ShardingStrategy, "BackwardPrefetch": BackwardPrefetch,
                "CPUOffload": CPUOffload, "MixedPrecision": MixedPrecision, "ModuleWrapPolicy": ModuleWrapPolicy,
                "size_based_auto_wrap_policy": size_based_auto_wrap_policy,
                "lambda_auto_wrap_policy": lambda_auto_wrap_policy, "wrap_at": wrap_at, "one_of": one_of,
                "parameters_of": parameters_of, "apply_checkpoint": apply_checkpoint, **MODEL_CLASSES}

    def wrap(self, model: nn.Module) -> nn.Module:
        plan = self.case.plan
        self._ignored = ignored_names(model, plan.ignored)
        if plan.sync_module_states and self.ctx.rank != 0:
            self._start_elsewhere(model)
        model = calls.run(plan_calls.wrap_calls(self.case, self.device_mesh), self.names(model))["model"]
        if plan.sharding in HYBRID:
            self._check_hybrid_groups(model)
        return model

    def _start_elsewhere(self, model: nn.Module) -> None:
        """Other initial weights on this rank (not rank 0) for what FSDP1 manages: ``sync_module_states`` must
        replace them by rank 0's (ignored modules keep theirs, as FSDP1 documents)."""
        g = torch.Generator().manual_seed(1000 + self.ctx.rank)
        with torch.no_grad():
            for name, t in [*model.named_parameters(), *(("buffer:" + n, b) for n, b in model.named_buffers())]:
                if case_name(name) not in self._ignored and t.is_floating_point():
                    local = t.to_local() if hasattr(t, "to_local") else t  # a tensor-parallel parameter's shard
                    local.add_(torch.randn(local.shape, generator=g, dtype=torch.float64).to(t.dtype))

    def _check_hybrid_groups(self, model: nn.Module) -> None:
        """The hybrid groups FSDP1 uses must be the case's mesh (torch's own ones included)."""
        got = (dist.get_world_size(model._inter_node_pg), dist.get_world_size(model.process_group))
        if got != tuple(self.case.mesh.shape):
            raise RuntimeError(f"parityfuzz: FSDP1's hybrid groups are (inter, intra) = {got}, the case's mesh "
                               f"says {tuple(self.case.mesh.shape)} (torch's own groups follow the machine)")

    def rank_local(self) -> frozenset[str]:
        return self._ignored

    def accumulation(self, index: int, last: bool):
        return self.model.no_sync() if self.case.plan.no_sync and not last else contextlib.nullcontext()

    def clip_gradients(self, max_norm: float) -> None:
        self.model.clip_grad_norm_(max_norm)

    def parameters(self) -> dict[str, torch.Tensor]:
        with FSDP.summon_full_params(self.model, writeback=False):
            return {case_name(n): p.detach().clone() for n, p in self.model.named_parameters()}

    def gradients(self) -> dict[str, torch.Tensor | None]:
        grads = {case_name(n): None if p.grad is None else p.grad.detach().clone()  # the ignored modules' own
                 for n, p in self.model.named_parameters() if case_name(n) in self._ignored}
        for prefix, module in self.model.named_modules():
            if isinstance(module, FSDP) and module._handle is not None:
                grads.update(_flat_gradients(module, case_name(prefix + "." if prefix else "")))
        return grads


def _flat_gradients(module: FSDP, prefix: str) -> dict[str, torch.Tensor | None]:
    """The full gradients of the original parameters of one FSDP1 instance, as its optimizer sees them: with
    ``use_orig_params=True`` the original parameters' gradients (views FSDP1 sets on each rank's piece; None
    where no rank shows one), else the ``FlatParameter``'s gradient (None for all its parameters where it has
    none).  Each rank's flat shard is put together from them and all-gathered over the shard group."""
    handle = module._handle
    flat = handle.flat_param
    names = [prefix + case_name(f) for f in flat._fqns]
    dtype = flat.dtype
    if flat._params is not None:  # use_orig_params=True
        # Put together in float64 (exact for every dtype); each gradient's own dtype (FSDP1's
        # keep_low_precision_grads leaves it in low precision) is agreed over the group, 0 for none.
        shard = torch.zeros(flat.numel(), dtype=torch.float64, device=flat.device)
        shown = torch.zeros(len(names))
        for i, (p, info) in enumerate(zip(flat._params, flat._shard_param_infos)):
            if info.in_shard and p.grad is not None:
                _check_gradient_shape(p.grad, p, names[i])
                shard[info.offset_in_shard:info.offset_in_shard + info.numel_in_shard] = p.grad.detach().reshape(-1)
                shown[i] = 1 + _GRAD_DTYPES.index(p.grad.dtype)
        dist.all_reduce(shown, op=dist.ReduceOp.MAX, group=module.process_group)
    else:
        if flat.grad is None:
            return dict.fromkeys(names)
        _check_gradient_shape(flat.grad, flat, f"{prefix or '<root>.'}FlatParameter")
        shard, dtype, shown = flat.grad.detach(), flat.grad.dtype, torch.ones(len(names))
    if handle.uses_sharded_strategy:
        full = shard.new_empty(shard.numel() * dist.get_world_size(module.process_group))
        dist.all_gather_into_tensor(full, shard.contiguous(), group=module.process_group)
        shard = full
    out, offset, views = {}, 0, iter(zip(names, flat._shapes, shown.tolist()))
    for numel, padding in zip(flat._numels_with_padding, flat._is_padding_mask):
        if not padding:
            name, shape, seen = next(views)
            own = _GRAD_DTYPES[int(seen) - 1] if flat._params is not None and seen else dtype
            out[name] = shard[offset:offset + numel].view(shape).to(own, copy=True) if seen else None
        offset += numel
    return out


def _check_gradient_shape(grad: torch.Tensor, param: torch.Tensor, name: str) -> None:
    """Invariant: a parameter's gradient has its parameter's shape (what autograd's accumulation and every
    optimizer's step assume).  FSDP1 leaves an unsharded, unreduced gradient on a sharded FlatParameter where a
    unit sits out the synced microbatch after no_sync() (a known bug): said so, not a crash in the reading."""
    if grad.shape != param.shape:
        raise InvariantViolation(f"the gradient of {name} has shape {tuple(grad.shape)}, its parameter "
                                 f"{tuple(param.shape)}: the optimizer would step it with a gradient of another shape")


_GRAD_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


class DDPIgnoringSystem(DDPSystem):
    """DDP that leaves the parameters of FSDP1's ignored modules alone (not reduced: each rank trains its
    own copy), as FSDP1 does."""

    name = "ddp_ignoring"

    def wrap(self, model: nn.Module) -> nn.Module:
        self._ignored = ignored_names(model, self.case.plan.ignored)
        if not any(p.requires_grad for n, p in model.named_parameters() if case_name(n) not in self._ignored):
            return _Local(model)  # nothing left to reduce (DDP refuses a module with nothing to train)
        raw = [n.removeprefix("buffer:") for n in self._ignored]
        DDP = torch.nn.parallel.DistributedDataParallel
        DDP._set_params_and_buffers_to_ignore_for_model(model, raw)
        return super().wrap(model)

    def rank_local(self) -> frozenset[str]:
        return self._ignored

    @classmethod
    def sharded_reference_scaler(cls, case) -> bool:
        """Where FSDP1 scales with ``ShardedGradScaler``: each rank's own copy of an ignored module can overflow
        alone, and that scaler syncs infs and NaNs across the ranks, so every rank skips the step (with torch.amp.GradScaler
        the reference skipped on the overflowing rank alone: corpus/fsdp1/fad3c69dcd1b09f4)."""
        return case.train.scaler != "amp"


class _Local(nn.Module):
    """A module trained on each rank alone, in DDP's shape (``module``, ``no_sync``): what DDP would do with
    every parameter ignored."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, *args):
        return self.module(*args)

    def no_sync(self):
        return contextlib.nullcontext()
