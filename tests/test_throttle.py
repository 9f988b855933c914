"""Known bugs met often get a small share of a target's cases, never none (parityfuzz.engine.throttle)."""

import dataclasses

from parityfuzz.engine.throttle import KEEP_ONE_IN, MET_BEFORE_THROTTLE, Throttle
from parityfuzz.judge.verdict import Divergence, Verdict
from parityfuzz.triage import explain
from parityfuzz.triage.known import shipped
from tests.test_pipeline import pipeline_case

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
