"""Torch calls as plain data, with two backends: a system executes them on its model, the exporter prints them as
the script's source.  One representation, so that what a script shows is what the harness ran
(``fully_shard(resolve(model, "body.1"), mesh=mesh, ...)``), not a copy kept equal by tests.

A :class:`Call` names its callable (a name the backend binds, dotted names through attributes: ``torch.bfloat16``)
or a method of a value (``on``: the module at a case path, a name); its arguments are literals, :class:`At` (the
module at a path of the bound ``model``), :class:`Name` (a value the backend binds: ``mesh``), lists, tuples and
sets of those, or other calls (a policy's constructor).  :class:`Let` binds a name to a value (``model = FSDP(model,
...)`` rebinds the model itself).
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
    """``fn(*args, **kwargs, **splat)``, or the method ``fn`` of the value ``on``."""

    fn: str
    args: tuple = ()
    kwargs: tuple[tuple[str, Any], ...] = ()
    on: Any = None
    #: A bound dict whose items are keyword arguments too (``**kwargs`` of a script).
    splat: Name | None = None


@dataclass(frozen=True)
class Let:
    """``name = value``: binds ``name`` for the calls after it."""

    name: str
    value: Any


def keywords(**kwargs) -> tuple[tuple[str, Any], ...]:
    """``Call.kwargs`` in the order given."""
    return tuple(kwargs.items())


# ---------------------------------------------------------------------------------------------- executing them


def run(calls, names: dict) -> dict:
    """Execute ``calls``, each name bound by ``names`` (``model``: the model the paths of :class:`At` are on), which
    their :class:`Let` statements rebind; returns the names as they end."""
    names = dict(names)
    for call in calls:
        if isinstance(call, Let):
            names[call.name] = _value(call.value, names)
        else:
            _value(call, names)
    return names


def lookup(name: str, names: dict):
    """The value of a (dotted) name in ``names``."""
    head, *rest = name.split(".")
    if head not in names:
        raise KeyError(f"a call names {head!r}, which its backend does not bind (binds: {', '.join(sorted(names))})")
    value = names[head]
    for attr in rest:
        value = getattr(value, attr)
    return value


def _value(v, names: dict):
    from parityfuzz.systems.base import resolve

    if isinstance(v, Call):
        fn = getattr(_value(v.on, names), v.fn) if v.on is not None else lookup(v.fn, names)
        kwargs = {k: _value(a, names) for k, a in v.kwargs}
        return fn(*(_value(a, names) for a in v.args), **kwargs, **(_value(v.splat, names) if v.splat else {}))
    if isinstance(v, At):
        return resolve(names["model"], v.path)
    if isinstance(v, Name):
        return lookup(v.name, names)
    if isinstance(v, (list, tuple, set, frozenset)):
        return type(v)(_value(a, names) for a in v)
    return v


# ----------------------------------------------------------------------------------------------- printing them


def source(v, model: str = "model") -> str:
    """The script's expression for a call or an argument (``model``: the script's variable holding the model)."""
    if isinstance(v, Let):
        return f"{v.name} = {source(v.value, model)}"
    if isinstance(v, Call):
        return f"{_callee(v, model)}({', '.join(_arguments(v, model))})"
    if isinstance(v, At):
        return f'resolve({model}, "{v.path}")' if v.path else model
    if isinstance(v, Name):
        return v.name
    if isinstance(v, list):
        return f"[{', '.join(source(a, model) for a in v)}]"
    if isinstance(v, tuple):
        return f"({', '.join(source(a, model) for a in v)}{',' if len(v) == 1 else ''})"
    if isinstance(v, (set, frozenset)):
        return f"{{{', '.join(sorted(source(a, model) for a in v))}}}" if v else "set()"
    return repr(v)


def statement(v, model: str = "model", width: int = 110) -> str:
    """A call or :class:`Let` as a script's statement: one line, or, past ``width`` characters, its arguments one
    per line under the opening parenthesis."""
    line = source(v, model)
    call = v.value if isinstance(v, Let) else v
    if len(line) <= width or not isinstance(call, Call):
        return line
    head = (f"{v.name} = " if isinstance(v, Let) else "") + f"{_callee(call, model)}("
    return head + (",\n" + " " * len(head)).join(_arguments(call, model)) + ")"


def _callee(call: Call, model: str) -> str:
    return f"{source(call.on, model)}.{call.fn}" if call.on is not None else call.fn


def _arguments(call: Call, model: str) -> list[str]:
    """A call's arguments as the script writes them: positional, keyword, then the ``**`` dict."""
    return ([source(a, model) for a in call.args] + [f"{k}={source(a, model)}" for k, a in call.kwargs]
            + ([f"**{source(call.splat, model)}"] if call.splat else []))


__all__ = ["At", "Call", "Let", "Name", "keywords", "lookup", "run", "source", "statement"]
