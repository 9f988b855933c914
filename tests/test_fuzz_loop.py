"""The whole loop: a short fuzz run finds an injected fault, shrinks it, and writes it to the corpus;
the same budget against correct FSDP2 reports nothing."""

import pytest
from hypothesis import settings

from fuzz import corpus, known
from fuzz.engine import Fuzzer, FuzzOptions
from fuzz.verify import check
from strategies import cases

BUDGET_S = 45.0


def body_modules(case) -> int:
    """Modules of the model body below its top-level container."""
    return sum(1 for _ in case.model.body.walk("body")) - 1


def fuzz(executor, tmp_path, system, seed=1, budget_s=BUDGET_S):
    fuzzer = Fuzzer(FuzzOptions(corpus_dir=tmp_path, seed=seed, shrink_budget_s=120), executor, log=print)
    return fuzzer.fuzz(system, cases((2,), system=system), budget_s=budget_s)


@pytest.mark.parametrize("fault, shows", [
    ("OddLinearGradDrop", lambda c: any(n.kind == "linear" and n.out % 2 for _, n in c.model.body.walk("body"))),
    ("TwiceGradDrop", lambda c: any(n.kind == "twice" for _, n in c.model.body.walk("body"))),
    ("HSDPSkipsReplicaAllReduce", lambda c: c.mesh.names == ("replicate", "shard")),
    ("CheckpointedGradDrop", lambda c: bool(c.plan.checkpoints)),
    ("PrefetchTargetGradDrop", lambda c: bool(c.plan.prefetch)),
    ("OffloadForgetsUpdate", lambda c: any(w.offload for w in c.plan.wraps)),
    ("FirstMicrobatchGradDrop", lambda c: c.train.microbatches > 1 and bool(c.train.no_sync)),
    ("CheckpointLosesRNG", lambda c: bool(c.plan.checkpoints) and "has:dropout" in c.features()),
    ("GatedGradDrop", lambda c: "has:gate" in c.features()),
    ("BufferReset", lambda c: "has:scale" in c.features()),
    ("LowPrecisionGradSummed", lambda c: any(w.param_dtype in ("bfloat16", "float16") for w in c.plan.wraps)),
    ("NonRootPassUnsynced", lambda c: bool(c.train.nonroot)),
])
def test_injected_fault_is_found_and_shrunk(executor, tmp_path, fault, shows):
    system = f"tests.faults:{fault}"
    stats = fuzz(executor, tmp_path, system)
    assert len(stats.failures) == 1
    f = stats.failures[0]
    print(f"{fault}: found after {f.cases_to_find} cases / {f.seconds_to_find:.1f}s, "
          f"shrunk in {f.shrink_runs} runs / {f.shrink_seconds:.1f}s to {body_modules(f.case)} modules")
    assert f.verdict.kind == "mismatch"
    # A gate drawn after other layers cannot move to the front of its chain; the rest shrink to 1-2 modules.
    assert body_modules(f.case) <= (5 if fault == "GatedGradDrop" else 3), f.case.to_json(indent=1)
    assert shows(f.case), "the minimal case still shows the faulty situation"
    assert f.case.world_size == 2 and f.case.seed == 0
    entry = corpus.load(f.corpus_path)
    assert entry.case == f.case and entry.expect == "fail"
    assert check(entry.case, executor).kind == "mismatch"  # the saved case replays to the same verdict


def test_correct_fsdp2_has_no_failures_in_the_same_budget(executor, tmp_path):
    stats = fuzz(executor, tmp_path, "fsdp2")
    print(stats.summary_line())
    assert stats.failures == [] and stats.verdicts["pass"] == stats.cases
    assert stats.cases >= 50
    assert corpus.discover(tmp_path) == []


@pytest.fixture
def load_profile():
    """``settings.load_profile``, with the profile in force before the test put back after it."""
    before = settings.get_current_profile_name()
    yield settings.load_profile
    settings.load_profile(before)


def test_soak_profile_goes_on_after_a_failure_and_reports_another_bug(executor, tmp_path, load_profile):
    """Under ``report_multiple_bugs`` (the soak profile) a shrunk failure starts a new round with a fresh
    seed, in which cases with that failure's features count as passing: a system with two independent
    faults gets both reported, each shrunk to a case showing its own situation.

    A bug can come back once more when its first shrunk case kept an incidental feature (here the
    offload fault first shrinks to a case with Adam, then shows again with SGD); the corpus then reports
    it as a duplicate of the first file by its signature instead of writing it again."""
    load_profile("soak")
    stats = fuzz(executor, tmp_path, "tests.faults:OffloadForgetsUpdateAndBufferReset", budget_s=60)
    for f in stats.failures:
        print(f"{f.verdict.signature()}: found after {f.cases_to_find} cases, {body_modules(f.case)} modules, "
              f"needs {sorted(f.case.features())}, duplicate of {f.duplicate_of}")
    shown = {("offload" in f.case.features(), "has:scale" in f.case.features()) for f in stats.failures}
    assert shown == {(False, True), (True, False)}
    assert stats.notes["already found in this run"] > 0
    written = [f for f in stats.failures if f.duplicate_of is None]
    assert len(corpus.discover(tmp_path)) == len(written) == 2


def test_dev_profile_stops_at_the_first_failure(executor, tmp_path, load_profile):
    load_profile("dev")
    stats = fuzz(executor, tmp_path, "tests.faults:OffloadForgetsUpdateAndBufferReset", budget_s=60)
    assert len(stats.failures) == 1 and stats.generate_seconds < 60


def test_a_failure_meeting_a_known_bug_precondition_passes_with_a_note(executor, tmp_path, monkeypatch):
    """A failing case that meets a known torch bug's precondition is counted against that bug (run goes on,
    nothing written).  Without the entry the same fault is a failure: test_injected_fault_is_found_and_shrunk
    [BufferReset], same seed and system."""
    bug = known.KnownBug("buffers reset by the test fault", "tests/faults.py", lambda c: "has:scale" in c.features())
    monkeypatch.setattr(known, "KNOWN_BUGS", (bug,))
    stats = fuzz(executor, tmp_path, "tests.faults:BufferReset", budget_s=20)
    assert stats.failures == [] and corpus.discover(tmp_path) == []
    assert stats.notes[f"known torch bug, {bug.name}"] > 0
    assert stats.verdicts["pass"] == stats.cases
