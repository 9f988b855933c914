"""The oracle: pure comparison of a reference trace and a system-under-test trace.

Per pass (a step, and with ``train.nonroot`` each step's second pass through a
non-root module), in order: every rank's loss, then rank 0's full gradients
(taken before the optimizer step), then its full parameters (after it).  The first
element that is not close gives the verdict.

Tolerances are torch.testing's defaults for the recorded dtype, applied at
the tensor's scale: an element passes when ``|a - b| <= atol + rtol *
max(|ref|)`` over its tensor.  Rounding in a tensor built from sums of large
terms is proportional to those terms, not to each (possibly cancelled)
element: a float64 run that grew to gradients of 8e4 differed by 2.3e-7 on an
element of 0.03 (3e-12 of the tensor's scale), which elementwise rtol would
call a mismatch.  Real faults (a dropped, doubled or unaveraged gradient)
move errors to the tensor's own scale.  Second departure: float32.  FSDP2 and DDP compute
float32 results that differ in the last bits (BLAS rounding depends on buffer
alignment; gradient sums run in another order at world size >= 3), and over
several SGD steps that drift reached 7.5e-5 relative in 150 generated cases
against a default rtol of 1.3e-6.  So float32 uses rtol 1e-3, atol 1e-4: still
far below what a dropped, doubled or unaveraged gradient does.  float64 cases
(every optimizer) keep the strict defaults.  NaN matches NaN and equal infinities match (both
systems blowing up alike is parity); NaN against a number does not.

A mismatch can be numerical instability rather than a bug: some models
amplify last-bit differences a thousandfold per step.  :func:`confirm` checks
a mismatch against the reference re-run from weights perturbed by two ulps
(the size of difference two correct systems make): if that moves the
reference by at least 1/:data:`UNSTABLE_RATIO` of the system's deviation at
the same step and tensor, the case is unstable and passes with a note.  A
real fault shows at its first step while the perturbed reference still
agrees to rounding.

A reference that diverges numerically ends the comparison: from the first step
at which any reference loss, gradient or parameter is non-finite or larger than
:data:`DIVERGENCE_LIMIT` in magnitude, training is chaos (both systems cross
overflow at slightly different steps), not a parity question.  Steps before it
are compared in full; the verdict's ``note`` says where comparison stopped, and
the run summary counts such cases.  A system under test that blows up while the
reference stays sane is still a mismatch.
"""

from __future__ import annotations

import numpy as np

from fuzz.trace import Trace
from fuzz.verdict import MISMATCH, PASS, Divergence, Verdict, pass_name

#: dtype -> (rtol, atol): torch.testing.assert_close defaults.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-3, 1e-4),  # departure from (1.3e-6, 1e-5): see the module docstring
    "bfloat16": (1.6e-2, 1e-5),
    "float16": (1e-3, 1e-5),
}
# Mixed-precision cases are compared at the tolerance of their least precise dtype (``Case.precision()``)
# even for float32/float64 master weights and gradients: those come out of bf16/fp16 arithmetic.  The
# emulating reference (fuzz.systems.mp_reference) reproduces FSDP2's reduction layout, so its results
# match FSDP2 bit for bit in the cases measured; the dtype's torch.testing default leaves room for BLAS
# rounding differences.  The 2-ulp perturbation of ``confirm`` stays on the master weights: half an ulp of
# bf16 moved a reference's gradients by 1/60 of what a summed-instead-of-averaged gradient does, which would
# clear real faults as "unstable".


#: Magnitude beyond which the reference run counts as numerically diverged.
DIVERGENCE_LIMIT = 1e6


def reference_diverged_at(ref: Trace) -> int | None:
    """The first pass (index into the trace) at which the reference left the sane range, if any."""
    for step in range(len(ref.losses)):
        values = [np.asarray(ref.losses[step], dtype=np.float64)]
        for tensors in (ref.grads, ref.params):
            if step < len(tensors):
                values += [r.value for r in tensors[step].values() if r is not None]
        for v in values:
            if v.size and not (np.isfinite(v).all() and np.abs(v).max() <= DIVERGENCE_LIMIT):
                return step
    return None


#: A mismatch is put down to instability when the perturbed reference moves by at least 1/UNSTABLE_RATIO of it.
UNSTABLE_RATIO = 100.0


def deviation(a: Trace, b: Trace, step: int, what: str, tensor: str, phase: str = "") -> float | None:
    """Max abs difference between two traces at one pass and tensor (None if not comparable)."""
    i = a.index(step, phase)
    if i is None or b.index(step, phase) != i:
        return None
    if what == "loss" and tensor.startswith("loss[rank "):
        rank = int(tensor[len("loss[rank "):-1])
        return abs(a.losses[i][rank] - b.losses[i][rank])
    tensors = {"grad": (a.grads, b.grads), "param": (a.params, b.params)}.get(what)
    if tensors is None or i >= len(tensors[0]) or i >= len(tensors[1]):
        return None
    x, y = tensors[0][i].get(tensor), tensors[1][i].get(tensor)
    if x is None or y is None or x.value.shape != y.value.shape:
        return None
    return float(np.abs(x.value - y.value).max()) if x.value.size else 0.0


