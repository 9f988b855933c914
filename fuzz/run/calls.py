"""Torch calls as plain data, with two backends: a system executes them on its model, the exporter prints them as
the script's source.  One representation, so that what a script shows is what the harness ran
(``fully_shard(resolve(model, "body.1"), mesh=mesh, ...)``), not a copy kept equal by tests.

A :class:`Call` names its callable (a name the backend binds, dotted names through attributes: ``torch.bfloat16``)
or a method of the module at a case path (``on``); its arguments are literals, :class:`At` (the module at a path),
:class:`Name` (a value the backend binds: ``mesh``), lists of those, or other calls (a policy's constructor).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class At:
    """The module at a case path of ``model`` (``""``: the model)."""

    path: str


@dataclass(frozen=True)
class Name:
    """A value the backend binds (dotted: attributes of a bound value, ``torch.bfloat16``)."""

    name: str


@dataclass(frozen=True)
class Call:
    """``fn(*args, **kwargs)``, or the method ``fn`` of the module at ``on``."""

    fn: str
    args: tuple = ()
    kwargs: tuple[tuple[str, Any], ...] = ()
    on: At | None = None


def keywords(**kwargs) -> tuple[tuple[str, Any], ...]:
    """``Call.kwargs`` in the order given."""
    return tuple(kwargs.items())


# ---------------------------------------------------------------------------------------------- executing them


def run(calls, model, names: dict):
    """Execute ``calls`` on ``model``, each name bound by ``names``; returns the last call's result."""
    result = None
    for call in calls:
        result = _value(call, model, names)
    return result


def _lookup(name: str, names: dict):
    head, *rest = name.split(".")
    if head not in names:
        raise KeyError(f"a call names {head!r}, which its backend does not bind (binds: {', '.join(sorted(names))})")
    value = names[head]
    for attr in rest:
        value = getattr(value, attr)
    return value


def _value(v, model, names: dict):
    from parityfuzz.systems.base import resolve

    if isinstance(v, Call):
        fn = getattr(_value(v.on, model, names), v.fn) if v.on is not None else _lookup(v.fn, names)
        return fn(*(_value(a, model, names) for a in v.args), **{k: _value(a, model, names) for k, a in v.kwargs})
    if isinstance(v, At):
        return resolve(model, v.path)
    if isinstance(v, Name):
        return _lookup(v.name, names)
    if isinstance(v, (list, tuple)):
        return type(v)(_value(a, model, names) for a in v)
    return v


# ----------------------------------------------------------------------------------------------- printing them


def source(v, model: str = "model") -> str:
    """The script's expression for a call or an argument (``model``: the script's variable holding the model)."""
    if isinstance(v, Call):
        args = [source(a, model) for a in v.args] + [f"{k}={source(a, model)}" for k, a in v.kwargs]
        return f"{source(v.on, model) + '.' if v.on is not None else ''}{v.fn}({', '.join(args)})"
    if isinstance(v, At):
        return f'resolve({model}, "{v.path}")' if v.path else model
    if isinstance(v, Name):
        return v.name
    if isinstance(v, list):
        return f"[{', '.join(source(a, model) for a in v)}]"
    if isinstance(v, tuple):
        return f"({', '.join(source(a, model) for a in v)}{',' if len(v) == 1 else ''})"
    return repr(v)


__all__ = ["At", "Call", "Name", "keywords", "run", "source"]
