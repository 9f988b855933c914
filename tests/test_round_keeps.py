"""What a fuzz round keeps, whatever the shrinker does and however many failures a target meets: the failure
first found is never traded for another one the shrink slipped to, and a target that finds failure after failure
still ends by its deadline with every one of them recorded.

The cases are drawn by the real strategies; their verdicts come from a stand-in for the executor (a rule on the
drawn case), so these runs take seconds and the shrinker's choices are what they would be on real verdicts."""

import time

from parityfuzz.engine import Fuzzer, FuzzOptions
from parityfuzz.judge.verdict import Divergence, Verdict
from parityfuzz.strategies import cases


class NoPools:
    """The executor's pool start, which the loop calls before each case: nothing to start here."""

    def pool(self, world_size):
        return None


def body_modules(case) -> int:
    return sum(1 for _ in case.model.body.walk("body")) - 1


def shape_mismatch(what: str) -> Verdict:
    return Verdict("mismatch", divergence=Divergence(step=0, what=what, tensor="body.0.weight", max_abs=1.0,
                                                     max_rel=1.0, check="shape"))


def fuzzer_over(tmp_path, rule, **options) -> tuple[Fuzzer, list[Verdict]]:
    """A fuzzer whose cases are judged by ``rule`` (case -> Verdict); the verdicts given, in order, are listed."""
    given = []
    fuzzer = Fuzzer(FuzzOptions(corpus_dir=tmp_path, locate=False, **options), NoPools(), log=print)

    def run(case, timeout):
        given.append(rule(case))
        return given[-1]

    fuzzer._run = run
    return fuzzer, given


def test_a_shrink_that_slips_to_another_failure_keeps_the_failure_first_found(tmp_path):
    """Big bodies fail one way (a parameter's shape), smaller ones another (a gradient's shape); both are mismatches,
    so Hypothesis keeps one shrunk case for both and shrinks a big body's failure into a small body's.  The case
    first found is recorded as well, reduced under its own signature."""
    def rule(case):
        n = body_modules(case)
        return Verdict("pass") if n < 2 else shape_mismatch("param" if n >= 4 else "grad")

    slipped = 0
    for seed in (1, 2, 3):  # seeds 1 and 3 slip, 2 finds a small body first
        fuzzer, given = fuzzer_over(tmp_path / str(seed), rule, seed=seed, max_cases=60, max_shrink_runs=40,
                                    max_reduce_runs=10, stop_after=1)
        stats = fuzzer.fuzz("fsdp2", cases(world_sizes=(2,), system="fsdp2"), budget_s=300)
        first = next(v for v in given if not v.ok).bug_signature()
        recorded = [f.verdict.bug_signature() for f in stats.failures]
        assert first in recorded, (seed, first, recorded)
        assert all(f.corpus_path is not None and f.corpus_path.exists() for f in stats.failures)
        if len(set(recorded)) > 1:
            slipped += 1
            kept = next(f for f in stats.failures if f.verdict.bug_signature() == first)
            assert body_modules(kept.case) >= 4  # the first failure, reduced under its own signature
    assert slipped, "no seed's shrink slipped: the test does not exercise what it guards"


def test_a_target_that_finds_failure_after_failure_ends_by_its_deadline_with_each_recorded(tmp_path):
    """Every case past the simplest fails, each in its own way (its own innermost frame), and a case takes a tenth
    of a second: each
    round finds a new failure at once and would shrink and reduce it for the full budgets.  The target still ends
    by its deadline (generation, one shrink, one reduction), the later failures shrunk in what was left of it."""
    def rule(case):
        time.sleep(0.1)
        if body_modules(case) < 2:  # (the simplest case passes, so that no round stops at it from the cache)
            return Verdict("pass")
        frame = f"fake.py:{abs(hash(case.to_json())) % 10**6}"
        return Verdict("error", ranks=({"rank": 0, "role": "system", "type": "FakeError", "message": "planted",
                                        "torch_frame": frame},))

    options = dict(seed=3, shrink_budget_s=4.0, reduce_budget_s=2.0)
    fuzzer, _ = fuzzer_over(tmp_path, rule, **options)
    began = time.monotonic()
    stats = fuzzer.fuzz("fsdp2", cases(world_sizes=(2,), system="fsdp2"), budget_s=3.0)
    took = time.monotonic() - began
    deadline = FuzzOptions(**options).deadline_s(3.0)
    assert deadline == 9.0
    # On top: the case running at the deadline and the recording.  Hypothesis's shrinker, going on through its
    # passes once every untried case counts as passing (each candidate a draw), took this run to 17.7 s under CI's
    # two test processes on 2 cores, and 30.5 s on a slower CI machine, before a spent shrink budget stopped it.
    assert took < deadline + 4.0, took
    assert len(stats.failures) >= 2, [f.verdict.bug_signature() for f in stats.failures]
    assert all(f.corpus_path is not None and f.corpus_path.exists() for f in stats.failures)
    assert len({f.verdict.bug_signature() for f in stats.failures}) >= 2
