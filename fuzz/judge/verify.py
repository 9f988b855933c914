"""One case, start to verdict: run it on the executor, then hand the traces to the oracle."""

from __future__ import annotations

import dataclasses
from typing import Callable

from parityfuzz.case import dtypes
from parityfuzz.case import LEAF_SUBMODULES, Case
from parityfuzz.executor import Executor, RankOutcome
from parityfuzz.judge import origin
from parityfuzz.judge.expected import expectation, judge
from parityfuzz.judge.oracle import Tolerance, compare
from parityfuzz.judge.tolerance import NOISE_SAMPLES
from parityfuzz.judge.verdict import CRASH, ERROR, HANG, MISMATCH, PASS, Verdict
from parityfuzz.run.trace import Trace


def traces(outcomes: list[RankOutcome], role: str) -> Trace:
    return Trace.merge([o.result[role] for o in outcomes])


def failure_verdict(outcomes: list[RankOutcome]) -> Verdict | None:
    """ERROR, CRASH or HANG where some rank did not finish its case; None where all did."""
    failed = [o for o in outcomes if o.status != "ok"]
    if not failed:
        return None
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


def tolerance(case: Case) -> Tolerance:
    """The case's tolerance: noise-derived, floored at the rounding of the model's dtype (``parityfuzz.judge.oracle``),
    and for a compiled system computing in a lower precision at that one's too."""
    groups = tuple((f"{path}.{sub}", path) for path, node in case.model.body.walk("body")
                   for sub in LEAF_SUBMODULES.get(node.kind, ()))
    return Tolerance(dtypes.model_dtype(case), scale_groups=groups, unpinned_dtype=dtypes.unpinned_dtype(case))


def verdict_from_outcomes(case: Case, outcomes: list[RankOutcome], noise: Trace | list[Trace] | None = None) -> Verdict:
    failure = failure_verdict(outcomes)
    if failure is not None:
        return failure
    sut = traces(outcomes, "system")
    verdict = compare(traces(outcomes, "reference"), sut, dtypes.promise(case), tolerance(case), noise)
    if not case.compile:
        return verdict
    # A compiled case proves that it compiled (DESIGN.md's traps): where a rank's compiler captured nothing, the
    # system ran eagerly there, and the verdict says so (a pass is an eager pass; the run counts such cases).
    eager = [r for r, rt in enumerate(sut.ranks) if not rt.compiled.get("graphs")]
    note = f"compiled nothing: torch.compile captured no graph on ranks {eager}, which ran eagerly" if eager else ""
    return dataclasses.replace(_noted(verdict, note), tags=compile_tags(sut),
                               compile_seconds=max(rt.compiled.get("seconds", 0.0) for rt in sut.ranks))


def compile_tags(sut: Trace) -> tuple[str, ...]:
    """What the compiler captured, as feature tags: graphs (the fewest any rank captured), graph breaks (the
    most any rank counted)."""
    breaks = max(rt.compiled.get("breaks", 0) for rt in sut.ranks)
    graphs = min(rt.compiled.get("graphs", 0) for rt in sut.ranks)
    return (f"compile_graphs={graphs if graphs < 3 else '3-5' if graphs <= 5 else '6+'}",
            f"compile_breaks={breaks if breaks < 3 else '3+'}")


#: The note of a verdict given on fresh ranks after the case crashed a rank of ranks that had run other cases (a
#: heap corrupted by an earlier case: its crash is not this case's, which replays as it does on fresh ranks).
WARM_CRASH = ("a rank crashed when this case ran on ranks that had run {runs} cases before; fresh ranks give this "
              "verdict")

#: The note of a mismatch whose noise was not measured because a known torch bug explains it anyway.
KNOWN_UNMEASURED = "noise not measured: a known torch bug explains the mismatch"


