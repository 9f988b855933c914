"""Systems: ways to train a case's model, all behind one interface.

References (``ddp``; ``ddp_mp``, which emulates mixed precision, and ``ddp_mp_tp``, the same on a
tensor-parallel model; ``ddp_ignoring``, which leaves FSDP1's ignored modules unreduced; ``ddp_mp_fsdp1``, which
emulates FSDP1's ``MixedPrecision``; ``zero_reference``, DDP with the whole optimizer, modelling ZeRO's overlap warm-up) and systems under
test (``fsdp2``, ``fsdp2_tp``, ``fsdp1``, ``fsdp1_tp``, ``zero``, ``composable``) subclass
:class:`~fuzz.systems.base.System`.  A case names its systems by registry name
or as an importable ``module:attribute`` (test-only faulty systems and user
plug-ins use the latter).
"""

from __future__ import annotations

import importlib

from fuzz.systems.base import RankContext, System

REGISTRY: dict[str, str] = {
    "ddp": "fuzz.systems.ddp:DDPSystem",
    "ddp_mp": "fuzz.systems.mp_reference:MixedPrecisionReference",
    "ddp_mp_tp": "fuzz.systems.fsdp2_tp:MixedPrecisionTPReference",
    "fsdp2": "fuzz.systems.fsdp2:FSDP2System",
    "fsdp2_tp": "fuzz.systems.fsdp2_tp:FSDP2TPSystem",
    "fsdp1": "fuzz.systems.fsdp1:FSDP1System",
    "fsdp1_tp": "fuzz.systems.fsdp1_tp:FSDP1TPSystem",
    "zero": "fuzz.systems.zero:ZeroSystem",
    "zero_reference": "fuzz.systems.zero:ZeroReference",
    "composable": "fuzz.systems.composable:ComposableSystem",
    "ddp_ignoring": "fuzz.systems.fsdp1:DDPIgnoringSystem",
    "ddp_mp_fsdp1": "fuzz.systems.fsdp1_mp:FSDP1MixedPrecisionReference",
}


def resolve(name: str) -> type[System]:
    """The System class a case names; raises ``ValueError`` naming it if unknown."""
    target = REGISTRY.get(name, name)
    if ":" not in target:
        raise ValueError(f"unknown system {name!r} (registered: {', '.join(sorted(REGISTRY))}; "
                         "or give module:attribute)")
    module, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot load system {name!r}: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, System)):
        raise ValueError(f"system {name!r} is not a parityfuzz System subclass")
    return cls


__all__ = ["REGISTRY", "RankContext", "System", "resolve"]
