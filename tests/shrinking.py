"""Short fuzz runs shared by the tests of every family: with a test-only faulty system until the fault is found
and shrunk, or on unmodified torch where no failure may show."""

from __future__ import annotations

from parityfuzz.engine import Failure, Fuzzer, FuzzOptions
from parityfuzz.strategies import cases


def the_fault(stats, kinds: tuple[str, ...] = ("mismatch",)) -> Failure:
    """The run's one failure of the kinds the fault shows as.  A run reports every distinct failure it meets, so a
    shrink may also meet a torch bug that no record names yet (an error on the way): printed here, for triage, and
    not counted against the fault."""
    mine = [f for f in stats.failures if f.verdict.kind in kinds]
    for f in stats.failures:
        if f not in mine:
            print(f"also met, not the fault (triage it): {f.verdict.describe()[:300]}\n{f.case.to_json()}")
    assert len(mine) == 1, stats.summary_line()
    return mine[0]


def found_and_shrunk(executor, tmp_path, family: str, fault: str, world_sizes: tuple[int, ...],
                     seed: int = 1, where=None, locate: bool = False, reduce_runs: int = 0,
                     shrink_runs: int = 20) -> tuple[Failure, int]:
    """``(failure, modules left in the shrunk model)`` of a short fuzz run of ``family`` with
    ``tests.faults:<fault>`` as the system under test (only its cases ``where`` holds, if given); asserts that it
    found exactly one mismatch (:func:`the_fault`).  ``reduce_runs``: runs of the 1-minimal reduction after the shrink (0: off);
    ``shrink_runs``: the shrink's budget of runs."""
    options = FuzzOptions(corpus_dir=tmp_path, seed=seed, shrink_budget_s=120, max_cases=60, max_shrink_runs=shrink_runs,
                          max_reduce_runs=reduce_runs, locate=locate, stop_after=1)
    strategy = cases(family=family, world_sizes=world_sizes, system=f"tests.faults:{fault}")
    stats = Fuzzer(options, executor, log=print).fuzz(fault, strategy.filter(where) if where else strategy,
                                                      budget_s=300)
    f = the_fault(stats)
    modules = sum(1 for _ in f.case.model.body.walk("body")) - 1
    print(f"{fault} seed {seed}: found after {f.cases_to_find} cases / {f.seconds_to_find:.1f}s, shrunk in "
          f"{f.shrink_runs} runs to {modules} modules, mesh {f.case.mesh.label()}: {f.verdict.describe()[:200]}")
    return f, modules


def clean_run(executor, tmp_path, family: str, max_cases: int, world_sizes: tuple[int, ...] = (2, 4), seed: int = 7):
    """A short fuzz run of ``family`` on unmodified torch: asserts no failure (printing each case) and that all
    ``max_cases`` cases ran; returns the run's stats."""
    options = FuzzOptions(corpus_dir=tmp_path, seed=seed, max_cases=max_cases)
    stats = Fuzzer(options, executor, log=print).fuzz(family, cases(family=family, world_sizes=world_sizes),
                                                      budget_s=300)
    assert not stats.failures, [(f.verdict.describe(), f.case.to_json()) for f in stats.failures]
    assert stats.cases == max_cases
    return stats
