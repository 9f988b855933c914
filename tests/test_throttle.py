"""Known bugs met often get a small share of a target's cases, never none (parityfuzz.engine.throttle)."""

import dataclasses

from parityfuzz.engine.throttle import (KEEP_ONE_IN, KNOWN_HANG_TIMEOUT_FLOOR_S, MET_BEFORE_THROTTLE,
                                       SECONDS_BEFORE_THROTTLE, Throttle)
from parityfuzz.judge.verdict import Divergence, Verdict
from parityfuzz.strategies import cases
from parityfuzz.triage import explain
from parityfuzz.triage import known
from parityfuzz.triage.known import shipped
from tests.known import record, register
from tests.test_pipeline import pipeline_case
from tests.test_round_keeps import fuzzer_over

#: pipeline-scale-grads-over-accumulated-steps: scale_grads over several microbatches and several step() calls.
BUG = next(b for b in shipped() if b.id == "pipeline-scale-grads-over-accumulated-steps")
MISMATCH = Verdict("mismatch", Divergence(step=1, what="grad", tensor="body.0.0.weight", max_abs=1, max_rel=1))


def accumulating(seed: int):
    case = pipeline_case("gpipe", micro=2)
    return dataclasses.replace(case, seed=seed, train=dataclasses.replace(case.train, microbatches=2)).validate()


def test_a_known_bug_met_often_runs_one_case_in_eight_of_its_precondition_and_never_none():
    throttle = Throttle()
    assert BUG.applies(accumulating(0)) and not BUG.applies(pipeline_case("gpipe", micro=2).validate())
    for seed in range(MET_BEFORE_THROTTLE):
        assert throttle.skip(accumulating(seed)) == ""  # not met often yet: every case runs
        why = explain(accumulating(seed), MISMATCH)
        assert why.bug == BUG
        throttle.note(why)
    skipped = [throttle.skip(accumulating(seed)) for seed in range(10, 10 + 4 * KEEP_ONE_IN)]
    assert skipped.count("") == 4 and set(skipped) == {"", BUG.title}  # one in eight still runs
    assert throttle.skipped[BUG.title] == 4 * (KEEP_ONE_IN - 1)
    assert throttle.skip(pipeline_case("gpipe", micro=2).validate()) == ""  # outside the precondition: runs
    assert Throttle().skip(accumulating(99)) == ""  # each target's run counts its own meetings


def test_a_known_bug_whose_meetings_cost_a_minute_is_throttled_however_few():
    """A known hang costs its case's whole timeout each time (100 s for a 4-rank compiled checkpoint case): met
    once at that cost, its precondition's cases run one in eight from then on; quick meetings wait for three."""
    why = explain(accumulating(0), MISMATCH)
    slow, quick = Throttle(), Throttle()
    slow.note(why, seconds=SECONDS_BEFORE_THROTTLE + 40)
    quick.note(why, seconds=2.0)
    quick.note(None, seconds=SECONDS_BEFORE_THROTTLE)  # a case no known bug explains costs the bug nothing
    assert [slow.skip(accumulating(seed)) for seed in range(1, 1 + KEEP_ONE_IN)].count(BUG.title) == KEEP_ONE_IN - 1
    assert all(quick.skip(accumulating(seed)) == "" for seed in range(1, 1 + KEEP_ONE_IN))


def test_a_case_that_may_meet_a_known_hang_runs_under_a_short_timeout():
    """broadcast-through-set-state-dict hangs: a case meeting its precondition (its corpus file) gets the floor or
    three times the slowest passing case, never more than its own timeout; a case outside every known hang's
    precondition keeps its own."""
    from parityfuzz.triage import corpus

    hang = next(b for b in shipped() if b.id == "broadcast-through-set-state-dict")
    case = corpus.load(known.DEFAULT_PATH.parent / hang.files[0]).case
    throttle = Throttle()
    assert hang in throttle.hangs and BUG not in throttle.hangs and hang.applies(case)
    assert throttle.hang_timeout(case, 100.0, slowest_pass=1.0) == KNOWN_HANG_TIMEOUT_FLOOR_S
    assert throttle.hang_timeout(case, 100.0, slowest_pass=14.0) == 42.0
    assert throttle.hang_timeout(case, 30.0, slowest_pass=14.0) == 30.0
    assert throttle.hang_timeout(accumulating(0), 100.0, slowest_pass=1.0) == 100.0


def test_a_fuzz_run_spends_a_small_share_of_its_cases_on_a_known_bug_met_often(tmp_path, monkeypatch):
    """Real draws, stand-in verdicts: every case with a Scale module fails as a registered known bug does.  Once
    met three times, its cases run one in eight; the skipped ones count as passing, under the bug, and the others
    still run (the rule sees them)."""
    mismatch = Verdict("mismatch", Divergence(step=0, what="grad", tensor="body.0.w", max_abs=1.0, max_rel=1.0))
    bug, = register(monkeypatch, tmp_path, record("scale-bug", '[{ verdict = "mismatch", check = "value", '
                                                                'tensor = "grad" }]'))
    # (this record alone: a shipped one whose precondition a drawn Scale case meets would explain some of them)
    monkeypatch.setattr(known, "shipped", lambda: (bug,))
    fuzzer, given = fuzzer_over(tmp_path, lambda c: mismatch if "has:scale" in c.features() else Verdict("pass"),
                                seed=3, max_cases=200)
    stats = fuzzer.fuzz("fsdp2", cases(world_sizes=(2,), system="fsdp2"), budget_s=300)
    met, skipped = stats.explained[f"known torch bug, {bug.title}"], stats.throttled[bug.title]
    assert stats.failures == [] and met == sum(1 for v in given if not v.ok)
    matched = skipped + met - MET_BEFORE_THROTTLE  # cases with a Scale module drawn once the bug was met often
    assert skipped > 0 and met - MET_BEFORE_THROTTLE == -(-matched // KEEP_ONE_IN), (met, skipped)
    assert f"{skipped} cases skipped: {bug.title}" in stats.summary_line()
