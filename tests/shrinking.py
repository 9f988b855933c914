"""Shared by the fault tests of every family: fuzz with a test-only faulty system until the fault is found,
shrink it, and return the one failure with the figures the test prints."""

from __future__ import annotations

from fuzz.engine import Failure, Fuzzer, FuzzOptions
from strategies import cases


def found_and_shrunk(executor, tmp_path, family: str, fault: str, world_sizes: tuple[int, ...],
                     seed: int = 1) -> tuple[Failure, int]:
    """``(failure, modules left in the shrunk model)`` of a short fuzz run of ``family`` with
    ``tests.faults:<fault>`` as the system under test; asserts that it found exactly one failure."""
    options = FuzzOptions(corpus_dir=tmp_path, seed=seed, shrink_budget_s=120, max_cases=60, max_shrink_runs=20)
    stats = Fuzzer(options, executor, log=print).fuzz(
        fault, cases(family=family, world_sizes=world_sizes, system=f"tests.faults:{fault}"), budget_s=300)
    assert len(stats.failures) == 1, "not found"
    f = stats.failures[0]
    modules = sum(1 for _ in f.case.model.body.walk("body")) - 1
    print(f"{fault} seed {seed}: found after {f.cases_to_find} cases / {f.seconds_to_find:.1f}s, shrunk in "
          f"{f.shrink_runs} runs to {modules} modules, mesh {f.case.mesh.label()}: {f.verdict.describe()[:200]}")
    return f, modules
