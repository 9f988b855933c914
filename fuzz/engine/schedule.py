"""Spending one wall-clock budget over several targets: in slices, each to the target that will find the most new
in the next second.

A target's *outlook* is what its next second of generation is expected to add: new feature pairs (two features met
in one case for the first time in the run), new near misses (a passing case within :data:`NEAR_MISS` of the
tolerance, in a feature combination no earlier near miss had) and new kinds of failure (:func:`gains_of`), weighted
(:data:`WEIGHTS`) so that one finding outweighs a slice's worth of coverage.

New pairs are estimated the way species are in ecology (Good-Turing, as HypoFuzz estimates a test's chance of new
coverage): the expected number of pairs the next case meets for the first time is the number of pairs met in
exactly one case so far over the number of cases (``singletons / cases``), divided by the seconds a case of the
target takes (a running mean over its slices).  Unlike the pairs a slice happened to find, this counts every case
the target ever ran, so it does not jump with one lucky slice, and it is a *marginal* rate: a family whose space
is small says so as soon as its pairs repeat, however many it found at first.  Near misses and failures are too
rare for that: their rate is an exponentially weighted mean of the slices' (:data:`SMOOTHING`).

Every target first gets one slice (its estimate needs one); then each slice goes to the target with the best
outlook (greedy: the marginal rates even out, which is what maximizes what the run finds when each target's
returns diminish), except that a target whose time has fallen below its floor (:data:`FLOOR` of the time spent so
far, spread evenly) is served first: no target starves, so a quiet target still sees a finding, late.  Where the
budget is too small for that (less than :data:`MIN_SLICES` slices a target), each target gets one even slice:
that is the even schedule.  A target's first slice is never skipped, even where the targets before it overran the
whole budget (a case is never cut): it then runs its first cases alone (:func:`first_cases`), as no target of the
run is left with none (a CI run under ``--fuzz-max-cases`` once reported a target with 0 cases).

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
#: What a slice's gains count for: one new feature pair, one new near-miss combination, one new kind of failure.
WEIGHTS = {"pairs": 1.0, "near_misses": 5.0, "failures": 200.0}
#: The weight of a slice in its target's running means (seconds a case, near misses and failures a second).
SMOOTHING = 0.5
#: The share of the time spent so far that is spread evenly over the targets whatever their outlooks.
FLOOR = 0.5
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
    """What a target's run has found so far (the counts yields are differences of), and how far its pairs repeat."""

    pairs: int = 0
    near_misses: int = 0
    failures: int = 0
    cases: int = 0
    #: Pairs met in exactly one case (a level, not a count that only grows: :meth:`minus` keeps the later one).
    singletons: int = 0

    def minus(self, other: "Gains") -> "Gains":
        return Gains(self.pairs - other.pairs, self.near_misses - other.near_misses, self.failures - other.failures,
                     self.cases - other.cases, self.singletons)

    def score(self) -> float:
        return sum(WEIGHTS[k] * getattr(self, k) for k in WEIGHTS)

    def events(self) -> float:
        """The weighted near misses and failures (the rare gains, estimated from slices)."""
        return WEIGHTS["near_misses"] * self.near_misses + WEIGHTS["failures"] * self.failures


@dataclass
class Outlook:
    """One target's running means and its expected gains a second (:meth:`per_s`)."""

    #: Seconds a case takes, near misses and failures (weighted) a second: running means over the slices.
    case_s: float | None = None
    events_per_s: float = 0.0
    #: Expected new pairs in the next case (Good-Turing: singletons / cases), and the cases the target ran.
    unseen: float = 0.0
    cases: int = 0

    def update(self, seconds: float, gains: Gains) -> None:
        # (a slice that finished no case says a case takes at least its seconds)
        case_s = seconds / gains.cases if gains.cases else max(seconds, self.case_s or 0.0)
        first = self.case_s is None
        self.case_s = case_s if first else SMOOTHING * case_s + (1 - SMOOTHING) * self.case_s
        events = gains.events() / seconds if seconds > 0 else 0.0
        self.events_per_s = events if first else SMOOTHING * events + (1 - SMOOTHING) * self.events_per_s
        self.cases += gains.cases
        self.unseen = gains.singletons / self.cases if self.cases else 0.0

    def per_s(self) -> float:
        """Weighted gains expected from the target's next second."""
        return WEIGHTS["pairs"] * self.unseen / max(self.case_s or 0.0, 1e-3) + self.events_per_s


