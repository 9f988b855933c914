"""``python -m fuzz.bench --faults``: the project's own test faults (tests/faults/), each planted in turn under the
user's command, so that a dimension's reach is measured where users run it, not in a test that draws it alone.

Each run is what ``pytest fuzz/ --fuzz-budget=BUDGET --world-sizes=...`` does from an empty corpus (every target,
the adaptive schedule, shrinking on), with one fault planted in its target's system under test: the fault's family
target draws the family's own, unfocused cases (the checkpoint target's faults: its cases of that family alone).  A
failure of the planted target counts as the fault's where its case passes without the fault (a failure that still
fails is a torch finding, listed apart).  Per fault and seed: found or not, the seconds into the run of the first
find, and the shrunk case's size (body modules, steps).  From the repository (it imports tests/faults/).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Callable

#: ``(label, target, family, fault)``: at least one per training-loop dimension and per situation issue 52 names.
FAULTS = (
    ("compile", "fsdp2", "fsdp2", "CompiledBackwardOff"),
    ("autocast", "fsdp2", "fsdp2", "RecomputeWithoutAutocast"),
    ("reentrant", "fsdp2", "fsdp2", "ReentrantRecomputeWithLaterRng"),
    ("token_loss", "fsdp2_tp", "fsdp2_tp", "LossParallelBackwardCountsPadding"),
    ("loss_scale", "fsdp2", "fsdp2", "ScalerKeepsItsScaleOnRankOne"),
    ("overflow", "fsdp2", "fsdp2", "ScalerSkipsTheStepAfterAnOverflow"),
    ("overflow in one shard", "fsdp1", "fsdp1", "ScalerDecidesOnItsOwnShard"),
    ("amp scaler over DTensor", "fsdp2", "fsdp2", "DTensorInfFlagsNotReduced"),
    ("nonroot", "fsdp2", "fsdp2", "NonRootPassUnsynced"),
    ("rollback", "checkpoint", "fsdp2", "LiveLoadKeepsOptimizerState"),
    ("zero reload", "checkpoint", "zero", "ZeroLoadSkipsTheLastOfEachPartition"),
    ("late step", "fsdp2", "fsdp2", "LateGradDrift"),
    ("mixed precision", "fsdp2", "fsdp2", "ReducesInBf16"),
    ("HSDP replicas", "fsdp2", "fsdp2", "ReplicaNotAllReduced"),
    ("sequence parallel", "fsdp2_tp", "fsdp2_tp", "SequenceParallelGradNotReduced"),
    ("fsdp1 no_shard", "fsdp1", "fsdp1", "NoShardOrigParamsGradUnreduced"),
    ("fsdp1 over tp", "fsdp1_tp", "fsdp1_tp", "TensorParallelShardNotReduced"),
    ("zero buckets", "zero", "zero", "ZeroBucketFromWrongRank"),
    ("composable", "composable", "composable", "ReplicateUnderFullyShardUnaveraged"),
    ("pipeline", "pipeline", "pipeline", "LastMicrobatchWeightGradLost"),
    ("pipeline units' precision", "pipeline", "pipeline", "UnitsAccumulateInComputeDtype"),
    ("pipeline sequence microbatches", "pipeline", "pipeline", "NonBatchChunksOutOfOrder"),
)


def planted_strategy(name: str, world_sizes: tuple[int, ...], target: str, family: str, system: str):
    """Target ``name``'s strategy with the fault's ``system`` planted where ``name`` is the fault's target."""
    from parityfuzz.frontends import targets
    from parityfuzz.strategies.checkpoint import checkpointed_cases

    if name != target:
        return targets.strategy(name, world_sizes)
    if name == targets.CHECKPOINT:
        return checkpointed_cases(world_sizes=world_sizes, families=(family,), system=system)
    return targets.strategy(name, world_sizes, system=system)


