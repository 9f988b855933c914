"""Expected errors: cases torch must refuse, judged by whether it does.

Where torch documents that it refuses a combination (FSDP1's CPU offload without an accelerator; later,
``replicate`` on a module ``fully_shard`` already manages), the case passes when the system under test raises
that error on every rank and fails when it does not.  The expectation is the case's own ``expect_error`` (it
holds wherever the case runs) or its family's for the device the ranks run on.  Only the system under test
runs: there is nothing to compare.
"""

from __future__ import annotations

import re

from parityfuzz.case import Case, ExpectedError
from parityfuzz.executor import RankOutcome
from parityfuzz.judge.verdict import ERROR, MISMATCH, PASS, Divergence, Verdict


def expectation(case: Case, device_type: str) -> ExpectedError | None:
    """The error this case must raise on this kind of device, or None."""
    from parityfuzz import families

    if case.expect_error:
        return case.expect_error
    rule = families.get(case.family).expected_error
    return (rule(case, device_type) or None) if rule is not None else None


def raised(expected: ExpectedError, error: dict) -> bool:
    """Whether a rank's error (``RankOutcome.error``) is the expected one."""
    return (error.get("role") == "system" and error.get("type") == expected.type
            and re.search(expected.match, error.get("message") or "") is not None)


def judge(expected: ExpectedError, outcomes: list[RankOutcome], failure: Verdict | None) -> Verdict:
    """PASS when every rank raised the expected error; a ``no_error`` mismatch when the system under test ran
    through; else the failure as it is (another error, a crash, a hang: a finding of its own)."""
    what = f"{expected.type} matching {expected.match!r}"
    if failure is None:
        return Verdict(MISMATCH, divergence=Divergence(step=0, what="error", tensor=expected.type, max_abs=0.0,
                                                       max_rel=0.0, check="no_error",
                                                       detail=f"expected {what}; it trained"))
    if failure.kind == ERROR and len(failure.ranks) == len(outcomes) and all(raised(expected, r)
                                                                              for r in failure.ranks):
        return Verdict(PASS, note=f"expected error: torch raised {what}")
    return failure
