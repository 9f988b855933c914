"""The command-line contract (DESIGN.md): options, exit codes, corpus writing, replay, report, repro."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from parityfuzz.case import MeshSpec
from parityfuzz.judge.verdict import Divergence, Verdict
from parityfuzz.triage import corpus
from tests.test_case import simple
from tests import subprocess_environ

ROOT = Path(__file__).resolve().parents[1]
ENV = subprocess_environ(PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
#: The fsdp2 family's fuzz target.
FSDP2_TARGET = "fuzz/test_families.py::test_family_trains_like_its_reference[fsdp2]"


def pytest_run(*args, cwd=ROOT, timeout=300):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("option, needle", [
    ("--fuzz-budget=abc", "--fuzz-budget"),
    ("--fuzz-budget=-5", "--fuzz-budget"),
    ("--world-sizes=5", "--world-sizes"),
    ("--world-sizes=two", "--world-sizes"),
    ("--corpus-dir=/no/such/dir", "--corpus-dir"),
    ("--fuzz-seed=x", "--fuzz-seed"),
    ("--fuzz-max-cases=0", "--fuzz-max-cases"),
    ("--fuzz-max-failures=0", "--fuzz-max-failures"),
])
def test_bad_option_is_a_one_line_usage_error(tmp_path, option, needle):
    result = pytest_run(FSDP2_TARGET, option, f"--fuzz-report={tmp_path}/r.json")
    assert result.returncode == 4, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and needle in errors[0]
    assert not (tmp_path / "r.json").exists()


#: A target of cheap cases (no training-loop dimension, a few steps): these tests check what a run reports and
#: writes, which any case shows; compiled cases made the two runs below take 228 s of CI.
FAULT_TARGET = textwrap.dedent("""
    import pytest
    from parityfuzz.strategies import cases

    @pytest.mark.fuzz_target
    def test_faulty(fuzz_session):
        fuzz_session.run_target("odd", lambda ws: cases(world_sizes=ws, system="tests.faults:OddLinearGradDrop",
                                                        within=(), max_steps=3))
