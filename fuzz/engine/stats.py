"""What a target's run counts: cases, verdicts, feature and pairwise coverage, shares, time, failures."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations

from parityfuzz.case import seedgrids
from parityfuzz.case.dimensions import NAMES
from parityfuzz.case.features import DIMENSION
from parityfuzz.case import Case
from parityfuzz.engine.outcomes import Failure
from parityfuzz.engine.schedule import NEAR_MISS
from parityfuzz.judge.verdict import Verdict
from parityfuzz.triage import Explanation


#: The width of a timeline slice, in seconds.
TIMELINE_SECONDS = 5.0


@dataclass
class TargetStats:
    name: str
    cases: int = 0
    verdicts: Counter = field(default_factory=Counter)
    features: Counter = field(default_factory=Counter)
    pairs: Counter = field(default_factory=Counter)
    combinations: Counter = field(default_factory=Counter)
    generate_seconds: float = 0.0
    shrink_seconds: float = 0.0
    shrink_runs: int = 0
    reduce_seconds: float = 0.0
    reduce_runs: int = 0
    failures: list[Failure] = field(default_factory=list)
    #: Passing cases whose comparison was cut short, by reason.
    notes: Counter = field(default_factory=Counter)
    #: Failing cases that count as passing, by what explains them (:meth:`parityfuzz.triage.Explanation.label`), and
    #: the seconds their runs took.
    explained: Counter = field(default_factory=Counter)
    explained_seconds: Counter = field(default_factory=Counter)
    #: Cases skipped before they ran, by the known bug whose precondition they met once it was met often
    #: (:mod:`parityfuzz.engine.throttle`).
    throttled: Counter = field(default_factory=Counter)
    #: Cases per ``(start of a TIMELINE_SECONDS slice of the run, verdict kind)``: bounded by the run's length, not
    #: its case count (a 12-hour soak keeps at most 8,640 slices per verdict kind).
    timeline: Counter = field(default_factory=Counter)
    #: Cases run, and seconds their runs took (verdicts included, not generation), eager and compiled apart.
    run_cases: Counter = field(default_factory=Counter)
    run_seconds: Counter = field(default_factory=Counter)
    #: Of the compiled cases' seconds, those their systems spent compiling (:attr:`Verdict.compile_seconds`).
    compile_seconds: float = 0.0
    #: Feature combinations of the passing cases that came within :data:`NEAR_MISS` of the tolerance.
    near_miss_combinations: set = field(default_factory=set)
    #: ``{dimension: "" where the target draws it, else why not}`` (:func:`parityfuzz.frontends.targets.dimensions`;
    #: empty for a target of the user's own) and the run's seconds at each dimension's first case.
    support: dict = field(default_factory=dict)
    first_seen: dict = field(default_factory=dict)
    #: The cases drawn outside shrinking, and their training-loop dimension tags and pairs of them: the dimension
    #: table's denominator and counts (a shrink runs hundreds of variants of one failing case).
    explored: int = 0
    explored_dimensions: Counter = field(default_factory=Counter)
    explored_pairs: Counter = field(default_factory=Counter)
    #: The time a schedule gave the target (:meth:`parityfuzz.engine.schedule.Schedule.summary`); None where the
    #: target ran alone.
    schedule: dict | None = None

    def count(self, case: Case, verdict: Verdict, at: float = 0.0, why: Explanation | None = None,
              seconds: float = 0.0, shrinking: bool = False) -> None:
        """Count a case as the search saw it (``verdict``), with what explains it where it failed, and the
        ``seconds`` its run took; ``shrinking``: a shrink run (left out of the dimension table)."""
        self.cases += 1
        mode = "compiled" if case.compile else "eager"
        self.run_cases[mode] += 1
        self.run_seconds[mode] += seconds
        self.compile_seconds += verdict.compile_seconds
        if why is not None and why.silences:
            self.explained[why.label()] += 1
            self.explained_seconds[why.label()] += seconds
        elif verdict.ok and verdict.note:
            for part in verdict.note.split("; "):  # the oracle's "reason: details" (details may name a step)
                self.notes[part.split(":")[0].split(" at step")[0]] += 1
        self.timeline[(TIMELINE_SECONDS * int(at // TIMELINE_SECONDS), verdict.kind)] += 1
        self.verdicts[verdict.kind] += 1
        feats = case.features() | frozenset(verdict.tags)
        for tag in feats:
            if tag.startswith(DIMENSION):
                self.first_seen.setdefault(tag[len(DIMENSION):], round(at, 1))
        self.features.update(feats)
        self.pairs.update(" & ".join(p) for p in combinations(sorted(feats), 2))
        if not shrinking:
            self.explored += 1
            dims = sorted(tag for tag in feats if tag.startswith(DIMENSION))
            self.explored_dimensions.update(dims)
            self.explored_pairs.update(" & ".join(p) for p in combinations(dims, 2))
        self.combinations[feats] += 1
        if verdict.ok and verdict.closeness >= NEAR_MISS:
            self.near_miss_combinations.add(feats)

    def shares(self) -> dict[str, float]:
        """The share of cases per world size and mesh, with nothing sharded, and with CPU offload."""
        if not self.cases:
            return {}
        keys = sorted(k for k in self.features if k.startswith(("ws=", "mesh="))) + ["unsharded", "offload"]
        return {k: self.features[k] / self.cases for k in keys}

    def dimensions(self) -> dict:
        """:func:`dimension_coverage` of this target's cases."""
        return dimension_coverage(self.explored, self.explored_dimensions, self.explored_pairs, self.first_seen,
                                  self.support)

    def seed_grids(self) -> dict[str, dict]:
        """How much of each seed test's grid about this target's families the run covered
        (:mod:`parityfuzz.case.seedgrids`)."""
        combos = list(self.combinations.items())
        return {g.source: seedgrids.coverage(g, combos) for g in seedgrids.grids()
                if f"family={g.family}" in self.features}

    def timing(self) -> dict:
        """:func:`timing` of this target's cases."""
        return timing(self.run_cases, self.run_seconds, self.compile_seconds)

    def summary_line(self) -> str:
        verdicts = ", ".join(f"{n} {k}" for k, n in sorted(self.verdicts.items()))
        notes = "".join(f"; {n} cases: {reason}" for reason, n in (self.notes + self.explained).items())
        notes += "".join(f"; {n} cases skipped: {title} (met often)" for title, n in self.throttled.items())
        return (f"{self.name}: {self.cases} cases ({verdicts or 'none'}), {len(self.combinations)} distinct feature "
                f"combinations, {self.generate_seconds:.1f}s generating, {self.shrink_seconds:.1f}s shrinking"
                + (f", {self.reduce_seconds:.1f}s reducing ({self.reduce_runs} runs)" if self.reduce_runs else "")
                + "".join(f"; {mode} {t['cases_per_minute']} cases/min"
                          + (f" ({t['compile_share']:.0%} of it compiling)" if t.get("compile_share") is not None else "")
                          for mode, t in self.timing().items() if t["cases_per_minute"] is not None)
                + notes)

    def to_dict(self) -> dict:
        return {
            "cases": self.cases,
            "verdicts": dict(self.verdicts),
            "generate_seconds": round(self.generate_seconds, 2),
            "shrink_seconds": round(self.shrink_seconds, 2),
            "shrink_runs": self.shrink_runs,
            "reduce_seconds": round(self.reduce_seconds, 2),
            "reduce_runs": self.reduce_runs,
            "timing": self.timing(),
            "cut_short": dict(self.notes),
            "explained": dict(self.explained),
            "explained_seconds": {k: round(v, 1) for k, v in self.explained_seconds.items()},
            "throttled": dict(self.throttled),
            "distinct_feature_combinations": len(self.combinations),
            "distinct_feature_pairs": len(self.pairs),
            "near_miss_combinations": len(self.near_miss_combinations),
            **({"schedule": self.schedule} if self.schedule is not None else {}),
            "shares": {k: round(v, 4) for k, v in self.shares().items()},
            "dimensions": self.dimensions(),
            "explored_cases": self.explored,
            "explored_dimension_counts": dict(sorted(self.explored_dimensions.items())),
            "explored_dimension_pairs": dict(sorted(self.explored_pairs.items())),
            "dimension_first_seconds": dict(self.first_seen),
            "dimension_support": dict(self.support),
            "feature_counts": dict(sorted(self.features.items())),
            "pair_counts": dict(sorted(self.pairs.items())),
            "timeline": [[t, kind, n] for (t, kind), n in sorted(self.timeline.items())],
            "seed_grids": self.seed_grids(),
            "failures": [f.to_dict() for f in self.failures],
        }


