"""The upstream drafts (:mod:`parityfuzz.triage.upstream`) and the torch-only scripts they are built on
(``corpus/upstream/<record>.py``): each script belongs to a record, imports only torch and the standard library,
and shows its bug (exit 1) under torchrun on the pinned torch, so that no draft goes stale silently."""

from __future__ import annotations

import ast
import os
import runpy
import socket
import sys
import time
import traceback
from pathlib import Path

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


def _rank(path: str, rank: int, nproc: int, port: int, log: str) -> None:
    """One rank of a script, as torchrun starts it (its environment variables), output to ``log``."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank),
                      WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc), ROLE_WORLD_SIZE=str(nproc),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.argv = [path]
    code = 0
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except BaseException:  # noqa: BLE001 (a rank's traceback is its output, as under torchrun)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_forked(path: Path, tmp_path: Path, timeout_s: float = 120.0) -> tuple[int, str]:
    """Run ``path`` as torchrun would at its world size, each rank forked from the executor's fork server (torch
    already imported) instead of a fresh interpreter per rank and one for torchrun's agent: the scripts cost CI
    about a tenth of the time.  Its exit code (the first failing rank's, 124 where the ranks outlive
    ``timeout_s``) and every rank's output."""
    from parityfuzz.executor.pool import start_context

    nproc = upstream.world_size(path.read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = start_context()
    logs = [tmp_path / f"rank{r}.log" for r in range(nproc)]
    procs = [ctx.Process(target=_rank, args=(str(path), r, nproc, port, str(logs[r])), daemon=True)
             for r in range(nproc)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    if any(p.is_alive() for p in procs):
        for p in procs:
            p.kill()
            p.join()
        rc = 124
    else:
        rc = next((p.exitcode for p in procs if p.exitcode), 0)
    output = "".join(f"--- rank {r} ---\n{log.read_text() if log.exists() else ''}" for r, log in enumerate(logs))
    return rc, output


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_script_shows_its_bug(path, tmp_path):
    rc, output = run_forked(path, tmp_path)
    assert rc == 1, f"{path.name} exited {rc} (1: the bug shows); its output:\n{output}"


def test_a_script_exits_alike_under_torchrun(tmp_path):
    """The launcher above stands for torchrun: one script under both (the drafts' output is torchrun's)."""
    path = upstream.SCRIPTS / "fsdp1-keep-low-precision-grads-sharded.py"
    rc, output = upstream.run_script(path)
    assert rc == 1 and "BUG" in output, output
    forked_rc, forked = run_forked(path, tmp_path)
    assert forked_rc == rc and all(line in forked for line in output.splitlines()), forked


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
