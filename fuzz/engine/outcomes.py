"""Failures as Hypothesis sees them (one exception type per verdict kind, so that with
``report_multiple_bugs`` distinct kinds are kept apart and each shrunk) and as a run reports them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

try:
    BaseExceptionGroup
except NameError:  # Python 3.10: the backport Hypothesis depends on
    from exceptiongroup import BaseExceptionGroup

from parityfuzz.case import Case
from parityfuzz.engine.reduce import Reduction
from parityfuzz.export import refusal
from parityfuzz.frontends.show import describe_case
from parityfuzz.judge.verdict import Verdict


class CaseFailed(AssertionError):
    """A case's verdict was not PASS."""

    def __init__(self, case: Case, verdict: Verdict):
        self.case, self.verdict = case, verdict
        super().__init__(verdict.describe())


class MismatchFound(CaseFailed):
    pass


class ErrorFound(CaseFailed):
    pass


class CrashFound(CaseFailed):
    pass


class HangFound(CaseFailed):
    pass


FAILURE_TYPES = {"mismatch": MismatchFound, "error": ErrorFound, "crash": CrashFound, "hang": HangFound}


@dataclass
class Failure:
    target: str
    case: Case
    verdict: Verdict
    corpus_path: Path | None
    cases_to_find: int
    seconds_to_find: float
    shrink_runs: int
    shrink_seconds: float
    duplicate_of: Path | None = None
    known_issue: str | None = None
    interrupted: bool = False
    #: The reduction to a 1-minimal case after the shrink (:mod:`parityfuzz.engine.reduce`); None where turned off.
    reduction: Reduction | None = None
    #: Seconds into the run (its fuzzer's start) at which the failure was first met.
    found_at: float = 0.0

    def to_dict(self) -> dict:
        d = self.verdict.divergence
        return {
            "target": self.target,
            "corpus_file": str(self.corpus_path) if self.corpus_path else None,
            "case_id": self.case.case_id(),
            "verdict_kind": self.verdict.kind,
            "signature": self.verdict.signature(),
            "bug_signature": self.verdict.bug_signature(),
            "first_divergence": None if d is None else asdict(d),
            "origin": None if self.verdict.origin is None else asdict(self.verdict.origin),
            "description": self.verdict.describe(),
            "known_issue": self.known_issue,
            "duplicate_of": str(self.duplicate_of) if self.duplicate_of else None,
            "interrupted": self.interrupted,
            "cases_to_find": self.cases_to_find,
            "seconds_to_find": round(self.seconds_to_find, 2),
            "found_at_seconds": round(self.found_at, 2),
            "shrink_runs": self.shrink_runs,
            "shrink_seconds": round(self.shrink_seconds, 2),
            "reduce_runs": self.reduction.runs if self.reduction else 0,
            "reduce_seconds": round(self.reduction.seconds, 2) if self.reduction else 0.0,
            "reduce_steps": list(self.reduction.steps) if self.reduction else [],
            "one_minimal": bool(self.reduction and self.reduction.minimal),
            "origin_description": None if self.verdict.origin is None else self.verdict.origin.describe(),
            "world_size": self.case.world_size,
            "case_tree": describe_case(self.case),
            "exportable": refusal(self.case) is None,
        }


def case_failures(e: BaseException) -> list[CaseFailed]:
    if isinstance(e, CaseFailed):
        return [e]
    if isinstance(e, BaseExceptionGroup):
        out = []
        for sub in e.exceptions:
            got = case_failures(sub)
            if not got:
                return []
            out.extend(got)
        return out
    return []
