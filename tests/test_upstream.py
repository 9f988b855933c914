"""The upstream drafts (:mod:`parityfuzz.triage.upstream`) and the torch-only scripts they are built on
(``corpus/upstream/<record>.py``): each script belongs to a record, imports only torch and the standard library,
and shows its bug (exit 1) under torchrun on the pinned torch, so that no draft goes stale silently."""

from __future__ import annotations

import ast
import sys

import pytest

from parityfuzz.triage import known, upstream

SCRIPTS = sorted(upstream.SCRIPTS.glob("*.py"))


def test_every_script_belongs_to_a_record_and_imports_only_torch():
    ids = {b.id for b in known.shipped()}
    assert SCRIPTS, upstream.SCRIPTS
    for path in SCRIPTS:
        assert path.stem in ids, f"{path.name}: no known-bug record {path.stem!r}"
        tree = ast.parse(path.read_text())
        modules = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                   for alias in node.names}
        modules |= {node.module.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module}
        assert modules <= {"torch"} | set(sys.stdlib_module_names), f"{path.name} imports {sorted(modules)}"
        upstream.world_size(path.read_text())  # its docstring says how to run it


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_script_shows_its_bug_under_torchrun(path):
    rc, output = upstream.run_script(path)
    assert rc == 1, f"{path.name} exited {rc} (1: the bug shows); its output:\n{output}"


def test_the_command_drafts_every_unreported_record_with_a_script_and_lists_the_others(tmp_path, capsys):
    rc = upstream.main(["-o", str(tmp_path), "--no-run"])
    err = capsys.readouterr().err
    chosen = upstream.unreported(known.shipped())
    drafted = {p.stem for p in tmp_path.glob("*.md")}
    assert drafted == {b.id for b in chosen if upstream.script_path(b).is_file()}
    assert rc == (0 if len(drafted) == len(chosen) else 1)
    assert f"{len(drafted)} of {len(chosen)} unreported records drafted" in err
    for bug in chosen:
        if bug.id in drafted:
            text = (tmp_path / f"{bug.id}.md").read_text()
            assert text.startswith(f"# {bug.title}\n") and upstream.script_path(bug).read_text().strip() in text
            assert "### Versions" in text and "Expected behaviour" in text and bug.source[0] in text
        else:
            assert bug.id in err


def test_a_record_that_does_not_exist_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        upstream.main(["-o", str(tmp_path), "--record", "no-such-bug"])
    assert e.value.code == 2 and "no-such-bug" in capsys.readouterr().err
