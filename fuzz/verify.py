"""One case, start to verdict: run it on the executor, then hand the traces to the oracle."""

from __future__ import annotations

from fuzz.case import Case
from fuzz.executor import Executor, RankOutcome
from fuzz.oracle import compare, confirm
from fuzz.trace import Trace
from fuzz.verdict import CRASH, ERROR, HANG, MISMATCH, Verdict


def traces(outcomes: list[RankOutcome], role: str) -> Trace:
    return Trace.merge([o.result[role] for o in outcomes])


def verdict_from_outcomes(outcomes: list[RankOutcome], precision: str | None = None) -> Verdict:
    failed = [o for o in outcomes if o.status != "ok"]
    if not failed:
        return compare(traces(outcomes, "reference"), traces(outcomes, "system"), precision=precision)
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


def check(case: Case, executor: Executor, timeout_s: float | None = None) -> Verdict:
    """The case's verdict; a mismatch is confirmed against a perturbed reference run (``oracle.confirm``)."""
    outcomes = executor.run(case, timeout_s)
    verdict = verdict_from_outcomes(outcomes, case.precision())
    if verdict.kind != MISMATCH:
        return verdict
    again = executor.run(case, timeout_s, roles=("perturbed_reference",))
    if any(o.status != "ok" for o in again):
        return verdict
    return confirm(verdict, traces(outcomes, "reference"), traces(again, "perturbed_reference"))
