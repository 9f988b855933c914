"""The package's shape: no import cycles among parityfuzz's modules.

Every import counts, a function's lazy one too (a lazy import hides a cycle, it does not remove it); only
imports under ``if TYPE_CHECKING:`` do not, since they never run (a type named in an annotation)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"parityfuzz": ROOT / "fuzz", "parityfuzz.strategies": ROOT / "strategies"}


def modules() -> dict[str, Path]:
    out = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            if path.name.startswith("test_"):
                continue  # the fuzz targets and the corpus replay are pytest's, nobody imports them
            rel = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package,) + (rel[:-1] if rel[-1] == "__init__" else rel))
            if package == "parityfuzz" and rel[0] == "strategies":
                continue
            out[name] = path
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Line numbers of the statements under ``if TYPE_CHECKING:``."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            for stmt in node.body:
                lines.update(range(stmt.lineno, stmt.end_lineno + 1))
    return lines


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_only(tree)
        deps = set()
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("parityfuzz"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    deps.add(sub if sub in mods else node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("parityfuzz"))
        # importing a.b.c runs a.b's __init__ too (unless the importer is inside a.b)
        for dep in list(deps):
            parts = dep.split(".")
            deps.update(p for p in (".".join(parts[:i]) for i in range(2, len(parts)))
                         if p in mods and not name.startswith(p + ".") and p != name)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    graph = import_graph()
    assert "parityfuzz.case.core" in graph["parityfuzz.case"]  # the graph is the package's
    graph["parityfuzz.case.errors"] = graph["parityfuzz.case.errors"] | {"parityfuzz.case.core"}
    assert any("parityfuzz.case.errors" in c for c in cycles(graph))


def family_modules(family) -> list[str]:
    """The modules that belong to ``family``: its folder, its strategy's package, the modules of its systems and
    its export writer (all named by its record), but for the shared parts (``parityfuzz.parts``) it may name."""
    from parityfuzz import families

    named = [families.MODULES[family.name], family.strategy, family.export,
             *(getattr(entry, "target", entry).partition(":")[0] for entry in family.systems.values())]
    return [m for m in named if m and not m.startswith("parityfuzz.parts.")]


def family_owned() -> set[str]:
    """The modules that belong to a family (:func:`family_modules`), and the validity rules (``parityfuzz.rules``,
    each a family's)."""
    from parityfuzz import families

    return {m for family in families.records() for m in family_modules(family)}


def test_nothing_generic_imports_a_family():
    """A family's folder stands above the generic layers and registers itself: the case codec, the shared
    strategies, the export's script writer, triage, the engine and the front ends reach a family only through
    its record (a registry lookup), never by importing its modules."""
    graph = import_graph()
    owned = family_owned()

    def is_owned(module: str) -> bool:
        return module.startswith("parityfuzz.rules.") or any(module == o or module.startswith(o + ".") for o in owned)

    def offenders(graph) -> dict:
        found = {m: sorted(d for d in deps if is_owned(d)) for m, deps in graph.items() if not is_owned(m)}
        return {m: d for m, d in found.items() if d}

    assert offenders(graph) == {}
    graph["parityfuzz.export.script"] = graph["parityfuzz.export.script"] | {"parityfuzz.families.fsdp1_tp.system"}
    assert offenders(graph) == {"parityfuzz.export.script": ["parityfuzz.families.fsdp1_tp.system"]}  # it can fail
    assert is_owned("parityfuzz.families.fsdp2.known") and is_owned("parityfuzz.families.fsdp1_tp.export")  # the test sees them
    assert not is_owned("parityfuzz.export.script") and not is_owned("parityfuzz.families")


def family_of(module: str, owned: dict[str, str]) -> str | None:
    return next((name for o, name in owned.items() if module == o or module.startswith(o + ".")), None)


def test_a_family_imports_parts_and_generic_modules_never_another_family():
    """A family composes shared parts (``parityfuzz.parts``: activation checkpointing, tensor parallelism,
    fully_shard, FSDP1) and generic modules; no family's module imports another family's, and no part imports a
    family.  What two families share goes into a part."""
    from parityfuzz import families

    owned = {module: family.name for family in families.records() for module in family_modules(family)}
    graph = import_graph()

    def crossing(graph) -> set:
        return {(m, d) for m, deps in graph.items() for d in deps
                if family_of(d, owned) and family_of(m, owned) not in (None, family_of(d, owned))}

    assert crossing(graph) == set()
    assert not {m: d for m, deps in graph.items() if m.startswith("parityfuzz.parts") for d in deps
                if family_of(d, owned)}
    graph["parityfuzz.families.zero.system"] = graph["parityfuzz.families.zero.system"] | {"parityfuzz.families.fsdp1_tp.system"}
    assert crossing(graph) == {("parityfuzz.families.zero.system", "parityfuzz.families.fsdp1_tp.system")}  # it can fail
    graph["parityfuzz.parts.fsdp1"] = graph["parityfuzz.parts.fsdp1"] | {"parityfuzz.families.fsdp1.known"}
    assert {m for m, deps in graph.items() if m.startswith("parityfuzz.parts") for d in deps
            if family_of(d, owned)} == {"parityfuzz.parts.fsdp1"}  # and so can the parts' check