def verify_case(case: Case, executor: Executor, timeout_s: float | None = None,
                known: Callable[[Verdict], bool] | None = None) -> Verdict:
    """The case's verdict.  A value mismatch against the rounding floor is compared again with the noise measured by a
    perturbed reference run, and one that stands against it with the largest noise of :data:`NOISE_SAMPLES` such
    runs (``parityfuzz.judge.oracle``): it is reported only then.  Where ``known`` says that a known torch bug
    explains the mismatch (its precondition and signature: the search counts the case as passing either way), it is
    returned unmeasured, noted :data:`KNOWN_UNMEASURED`: the noise runs are most of a mismatching case's time (the
    README's 60-second run on one seed drew 10 cases with them, 87 without).  A case torch must refuse
    (:mod:`parityfuzz.judge.expected`) runs the system under test alone and passes when it raises the expected
    error.  A case whose checkpoint event resumes at another world size runs on two pools: each part is compared on
    its own, the first finding is the verdict.  A crash on ranks that had run other cases is run again on fresh ones
    (the crash broke the pool), whose verdict stands, noted :data:`WARM_CRASH` where it differs: a case must give
    its verdict on replay."""
    expected = expectation(case, executor.device_type(case.world_size))
    if expected is not None:
        outcomes = executor.run(case, timeout_s, roles=("system",))
        return judge(expected, outcomes, failure_verdict(outcomes))
    segments = executor.run_segments(case, timeout_s)
    verdict = verdict_of_segments(case, segments)
    warm = getattr(executor, "crashed_after", 0) if verdict.kind == CRASH else 0
    if warm:  # a rank died on ranks that had run other cases: their damage, or this case's? (fresh ranks now)
        segments = executor.run_segments(case, timeout_s)
        verdict = verdict_of_segments(case, segments)
        if verdict.kind != CRASH:
            verdict = _noted(verdict, WARM_CRASH.format(runs=warm))
    if verdict.kind != MISMATCH or verdict.divergence.check != "value":
        return verdict
    if known is not None and known(verdict):
        return _noted(verdict, KNOWN_UNMEASURED)
    again = executor.run_segments(case, timeout_s, roles=("perturbed_reference",))
    if len(again) != len(segments) or any(failure_verdict(o) is not None for o in again):
        return _unmeasured(verdict, again)
    noise = [[traces(o, "perturbed_reference")] for o in again]
    verdict = verdict_of_segments(case, segments, noise)
    if verdict.kind != MISMATCH or verdict.divergence.check != "value":
        return verdict
    roles = tuple(f"perturbed_reference/{i}" for i in range(1, NOISE_SAMPLES))
    more = executor.run_segments(case, timeout_s, roles=roles)
    if len(more) != len(segments) or any(failure_verdict(o) is not None for o in more):
        return _unmeasured(verdict, more)
    return verdict_of_segments(case, segments, [n + [traces(o, role) for role in roles]
                                                for n, o in zip(noise, more)])


def _unmeasured(verdict: Verdict, runs: list[list[RankOutcome]]) -> Verdict:
    """``verdict``, noting that its noise was not (fully) measured: a perturbed reference run failed (a harness
    defect: the verdict stands on the rounding floor, or on fewer noise samples, and may be a false alarm)."""
    failures = [failure_verdict(o) for o in runs]
    failure = next((f for f in failures if f is not None), None)
    why = "it did not run on every part" if failure is None else failure.describe().splitlines()[0]
    return _noted(verdict, f"noise not measured: a perturbed reference run failed ({why})")


def _noted(verdict: Verdict, note: str) -> Verdict:
    """``verdict`` with ``note`` added to its notes."""
    return dataclasses.replace(verdict, note="; ".join(n for n in (verdict.note, note) if n))


def verdict_of_segments(case: Case, segments: list[list[RankOutcome]], noises: list | None = None) -> Verdict:
    """The first finding over the parts of a run (one pool's outcomes each), or PASS with the largest
    closeness and every part's notes."""
    passed = []
    for i, outcomes in enumerate(segments):  # the second part runs the resumed case
        verdict = verdict_from_outcomes(case.resumed() if i else case, outcomes, noises[i] if noises else None)
        if verdict.kind != PASS:
            return verdict
        passed.append(verdict)
    if len(passed) == 1:
        return passed[0]
    return Verdict(PASS, note="; ".join(v.note for v in passed if v.note),
                   closeness=max(v.closeness for v in passed), tags=tuple(dict.fromkeys(t for v in passed for t in v.tags)),
                   compile_seconds=sum(v.compile_seconds for v in passed))


def locate(case: Case, executor: Executor, verdict: Verdict, timeout_s: float | None = None) -> Verdict:
    """``verdict`` with its :attr:`~Verdict.origin` where it is a mismatch: the case re-run with every module's
    output and output gradient recorded in the reference, the system under test and a perturbed reference
    (the noise), and walked in execution order up to the divergence (:mod:`parityfuzz.judge.origin`).  Unchanged where
    the re-run fails otherwise (the probes change nothing a run computes, so it does not on a sound torch)."""
    if verdict.kind != MISMATCH or verdict.divergence is None:
        return verdict
    segments = executor.run_segments(case, timeout_s, roles=("reference", "system", "perturbed_reference"),
                                     probe=True)
    if any(failure_verdict(o) is not None for o in segments):
        return verdict
    tol, d = tolerance(case), verdict.divergence
    for outcomes in segments:
        ref, sut = traces(outcomes, "reference"), traces(outcomes, "system")
        found = origin.locate(ref, sut, [traces(outcomes, "perturbed_reference")], tol, d)
        if found is None and ref.index(d.step, d.phase) is not None:
            found = origin.at_divergence(ref, sut, d)
        if found is not None:
            return dataclasses.replace(verdict, origin=found)
    return verdict
