"""Spending one wall-clock budget over several targets: in slices, each to the target whose recent slices paid best.

A target's *yield* is what its slice added per second of generation: new feature pairs (two features met in one
case for the first time in the run), new near misses (a passing case within :data:`NEAR_MISS` of the tolerance, in
a feature combination no earlier near miss had) and new distinct failures, weighted (:data:`WEIGHTS`) so that one
finding outweighs a slice's worth of coverage.  Each target's estimate is an exponentially weighted mean of its
slices' yields (:data:`SMOOTHING`), so a target that stops finding anything new loses its share within a few
slices and one that starts again wins it back.

Every target first gets one slice (its estimate needs one); then time goes in proportion to the estimates, with a
floor (:data:`FLOOR`: that share of the budget is spread evenly) so that no target starves: a quiet target still
sees a new finding, late.  The next slice goes to the target furthest behind its share of the time spent so far
(deficit round robin), so shares hold over the run whatever the slices' lengths.  Where the budget is too small for
that (less than :data:`MIN_SLICES` slices a target), each target gets one even slice: that is the even schedule.

The schedule only chooses; running a slice is :meth:`parityfuzz.engine.fuzzer.TargetRun.run`.  The budget stays
wall-clock seconds of generation, as ``--fuzz-budget`` says: shrinking a finding is not charged to it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

#: A passing case at least this close to the tolerance (:attr:`parityfuzz.judge.verdict.Verdict.closeness`) is a
#: near miss.
NEAR_MISS = 0.5
#: What a slice's gains count for: one new feature pair, one new near-miss combination, one new distinct failure.
WEIGHTS = {"pairs": 1.0, "near_misses": 5.0, "failures": 200.0}
#: The weight of a slice's yield in its target's estimate (the rest is the estimate before it).
SMOOTHING = 0.5
#: The share of the budget spread evenly over the targets whatever their yields.
FLOOR = 0.25
#: Seconds a slice lasts (shorter when the budget is small): long enough for a few cases of the slowest target.
SLICE_S = 30.0
MIN_SLICE_S = 5.0
#: Slices a target must be able to get for the schedule to adapt at all.
MIN_SLICES = 3
#: Cases a target's first slice runs at least, whatever its seconds: one slow first case (a pool starting, a
#: compile) is no estimate of a target's yield.
FIRST_SLICE_CASES = 3


@dataclass
class Gains:
    """What a target's run has found so far (the counts yields are differences of)."""

    pairs: int = 0
    near_misses: int = 0
    failures: int = 0

    def minus(self, other: "Gains") -> "Gains":
        return Gains(self.pairs - other.pairs, self.near_misses - other.near_misses, self.failures - other.failures)

    def score(self) -> float:
        return sum(WEIGHTS[k] * getattr(self, k) for k in WEIGHTS)


@dataclass
class Slice:
    target: str
    #: Seconds into the schedule at which the slice began; seconds of generation it took.
    at: float
    seconds: float
    gains: Gains
    #: The target's share of the time when the slice was chosen.
    share: float

    @property
    def yield_per_s(self) -> float:
        return self.gains.score() / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {"target": self.target, "at": round(self.at, 1), "seconds": round(self.seconds, 1),
                "new_pairs": self.gains.pairs, "new_near_misses": self.gains.near_misses,
                "new_failures": self.gains.failures, "yield_per_s": round(self.yield_per_s, 3),
                "share": round(self.share, 3)}