#: A dimension the target draws that got fewer cases than this in a run is named in a warning.
THIN = 5


def dimension_coverage(cases: int, features, pairs, first_seen: dict, support: dict) -> dict:
    """What a run's ``cases`` (those drawn outside shrinking, with their ``features`` and ``pairs`` counts, and
    ``first_seen``: the run's seconds at each dimension's first case) did with the training-loop dimensions
    (:mod:`parityfuzz.case.dimensions`): per dimension the target draws (``support``; without one, every dimension
    met) its cases, share of the cases and seconds to its first case; per pair of them met together, its share; the
    ones drawn in fewer than :data:`THIN` cases (``thin``); and the ones the target does not draw, with why."""
    drawn = [d for d in NAMES if support.get(d, "") == ""] if support else \
        [d for d in NAMES if features.get(DIMENSION + d)]
    count = {d: features.get(DIMENSION + d, 0) for d in drawn}
    share = (lambda n: round(n / cases, 4) if cases else 0.0)
    together = {}
    for a, b in combinations(sorted(drawn), 2):
        n = pairs.get(f"{DIMENSION}{a} & {DIMENSION}{b}", 0)
        if n:
            together[f"{a} & {b}"] = share(n)
    return {"drawn": cases, "cases": count, "shares": {d: share(n) for d, n in count.items()},
            "first_seconds": {d: first_seen[d] for d in drawn if d in first_seen},
            "pairs": together, "thin": [d for d in drawn if count[d] < THIN],
            "not_drawn": {d: why for d, why in support.items() if why}}


def timing(cases: dict, seconds: dict, compile_seconds: float) -> dict:
    """Per mode (``eager``, ``compiled``: its ``cases`` and their run's ``seconds``): cases, seconds, cases per
    minute; for compiled cases also the seconds and share of their time spent compiling."""
    out = {}
    for mode in sorted(cases):
        n, s = cases[mode], seconds.get(mode, 0.0)
        out[mode] = {"cases": n, "seconds": round(s, 1), "cases_per_minute": round(60 * n / s, 1) if s else None}
        if mode == "compiled":
            out[mode]["compile_seconds"] = round(compile_seconds, 1)
            out[mode]["compile_share"] = round(compile_seconds / s, 3) if s else None
    return out


def merge_timing(a: dict, b: dict) -> dict:
    """Two :func:`timing` results as one."""
    modes = set(a) | set(b)
    get = lambda key: {m: a.get(m, {}).get(key, 0) + b.get(m, {}).get(key, 0) for m in modes}  # noqa: E731
    compile_s = a.get("compiled", {}).get("compile_seconds", 0.0) + b.get("compiled", {}).get("compile_seconds", 0.0)
    return timing(get("cases"), get("seconds"), compile_s)
