"""The oracle: pure comparison of a reference trace and a system-under-test trace.

Per pass of training (a step; with ``train.nonroot`` each step's second pass through a non-root module;
with ``train.eval_every`` a forward under ``no_grad``; with a checkpoint event the pass right after the load),
first whether a checkpoint event's save or load broke one of its invariants there on some rank of the system
under test (:mod:`parityfuzz.checkpoint.invariants`; check ``checkpoint``), then in order:
0. where a system counts them, every rank issued the same collectives in the pass's forwards and backwards
   (counted per op, as ``CommDebugMode`` counts them) as the other ranks of its control flow (all ranks,
   unless per-rank gates make data-parallel ranks differ): SPMD training runs the same collectives on each;
1. every rank's loss: its dtype is the one the case promises for that pass's output, its value matches
   the reference's;
1b. under fp16 loss scaling, the same ranks' GradScaler skipped the optimizer step in both (an inf or NaN in
   the unscaled gradients; check ``skipped_step``): a step one system skipped and the other took is a finding of
   its own, not a gradient the one did not record.  Where a perturbed reference decides otherwise than the
   reference, the skip is decided by rounding (an overflow at the edge of fp16's range): the comparison stops
   before that pass, as it does before the reference's first non-finite value, and the verdict says so;
2. every gradient (taken before the optimizer step), then every parameter and buffer (after it), by name:
   - present on every rank of both systems (a tensor missing on some rank is a finding), or, where a system records
     by ownership (a pipeline stage's parameters), on the ranks that hold it, which some rank must;
   - a gradient exists on all ranks or on none, and where the reference has one (a gradient on some ranks
     only, a missing gradient and an extra one are findings);
   - its dtype on every rank is the one the case promises (:mod:`parityfuzz.case.dtypes`), even where the values
     happen to agree;
   - replicas agree: ranks holding the same piece (every rank, for a plain tensor; the ranks of one
     replicate group, for an HSDP shard) hold it bit for bit, in the system under test and in the
     reference alike (all-reduce and broadcast leave every replica the same bits: a replica that drifts is
     a finding, whatever the other replicas say);
   - the full tensor, put together from one piece per region, matches the reference's.

The first finding is the verdict.

Values match when ``max |sut - ref| <= k * noise + floor`` over the tensor, where

- ``noise`` is the rounding noise two correct implementations can show, *measured* for this case, pass
  and tensor: ``max |perturbed - ref|`` for the reference re-run from weights perturbed by 2 ulps
  (:func:`parityfuzz.run.train.perturb`), with every reduced gradient perturbed by 2 ulps at its module's scale
  (below) before each optimizer step (:func:`parityfuzz.run.train.perturb_gradients`: what another summation order does,
  down to the rounding residue of cancelled elements, which Adam's ``eps`` term amplifies).  It grows with
  the steps exactly as far as this model and optimizer amplify rounding, so a model that amplifies a
  thousandfold per step is judged by its own noise, and a fault well beyond it is a finding at whatever
  step it first shows.  One perturbed run is one sample of that noise, and at some pass its effect on a
  tensor can all but vanish by chance (a cancelled attention gradient 1e-9 in size, whose measured noise
  dropped twentyfold for one step while the system's rounding did not): so the noise of a tensor, relative
  to its scale, is pooled over passes, the largest seen for it in this and the earlier passes.  A value
  mismatch that stands against one sample is compared again against more
  (:data:`parityfuzz.judge.tolerance.NOISE_SAMPLES` in all, each from other perturbations) with the largest noise
  among them, and only then reported: a 20-minute run met a LayerNorm over width 2 whose upstream gradients
  are rounding residues of the norm's backward, where one sample measured a thirtieth of what the five
  others did; a 60-minute run met a ZeRO case exploding to gradients of 1e48 in float64, whose step-6
  gradient changed by O(1) in 9 of 40 perturbed runs and by 1e-13 in the others (a mismatch 1e12 times
  beyond what one sample allowed, and no bug: the system's reduction was exact, its local gradients off as
  a perturbed run's can be).
- ``floor = FLOOR_ULPS * eps(dtype) * scale`` covers what the perturbation does not model (summation
  order in collectives, BLAS rounding at a buffer's alignment).  Rounding in a tensor built from sums of
  large terms is proportional to those terms, not to each (possibly cancelled) element, so ``scale`` is
  the largest magnitude among the reference's tensors of the same module (a weight and its bias), and for
  the Linears inside an MLP or attention block, of the whole block: the gradient of attention's key bias is
  analytically zero, and what two implementations compute for it is a rounding residue of terms the size of
  the block's gradients (tensor parallelism, which splits the heads, showed residues 100 ulps of the key
  weight's gradient, 5 of the block's).  A gradient's scale also counts the local gradients each rank of the
  reference computed before the reduction across ranks (recorded by hooks on its parameters): the reduction's
  rounding is proportional to the terms it sums, and where the ranks' gradients cancel, the reduced one can be
  a hundred times smaller than they are (a 20-minute run met a LayerNorm bias whose reduced gradient was 1e-3
  of terms of 0.2; FSDP2's reduce-scatter and DDP's all-reduce rounded it 60 ulps apart, which no weight
  perturbation reaches: the gradient did not depend on the weights).  A module whose reference tensors are
  all exactly zero (upstream of
  a LayerNorm over width 1 every gradient is analytically zero) takes the largest scale of the pass: its
  residues follow the gradients flowing into it.  ``dtype`` is the model's: the mixed-precision reference reproduces FSDP2's
  low-precision arithmetic bit for bit (:mod:`parityfuzz.parts.fully_shard.reference`), so a reduction done in bf16
  where the policy says fp32 (~1e-3 relative) is caught.
- ``k`` and ``FLOOR_ULPS`` were chosen from measurement over clean cases (``python -m parityfuzz.frontends.calibrate``;
  the figures are in docs/oracle.md).

The noise is measured lazily: the comparison runs first with ``noise = 0`` (the floor alone); only a case
that fails a value check is re-run with the perturbed reference and compared again.  Since the full
tolerance is never below the floor, this gives exactly the verdict of always measuring.

NaN matches NaN and equal infinities match (both systems blowing up alike); NaN against a number does not.
From the first pass at which the reference holds a non-finite value, training is chaos, not a parity
question: comparison stops there (the verdict's note says where; the run summary counts such cases).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from parityfuzz.case.dtypes import EPS, Promise
from parityfuzz.judge.tolerance import FLOOR_ULPS, K, allowed, pooled_noise, scale_of
from parityfuzz.judge.verdict import MISMATCH, PASS, Divergence, Verdict, pass_name
from parityfuzz.run.arrays import (all_finite, count_above, difference, largest, largest_relative, magnitude, same,
                                   size)
from parityfuzz.run.trace import ABSENT, TENSOR_KINDS, Rec, Trace, module_of, replica_groups

#: A passing case whose allowed difference somewhere exceeded this share of the tensor's scale was
#: checked only loosely there: the verdict's note says so (and the run summary counts such cases).
LOOSE_SHARE = 0.01


@dataclass(frozen=True)
class Tolerance:
    """How far the system under test may be from the reference: ``k * noise + floor_ulps * eps * scale``."""

    dtype: str
    k: float = K
    floor_ulps: float = FLOOR_ULPS
    #: ``(module, group)`` pairs: modules whose tensors share the scale of a larger group (the Linears inside
    #: an MLP or attention block share the block's).  Other modules are their own group.
    scale_groups: tuple[tuple[str, str], ...] = ()
    #: The dtype, below ``dtype``, whose rounding the reference does not pin ("": none; see UNPINNED_ULPS).
    unpinned_dtype: str = ""

    def allowed(self, scale: float, noise: float) -> float:
        return allowed(scale, noise, EPS[self.dtype], self.k, self.floor_ulps,
                       EPS[self.unpinned_dtype] if self.unpinned_dtype else 0.0)

    def group(self, name: str) -> str:
        """The scale group of the tensor ``name``: its module, or the block that module belongs to."""
        module = module_of(name)
        return dict(self.scale_groups).get(module, module)


class _Mismatch(Exception):
    def __init__(self, divergence: Divergence):
        self.divergence = divergence


@dataclass
class _Pass:
    """The comparison of one pass: where it is, the traces, and the closest call so far."""

    at: tuple
    i: int
    ref: Trace
    sut: Trace
    noises: list[Trace]
    tol: Tolerance
    #: Per ``(what, tensor)``, the largest measured noise relative to the tensor's scale in this and earlier
    #: passes (shared by every pass of one comparison).
    pooled: dict
    closeness: float = 0.0
    loosest: tuple = (0.0, "")  # (allowed / scale, where)

    def fail(self, what: str, tensor: str, check: str, detail: str = "", ranks=(), max_abs=float("inf"),
             max_rel=float("inf"), allowed=0.0) -> None:
        step, phase = self.at
        raise _Mismatch(Divergence(step=step, what=what, tensor=tensor, max_abs=max_abs, max_rel=max_rel,
                                   detail=detail, phase=phase, check=check, ranks=tuple(ranks), allowed=allowed))

    def value(self, what: str, tensor: str, ref, sut, noises: list, scale: float = 0.0) -> None:
        """Values of one tensor (or one rank's loss) against the tolerance; ``scale`` is its module's and
        ``noises`` are the tensor's values in each perturbed run (none: the floor alone)."""
        if ref.shape != sut.shape:
            self.fail(what, tensor, "shape", f"system {list(sut.shape)}, reference {list(ref.shape)}")
        diff = difference(ref, sut)
        scale = max(scale, magnitude(ref))
        measured = 0.0
        samples = [n for n in noises if n.shape == ref.shape]
        if samples:  # pooled over passes: the worst relative noise so far
            measured = pooled_noise(max(largest(difference(ref, n)) for n in samples), scale, self.pooled,
                                    (what, tensor))
        allowed = self.tol.allowed(scale, measured)
        dev = largest(diff)
        ratio = dev / allowed if allowed > 0 else (0.0 if dev == 0 else float("inf"))
        self.closeness = max(self.closeness, ratio)
        if scale > 0 and allowed / scale > self.loosest[0]:
            self.loosest = (allowed / scale, f"{pass_name(*self.at)} {what} {tensor}")
        if dev > allowed:
            self.fail(what, tensor, "value", f"{count_above(diff, allowed)} of {size(diff)} elements; measured noise "
                      f"{measured:.3g}, scale {scale:.3g}", max_abs=dev, max_rel=largest_relative(diff, ref),
                      allowed=allowed)


def module_scales(trace: Trace, i: int, what: str, tol: Tolerance) -> dict[str, float]:
    """Per scale group (:meth:`Tolerance.group`), the largest magnitude among the trace's full tensors of kind
    ``what`` in pass ``i``; for gradients also among the local gradients any rank computed before the
    reduction across ranks (the terms the reduction sums)."""
    out: dict[str, float] = {}
    for name in trace.names(i, what):
        full = trace.full(i, what, name)
        if full is not None:
            key = tol.group(name)
            out[key] = max(out.get(key, 0.0), magnitude(full.value))
    if what == "grad":
        for name, value in trace.local_grad_scales(i).items():
            if math.isfinite(value):
                key = tol.group(name)
                out[key] = max(out.get(key, 0.0), value)
    return out


def compare(ref: Trace, sut: Trace, promise: Promise, tol: Tolerance,
            noise: Trace | Sequence[Trace] | None = None) -> Verdict:
    """The first finding in ``sut`` against ``ref`` (see the module docstring), or PASS.

    ``noise`` is the reference re-run from perturbed weights, or several such runs (each a sample of the
    noise; a tensor's measured noise is the largest); without it the tolerance is the floor alone.
    """
    noises = [noise] if isinstance(noise, Trace) else list(noise or ())
    noises = [n for n in noises if n.passes == ref.passes]
    passes = ref.passes
    for name, trace in (("system under test", sut), ("reference", ref)):
        for rank, rt in enumerate(trace.ranks):
            if [tuple(p) for p in rt.passes] != passes:
                return Verdict(MISMATCH, Divergence(
                    step=0, what="loss", tensor="passes", max_abs=float("inf"), max_rel=float("inf"),
                    check="passes", ranks=(rank,),
                    detail=f"{name} rank {rank} ran {[pass_name(*p) for p in rt.passes]}, reference rank 0 "
                           f"{[pass_name(*p) for p in passes]}"))
    stop = _first_non_finite(ref)
    undecided = _first_noise_sensitive_skip(ref, noises)
    if undecided is not None and (stop is None or undecided < stop):
        stop = undecided
    closeness, loosest, pooled = 0.0, (0.0, ""), {}
    for i in range(len(passes) if stop is None else stop):
        p = _Pass(passes[i], i, ref, sut, noises, tol, pooled)
        try:
            _compare_pass(p, promise)
        except _Mismatch as m:
            return Verdict(MISMATCH, m.divergence, closeness=max(closeness, p.closeness))
        closeness = max(closeness, p.closeness)
        loosest = max(loosest, p.loosest)
    notes = []
    if stop is not None and stop == undecided:
        notes.append(f"the GradScaler's skip of the step at {pass_name(*passes[stop])} is decided by rounding (a "
                     "perturbed reference decided otherwise): compared the passes before it")
    elif stop is not None:
        notes.append(f"reference went non-finite at {pass_name(*passes[stop])}: compared the passes before it")
    if loosest[0] > LOOSE_SHARE:
        notes.append(f"loosely checked: the measured noise allowed {loosest[0]:.2g} of the tensor's scale at "
                     f"{loosest[1]}")
    return Verdict(PASS, note="; ".join(notes), closeness=closeness)


def _compare_pass(p: _Pass, promise: Promise) -> None:
    step, phase = p.at
    for rank, rt in enumerate(p.sut.ranks):  # a checkpoint event's save or load broke an invariant here
        for i, kind, tensor, message, max_abs in rt.violations:
            if i == p.i:
                ranks = [r for r, other in enumerate(p.sut.ranks) if any(v[:2] == (i, kind) for v in other.violations)]
                p.fail(kind, tensor, "checkpoint", message, ranks=ranks, max_abs=max_abs)
    for role, trace in (("system under test", p.sut), ("reference", p.ref)):
        counts = [rt.collectives[p.i] if p.i < len(rt.collectives) else {} for rt in trace.ranks]
        flows = promise.flows or (0,) * len(counts)
        first = {}  # per control flow, its first rank
        for rank, c in enumerate(counts):
            alike = first.setdefault(flows[rank], rank)
            if c != counts[alike]:
                p.fail("collectives", "collectives", "collectives", f"in the {role}: rank {rank} issued {c}, "
                       f"rank {alike} {counts[alike]}", ranks=(alike, rank))
    expected = promise.output(phase)
    refs, suts = p.ref.losses(p.i), p.sut.losses(p.i)
    noises = [n.losses(p.i) for n in p.noises]
    for rank, (a, b) in enumerate(zip(refs, suts)):
        if a is None or b is None:  # a pass with no forward (right after a checkpoint load)
            if a is not b:
                p.fail("loss", f"loss[rank {rank}]", "passes", "one system ran a forward, the other none",
                       ranks=(rank,))
            continue
        if b.dtype != expected:
            p.fail("loss", f"loss[rank {rank}]", "dtype", f"{b.dtype}, promised {expected}", ranks=(rank,))
        p.value("loss", f"loss[rank {rank}]", a.value, b.value, [n[rank].value for n in noises])
    skipped = {"system under test": p.sut.skipped(p.i), "reference": p.ref.skipped(p.i)}
    if skipped["system under test"] != skipped["reference"]:
        said = [f"in the {role} " + ("no rank's GradScaler skipped the optimizer step" if not ranks else
                                     f"the GradScaler of rank{'s' if len(ranks) > 1 else ''} "
                                     f"{', '.join(map(str, ranks))} skipped the optimizer step")
                for role, ranks in skipped.items()]
        p.fail("optimizer", "step", "skipped_step",
               "; ".join(said) + " (a skip: an inf or NaN in the unscaled gradients)",
               ranks=tuple(sorted(set(skipped["system under test"]) ^ set(skipped["reference"]))))
    for what in TENSOR_KINDS:
        scales = module_scales(p.ref, p.i, what, p.tol)
        for name in p.ref.names(p.i, what) + [n for n in p.sut.names(p.i, what) if n not in p.ref.names(p.i, what)]:
            _compare_tensor(p, what, name, promise, scale_of(scales, p.tol.group(name)))


def _compare_tensor(p: _Pass, what: str, name: str, promise: Promise, scale: float) -> None:
    held = {}  # per role, {rank: record} over the ranks that hold the tensor (all, unless recorded by ownership)
    for role, trace in (("system under test", p.sut), ("reference", p.ref)):
        recs = trace.held(p.i, what, name)
        if not recs:
            p.fail(what, name, "missing", f"held by no rank of the {role} (every rank says another holds it)",
                   ranks=())
        absent = [r for r, rec in recs.items() if rec is ABSENT]
        if absent:
            p.fail(what, name, "missing", f"not recorded by the {role}", ranks=absent)
        held[role] = recs
    suts, refs = held["system under test"], held["reference"]
    for role, recs in held.items():
        for r, rec in recs.items():
            if rec is not None and (misfit := rec.misfit()):
                p.fail(what, name, "local_shape", f"in the {role}: rank {r}'s {misfit}", ranks=(r,))
    for role, recs in held.items():
        none = [r for r, rec in recs.items() if rec is None]
        if none and len(none) < len(recs):
            p.fail(what, name, "uneven_grad", f"in the {role}: ranks {none} have no gradient, the others do",
                   ranks=none)
    ref0, sut0 = next(iter(refs.values())), next(iter(suts.values()))
    if ref0 is None or sut0 is None:
        if ref0 is None and sut0 is None:
            return
        p.fail(what, name, "missing_grad" if sut0 is None else "extra_grad")
    for rank, rec in suts.items():
        if rec.dtype != promise.tensor(what, name):
            p.fail(what, name, "dtype", f"{rec.dtype}, promised {promise.tensor(what, name)}", ranks=(rank,))
    for role, recs in held.items():
        ranks = list(recs)
        for group in replica_groups([recs[r] for r in ranks]):
            group = [ranks[g] for g in group]
            first = recs[group[0]].value
            for r in group[1:]:
                other = recs[r].value
                if not same(first, other):
                    dev = largest(difference(first, other)) if other.shape == first.shape else float("inf")
                    p.fail(what, name, "replica", f"in the {role}: rank {r}'s copy differs from rank "
                           f"{group[0]}'s (ranks {group} hold the same piece)", ranks=(group[0], r), max_abs=dev)
    noises = [n.full(p.i, what, name) for n in p.noises]
    ref_full, sut_full = p.ref.full(p.i, what, name), p.sut.full(p.i, what, name)
    p.value(what, name, ref_full.value, sut_full.value, [n.value for n in noises if n is not None], scale)


def measure(ref: Trace, sut: Trace, noise: Trace, tol: Tolerance):
    """``(pass, what, tensor, deviation, noise, scale)`` for every loss and tensor both systems hold, up to the
    reference's first non-finite pass: the raw figures behind the tolerance (``python -m parityfuzz.frontends.calibrate``)."""
    stop = _first_non_finite(ref)
    for i, at in enumerate(ref.passes[:stop]):
        rows = [(f"loss[rank {r}]", "loss", a, b, n)
                for r, (a, b, n) in enumerate(zip(ref.losses(i), sut.losses(i), noise.losses(i))) if a is not None]
        scales = {what: module_scales(ref, i, what, tol) for what in TENSOR_KINDS}
        for what in TENSOR_KINDS:
            rows += [(name, what, ref.full(i, what, name), sut.full(i, what, name), noise.full(i, what, name))
                     for name in ref.names(i, what)]
        for name, what, a, b, n in rows:
            if a is None or b is None or n is None or not (a.value.shape == b.value.shape == n.value.shape):
                continue
            scale = max(magnitude(a.value), scale_of(scales.get(what, {}), tol.group(name)))
            yield at, what, name, largest(difference(a.value, b.value)), largest(difference(a.value, n.value)), scale


def _first_noise_sensitive_skip(ref: Trace, noises: Sequence[Trace]) -> int | None:
    """The first pass at which a perturbed reference's GradScaler decided otherwise than the reference's whether
    to skip the step, if any."""
    for i in range(len(ref.passes)):
        if any(n.skipped(i) != ref.skipped(i) for n in noises):
            return i
    return None


def _first_non_finite(ref: Trace) -> int | None:
    """The first pass at which the reference holds a non-finite value (loss, gradient or parameter), if any."""
    for i in range(len(ref.passes)):
        values: list[Rec | None] = list(ref.losses(i))
        for what in TENSOR_KINDS:
            values += [ref.full(i, what, name) for name in ref.names(i, what)]
        if any(r is not None and not all_finite(r.value) for r in values):
            return i
    return None
