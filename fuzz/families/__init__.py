"""System families: one registry, torch-free.

A family is a way of training in parallel (``fsdp2``, ``fsdp2_tp``, ``fsdp1``, ``fsdp1_tp``, ``zero``,
``composable``).  Each brings one module here (its plan type, validation, feature tags, mesh axes,
reference rule and printout), one strategy module in ``strategies/`` and one system module in ``fuzz/systems/``.  This registry
is the only place that maps a family name to them: the executor, the oracle and the engine never name a
family.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

#: Family name -> its module in this package.
REGISTRY = {
    "fsdp2": "parityfuzz.families.fsdp2",
    "fsdp2_tp": "parityfuzz.families.fsdp2_tp",
    "fsdp1": "parityfuzz.families.fsdp1",
    "fsdp1_tp": "parityfuzz.families.fsdp1_tp",
    "zero": "parityfuzz.families.zero",
    "composable": "parityfuzz.families.composable",
}


@dataclass(frozen=True)
class Family:
    """What the torch-free side knows of a family."""

    name: str
    #: The plan dataclass (a :class:`parityfuzz.case.core.Plan` subclass whose ``family`` is ``name``).
    plan_type: type
    #: The axis sets its meshes may have (names from :data:`parityfuzz.case.mesh.AXES`).
    meshes: tuple[tuple[str, ...], ...]
    #: The registered system (``parityfuzz.systems``) that applies its plan.
    system: str
    #: The module (``strategies/``) whose ``cases`` strategy draws its cases.
    strategy: str
    #: ``reference(case)``: the registered system its cases are compared with.
    reference: Callable
    #: ``validate(case)``: raise ``CaseError`` for a plan that does not fit the case (the generic parts are
    #: checked before).
    validate: Callable
    #: ``features(case)``: the family's own feature tags.
    features: Callable
    #: ``describe(case)``: ``(notes per module path, lines about the plan)`` for the case printout.
    describe: Callable
    #: ``promise(case)``: the dtypes the case promises (:class:`parityfuzz.case.dtypes.Promise`) and ``precision(case)``:
    #: its least precise dtype, where the family's mixed precision is not FSDP2's ``MixedPrecisionPolicy``.
    promise: Callable | None = None
    precision: Callable | None = None
    #: ``expected_error(case, device_type)``: the :class:`parityfuzz.case.ExpectedError` torch raises for this case on
    #: this kind of device (``"cpu"``, ``"cuda"``), or None: documented refusals that depend on the machine.
    expected_error: Callable | None = None


def get(name: str) -> Family:
    """The family registered as ``name``; ``KeyError`` naming the known ones otherwise."""
    if name not in REGISTRY:
        raise KeyError(f"unknown family {name!r} (known: {', '.join(sorted(REGISTRY))})")
    return importlib.import_module(REGISTRY[name]).FAMILY


__all__ = ["REGISTRY", "Family", "get"]
