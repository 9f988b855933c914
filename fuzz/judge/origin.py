"""Where a divergence begins: pure comparison of probed traces (:mod:`parityfuzz.run.activations`).

The oracle names the first tensor that differs, a gradient or a parameter, which is often far from the
cause: a wrong forward shows first in some gradient, a lost reduction at step 0 in every later output.
:func:`locate` walks a probed run in execution order, pass by pass up to the oracle's divergence, and names the
first module whose forward output or output gradient leaves the reference's on some rank.  Values are compared
rank by rank (each rank of both systems ran the same batch), where both systems hold them in the same shape (a
tensor-parallel module that hands on its local shard is not comparable on its own: the modules after it are),
against the oracle's tolerance: ``k * noise + floor_ulps * eps * scale``, the noise measured by the perturbed
reference's run of the same probe and pooled over passes relative to the record's scale, the scale the largest
magnitude of the reference's record.  Where every module agrees up to the divergence, the divergence itself
is where it begins (:func:`at_divergence`): a parameter's gradient that its reduction or its own backward
got wrong, or an optimizer update.
"""

from __future__ import annotations

from parityfuzz.judge.oracle import Tolerance
from parityfuzz.judge.verdict import Divergence, Origin
from parityfuzz.run.activations import parse
from parityfuzz.run.arrays import difference, magnitude
from parityfuzz.run.trace import Trace, module_of


def _labels(trace: Trace, i: int) -> list[str]:
    """Every record of pass ``i`` on some rank, in rank 0's execution order, then the other ranks'."""
    out: dict[str, None] = {}
    for rt in trace.ranks:
        if i < len(rt.activations):
            out.update(dict.fromkeys(rt.activations[i]))
    return list(out)


def _record(trace: Trace, rank: int, i: int, name: str):
    acts = trace.ranks[rank].activations
    return acts[i].get(name) if i < len(acts) else None


def locate(ref: Trace, sut: Trace, noises: list[Trace], tol: Tolerance,
           divergence: Divergence | None = None) -> Origin | None:
    """The first module output or output gradient that differs, in passes up to the one of ``divergence``
    (all passes where it is not one of these traces'); None where all agree."""
    passes = ref.passes
    last = ref.index(divergence.step, divergence.phase) if divergence is not None else None
    pooled: dict[str, float] = {}
    for i in range(len(passes) if last is None else last + 1):
        if sut.passes[i:i + 1] != passes[i:i + 1]:
            return None
        for name in _labels(ref, i):
            found = _compare(ref, sut, noises, tol, i, name, pooled)
            if found is not None:
                return found
    return None


def _compare(ref: Trace, sut: Trace, noises: list[Trace], tol: Tolerance, i: int, name: str,
             pooled: dict) -> Origin | None:
    bad, worst = [], (0.0, 0.0)
    for rank in range(len(ref.ranks)):
        a, b = _record(ref, rank, i, name), _record(sut, rank, i, name)
        if a is None or b is None or a.value.shape != b.value.shape:
            continue
        scale = magnitude(a.value)
        samples = [n for n in (_record(t, rank, i, name) for t in noises) if n is not None
                   and n.value.shape == a.value.shape]
        measured = max((float(difference(a.value, n.value).max(initial=0.0)) for n in samples), default=0.0)
        if scale > 0:
            relative = pooled[name] = max(pooled.get(name, 0.0), measured / scale)
            measured = relative * scale
        allowed = tol.allowed(scale, measured)
        dev = float(difference(a.value, b.value).max(initial=0.0))
        if dev > allowed:
            bad.append(rank)
            worst = max(worst, (dev, allowed))
    if not bad:
        return None
    module, call, what = parse(name)
    step, phase = ref.passes[i]
    return Origin(step=step, phase=phase, module=module, what=what, call=call, ranks=tuple(bad),
                  max_abs=worst[0], allowed=worst[1], **_collectives(ref, sut, i, bad[0]))


def at_divergence(ref: Trace, sut: Trace, divergence: Divergence) -> Origin:
    """The origin where every module agrees up to ``divergence``: its own tensor."""
    d = divergence
    i = ref.index(d.step, d.phase)
    rank = d.ranks[0] if d.ranks else 0
    module = "" if d.what in ("loss", "optimizer") else module_of(d.tensor.removeprefix("buffer:")) or "model"
    return Origin(step=d.step, phase=d.phase, module=module, what=d.what, tensor=d.tensor, ranks=d.ranks,
                  max_abs=d.max_abs, allowed=d.allowed, **({} if i is None else _collectives(ref, sut, i, rank)))


def _collectives(ref: Trace, sut: Trace, i: int, rank: int) -> dict:
    def counts(trace: Trace) -> dict:
        rt = trace.ranks[rank] if rank < len(trace.ranks) else None
        return dict(rt.collectives[i]) if rt is not None and i < len(rt.collectives) else {}

    return {"system_collectives": counts(sut), "reference_collectives": counts(ref)}
