"""One case, start to verdict: run it on the executor, then hand the traces to the oracle."""

from __future__ import annotations

from fuzz import dtypes
from fuzz.case import LEAF_SUBMODULES, Case
from fuzz.executor import Executor, RankOutcome
from fuzz.oracle import Tolerance, compare
from fuzz.trace import Trace
from fuzz.verdict import CRASH, ERROR, HANG, MISMATCH, Verdict


def traces(outcomes: list[RankOutcome], role: str) -> Trace:
    return Trace.merge([o.result[role] for o in outcomes])


def failure_verdict(outcomes: list[RankOutcome]) -> Verdict | None:
    """ERROR, CRASH or HANG where some rank did not finish its case; None where all did."""
    failed = [o for o in outcomes if o.status != "ok"]
    if not failed:
        return None
    statuses = {o.status for o in failed}
    # A crash explains errors and hangs on the other ranks, an error explains hangs.
    kind = CRASH if "crash" in statuses else ERROR if "error" in statuses else HANG
    ranks = []
    for o in sorted(failed, key=lambda o: (("crash", "error", "hang").index(o.status), o.rank)):
        entry = {"rank": o.rank, "status": o.status}
        if o.status == "error":
            entry.update(o.error)
        else:
            entry.update({"exitcode": o.exitcode, "log": o.log})
        ranks.append(entry)
    return Verdict(kind, ranks=tuple(ranks))


def tolerance(case: Case) -> Tolerance:
    """The case's tolerance: noise-derived, floored at the rounding of the model's dtype (``fuzz.oracle``)."""
    groups = tuple((f"{path}.{sub}", path) for path, node in case.model.body.walk("body")
                   for sub in LEAF_SUBMODULES.get(node.kind, ()))
    return Tolerance(dtypes.model_dtype(case), scale_groups=groups)


def verdict_from_outcomes(case: Case, outcomes: list[RankOutcome], noise: Trace | None = None) -> Verdict:
    failure = failure_verdict(outcomes)
    if failure is not None:
        return failure
    return compare(traces(outcomes, "reference"), traces(outcomes, "system"), dtypes.promise(case),
                   tolerance(case), noise)


def check(case: Case, executor: Executor, timeout_s: float | None = None) -> Verdict:
    """The case's verdict.  A value mismatch against the rounding floor is compared again with the noise
    measured by a perturbed reference run (``fuzz.oracle``)."""
    outcomes = executor.run(case, timeout_s)
    verdict = verdict_from_outcomes(case, outcomes)
    if verdict.kind != MISMATCH or verdict.divergence.check != "value":
        return verdict
    again = executor.run(case, timeout_s, roles=("perturbed_reference",))
    if failure_verdict(again) is not None:
        return verdict
    return verdict_from_outcomes(case, outcomes, traces(again, "perturbed_reference"))