@dataclass
class Slice:
    target: str
    #: Seconds into the schedule at which the slice began; seconds of generation it took.
    at: float
    seconds: float
    gains: Gains
    #: Why the target got it: ``first`` (its estimate needs one), ``floor`` (it had fallen below its floor),
    #: ``best`` (the best outlook), ``even`` (the even schedule) or ``alone`` (no other target left).
    reason: str
    #: The target's outlook after the slice (weighted gains a second).
    outlook: float = 0.0

    @property
    def yield_per_s(self) -> float:
        return self.gains.score() / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {"target": self.target, "at": round(self.at, 1), "seconds": round(self.seconds, 1),
                "reason": self.reason, "cases": self.gains.cases, "new_pairs": self.gains.pairs,
                "new_near_misses": self.gains.near_misses, "new_failures": self.gains.failures,
                "yield_per_s": round(self.yield_per_s, 3), "outlook_per_s": round(self.outlook, 3)}


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
    outlooks: dict[str, Outlook] = field(default_factory=dict)
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

    def outlook(self, target: str) -> float:
        o = self.outlooks.get(target)
        return o.per_s() if o is not None else 0.0

    def next(self) -> tuple[str, float, str] | None:
        """``(target, seconds, reason)`` of the next slice (reasons: :attr:`Slice.reason`); None when the budget is
        spent or every target finished."""
        live = [t for t in self.targets if t not in self.finished]
        ran = {s.target for s in self.slices}
        unrun = [t for t in live if t not in ran]
        if not live or (self.left <= 0 and not unrun):
            return None
        if not self.adaptive:
            return (unrun[0], max(0.0, self.left) / len(unrun), "even") if unrun else None
        if self.left <= 0:  # the budget overrun before every target's first slice: each still gets its first cases
            return unrun[0], 0.0, "first"
        if len(live) == 1:  # nothing to share with: the rest in one slice (a round is never cut for nothing)
            return live[0], self.left, "alone"
        seconds = min(self.slice_s, self.left)
        if self.left - seconds < MIN_SLICE_S:
            seconds = self.left  # no sliver left over
        unexplored = [t for t in live if t not in self.outlooks]
        if unexplored:
            return unexplored[0], seconds, "first"
        floor = FLOOR / len(live) * (sum(self.spent[t] for t in live) + seconds)
        behind = [t for t in live if self.spent[t] < floor]
        if behind:
            return min(behind, key=lambda t: self.spent[t]), seconds, "floor"
        return max(live, key=self.outlook), seconds, "best"

    def record(self, target: str, seconds: float, gains: Gains, reason: str, done: bool = False) -> Slice:
        """A slice of ``target`` took ``seconds`` of generation and found ``gains``; ``done``: the target has
        nothing more to do (its case limit, or its failure limit, reached)."""
        outlook = self.outlooks.setdefault(target, Outlook())
        outlook.update(seconds, gains)
        s = Slice(target, sum(self.spent.values()), seconds, gains, reason, outlook.per_s())
        self.slices.append(s)
        self.spent[target] += seconds
        if done:
            self.finished.add(target)
        return s

    def to_dict(self) -> dict:
        return {"adaptive": self.adaptive, "budget_seconds": self.budget_s, "slice_seconds": round(self.slice_s, 1),
                "targets": self.summary(), "slices": [s.to_dict() for s in self.slices]}

    def summary(self) -> dict[str, dict]:
        """Per target: the seconds it got, its share of the run, its slices (and how many it got for its outlook,
        how many for its floor), its last outlook."""
        total = sum(self.spent.values()) or 1.0
        out = {}
        for t in self.targets:
            mine = [s for s in self.slices if s.target == t]
            out[t] = {"seconds": round(self.spent[t], 1), "share": round(self.spent[t] / total, 3),
                      "slices": len(mine), "best": sum(s.reason == "best" for s in mine),
                      "floor": sum(s.reason == "floor" for s in mine), "yield_per_s": round(self.outlook(t), 3)}
        return out


