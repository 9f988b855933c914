"""Systems: ways to train a case's model, all behind one interface (:class:`~parityfuzz.systems.base.System`).

The generic reference is ``ddp``; every other system is a family's, named in its record
(:attr:`parityfuzz.families.Family.systems`: ``fsdp2`` and ``ddp_mp``, the emulation of ``MixedPrecisionPolicy``;
``fsdp2_tp`` and ``ddp_mp_tp``; ``fsdp1``, ``ddp_ignoring`` and ``ddp_mp_fsdp1``; ``fsdp1_tp``; ``zero`` and
``zero_reference``; ``composable``).  A case names its systems by registered name, by the name an installed package
registers it under (entry-point group ``parityfuzz.systems``: a user's own system under test), or as an
importable ``module:attribute`` (test-only faulty systems).
"""

from __future__ import annotations

import importlib

from parityfuzz.systems.base import RankContext, System


def registry() -> dict[str, str]:
    """Every registered system, ``{name: "module:Class"}`` (:func:`parityfuzz.families.registrations`)."""
    from parityfuzz import families

    return {name: entry.target for name, entry in families.registrations().items()}


#: The entry-point group through which an installed package registers its own systems under test by name
#: (``[project.entry-points."parityfuzz.systems"] mine = "mypackage.systems:MySystem"``).
ENTRY_POINTS = "parityfuzz.systems"


def plugged() -> dict[str, str]:
    """The systems installed packages register, as ``{name: "module:attribute"}``."""
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINTS)}


def system_class(name: str) -> type[System]:
    """The System class a case names (the registry's, a plug-in's registered name, or ``module:attribute``);
    raises ``ValueError`` naming it if unknown."""
    registered = registry() if ":" not in name else {}
    target = registered.get(name) or (plugged().get(name, name) if ":" not in name else name)
    if ":" not in target:
        raise ValueError(f"unknown system {name!r} (registered: {', '.join(sorted(registered))}; installed plug-ins: "
                         f"{', '.join(sorted(plugged())) or 'none'}; or give module:attribute)")
    module, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot load system {name!r}: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, System)):
        raise ValueError(f"system {name!r} is not a parityfuzz System subclass")
    return cls


__all__ = ["ENTRY_POINTS", "RankContext", "System", "plugged", "registry", "system_class"]