""")


def test_fuzz_run_finds_shrinks_records_and_exits_nonzero(tmp_path):
    """... even where the corpus holds other cases failing with a look-alike signature, untriaged or triaged:
    only a corpus/known_bugs.toml record silences a failure."""
    (tmp_path / "test_faulty.py").write_text(FAULT_TARGET)
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    look_alike = Verdict("mismatch", Divergence(step=0, what="grad", tensor="body.0.weight", max_abs=1, max_rel=1))
    system = "tests.faults:OddLinearGradDrop"
    corpus.record(corpus_dir, simple(seed=5, system=system), look_alike, note="triage me")
    corpus.record(corpus_dir, simple(seed=6, system=system), look_alike, known_issue="pytorch/pytorch#1")
    seeded = set(corpus.discover(corpus_dir))
    report = tmp_path / "report.json"
    result = pytest_run(str(tmp_path / "test_faulty.py"), "-x", "--fuzz-budget=60",
                        "--world-sizes=2", "--fuzz-seed=3", f"--corpus-dir={corpus_dir}", "--shrink-budget=60",
                        "--reduce-budget=30", f"--fuzz-report={report}", f"--rootdir={tmp_path}")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "mismatch" in out and "parityfuzz repro" in out
    files = [p for p in corpus.discover(corpus_dir) if p not in seeded]
    data = json.loads(report.read_text())
    assert data["cases_run"] >= 1 and data["verdicts"]["mismatch"] >= 1
    # each failure a file of its own (the round's first failing case too, where it fails another way)
    assert files and sorted(f["corpus_file"] for f in data["failures"]) == sorted(map(str, files))
    found, files = len(files), [Path(data["failures"][0]["corpus_file"])]
    assert data["failures"][0]["first_divergence"]["what"] == "grad"
    assert data["failures"][0]["reduce_runs"] >= 1 and "reduced in" in out  # the reduction ran and says so
    origin = data["failures"][0]["origin"]  # where it begins: an odd Linear's gradient, all else agreeing
    assert origin["what"] == "grad" and origin["tensor"].startswith(origin["module"] + "."), origin
    assert "the mismatch begins at step" in out
    assert corpus.load(files[0]).verdict.origin.module == origin["module"]
    from parityfuzz.frontends.report import main as render_report  # the page of this very run

    assert render_report([str(report), "-o", str(tmp_path / "report.html")]) == 0
    page = (tmp_path / "report.html").read_text()
    assert f"parityfuzz repro {files[0]}" in page and data["failures"][0]["case_tree"].splitlines()[0] in page

    assert any(f["bug_signature"] == look_alike.bug_signature() for f in data["failures"])  # it did look alike
    for path in seeded:
        path.unlink()
    # Replay: expected to fail -> xfail, exit 0.
    replay = pytest_run("fuzz/test_corpus.py", f"--corpus-dir={corpus_dir}", "-rxX")
    assert replay.returncode == 0 and f"{found} xfailed" in replay.stdout, replay.stdout
    # Flipped to "pass": the case diverges, so the replay fails.
    doc = json.loads(files[0].read_text())
    doc["expect"] = "pass"
    files[0].write_text(json.dumps(doc))
    replay = pytest_run("fuzz/test_corpus.py", f"--corpus-dir={corpus_dir}")
    assert replay.returncode == 1 and "1 failed" in replay.stdout, replay.stdout
    # repro explains it and exits 1.
    repro = subprocess.run([sys.executable, "-m", "fuzz.repro", str(files[0])], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=120)
    assert repro.returncode == 1 and "verdict: mismatch" in repro.stdout and "Linear(" in repro.stdout


def test_a_run_spends_its_budget_after_a_finding_and_x_stops_at_the_first(tmp_path):
    """The contract: a finding is shrunk and written, then fuzzing goes on for the target's share (a failure of
    the same kind and situation counts as already found); ``-x`` ends the target at its first finding.  Bounded
    by a case count, so the same on any machine (the budget only bounds a run that never reaches it: at 120 s a
    loaded machine ended the run before the cap)."""
    (tmp_path / "test_faulty.py").write_text(FAULT_TARGET)
    runs = {}
    for mode, extra in (("goes on", ()), ("-x", ("-x",))):
        corpus_dir, report = tmp_path / mode / "corpus", tmp_path / mode / "report.json"
        corpus_dir.mkdir(parents=True)
        result = pytest_run(str(tmp_path / "test_faulty.py"), *extra, "--fuzz-budget=600", "--fuzz-max-cases=30",
                            "--world-sizes=2", "--fuzz-seed=3", f"--corpus-dir={corpus_dir}", "--shrink-budget=5",
                            "--reduce-budget=0", f"--fuzz-report={report}", f"--rootdir={tmp_path}")
        assert result.returncode == 1, result.stdout + result.stderr
        runs[mode] = json.loads(report.read_text()), result.stdout
    (stopped, out_x), (went_on, out) = runs["-x"], runs["goes on"]
    # cases count shrink runs too: -x ends with the first finding's shrink, the other run draws on to the cap
    first = stopped["failures"][0]
    assert stopped["targets"]["odd"]["cases"] == first["cases_to_find"] + first["shrink_runs"] < 30
    assert went_on["targets"]["odd"]["cases"] >= 30 and "round 2" in out and "round 2" not in out_x
    assert went_on["failures"][0]["cases_to_find"] == first["cases_to_find"]  # the same first finding


TWO_TARGETS = textwrap.dedent("""
    import pytest
    from parityfuzz.strategies import cases

    @pytest.mark.fuzz_target
    def test_one(fuzz_session):
        fuzz_session.run_target("one", lambda ws: cases(world_sizes=ws))

    @pytest.mark.fuzz_target
    def test_two(fuzz_session):
        fuzz_session.run_target("two", lambda ws: cases(world_sizes=ws))
