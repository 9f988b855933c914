"""One case, start to verdict: run it on the executor, then hand the traces to the oracle."""

from __future__ import annotations

from fuzz.case import Case
from fuzz.executor import Executor, RankOutcome
from fuzz.oracle import compare
from fuzz.trace import Trace
from fuzz.verdict import CRASH, ERROR, HANG, Verdict


def verdict_from_outcomes(outcomes: list[RankOutcome]) -> Verdict:
    failed = [o for o in outcomes if o.status != "ok"]
    if not failed:
        ref = Trace.merge([o.result["reference"] for o in outcomes])
        sut = Trace.merge([o.result["system"] for o in outcomes])
        return compare(ref, sut)
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
    return verdict_from_outcomes(executor.run(case, timeout_s))
