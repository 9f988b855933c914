"""Strict JSON for cases: dataclasses to dicts (fields at their defaults left out, so corpus files stay
readable) and back, with every error naming the dotted field; plans as a tagged union on ``family``; older
schemas upgraded on read."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, Union

from parityfuzz.case.errors import CaseError


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        out = {"family": obj.family} if isinstance(getattr(type(obj), "family", None), str) else {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
            if f.name != "schema" and default is not dataclasses.MISSING and value == default \
                    and type(value) is type(default):
                continue
            out[f.name] = to_jsonable(value)
        return out
    if isinstance(obj, tuple):
        return [to_jsonable(v) for v in obj]
    return obj


def from_jsonable(tp: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise CaseError(where, f"expected an object, got {type(data).__name__}")
        if isinstance(getattr(tp, "family", None), str):  # a plan: the tagged union member its "family" names
            from parityfuzz import families

            name = data.get("family")
            if name not in families.MODULES:
                raise CaseError(_join(where, "family"), f"unknown family {name!r} (known: "
                                f"{', '.join(sorted(families.MODULES))})")
            tp = families.get(name).plan_type
            data = {k: v for k, v in data.items() if k != "family"}
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise CaseError(_join(where, unknown[0]), f"unknown field (known: {', '.join(sorted(names))})")
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in data:
                kwargs[f.name] = from_jsonable(hints[f.name], data[f.name], _join(where, f.name))
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise CaseError(_join(where, f.name), "missing required field")
        return tp(**kwargs)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(data, list):
            raise CaseError(where, f"expected a list, got {type(data).__name__}")
        return tuple(from_jsonable(args[0], v, f"{where}[{i}]") for i, v in enumerate(data))
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args:  # Optional[X]: null, or an X
            if data is None:
                return None
            rest = [a for a in args if a is not type(None)]
            if len(rest) == 1:
                return from_jsonable(rest[0], data, where)
        # Union[bool, int]: bool first so that JSON true stays a bool.
        for arg in typing.get_args(tp):
            if _scalar_ok(arg, data):
                return data
        names = " or ".join(a.__name__ for a in typing.get_args(tp))
        raise CaseError(where, f"expected {names}, got {json.dumps(data)}")
    if _scalar_ok(tp, data):
        return float(data) if tp is float else data
    raise CaseError(where, f"expected {tp.__name__}, got {json.dumps(data)}")


def _scalar_ok(tp: Any, data: Any) -> bool:
    if tp is bool:
        return isinstance(data, bool)
    if tp is int:
        return isinstance(data, int) and not isinstance(data, bool)
    if tp is float:
        return isinstance(data, (int, float)) and not isinstance(data, bool)
    if tp is str:
        return isinstance(data, str)
    return False


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


# --------------------------------------------------------------------------- older schemas

#: FSDP2 switches schema 1 kept in ``train``; schema 2 keeps them in the FSDP2 plan.
_FSDP2_TRAIN_KEYS = ("no_sync", "is_last_backward", "reshard_after_backward", "unshard_first", "no_all_reduce",
                     "forward_method")
_SCHEMA1_AXES = {"shard": "dp_shard", "replicate": "dp_replicate"}


def upgrade(data: Any) -> Any:
    """A case dict of an older schema, as the current schema writes it (other input is returned as is)."""
    if not isinstance(data, dict) or data.get("schema") != 1:
        return data
    data = dict(data)
    mesh = data.get("mesh")
    if isinstance(mesh, dict) and isinstance(mesh.get("names", ["shard"]), list):
        mesh = dict(mesh)
        mesh["names"] = [_SCHEMA1_AXES.get(n, n) for n in mesh.get("names", ["shard"])]
        data["mesh"] = mesh
    system = data.pop("system", "fsdp2")
    plan = dict(data.get("plan") or {}) if isinstance(data.get("plan", {}), dict) else data.get("plan")
    train = data.get("train")
    if isinstance(plan, dict):
        plan = {"family": "fsdp2", **plan}
        if isinstance(train, dict):
            train = dict(train)
            for key in _FSDP2_TRAIN_KEYS:
                if key in train:
                    plan[key] = train.pop(key)
            data["train"] = train
        data["plan"] = plan
    if system != "fsdp2":  # a plug-in system under test: kept by name
        data["system"] = system
    reference = data.pop("reference", "ddp")
    if reference != _fsdp2_reference(plan):  # kept only where it is not what the FSDP2 family's rule picks
        data["reference"] = reference
    data["schema"] = 2
    return data


def _fsdp2_reference(plan: Any) -> str:
    """The reference the FSDP2 family picks for a plan dict: the emulating one under mixed precision."""
    wraps = plan.get("wraps", [{}]) if isinstance(plan, dict) else []
    mixed = any(isinstance(w, dict) and (w.get("param_dtype") or w.get("reduce_dtype") or w.get("output_dtype")
                                         or w.get("cast_forward_inputs") is False) for w in wraps)
    return "ddp_mp" if mixed else "ddp"
