"""``python -m fuzz.bench --schedule``: the even schedule against the adaptive one (:mod:`parityfuzz.engine.schedule`),
side by side in one process on the same budget and fuzz seeds, over every fuzz target, with a test fault planted
inside torch in three families (:data:`FAULTS`).

For each fuzz seed both schedules run (in alternating order, so that a machine growing slower or faster does not
favour one); each run reports, per target, its seconds of generation, cases and distinct feature pairs, and per
planted fault the seconds into the run at which it was first met (None: not within the budget), and the failures
of the targets with no planted fault (unmodified torch: findings to triage; their corpus directories are kept).  Run-to-run noise
is the spread of the same schedule over the seeds.  Shrinking, reduction and locating are off: they cost the same
under both schedules and would only blur the times."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

#: The family whose system under test carries a test fault (tests/faults/), and the fault.
FAULTS = {
    "fsdp2": "tests.faults:UnevenShardGradOff",
    "fsdp1": "tests.faults:NoShardOrigParamsGradUnreduced",
    "zero": "tests.faults:ZeroBucketFromWrongRank",
}
MODES = ("even", "adaptive")


def one_run(executor, mode: str, seed: int, budget_s: float, world_sizes: tuple[int, ...],
            log: Callable[[str], None]) -> dict:
    """One schedule over every target, faults planted: per target its time, cases and pairs; per fault when it
    was first met."""
    from parityfuzz.engine import Fuzzer, FuzzOptions
    from parityfuzz.engine.schedule import run_schedule
    from parityfuzz.frontends import targets

    # (a corpus kept after the run: a failure of a target with no planted fault is a finding on unmodified torch,
    # to be triaged like any other; the JSON and the table name each one)
    tmp = tempfile.mkdtemp(prefix=f"parityfuzz-schedule-bench-{mode}-{seed}-")
    options = FuzzOptions(corpus_dir=Path(tmp), seed=seed, world_sizes=world_sizes, shrink_budget_s=0.0,
                          reduce_budget_s=0.0, locate=False)
    fuzzer = Fuzzer(options, executor, log=lambda m: None)
    runs = {name: fuzzer.start(name, targets.strategy(name, world_sizes, system=FAULTS.get(name, "")))
            for name in targets.names()}
    began = time.monotonic()
    schedule = run_schedule(runs, budget_s, adaptive=mode == "adaptive", log=lambda m: None,
                            on_slice=lambda s: log(f"  {mode} seed {seed}: {s.target} {s.seconds:.0f}s, "
                                                   f"{s.gains.pairs} new pairs, {s.gains.failures} new failures"))
    out = {"mode": mode, "seed": seed, "seconds": round(time.monotonic() - began, 1), "slices": len(schedule.slices),
           "schedule": [sl.to_dict() for sl in schedule.slices], "targets": {}, "faults": {}}
    for name, run in runs.items():
        s = run.stats
        out["targets"][name] = {"seconds": round(s.generate_seconds, 1), "cases": s.cases,
                                "pairs": len(s.pairs), "failures": len(s.failures)}
    for family in FAULTS:
        found = [f.found_at for f in runs[family].stats.failures]
        out["faults"][family] = round(min(found), 1) if found else None
    out["pairs"] = sum(t["pairs"] for t in out["targets"].values())
    # (a slice ends after the case running at its end: the budget is overshot by that case, more often the more
    # slices there are, so pairs are also given per second of generation)
    out["generate_seconds"] = round(sum(t["seconds"] for t in out["targets"].values()), 1)
    out["unplanted_failures"] = [f"{f.target}: {f.verdict.describe()[:200]} ({f.corpus_path})"
                                 for run in runs.values() if run.name not in FAULTS for f in run.stats.failures]
    return out


def compare(seeds: list[int], budget_s: float, world_sizes: tuple[int, ...], log: Callable[[str], None] = print) -> dict:
    """Both schedules on every seed; the runs, and per mode and fault the mean time to first find and its spread
    over the seeds."""
    from parityfuzz.executor import Executor

    runs = []
    with Executor() as ex:
        for ws in world_sizes:
            ex.pool(ws)  # pool start-up kept out of both schedules' time
        for i, seed in enumerate(seeds):
            for mode in (MODES if i % 2 == 0 else MODES[::-1]):
                log(f"{mode} schedule, fuzz seed {seed}, {budget_s:.0f}s")
                runs.append(one_run(ex, mode, seed, budget_s, world_sizes, log))
    summary = {}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        faults = {}
        for family in FAULTS:
            times = [r["faults"][family] for r in mine]
            met = [t for t in times if t is not None]
            faults[family] = {"times": times, "mean": round(statistics.mean(met), 1) if met else None,
                              "spread": round(max(met) - min(met), 1) if len(met) > 1 else None,
                              "missed": sum(t is None for t in times)}
        pairs = [r["pairs"] for r in mine]
        per_target = {name: round(statistics.mean(r["targets"][name]["pairs"] for r in mine), 1)
                      for name in mine[0]["targets"]}
        generated = [r["generate_seconds"] for r in mine]
        summary[mode] = {"faults": faults, "pairs_mean": round(statistics.mean(pairs), 1),
                         "pairs_spread": max(pairs) - min(pairs), "pairs_per_target": per_target,
                         "generate_seconds_mean": round(statistics.mean(generated), 1),
                         "pairs_per_generate_second": round(sum(pairs) / sum(generated), 1),
                         "seconds_per_target": {name: round(statistics.mean(r["targets"][name]["seconds"] for r in mine), 1)
                                                for name in mine[0]["targets"]}}
    return {"seeds": seeds, "budget_seconds": budget_s, "world_sizes": list(world_sizes), "runs": runs,
            "summary": summary}


def print_table(result: dict) -> None:
    s = result["summary"]
    print(f"budget {result['budget_seconds']:.0f}s per run, fuzz seeds {result['seeds']}, world sizes "
          f"{result['world_sizes']}; faults: " + ", ".join(f"{k} {v.split(':')[1]}" for k, v in FAULTS.items()))
    print(f"{'':>22} {'even':>24} {'adaptive':>24}")
    for family in FAULTS:
        cells = []
        for mode in MODES:
            f = s[mode]["faults"][family]
            times = "/".join("-" if t is None else f"{t:.0f}" for t in f["times"])
            cells.append(f"{times}s" + (f" (mean {f['mean']:.0f})" if f["mean"] is not None else ""))
        print(f"{'first find ' + family:>22} {cells[0]:>24} {cells[1]:>24}")
    for name in s["even"]["pairs_per_target"]:
        cells = [f"{s[m]['pairs_per_target'][name]:.0f} pairs, {s[m]['seconds_per_target'][name]:.0f}s" for m in MODES]
        print(f"{name:>22} {cells[0]:>24} {cells[1]:>24}")
    cells = [f"{s[m]['pairs_mean']:.0f} (spread {s[m]['pairs_spread']})" for m in MODES]
    print(f"{'pairs, all targets':>22} {cells[0]:>24} {cells[1]:>24}")
    cells = [f"{s[m]['generate_seconds_mean']:.0f}s, {s[m]['pairs_per_generate_second']:.1f} pairs/s" for m in MODES]
    print(f"{'generation, pairs/s':>22} {cells[0]:>24} {cells[1]:>24}")
    by_seed = {(r["mode"], r["seed"]): r["pairs"] for r in result["runs"]}
    paired = [by_seed["adaptive", seed] - by_seed["even", seed] for seed in result["seeds"]]
    print(f"{'paired (adaptive-even)':>22} {'':>24} {', '.join(f'{d:+d}' for d in paired):>24}")
    found = [(r["mode"], r["seed"], f) for r in result["runs"] for f in r.get("unplanted_failures", [])]
    if found:
        print("failures of targets with no planted fault (unmodified torch: triage them):")
        for mode, seed, f in found:
            print(f"  {mode} seed {seed}: {f}")