def one_run(executor, fault: tuple[str, str, str, str], seed: int, budget_s: float, world_sizes: tuple[int, ...],
            shrink_budget_s: float, log: Callable[[str], None], stop_when_found: bool = True) -> dict:
    """Every target under the adaptive schedule for ``budget_s``, ``fault`` planted: whether it was found, when, and
    how small its shrunk case is.  With ``stop_when_found`` no slice starts after the fault's first find (the find,
    its time and its shrunk case are what they would be in the whole budget; the other targets' findings fewer)."""
    from parityfuzz.engine import Fuzzer, FuzzOptions
    from parityfuzz.engine.schedule import run_schedule
    from parityfuzz.frontends import targets
    from parityfuzz.judge.verify import verify_case

    label, target, family, name = fault
    system = f"tests.faults:{name}"
    tmp = tempfile.mkdtemp(prefix=f"parityfuzz-fault-bench-{name}-{seed}-")
    options = FuzzOptions(corpus_dir=Path(tmp), seed=seed, world_sizes=world_sizes, shrink_budget_s=shrink_budget_s,
                          reduce_budget_s=0.0, locate=False)
    fuzzer = Fuzzer(options, executor, log=lambda m: None, dimensions=targets.dimensions)
    runs = {n: fuzzer.start(n, planted_strategy(n, world_sizes, target, family, system)) for n in targets.names()}
    clean: dict[int, bool] = {}  # a failure of the planted target -> whether its case passes without the fault

    def judged() -> list:
        for f in runs[target].stats.failures:
            if id(f) not in clean:
                clean[id(f)] = verify_case(dataclasses.replace(f.case, system=""), executor).ok
        return runs[target].stats.failures

    began = time.monotonic()
    schedule = run_schedule(runs, budget_s, adaptive=True, log=lambda m: None,
                            until=(lambda: any(clean[id(f)] for f in judged())) if stop_when_found else None)
    seconds = time.monotonic() - began
    failures = judged()
    mine = [f for f in failures if clean[id(f)]]
    torch_findings = [f for f in failures if not clean[id(f)]]
    first = min(mine, key=lambda f: f.found_at) if mine else None
    out = {"fault": name, "label": label, "target": target, "seed": seed, "seconds": round(seconds, 1),
           "found": first is not None, "first_find_s": round(first.found_at, 1) if first else None,
           "cases_of_target": runs[target].stats.cases,
           # (a miss is read against what the target got: its seconds of the budget and its share of the cases)
           "seconds_of_target": round(schedule.spent[target], 1),
           "cases_of_all": sum(r.stats.cases for r in runs.values()),
           "size": ({"body_modules": sum(1 for _ in first.case.model.body.walk("body")) - 1,
                     "steps": first.case.train.steps, "world_size": first.case.world_size} if first else None),
           "case": first.case.to_dict() if first else None,
           "torch_findings": [f"{f.target}: {f.verdict.describe()[:200]} ({f.corpus_path})" for f in torch_findings]
           + [f"{f.target}: {f.verdict.describe()[:200]} ({f.corpus_path})"
              for n, r in runs.items() if n != target for f in r.stats.failures]}
    log(f"  {name} seed {seed}: " + (f"found at {out['first_find_s']:.0f}s, shrunk to {out['size']}" if first
                                     else f"not found in {out['cases_of_target']} cases of {target} "
                                     f"({out['seconds_of_target']:.0f}s of {budget_s:.0f}, {out['cases_of_all']} cases "
                                     "in all)"))
    return out


def run(faults: tuple, seeds: list[int], budget_s: float, world_sizes: tuple[int, ...], shrink_budget_s: float = 60.0,
        log: Callable[[str], None] = print, stop_when_found: bool = True) -> dict:
    """Every fault on every seed; per fault the seeds that found it."""
    from parityfuzz.executor import Executor

    runs = []
    with Executor() as ex:
        for ws in world_sizes:
            ex.pool(ws)  # pool start-up kept out of the runs' time
        for fault in faults:
            for seed in seeds:
                log(f"{fault[3]} ({fault[0]}, {fault[1]} target), fuzz seed {seed}, {budget_s:.0f}s")
                runs.append(one_run(ex, fault, seed, budget_s, world_sizes, shrink_budget_s, log, stop_when_found))
    found = sum(r["found"] for r in runs)
    both = sum(all(r["found"] for r in runs if r["fault"] == f[3]) for f in faults)
    return {"budget_seconds": budget_s, "seeds": seeds, "world_sizes": list(world_sizes), "runs": runs,
            "found_runs": found, "total_runs": len(runs), "found_on_every_seed": both, "faults": len(faults)}


def print_table(result: dict) -> None:
    print(f"budget {result['budget_seconds']:.0f}s per run (every target, adaptive), fuzz seeds {result['seeds']}, "
          f"world sizes {result['world_sizes']}")
    print(f"{'fault':>38} {'dimension':>22} {'first find (s)':>16} {'shrunk (modules/steps/ws)':>26}")
    by_fault: dict[str, list] = {}
    for r in result["runs"]:
        by_fault.setdefault(r["fault"], []).append(r)
    for name, rows in by_fault.items():
        times = "/".join("-" if not r["found"] else f"{r['first_find_s']:.0f}" for r in rows)
        sizes = "/".join("-" if not r["size"] else f"{r['size']['body_modules']}m{r['size']['steps']}s"
                         f"{r['size']['world_size']}w" for r in rows)
        print(f"{name:>38} {rows[0]['label']:>22} {times:>16} {sizes:>26}")
    print(f"found in {result['found_runs']} of {result['total_runs']} runs; {result['found_on_every_seed']} of "
          f"{result['faults']} faults on every seed")
    for r in result["runs"]:
        for line in r["torch_findings"]:
            print(f"  finding on unmodified torch (triage it), {r['fault']} seed {r['seed']}: {line}")