def confirm(verdict: Verdict, ref: Trace, perturbed_ref: Trace) -> Verdict:
    """Keep a mismatch only if the reference is stable where it was found (see the module docstring)."""
    d = verdict.divergence
    if verdict.kind != MISMATCH or d is None or not np.isfinite(d.max_abs):
        return verdict
    self_dev = deviation(ref, perturbed_ref, d.step, d.what, d.tensor, d.phase)
    if self_dev is None:
        return verdict
    if not np.isfinite(self_dev) or self_dev * UNSTABLE_RATIO >= d.max_abs:
        return Verdict(PASS, note=f"numerically unstable: perturbing the reference's weights by 2 ulps moves "
                                  f"{d.where()} {d.what} {d.tensor} by {self_dev:.3g}, the system by {d.max_abs:.3g}")
    return Verdict(verdict.kind, d, verdict.ranks,
                   note=f"confirmed: the reference moves by only {self_dev:.3g} there under a 2-ulp perturbation")


def tolerance(dtype: str, table: dict[str, tuple[float, float]] = TOLERANCES,
              precision: str | None = None) -> tuple[float, float]:
    """``(rtol, atol)`` for a tensor recorded in ``dtype`` by a case whose least precise dtype is ``precision``."""
    rtol, atol = table.get(dtype, table["float32"])
    if precision is not None:
        floor = table.get(precision, table["float32"])
        rtol, atol = max(rtol, floor[0]), max(atol, floor[1])
    return rtol, atol


def close_report(ref: np.ndarray, sut: np.ndarray, rtol: float, atol: float) -> tuple[bool, float, float, str]:
    """``(ok, max abs err, max rel err, detail)`` for two arrays."""
    ref = np.asarray(ref, dtype=np.float64)
    sut = np.asarray(sut, dtype=np.float64)
    if ref.shape != sut.shape:
        return False, float("inf"), float("inf"), f"shape {list(sut.shape)} != reference {list(ref.shape)}"
    both_nan = np.isnan(ref) & np.isnan(sut)
    same_inf = np.isinf(ref) & (ref == sut)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(ref - sut)
        finite_ref = np.abs(ref[np.isfinite(ref)])
        scale = float(finite_ref.max()) if finite_ref.size else 0.0
        ok = (np.isfinite(diff) & (diff <= atol + rtol * scale)) | both_nan | same_inf
        diff = np.where(both_nan | same_inf, 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)
        rel = np.where(diff == 0, 0.0, diff / np.where(ref == 0, np.finfo(np.float64).tiny, np.abs(ref)))
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = float(rel.max()) if rel.size else 0.0
    n_bad = int((~ok).sum())
    detail = f"{n_bad} of {ok.size} elements differ" if n_bad else ""
    return bool(ok.all()), max_abs, max_rel, detail


def compare(ref: Trace, sut: Trace, table: dict[str, tuple[float, float]] = TOLERANCES,
            precision: str | None = None) -> Verdict:
    """The first divergence of ``sut`` from ``ref``; ``precision`` (``Case.precision()``) loosens to its dtype."""
    if len(ref.losses) != len(sut.losses) or [ref.pass_at(i) for i in range(len(ref.losses))] != \
            [sut.pass_at(i) for i in range(len(sut.losses))]:
        return _mismatch((0, ""), "loss", "steps", float("inf"), float("inf"),
                         f"system ran {len(sut.losses)} passes, reference {len(ref.losses)}")
    stop = reference_diverged_at(ref)
    for i in range(len(ref.losses) if stop is None else stop):
        at = ref.pass_at(i)
        rtol, atol = tolerance(ref.loss_dtype, table, precision)
        for rank, (a, b) in enumerate(zip(ref.losses[i], sut.losses[i])):
            ok, mabs, mrel, detail = close_report(np.array(a), np.array(b), rtol, atol)
            if not ok:
                return _mismatch(at, "loss", f"loss[rank {rank}]", mabs, mrel, f"reference {a!r}, system {b!r}")
        for what, ref_t, sut_t in (("grad", ref.grads, sut.grads), ("param", ref.params, sut.params)):
            verdict = _compare_tensors(at, what, ref_t[i] if i < len(ref_t) else {},
                                       sut_t[i] if i < len(sut_t) else {}, table, precision)
            if verdict is not None:
                return verdict
    if stop is not None:
        return Verdict(PASS, note=f"reference diverged numerically at {pass_name(*ref.pass_at(stop))}; "
                                  "compared passes before it")
    return Verdict(PASS)


def _compare_tensors(at: tuple, what: str, ref: dict, sut: dict, table, precision) -> Verdict | None:
    for name in list(ref) + sorted(set(sut) - set(ref)):
        if name not in sut:
            return _mismatch(at, what, name, float("inf"), float("inf"), "missing in the system under test")
        if name not in ref:
            return _mismatch(at, what, name, float("inf"), float("inf"), "not in the reference")
        a, b = ref[name], sut[name]
        if a is None or b is None:
            if a is None and b is None:
                continue
            return _mismatch(at, what, name, float("inf"), float("inf"),
                             "no gradient in the " + ("system under test" if b is None else "reference"))
        rtol, atol = tolerance(a.dtype, table, precision)
        ok, mabs, mrel, detail = close_report(a.value, b.value, rtol, atol)
        if not ok:
            if a.dtype != b.dtype:
                detail += f"; dtype {b.dtype} != reference {a.dtype}"
            return _mismatch(at, what, name, mabs, mrel, detail)
    return None


def _mismatch(at: tuple, what, tensor, mabs, mrel, detail) -> Verdict:
    step, phase = at
    return Verdict(MISMATCH, Divergence(step=step, what=what, tensor=tensor, max_abs=mabs, max_rel=mrel,
                                        detail=detail, phase=phase))
