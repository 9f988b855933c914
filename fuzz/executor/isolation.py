"""Every case starts from the same rank state.

Before a case the worker takes a :class:`Snapshot`; afterwards it puts back
whatever the case changed: functions of the torch namespaces a system might
patch (``torch.Tensor`` methods, collectives, functionals, FSDP2's and FSDP1's internal
modules and classes and the state-dict code, where test-only faults are injected), global module hooks,
the default dtype, grad mode, deterministic-algorithm flags and the RNG
streams.  Model-level hooks die with the model, which is rebuilt per case.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

import torch

#: Namespaces whose attributes any system (or a test-only fault) could patch; each family adds its own
#: (:attr:`parityfuzz.families.Family.patchable`).
GENERIC_PATCHABLE = ("torch", "torch.nn.functional", "torch.distributed", "torch.distributed.distributed_c10d",
                     "torch.autograd", "torch.optim",
                     # the state-dict code checkpoint events go through (a fault left there leaked into later cases)
                     "torch.distributed._state_dict_utils", "torch.distributed.checkpoint.state_dict",
                     # the training-loop dimensions' code: Dynamo's backend lookup (torch.compile), activation
                     # checkpointing's recompute (autocast state)
                     "torch._dynamo", "torch.utils.checkpoint")
#: Classes whose methods a test-only fault may patch inside torch, beyond each family's.
GENERIC_PATCHABLE_CLASSES = (("torch", "Tensor"), ("torch.utils.checkpoint", "CheckpointFunction"),
                             ("torch.distributed.fsdp.sharded_grad_scaler", "ShardedGradScaler"))


def patchable() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The namespaces and classes a rank restores after every case: the generic ones and every family's."""
    from parityfuzz import families

    names, classes = dict.fromkeys(GENERIC_PATCHABLE), dict.fromkeys(GENERIC_PATCHABLE_CLASSES)
    for family in families.records():
        names.update(dict.fromkeys(family.patchable))
        classes.update(dict.fromkeys(family.patchable_classes))
    return tuple(names), tuple(classes)


def _class(module: str, name: str) -> type:
    return getattr(importlib.import_module(module), name)


_MISSING = object()


def _global_hook_dicts() -> list[dict]:
    from torch.nn.modules import module as m

    names = [n for n in dir(m) if n.startswith("_global_") and n.endswith(("hooks", "hook"))]
    return [getattr(m, n) for n in names if isinstance(getattr(m, n), dict)]


@dataclass
class Snapshot:
    namespaces: dict
    class_attrs: dict
    hooks: list
    dtype: torch.dtype
    grad: bool
    deterministic: tuple
    rng: torch.Tensor

    @classmethod
    def take(cls) -> Snapshot:
        names, classes = patchable()
        return cls(
            namespaces={name: dict(vars(importlib.import_module(name))) for name in names},
            class_attrs={key: dict(vars(_class(*key))) for key in classes},
            hooks=[(d, dict(d)) for d in _global_hook_dicts()],
            dtype=torch.get_default_dtype(),
            grad=torch.is_grad_enabled(),
            deterministic=(torch.are_deterministic_algorithms_enabled(),
                           torch.is_deterministic_algorithms_warn_only_enabled()),
            rng=torch.get_rng_state(),
        )

    def restore(self) -> list[str]:
        """Undo what changed since the snapshot; return what was undone (for the log)."""
        undone = []
        for name, saved in self.namespaces.items():
            undone += _restore_attrs(importlib.import_module(name), saved, name)
        for key, saved in self.class_attrs.items():
            undone += _restore_attrs(_class(*key), saved, ".".join(key))
        for live, saved in self.hooks:
            if live != saved:
                undone.append("global module hooks")
                live.clear()
                live.update(saved)
        _clear_dtensor_sharding_caches()
        torch.set_default_dtype(self.dtype)
        torch.set_grad_enabled(self.grad)
        torch.use_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
        torch.set_rng_state(self.rng)
        return undone


def _clear_dtensor_sharding_caches() -> None:
    """Forget DTensor's cached sharding propagations (Python's and the C++ fast path's): a cached output spec is
    reused by every later op of the same schema, placement objects included, and a ``MaskPartial`` placement (a
    RowwiseParallel embedding's output) carries its mask buffer.  A case that fails between the embedding and the
    reduction leaves that mask materialized, and a later case of another model on the rank then meets it:
    'MaskBuffer has been materialized with conflicting data' eagerly, or a fake-tensor error when Dynamo traces
    the embedding (the sixth 30-minute run; both cases pass on a fresh rank).  Each role starts as on a fresh
    process."""
    if "torch.distributed.tensor" in sys.modules:
        from torch.distributed.tensor.debug import _clear_sharding_prop_cache

        _clear_sharding_prop_cache()


def _restore_attrs(obj, saved: dict, label: str) -> list[str]:
    """Put back replaced or added *callables* only.

    Module state that torch itself keeps (process-group counters and
    registries in ``distributed_c10d``, caches) must move forward: rolling it
    back makes the next ``new_group`` reuse a name.
    """
    undone = []
    current = dict(vars(obj))
    for key, value in saved.items():
        now = current.get(key, _MISSING)
        if now is not value and (_patchable(value) or _patchable(now)):
            setattr(obj, key, value)
            undone.append(f"{label}.{key}")
    for key in current.keys() - saved.keys():
        if not key.startswith("__") and _patchable(current[key]):
            delattr(obj, key)
            undone.append(f"{label}.{key}")
    return undone


def _patchable(value) -> bool:
    return callable(value) and not isinstance(value, type) or isinstance(value, (property, staticmethod, classmethod))