""")


def test_the_budget_goes_to_the_selected_targets(tmp_path):
    """``-k one`` gives the one selected target the whole budget, not half of it (the split once counted the
    targets ``-k`` deselected)."""
    (tmp_path / "test_two_targets.py").write_text(TWO_TARGETS)
    report = tmp_path / "report.json"
    result = pytest_run(str(tmp_path / "test_two_targets.py"), "-k", "one", "--fuzz-budget=6", "--world-sizes=1",
                        "--fuzz-seed=1", f"--corpus-dir={tmp_path}", f"--fuzz-report={report}", f"--rootdir={tmp_path}")
    assert result.returncode == 0, result.stdout + result.stderr
    targets = json.loads(report.read_text())["targets"]
    assert list(targets) == ["one"] and targets["one"]["generate_seconds"] > 4.5, targets


def test_replay_xpass_is_loud_and_bad_files_fail_alone(tmp_path):
    # A passing case wrongly marked as a known failure fails the run, saying so.
    corpus.record(tmp_path, simple(), Verdict("mismatch"), expect="fail")
    (tmp_path / "fsdp2" / "broken.json").write_text('{"corpus_format": 1, "case": {"seed": 0')
    result = pytest_run("fuzz/test_corpus.py", f"--corpus-dir={tmp_path}", "-rA")
    out = result.stdout
    assert result.returncode == 1
    assert "expected to fail (known failure) but passes" in out, out
    assert "broken.json: not valid JSON" in out
    assert "2 failed" in out


def test_the_replay_runs_each_file_at_its_own_world_size(tmp_path):
    """``--world-sizes`` restricts what the strategies draw (``../shared/DESIGN.md``); a corpus file found at
    world size 3 replays under the default 1,2,4 and under ``--world-sizes=2``."""
    corpus.record(tmp_path, simple(world_size=3, mesh=MeshSpec((3,))), Verdict("pass"), expect="pass")
    for option in ((), ("--world-sizes=2",)):
        result = pytest_run("fuzz/test_corpus.py", f"--corpus-dir={tmp_path}", "-rA", *option)
        assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-3000:]


def test_clean_fuzz_run_exits_zero_and_reports(tmp_path):
    report = tmp_path / "report.json"
    result = pytest_run(FSDP2_TARGET, "--fuzz-budget=8", "--world-sizes=1,2", "--fuzz-seed=1",
                        f"--corpus-dir={tmp_path}", f"--fuzz-report={report}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "distinct feature combinations" in result.stdout and "--fuzz-seed=1" in result.stdout
    data = json.loads(report.read_text())
    assert data["cases_run"] >= 1 and data["failures"] == [] and data["fuzz_seed"] == 1
    assert set(data["verdicts"]) == {"pass"}
    assert data["targets"]["fsdp2"]["distinct_feature_combinations"] >= 1


def test_a_seed_and_a_case_count_make_the_same_run_anywhere(tmp_path):
    """The README's test command: a fixed seed and case count, whatever the budget, run the same cases."""
    reports = []
    for n in range(2):
        report = tmp_path / f"report{n}.json"
        result = pytest_run(FSDP2_TARGET, "--fuzz-budget=600", "--fuzz-seed=5", "--fuzz-max-cases=4",
                            "--world-sizes=2", f"--corpus-dir={tmp_path}", f"--fuzz-report={report}")
        assert result.returncode == 0, result.stdout[-2000:]
        reports.append(json.loads(report.read_text()))
    assert reports[0]["cases_run"] == reports[1]["cases_run"] == 4
    assert reports[0]["targets"]["fsdp2"]["feature_counts"] == reports[1]["targets"]["fsdp2"]["feature_counts"]


