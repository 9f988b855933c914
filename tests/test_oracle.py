"""The oracle: equal traces pass; just inside passes, just outside fails; NaN handling; first divergence."""

import math

import numpy as np
import pytest

from fuzz.oracle import TOLERANCES, close_report, compare, confirm
from fuzz.trace import Rec, Trace


def trace(loss=1.0, grad=(1.0, 2.0), param=(3.0, -4.0), steps=2, dtype="float64", ranks=2):
    return Trace(
        losses=[[loss] * ranks for _ in range(steps)],
        loss_dtype=dtype,
        grads=[{"w": Rec(dtype, np.array(grad, dtype=np.float64))} for _ in range(steps)],
        params=[{"w": Rec(dtype, np.array(param, dtype=np.float64))} for _ in range(steps)],
    )


def test_identical_traces_pass():
    assert compare(trace(), trace()).ok


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_just_inside_and_just_outside_tolerance(dtype):
    rtol, atol = TOLERANCES[dtype]
    ref = 2.0
    limit = atol + rtol * ref
    inside = trace(grad=(1.0, ref), dtype=dtype)
    inside.grads[0]["w"].value[1] = ref + 0.99 * limit
    assert compare(trace(grad=(1.0, ref), dtype=dtype), inside).ok
    outside = trace(grad=(1.0, ref), dtype=dtype)
    outside.grads[0]["w"].value[1] = ref + 1.01 * limit
    v = compare(trace(grad=(1.0, ref), dtype=dtype), outside)
    assert v.kind == "mismatch"
    d = v.divergence
    assert (d.step, d.what, d.tensor) == (0, "grad", "w")
    assert d.max_abs == pytest.approx(1.01 * limit)
    assert d.max_rel == pytest.approx(1.01 * limit / ref)


def test_nan_against_number_fails_and_nan_against_nan_passes():
    ok, *_ = close_report(np.array([math.nan]), np.array([math.nan]), 1e-7, 1e-7)
    assert ok
    ok, mabs, _, _ = close_report(np.array([1.0]), np.array([math.nan]), 1e-7, 1e-7)
    assert not ok and mabs == math.inf
    ok, *_ = close_report(np.array([math.nan]), np.array([1.0]), 1e-7, 1e-7)
    assert not ok
    ok, *_ = close_report(np.array([math.inf]), np.array([math.inf]), 1e-7, 1e-7)
    assert ok
    ok, *_ = close_report(np.array([math.inf]), np.array([-math.inf]), 1e-7, 1e-7)
    assert not ok


def test_nan_loss_on_one_rank_is_caught():
    sut = trace()
    sut.losses[1][1] = math.nan
    v = compare(trace(), sut)
    assert v.divergence.what == "loss" and v.divergence.tensor == "loss[rank 1]" and v.divergence.step == 1


def test_first_divergence_is_reported_in_step_order():
    sut = trace(steps=3)
    sut.params[2]["w"].value[0] += 1
    sut.grads[1]["w"].value[0] += 1
    v = compare(trace(steps=3), sut)
    assert (v.divergence.step, v.divergence.what) == (1, "grad")


def test_loss_checked_before_gradients():
    sut = trace(loss=1.5)
    sut.grads[0]["w"].value[0] += 1
    assert compare(trace(), sut).divergence.what == "loss"


def test_shape_missing_and_none_gradients():
    sut = trace()
    sut.grads[0]["w"] = Rec("float64", np.zeros(3))
    assert "shape" in compare(trace(), sut).divergence.detail
    sut = trace()
    del sut.params[0]["w"]
    assert "missing" in compare(trace(), sut).divergence.detail
    sut = trace()
    sut.grads[0]["w"] = None
    assert "no gradient" in compare(trace(), sut).divergence.detail
    both = trace()
    both.grads[0]["w"] = None
    ref = trace()
    ref.grads[0]["w"] = None
    assert compare(ref, both).ok


def test_step_count_mismatch():
    assert not compare(trace(steps=2), trace(steps=1)).ok