def run_schedule(runs: dict, budget_s: float, adaptive: bool = True, log: Callable[[str], None] = print,
                 deadline: float = float("inf"), stop_after: int = 0,
                 on_slice: Callable[[Slice], None] | None = None,
                 on_schedule: Callable[[Schedule], None] | None = None,
                 until: Callable[[], bool] | None = None) -> Schedule:
    """Give ``runs`` (target name -> :class:`parityfuzz.engine.fuzzer.TargetRun`) ``budget_s`` seconds of generation
    by :class:`Schedule`, no slice going past ``deadline`` (:func:`time.monotonic`) and none starting after it,
    once the runs found ``stop_after`` distinct failures between them (0: no such limit) or once ``until()`` is
    true; each run is finished at the end (its summary logged).  ``on_schedule`` is handed the schedule before its
    first slice (so an interrupted run's report still has it)."""
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
        _slices(schedule, runs, log, deadline, stop_after, on_slice, until)
    finally:
        for run in runs.values():
            run.close()
    summary = schedule.summary()
    for run in runs.values():
        run.stats.schedule = summary[run.name]
        run.finish()
    return schedule


def _slices(schedule: Schedule, runs: dict, log: Callable[[str], None], deadline: float, stop_after: int,
            on_slice: Callable[[Slice], None] | None, until: Callable[[], bool] | None) -> None:
    while (choice := schedule.next()) is not None:
        if time.monotonic() >= deadline:
            log(f"schedule: the run's deadline is reached with {schedule.left:.0f}s of generation left: no further "
                "slice")
            break
        if stop_after and sum(len(r.stats.failures) for r in runs.values()) >= stop_after:
            break
        if until is not None and until():
            break
        name, seconds, reason = choice
        run = runs[name]
        before, spent = gains_of(run.stats), run.stats.generate_seconds
        run.run(seconds, deadline, min_cases=first_cases(reason))
        # (charged at least a tenth of a second: a slice cut by its deadline before generating still costs)
        s = schedule.record(name, max(0.1, run.stats.generate_seconds - spent), gains_of(run.stats).minus(before),
                            reason, done=run.done)
        if on_slice is not None:
            on_slice(s)
        if schedule.adaptive and len(runs) > 1:
            log(f"schedule: {name} {s.seconds:.0f}s ({reason}): {s.gains.pairs} new pairs, "
                f"{s.gains.near_misses} new near misses, {s.gains.failures} new failures; outlook "
                f"{s.outlook:.1f}/s; {schedule.left:.0f}s left")


def first_cases(reason: str) -> int:
    """Cases a slice runs at least, whatever its seconds: the first slice of an adaptive schedule
    :data:`FIRST_SLICE_CASES`, an even one (each target's only slice) one."""
    return {"first": FIRST_SLICE_CASES, "even": 1}.get(reason, 0)


def gains_of(stats) -> Gains:
    """What a :class:`parityfuzz.engine.stats.TargetStats` has found so far.  Its failures count once per kind of
    failure (:meth:`Verdict.bug_signature`) that no known bug explains: one bug met again in ever other cases (which
    each count as a failure of their own until a shrink gives them a small precondition) is no news to schedule by."""
    kinds = {f.verdict.bug_signature() for f in stats.failures if f.known_issue is None}
    return Gains(len(stats.pairs), len(stats.near_miss_combinations), len(kinds), stats.cases,
                 sum(1 for n in stats.pairs.values() if n == 1))