def test_hypothesis_observability_records_each_case_with_its_features(tmp_path):
    """Each feature tag and the verdict are Hypothesis ``event()``s: Hypothesis's observability output has
    them per case (its end-of-run statistics are not noted for a run that the budget stops)."""
    (tmp_path / "corpus").mkdir()
    env = {**ENV, "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY": "1"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(ROOT / FSDP2_TARGET),
                             "--fuzz-budget=4", "--world-sizes=1", f"--corpus-dir={tmp_path / 'corpus'}"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    observed = [json.loads(line) for f in (tmp_path / ".hypothesis" / "observed").glob("*testcases.jsonl")
                for line in f.read_text().splitlines()]
    spent = [o for o in observed if "not run: budget spent" in o["features"]]
    ran = [o for o in observed if o["status"] == "passed" and o not in spent]
    # Besides the draw that found the budget spent, only draws the strategy rejected ("gave_up": an invalid
    # combination) are not cases that ran (a CI run drew one: the seed is fresh every run).
    others = [(o["status"], o["features"]) for o in observed if o not in ran and o not in spent]
    assert ran and len(spent) <= 1, (len(ran), len(spent), others)
    assert all(status == "gave_up" for status, _ in others), others
    for o in ran:
        assert "verdict=pass" in o["features"] and "ws=1" in o["features"] and "mesh=1" in o["features"]


def test_repro_bad_file_exits_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"corpus_format": 1, "expect": "sometimes", "case": {}}')
    result = subprocess.run([sys.executable, "-m", "fuzz.repro", str(bad)], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "bad.json" in result.stderr and "expect" in result.stderr


def test_repro_passing_case_exits_0(tmp_path):
    path = tmp_path / "case.json"
    path.write_text(simple().to_json())
    result = subprocess.run([sys.executable, "-m", "fuzz.repro", str(path), "--json"], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["verdict"]["kind"] == "pass"


def test_repro_markdown_is_an_issue_ready_report():
    """``--markdown``: a bug report to paste into an issue: versions, the case tree with its plan, the verdict,
    the note, the failing rank's traceback, the command that reproduces it and the case JSON."""
    path = "corpus/fsdp1/c5d7c99dbe6c2ecf.json"
    result = subprocess.run([sys.executable, "-m", "fuzz.repro", path, "--markdown"], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=120)
    out = result.stdout
    assert result.returncode == 1, result.stderr
    assert out.startswith("### fsdp1: error: rank 0 error in system: RuntimeError: Error(s) in loading state_dict")
    for part in ("- torch 2.", "backend gloo, world size 2", "`error:system:RuntimeError:torch/nn/modules/module.py",
                 "Linear(", "```text", "Missing key(s) in state_dict", f"parityfuzz repro {path}",
                 "```json", "> Hand-reduced", "known issue: set_state_dict cannot load"):
        assert part in out, part


def test_repro_says_where_a_mismatch_begins():
    """A mismatch is explained down to where it begins (the Markdown report; the plain printout prints the same
    line), with the torch-only way to reproduce it where the case exports."""
    path = "corpus/fsdp2/85611cfad69184c0.json"  # FSDP2 under the reference's DDP: one gradient wrong at step 0
    result = subprocess.run([sys.executable, "-m", "fuzz.repro", path, "--markdown"], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert ("- where it begins at step 0 in the gradient of body.0.weight (module body.0): every module's output "
            "and output gradient agree up to there") in result.stdout, result.stdout
    assert "collectives of that pass's forward and backward on rank 0: system _allgather_base_ x4" in result.stdout
    assert f"parityfuzz export {path} -o repro.py\ntorchrun --nproc-per-node=2 repro.py" in result.stdout


def test_global_pytest_timeout_does_not_cut_a_fuzz_budget(tmp_path):
    result = pytest_run(FSDP2_TARGET, "-o", "timeout=2", "--fuzz-budget=5", "--world-sizes=2",
                        f"--corpus-dir={tmp_path}")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 passed" in result.stdout