def test_zero_reference_relative_error_is_finite_or_inf_but_reported():
    ok, mabs, mrel, _ = close_report(np.array([0.0]), np.array([1.0]), 1e-7, 1e-7)
    assert not ok and mabs == 1.0 and mrel > 1e300


def test_comparison_stops_where_the_reference_diverges():
    ref, sut = trace(steps=3), trace(steps=3)
    ref.grads[1]["w"].value[0] = 1e9  # the reference blows up at step 1 ...
    sut.grads[1]["w"].value[0] = math.inf  # ... and the system crosses overflow first
    sut.params[2]["w"].value[0] = 7.0
    v = compare(ref, sut)
    assert v.ok and "step 1" in v.note


def test_divergence_before_the_reference_blows_up_is_still_caught():
    ref, sut = trace(steps=3), trace(steps=3)
    ref.losses[2][0] = math.nan
    sut.params[0]["w"].value[0] += 1
    v = compare(ref, sut)
    assert v.kind == "mismatch" and v.divergence.step == 0


def test_system_blowing_up_alone_is_a_mismatch():
    sut = trace()
    sut.grads[0]["w"].value[0] = 1e9
    assert compare(trace(), sut).kind == "mismatch"


def test_tolerance_is_relative_to_the_tensor_scale():
    ref = np.array([8e4, 0.03])
    noisy = ref + np.array([0.0, 2.3e-7])  # rounding noise of the large terms, on a small element
    assert close_report(ref, noisy, *TOLERANCES["float64"])[0]
    wrong = ref * np.array([1.0, 2.0])  # a real fault on the small element alone is still caught
    assert not close_report(ref, wrong, *TOLERANCES["float64"])[0]


def test_confirm_keeps_a_mismatch_where_the_reference_is_stable():
    ref, sut = trace(), trace()
    sut.grads[0]["w"].value[0] += 0.5
    perturbed = trace()
    perturbed.grads[0]["w"].value[0] += 1e-15
    verdict = confirm(compare(ref, sut), ref, perturbed)
    assert verdict.kind == "mismatch" and "confirmed" in verdict.note


def test_confirm_clears_a_mismatch_the_reference_makes_itself():
    ref, sut = trace(), trace()
    sut.grads[1]["w"].value[0] += 0.5
    perturbed = trace()
    perturbed.grads[1]["w"].value[0] += 0.3  # the reference moves as much under a 2-ulp nudge: chaos
    verdict = confirm(compare(ref, sut), ref, perturbed)
    assert verdict.ok and "numerically unstable" in verdict.note


def test_confirm_leaves_non_numeric_mismatches_alone():
    ref, sut = trace(), trace()
    sut.grads[0]["w"] = None
    v = compare(ref, sut)
    assert confirm(v, ref, trace()) is v


def test_non_root_pass_is_named_in_the_divergence_and_confirmed_at_its_own_pass():
    """A trace with a non-root pass after each step: a divergence there names the step and the pass, and
    confirmation looks at that pass, not at the step's root pass."""
    passes = [(0, ""), (0, "non-root body.1"), (1, ""), (1, "non-root body.1")]
    ref, sut, perturbed = (trace(steps=4) for _ in range(3))
    for t in (ref, sut, perturbed):
        t.passes = list(passes)
    sut.grads[3]["w"].value[0] += 0.5
    verdict = compare(ref, sut)
    d = verdict.divergence
    assert (d.step, d.phase, d.what) == (1, "non-root body.1", "grad")
    assert "step 1 (non-root body.1 pass) grad w" in verdict.describe()
    assert verdict.signature() == "mismatch:1:non-root body.1:grad:w"
    perturbed.grads[2]["w"].value[0] += 0.5  # the root pass of step 1 is unstable; the non-root one is not
    assert confirm(verdict, ref, perturbed).kind == "mismatch"
    perturbed.grads[3]["w"].value[0] += 0.4
    assert confirm(verdict, ref, perturbed).kind == "pass"
    other = trace(steps=4)
    other.passes = [(0, ""), (1, ""), (2, ""), (3, "")]
    assert compare(ref, other).divergence.tensor == "steps"