@dataclass
class Schedule:
    """Which target gets the next slice of ``budget_s`` seconds, and for how long (:meth:`next`), from what each
    slice found (:meth:`record`).  ``adaptive=False`` is the even schedule: each target one slice of an even share
    of what is left, in turn."""

    targets: list[str]
    budget_s: float
    adaptive: bool = True
    slice_s: float = SLICE_S
    spent: dict[str, float] = field(default_factory=dict)
    estimate: dict[str, float] = field(default_factory=dict)
    slices: list[Slice] = field(default_factory=list)
    finished: set = field(default_factory=set)

    def __post_init__(self):
        self.spent = {t: 0.0 for t in self.targets}
        per_target = self.budget_s / max(1, len(self.targets))
        self.slice_s = min(self.slice_s, max(MIN_SLICE_S, per_target / MIN_SLICES))
        if per_target < MIN_SLICES * MIN_SLICE_S:
            self.adaptive = False  # too small a budget to learn anything from slices: the even schedule

    @property
    def left(self) -> float:
        return self.budget_s - sum(self.spent.values())

    def shares(self) -> dict[str, float]:
        """Each live target's share of the time: the floor spread evenly, the rest in proportion to the estimates
        (evenly while they are all zero)."""
        live = [t for t in self.targets if t not in self.finished]
        if not live:
            return {}
        total = sum(self.estimate.get(t, 0.0) for t in live)
        return {t: FLOOR / len(live) + (1 - FLOOR) * (self.estimate.get(t, 0.0) / total if total > 0 else 1 / len(live))
                for t in live}

    def next(self) -> tuple[str, float, float] | None:
        """``(target, seconds, share)`` of the next slice; None when the budget is spent or every target finished."""
        live = [t for t in self.targets if t not in self.finished]
        if not live or self.left <= 0:
            return None
        if not self.adaptive:
            ran = {s.target for s in self.slices}
            unrun = [t for t in live if t not in ran]
            return (unrun[0], self.left / len(unrun), 1 / len(live)) if unrun else None
        shares = self.shares()
        if len(live) == 1:  # nothing to share with: the rest in one slice (a round is never cut for nothing)
            return live[0], self.left, 1.0
        unexplored = [t for t in live if t not in self.estimate]
        if unexplored:
            target = unexplored[0]
        else:
            spent = sum(self.spent[t] for t in live)
            target = max(live, key=lambda t: shares[t] * (spent + self.slice_s) - self.spent[t])
        seconds = min(self.slice_s, self.left)
        if self.left - seconds < MIN_SLICE_S:
            seconds = self.left  # no sliver left over
        return target, seconds, shares[target]

    def record(self, target: str, seconds: float, gains: Gains, share: float, done: bool = False) -> Slice:
        """A slice of ``target`` took ``seconds`` of generation and found ``gains``; ``done``: the target has
        nothing more to do (its case limit, or its failure limit, reached)."""
        s = Slice(target, sum(self.spent.values()), seconds, gains, share)
        self.slices.append(s)
        self.spent[target] += seconds
        old = self.estimate.get(target)
        self.estimate[target] = s.yield_per_s if old is None else SMOOTHING * s.yield_per_s + (1 - SMOOTHING) * old
        if done:
            self.finished.add(target)
        return s

    def to_dict(self) -> dict:
        return {"adaptive": self.adaptive, "budget_seconds": self.budget_s, "slice_seconds": round(self.slice_s, 1),
                "targets": self.summary(), "slices": [s.to_dict() for s in self.slices]}

    def summary(self) -> dict[str, dict]:
        """Per target: the seconds it got, its share of the run, its slices, its last yield estimate."""
        total = sum(self.spent.values()) or 1.0
        return {t: {"seconds": round(self.spent[t], 1), "share": round(self.spent[t] / total, 3),
                    "slices": sum(1 for s in self.slices if s.target == t),
                    "yield_per_s": round(self.estimate.get(t, 0.0), 3)} for t in self.targets}


def run_schedule(runs: dict, budget_s: float, adaptive: bool = True, log: Callable[[str], None] = print,
                 deadline: float = float("inf"), stop_after: int = 0,
                 on_slice: Callable[[Slice], None] | None = None,
                 on_schedule: Callable[[Schedule], None] | None = None) -> Schedule:
    """Give ``runs`` (target name -> :class:`parityfuzz.engine.fuzzer.TargetRun`) ``budget_s`` seconds of generation
    by :class:`Schedule`, no slice going past ``deadline`` (:func:`time.monotonic`) and none starting after it or
    once the runs found ``stop_after`` distinct failures between them (0: no such limit); each run is finished at
    the end (its summary logged).  ``on_schedule`` is handed the schedule before its first slice (so an interrupted
    run's report still has it)."""
    schedule = Schedule(list(runs), budget_s, adaptive=adaptive)
    if on_schedule is not None:
        on_schedule(schedule)
    if len(runs) > 1:
        log(f"schedule: {budget_s:.0f}s over {len(runs)} targets, "
            + (f"adaptive in slices of up to {schedule.slice_s:.0f}s" if schedule.adaptive
               else "an even share each, in turn"))
    for run in runs.values():  # (many slices each: a round cut by a slice's end waits for the next)
        run.pausable = schedule.adaptive and len(runs) > 1
    try:
        _slices(schedule, runs, log, deadline, stop_after, on_slice)
    finally:
        for run in runs.values():
            run.close()
    summary = schedule.summary()
    for run in runs.values():
        run.stats.schedule = summary[run.name]
        run.finish()
    return schedule


def _slices(schedule: Schedule, runs: dict, log: Callable[[str], None], deadline: float, stop_after: int,
            on_slice: Callable[[Slice], None] | None) -> None:
    while (choice := schedule.next()) is not None:
        if time.monotonic() >= deadline:
            log(f"schedule: the run's deadline is reached with {schedule.left:.0f}s of generation left: no further "
                "slice")
            break
        if stop_after and sum(len(r.stats.failures) for r in runs.values()) >= stop_after:
            break
        name, seconds, share = choice
        run = runs[name]
        before, spent = gains_of(run.stats), run.stats.generate_seconds
        run.run(seconds, deadline, min_cases=FIRST_SLICE_CASES if schedule.adaptive and name not in schedule.estimate
                else 0)
        # (charged at least a tenth of a second: a slice cut by its deadline before generating still costs)
        s = schedule.record(name, max(0.1, run.stats.generate_seconds - spent), gains_of(run.stats).minus(before),
                            share, done=run.done)
        if on_slice is not None:
            on_slice(s)
        if schedule.adaptive and len(runs) > 1:
            log(f"schedule: {name} {s.seconds:.0f}s (share {share:.0%}): {s.gains.pairs} new pairs, "
                f"{s.gains.near_misses} new near misses, {s.gains.failures} new failures; "
                f"{schedule.left:.0f}s left")


def gains_of(stats) -> Gains:
    """What a :class:`parityfuzz.engine.stats.TargetStats` has found so far."""
    return Gains(len(stats.pairs), len(stats.near_miss_combinations), len(stats.failures))
