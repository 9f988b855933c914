"""The reduction after Hypothesis's shrink: the failing case made 1-minimal.

Hypothesis shrinks the choices a strategy made, so a shrunk case can keep parts no choice could drop alone
(a module whose removal would renumber the plan's paths, a setting two draws depend on).  This pass tries
every single simplification of :mod:`parityfuzz.case.reduce` on the case itself, keeps the first that still fails
with the same :meth:`~parityfuzz.judge.verdict.Verdict.bug_signature`, and starts over, until none does: then every part
left is needed (the case is 1-minimal).  A budget of seconds or runs may stop it earlier; the result says
whether it got there.  An interrupt ends it with the smallest failure reached (the caller records it, then
lets the interrupt go on).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from parityfuzz.case import Case
from parityfuzz.case.reduce import simplifications
from parityfuzz.judge.verdict import Verdict


@dataclass
class Reduction:
    case: Case
    verdict: Verdict
    #: What each kept simplification changed, in order.
    steps: list[str] = field(default_factory=list)
    runs: int = 0
    seconds: float = 0.0
    #: Whether no single simplification of :attr:`case` fails the same way (else the budget ran out first).
    minimal: bool = False
    #: Whether an interrupt (Ctrl-C, SIGTERM) stopped it: :attr:`case` is the smallest failure reached so far.
    interrupted: bool = False


def reduce_failure(case: Case, verdict: Verdict, judge: Callable[[Case], Verdict], budget_s: float | None = None,
                   max_runs: int | None = None, log: Callable[[str], None] = lambda _: None) -> Reduction:
    """Reduce the failing ``case`` (whose verdict is ``verdict``) by running candidates through ``judge``."""
    start = time.monotonic()
    out = Reduction(case, verdict)
    signature = verdict.bug_signature()
    tried: dict[str, Verdict] = {}
    while True:
        for what, candidate in simplifications(out.case):
            key = candidate.to_json()
            if key in tried:
                continue
            if (budget_s is not None and time.monotonic() - start >= budget_s) or \
                    (max_runs is not None and out.runs >= max_runs):
                out.seconds = time.monotonic() - start
                return out
            try:
                result = tried[key] = judge(candidate)
            except KeyboardInterrupt:
                out.interrupted = True
                out.seconds = time.monotonic() - start
                return out
            out.runs += 1
            if not result.ok and result.bug_signature() == signature:
                out.case, out.verdict = candidate, result
                out.steps.append(what)
                log(f"reduced: {what}")
                break
        else:
            out.minimal = True
            out.seconds = time.monotonic() - start
            return out
