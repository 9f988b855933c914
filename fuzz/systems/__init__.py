"""Systems: ways to train a case's model, all behind one interface.

References (``ddp``; ``ddp_mp``, which emulates mixed precision, and ``ddp_mp_tp``, the same on a
tensor-parallel model; ``ddp_ignoring``, which leaves FSDP1's ignored modules unreduced; ``ddp_mp_fsdp1``, which
emulates FSDP1's ``MixedPrecision``; ``zero_reference``, DDP with the whole optimizer, modelling ZeRO's overlap warm-up) and systems under
test (``fsdp2``, ``fsdp2_tp``, ``fsdp1``, ``fsdp1_tp``, ``zero``, ``composable``) subclass
:class:`~parityfuzz.systems.base.System`.  A case names its systems by registry name
by the name an installed package registers it under (entry-point group ``parityfuzz.systems``: a user's own
system under test), or as an importable ``module:attribute`` (test-only faulty systems).
"""

from __future__ import annotations

import importlib

from parityfuzz.systems.base import RankContext, System

REGISTRY: dict[str, str] = {
    "ddp": "parityfuzz.systems.ddp:DDPSystem",
    "ddp_mp": "parityfuzz.systems.mp_reference:MixedPrecisionReference",
    "ddp_mp_tp": "parityfuzz.systems.fsdp2_tp:MixedPrecisionTPReference",
    "fsdp2": "parityfuzz.systems.fsdp2:FSDP2System",
    "fsdp2_tp": "parityfuzz.systems.fsdp2_tp:FSDP2TPSystem",
    "fsdp1": "parityfuzz.systems.fsdp1:FSDP1System",
    "fsdp1_tp": "parityfuzz.systems.fsdp1_tp:FSDP1TPSystem",
    "zero": "parityfuzz.systems.zero:ZeroSystem",
    "zero_reference": "parityfuzz.systems.zero:ZeroReference",
    "composable": "parityfuzz.systems.composable:ComposableSystem",
    "ddp_ignoring": "parityfuzz.systems.fsdp1:DDPIgnoringSystem",
    "ddp_mp_fsdp1": "parityfuzz.systems.fsdp1_mp:FSDP1MixedPrecisionReference",
}


#: The entry-point group through which an installed package registers its own systems under test by name
#: (``[project.entry-points."parityfuzz.systems"] mine = "mypackage.systems:MySystem"``).
ENTRY_POINTS = "parityfuzz.systems"


def plugged() -> dict[str, str]:
    """The systems installed packages register, as ``{name: "module:attribute"}``."""
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINTS)}


def resolve(name: str) -> type[System]:
    """The System class a case names (the registry's, a plug-in's registered name, or ``module:attribute``);
    raises ``ValueError`` naming it if unknown."""
    target = REGISTRY.get(name) or (plugged().get(name, name) if ":" not in name else name)
    if ":" not in target:
        raise ValueError(f"unknown system {name!r} (registered: {', '.join(sorted(REGISTRY))}; installed plug-ins: "
                         f"{', '.join(sorted(plugged())) or 'none'}; or give module:attribute)")
    module, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot load system {name!r}: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, System)):
        raise ValueError(f"system {name!r} is not a parityfuzz System subclass")
    return cls


__all__ = ["ENTRY_POINTS", "REGISTRY", "RankContext", "System", "plugged", "resolve"]
