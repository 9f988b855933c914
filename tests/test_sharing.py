"""Many fuzzers, one corpus: fuzz processes sharing a corpus directory and Hypothesis's example database
(``--fuzz-db``), one after the other and at once, and pytest-xdist workers whose reports the controller merges."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from parityfuzz.triage import corpus
from tests import subprocess_environ

ROOT = Path(__file__).resolve().parents[1]
ENV = subprocess_environ(PYTHONPATH=str(ROOT))

#: Cheap cases (no training-loop dimension, a few steps): what is shared and merged shows in any case.
TARGET = textwrap.dedent("""
    import pytest
    from parityfuzz.strategies import cases

    @pytest.mark.fuzz_target
    def test_{name}(fuzz_session):
        fuzz_session.run_target("{name}", lambda ws: cases(world_sizes=ws, system="tests.faults:{fault}",
                                                           within=(), max_steps=3))
""")


def project(tmp_path: Path, **targets: str) -> Path:
    """A directory holding one fuzz target file per ``name=fault``."""
    for name, fault in targets.items():
        (tmp_path / f"test_{name}.py").write_text(TARGET.format(name=name, fault=fault))
    return tmp_path


def command(where: Path, seed: int, corpus_dir: Path, report: Path, *extra: str) -> list[str]:
    corpus_dir.mkdir(exist_ok=True)
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={where}", "--world-sizes=2",
            f"--fuzz-seed={seed}", "--fuzz-budget=60", "--shrink-budget=60", "--reduce-budget=0",
            "--fuzz-max-failures=1",
            f"--corpus-dir={corpus_dir}", f"--fuzz-report={report}", *extra]


def fuzz(where: Path, seed: int, corpus_dir: Path, report: Path, *extra: str) -> dict:
    result = subprocess.run(command(where, seed, corpus_dir, report, *extra), cwd=where, env=ENV,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, (result.stdout + result.stderr)[-3000:]  # the fault is found
    return json.loads(report.read_text())


def test_a_failure_one_fuzzer_found_replays_first_in_another(tmp_path):
    where = project(tmp_path, odd="OddLinearGradDrop")
    db = tmp_path / "db"
    first = fuzz(where, 3, tmp_path / "a", tmp_path / "a.json", f"--fuzz-db={db}")["failures"][0]
    # seed 13 on its own finds it and shrinks it anew; with the database its
    shared = fuzz(where, 13, tmp_path / "c", tmp_path / "c.json", f"--fuzz-db={db}")["failures"][0]
    # first case is the other fuzzer's shrunk failure: nothing left to shrink
    assert shared["cases_to_find"] == 1 and shared["shrink_runs"] == 0, shared
    assert shared["case_id"] == first["case_id"]


@pytest.mark.long  # 32 s on a clean clone (CI time): the test above shares one corpus and database in turn
def test_two_fuzzers_at_once_share_one_corpus_and_database(tmp_path):
    where = project(tmp_path, odd="OddLinearGradDrop")
    shared = tmp_path / "corpus"
    runs = [subprocess.Popen(command(where, seed, shared, tmp_path / f"{seed}.json", f"--fuzz-db={tmp_path / 'db'}"),
                             cwd=where, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for seed in (3, 13)]
    outputs = [r.communicate(timeout=300)[0] for r in runs]
    assert [r.returncode for r in runs] == [1, 1], "\n".join(o[-2000:] for o in outputs)
    files = corpus.discover(shared)
    reported = {json.loads((tmp_path / f"{seed}.json").read_text())["failures"][0]["corpus_file"] for seed in (3, 13)}
    assert {str(p) for p in files} == reported  # each wrote its finding, whole (the same case: one file)
    assert all(corpus.load(p).verdict.kind == "mismatch" for p in files)
    assert any((tmp_path / "db").iterdir())


def test_xdist_workers_fuzz_their_targets_and_the_controller_merges_their_reports(tmp_path):
    where = project(tmp_path, odd="OddLinearGradDrop", twice="TwiceGradDrop")
    # (shrinking is not what this test is about: a short shrink budget, for CI time)
    result = subprocess.run(command(where, 5, tmp_path / "corpus", tmp_path / "run.json", "-n", "2",
                                    "--shrink-budget=10"), cwd=where,
                            env=ENV, capture_output=True, text=True, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 1 and "2 failed" in out and "2 workers, fuzz seeds gw0 5, gw1 5" in out, out[-3000:]
    report = json.loads((tmp_path / "run.json").read_text())
    assert set(report["targets"]) == {"odd", "twice"} and set(report["worker_seeds"]) == {"gw0", "gw1"}
    assert report["cases_run"] == sum(t["cases"] for t in report["targets"].values())
    assert sorted(f["target"] for f in report["failures"]) == ["odd", "twice"]
    assert len(corpus.discover(tmp_path / "corpus")) == 2
