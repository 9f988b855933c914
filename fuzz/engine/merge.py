"""One run report (``--fuzz-report``) from several fuzzers' (pytest-xdist workers, each fuzzing its share of the
targets): counts add up, targets are put side by side (a target two workers ran is merged), failures are
listed together, and each worker's seed is kept."""

from __future__ import annotations

from collections import Counter

from parityfuzz.engine.stats import dimension_coverage, merge_timing


def _add(a: dict, b: dict) -> dict:
    return dict(Counter(a) + Counter(b))


def _merge_target(a: dict, b: dict) -> dict:
    out = dict(a)
    for key in ("cases", "explored_cases", "generate_seconds", "shrink_seconds", "shrink_runs", "reduce_seconds",
                "reduce_runs", "distinct_feature_combinations"):
        out[key] = a.get(key, 0) + b.get(key, 0)
    for key in ("verdicts", "cut_short", "explained", "explained_seconds", "throttled", "feature_counts",
                "pair_counts", "explored_dimension_counts", "explored_dimension_pairs"):
        out[key] = _add(a.get(key, {}), b.get(key, {}))
    out["distinct_feature_pairs"] = len(out["pair_counts"])
    out["near_miss_combinations"] = a.get("near_miss_combinations", 0) + b.get("near_miss_combinations", 0)  # at most
    out["timing"] = merge_timing(a.get("timing", {}), b.get("timing", {}))
    fa, fb = a.get("dimension_first_seconds", {}), b.get("dimension_first_seconds", {})
    out["dimension_first_seconds"] = {d: min(t for t in (fa.get(d), fb.get(d)) if t is not None) for d in {**fa, **fb}}
    out["dimensions"] = dimension_coverage(out["explored_cases"], out["explored_dimension_counts"],
                                           out["explored_dimension_pairs"],
                                           out["dimension_first_seconds"], a.get("dimension_support", {}))
    slices = Counter()
    for t, kind, *n in a.get("timeline", []) + b.get("timeline", []):
        slices[(t, kind)] += n[0] if n else 1
    out["timeline"] = [[t, kind, n] for (t, kind), n in sorted(slices.items())]
    out["failures"] = a.get("failures", []) + b.get("failures", [])
    grids = dict(a.get("seed_grids", {}))
    for source, g in b.get("seed_grids", {}).items():
        if source in grids:
            counts = _add(grids[source]["counts"], g["counts"])
            counts = {label: counts.get(label, 0) for label in g["counts"]}
            grids[source] = {**g, "counts": counts, "covered": sum(1 for n in counts.values() if n),
                             "missing": [label for label, n in counts.items() if not n]}
        else:
            grids[source] = g
    out["seed_grids"] = grids
    return out


def merge_reports(reports: dict[str, dict]) -> dict:
    """The report of a run whose fuzzers (``{worker id: its report}``) ran side by side."""
    if not reports:
        raise ValueError("no reports to merge")
    first = next(iter(reports.values()))
    targets: dict[str, dict] = {}
    for report in reports.values():
        for name, t in report["targets"].items():
            targets[name] = _merge_target(targets[name], t) if name in targets else t
    return {
        **{k: first.get(k) for k in ("parityfuzz_version", "torch_version", "budget_seconds", "world_sizes")},
        "fuzz_seed": first.get("fuzz_seed"),
        "worker_seeds": {worker: r.get("fuzz_seed") for worker, r in sorted(reports.items())},
        "cases_run": sum(r["cases_run"] for r in reports.values()),
        "generate_seconds": round(sum(r.get("generate_seconds", 0) for r in reports.values()), 2),
        "shrink_seconds": round(sum(r.get("shrink_seconds", 0) for r in reports.values()), 2),
        "verdicts": dict(sum((Counter(r["verdicts"]) for r in reports.values()), Counter())),
        "targets": targets,
        "failures": [f for t in targets.values() for f in t["failures"]],
        # (each worker's schedule over the group of targets it was dealt: its slices and each target's share)
        "schedules": {worker: r["schedule"] for worker, r in sorted(reports.items()) if r.get("schedule")},
    }
