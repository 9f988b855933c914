"""Single-step simplifications of a case: what the reduction after Hypothesis's shrink tries
(:mod:`parityfuzz.engine.reduce` runs them, keeping each change that still fails the same way until none does).

Plain data in, plain data out: each simplification edits the case's JSON (where fields at their defaults are
left out) and is kept only if the result validates and is strictly smaller (:func:`size`). What is tried:

- a module of the body removed (a child of a ``seq`` or ``block``), or a container replaced by one of its
  children; the plan's and the training spec's module paths follow (entries naming a removed module go,
  later siblings are renamed as the builder renames them);
- an embedding input and head replaced by dense input;
- each element of every list of the case (a wrap, a plan entry, a frozen module, a delay, ...);
- each field not at its default set back to it (a setting, an option of the checkpoint event, the event
  itself, ...), in every part of the case, so every family is covered without a reducer of its own;
- each integer made smaller (training steps, microbatches, widths, the event's step, ...), and the world size
  halved with the mesh's largest axis.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Iterator

from parityfuzz.case.core import Case
from parityfuzz.case.errors import CaseError
from parityfuzz.case.model import Node, child_names

#: Fields that identify a case rather than configure it: never reset.
_KEPT = {"schema", "seed", "family", "world_size"}


def size(data: Any) -> tuple[int, int, int, int]:
    """A case's size (its JSON), compared lexicographically: model nodes, list elements, fields, then the
    sum of its integers. Every simplification kept makes it strictly smaller, so a reduction ends."""
    counts = [0, 0, 0, 0]

    def walk(x: Any, in_model: bool) -> None:
        if isinstance(x, dict):
            counts[0] += in_model and "kind" in x
            counts[2] += len(x)
            for k, v in x.items():
                walk(v, in_model)
        elif isinstance(x, list):
            counts[1] += 0 if in_model else len(x)
            for v in x:
                walk(v, in_model)
        elif isinstance(x, int) and not isinstance(x, bool):
            counts[3] += abs(x)

    for key, value in data.items():
        if key != "seed":
            walk(value, key == "model")
    return tuple(counts)


def simplifications(case: Case) -> Iterator[tuple[str, Case]]:
    """``(what changed, the smaller case)`` for each valid single simplification of ``case``, the biggest
    changes first (modules, then list elements, then settings, then numbers)."""
    data = case.to_dict()
    limit = size(data)
    seen = set()
    for what, candidate in _candidates(data):
        key = json.dumps(candidate, sort_keys=True)
        if key in seen or size(candidate) >= limit:
            continue
        seen.add(key)
        try:
            smaller = Case.from_dict(candidate).validate()
        except CaseError:
            continue
        yield what, smaller


def _candidates(data: dict) -> Iterator[tuple[str, dict]]:
    yield from _model_candidates(data)
    yield from _list_candidates(data)
    yield from _default_candidates(data)
    yield from _number_candidates(data)


# ---- the model tree


def _model_candidates(data: dict) -> Iterator[tuple[str, dict]]:
    model = data["model"]
    if model.get("input") == "embedding":
        out = copy.deepcopy(data)
        for key in ("input", "vocab", "tie_head"):
            out["model"].pop(key, None)
        yield "dense input instead of the embedding and head", _remap(out, lambda p: None if p in (
            "inp", "head") else p)
    for path, node in _nodes(model["body"], "body"):
        children, names = node.get("children", []), _names(node)
        for i, child in enumerate(children):
            # replace the node by its i-th child: paths under that child move up, the rest of the node goes
            yield (f"{path} replaced by its child {names[i]}",
                   _edit_node(data, path, lambda _n, c=child: c, _moved(path, f"{path}.{names[i]}")))
            if node["kind"] in ("seq", "block") and len(children) > 1:
                rest = children[:i] + children[i + 1:]
                new_names = dict(zip([n for j, n in enumerate(names) if j != i], _names({**node, "children": rest})))
                yield (f"{path}.{names[i]} removed",
                       _edit_node(data, path, lambda n, r=rest: {**n, "children": r},
                                  _renamed(path, names[i], new_names)))


def _names(node: dict) -> list[str]:
    """The builder's names of a node's children (:func:`parityfuzz.case.model.child_names`), from its JSON."""
    children = tuple(Node(kind=c["kind"]) for c in node.get("children", []))
    return child_names(Node(kind=node["kind"], children=children))


def _nodes(node: dict, path: str) -> Iterator[tuple[str, dict]]:
    yield path, node
    for name, child in zip(_names(node), node.get("children", [])):
        yield from _nodes(child, f"{path}.{name}")


def _edit_node(data: dict, path: str, change: Callable[[dict], dict], paths: Callable[[str], str | None]) -> dict:
    out = copy.deepcopy(data)
    parts = path.split(".")[1:]
    if not parts:
        out["model"]["body"] = change(out["model"]["body"])
    else:
        parent = out["model"]["body"]
        for part in parts[:-1]:
            parent = _child(parent, part)
        siblings = parent["children"]
        index = _index(parent, parts[-1])
        siblings[index] = change(siblings[index])
    return _remap(out, paths)


def _child(node: dict, name: str) -> dict:
    return node["children"][_index(node, name)]


def _index(node: dict, name: str) -> int:
    return _names(node).index(name)


def _moved(path: str, child: str) -> Callable[[str], str | None]:
    """Paths after the node at ``path`` is replaced by its child at ``child``."""
    def move(p: str) -> str | None:
        if p == child or p.startswith(child + "."):
            return path + p[len(child):]
        if p == path or p.startswith(path + "."):
            return None
        return p
    return move


def _renamed(path: str, removed: str, new_names: dict[str, str]) -> Callable[[str], str | None]:
    """Paths after the child ``removed`` of the node at ``path`` is removed (the others renamed)."""
    def rename(p: str) -> str | None:
        if not p.startswith(path + "."):
            return p
        name, _, rest = p[len(path) + 1:].partition(".")
        if name == removed:
            return None
        return f"{path}.{new_names.get(name, name)}" + (f".{rest}" if rest else "")
    return rename


def _is_path(value: Any) -> bool:
    return isinstance(value, str) and (value in ("body", "inp", "head") or value.startswith("body."))


def _remap(data: dict, paths: Callable[[str], str | None]) -> dict:
    """``data`` with every module path outside the model mapped by ``paths`` (``None``: the entry naming it
    goes: a list element, or the field, or the list element the field belongs to)."""
    class Drop(Exception):
        pass

    def walk(x: Any) -> Any:
        if _is_path(x):
            new = paths(x)
            if new is None:
                raise Drop
            return new
        if isinstance(x, list):
            out = []
            for v in x:
                try:
                    out.append(walk(v))
                except Drop:
                    pass
            return out
        if isinstance(x, dict):
            out = {}
            for k, v in x.items():
                try:
                    out[k] = walk(v)
                except Drop:
                    if k in ("path", "paths"):  # the entry is about the removed module: it goes as a whole
                        raise
            return out
        return x

    return {k: (v if k == "model" else walk(v)) for k, v in data.items()}


# ---- lists, defaults, numbers: anywhere in the case but the model tree's children


def _places(x: Any, where: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """``(location, value)`` of every value in ``x``, containers before their contents."""
    yield where, x
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _places(v, where + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _places(v, where + (i,))


def _at(data: dict, where: tuple) -> Any:
    for k in where:
        data = data[k]
    return data


def _describe(where: tuple) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in where).lstrip(".")


def _list_candidates(data: dict) -> Iterator[tuple[str, dict]]:
    for where, value in _places(data):
        if isinstance(value, list) and value and not (where and where[-1] == "children") \
                and where[:1] != ("mesh",):
            for i in range(len(value)):
                out = copy.deepcopy(data)
                del _at(out, where)[i]
                yield f"{_describe(where + (i,))} removed", out


def _default_candidates(data: dict) -> Iterator[tuple[str, dict]]:
    for where, value in _places(data):
        if where and isinstance(where[-1], str) and where[-1] not in _KEPT and where[:1] != ("mesh",):
            out = copy.deepcopy(data)
            del _at(out, where[:-1])[where[-1]]
            yield f"{_describe(where)} at its default", out


def _number_candidates(data: dict) -> Iterator[tuple[str, dict]]:
    if data.get("world_size", 1) > 1:
        out = copy.deepcopy(data)
        out["world_size"] //= 2
        shape = out["mesh"]["shape"]
        big = shape.index(max(shape))
        if shape[big] % 2 == 0:
            shape[big] //= 2
            yield f"world_size {data['world_size']} -> {out['world_size']}", out
    for where, value in _places(data):
        if isinstance(value, int) and not isinstance(value, bool) and value > 1 and where[:1] != ("mesh",) \
                and where[-1] not in _KEPT:
            for smaller in dict.fromkeys((value // 2, value - 1)):
                out = copy.deepcopy(data)
                _at(out, where[:-1])[where[-1]] = smaller
                yield f"{_describe(where)} {value} -> {smaller}", out
