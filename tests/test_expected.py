"""Expected errors: a case torch documents refusing passes when the system under test raises that error on
every rank, and is a finding when it trains or raises something else (``parityfuzz.judge.expected``)."""

import dataclasses
import re

import pytest

from parityfuzz.case import Case, CaseError, ExpectedError
from parityfuzz.judge.verify import verify_case
from parityfuzz.parts.fsdp1 import expected_error as fsdp1_expected
from tests.test_fsdp1 import fsdp1_case


@pytest.mark.parametrize("flag", ["offload", "sync_module_states"])
def test_fsdp1_refusing_a_cpu_machine_is_a_pass(executor, flag):
    case = fsdp1_case((2,), **{flag: True})
    verdict = verify_case(case, executor)
    assert verdict.ok and "expected error" in verdict.note, verdict.describe()


def test_a_refusal_suppressed_inside_fsdp1_is_a_finding(executor):
    case = dataclasses.replace(fsdp1_case((2,), offload=True, sync_module_states=True),
                               system="tests.faults:RefusalSuppressed")
    verdict = verify_case(case, executor)
    assert verdict.kind == "mismatch" and verdict.divergence.check == "no_error", verdict.describe()
    assert verdict.bug_signature() == "mismatch:no_error:error"


def test_another_error_than_the_expected_one_is_a_finding(executor):
    case = dataclasses.replace(fsdp1_case((2,), offload=True),
                               expect_error=ExpectedError("RuntimeError", "some other message"))
    verdict = verify_case(case, executor)
    assert verdict.kind == "error" and re.search(fsdp1_expected(case, "cpu").match, verdict.describe()), \
        verdict.describe()


def test_a_case_expecting_an_error_that_trains_is_a_finding(executor):
    case = dataclasses.replace(fsdp1_case((2,)), expect_error=ExpectedError("RuntimeError", "refused"))
    verdict = verify_case(case, executor)
    assert verdict.kind == "mismatch" and "did not raise" in verdict.describe(), verdict.describe()


def test_an_expected_error_round_trips_and_is_validated():
    case = dataclasses.replace(fsdp1_case((2,)), expect_error=ExpectedError("ValueError", "on GPU"))
    assert Case.from_json(case.to_json()) == case
    assert "expect_error" not in fsdp1_case((2,)).to_json()  # left out when none is expected
    with pytest.raises(CaseError, match="expect_error.match"):
        dataclasses.replace(case, expect_error=ExpectedError("ValueError", "(unclosed")).validate()
    with pytest.raises(CaseError, match="expect_error.type"):
        dataclasses.replace(case, expect_error=ExpectedError("", "on GPU")).validate()
