"""Throughput of the executor against a bare hand-written loop, side by side in one run.

    python -m parityfuzz.frontends.bench [--cases N] [--world-sizes 2,4] [--json]
    python -m parityfuzz.frontends.bench --soak-check [--cases 2000] [--world-sizes 4] [--json]
    python -m parityfuzz.frontends.bench --shrink-errors [--seed N] [--json]    (from the repository: it uses tests/faults/)
    python -m parityfuzz.frontends.bench --attached [--cases N] [--world-sizes 2] [--json]
    python -m parityfuzz.frontends.bench --pool-starts [--cases N] [--world-sizes 2,4] [--json]
    python -m parityfuzz.frontends.bench --profile [--targets [A,B]] [--cases N] [--world-sizes 2,4] [--json]
    python -m parityfuzz.frontends.bench --schedule [--budget S] [--seeds 1,2] [--world-sizes 1,2,4] [--json]
        (from the repository: it plants tests/faults/ faults; see parityfuzz.frontends.schedule_bench)
    python -m parityfuzz.frontends.bench --faults [NAMES] [--budget 420] [--seeds 1,2] [--world-sizes 1,2,3,4] [--json]
        (from the repository: each test fault planted under the user's command; see parityfuzz.frontends.fault_bench)

The same generated cases (fixed seed) run twice per world size:

- **executor**: ``parityfuzz.judge.verify.verify_case`` per case: the driver sends each case to the
  persistent rank pool, ranks train reference and system under test, record
  losses, full gradients and parameters, send them back, and the oracle compares;
- **bare**: persistent rank processes that receive all cases up front and, in a
  tight loop, train the same reference and system on each with
  ``parityfuzz.run.train.run_system(record=False)`` (the same training code, so the same
  wrapping, accumulation and delays), recording, shipping and comparing nothing.

Pool start-up is excluded from both.  The ratio executor/bare is the share of
raw training throughput the harness keeps.

``--soak-check`` instead runs many generated cases (1-D and 2-D HSDP meshes)
through one executor and prints each rank's resident memory, thread count and
open file descriptors after the first case and at the end: they must stay flat.

``--shrink-errors`` finds and shrinks the same error-verdict fault (``tests.faults:RaiseWithLayerNorm``, every
rank raising where the model has a LayerNorm) twice with one seed: with pools replaced after every failing
case, and kept where the ranks' process groups are in step (the default); it prints the shrink time, runs and
pool restarts of each, and their ratio.

``--attached`` runs the same cases through the local pool and through ranks launched by torchrun on this machine
and attached to the driver (:mod:`parityfuzz.executor.attach`), pool start-up excluded from both, and prints
the throughput of each and their ratio.

``--pool-starts`` compares the two ways ranks start (:data:`parityfuzz.executor.pool.START_METHODS`), side by side
per world size: ``spawn`` (a fresh interpreter importing torch per rank: before) and ``forkserver`` (forked from a
template that imported torch once: after).  It prints the first start of a pool (for ``forkserver`` the fork
server's own start, once per driver, is in the first world size's figure), a restart (the pool closed and started
again, what a broken pool costs), and the cases per minute on the fixed case set with pool start-up included and
every pool replaced after each failing case (as shrinking an error out of step does).

``--profile`` says where a case's time goes, over the fixed case set: per role (the reference, the system under
test, the noise samples of perturbed references) the ranks' seconds building the model and applying the system,
training, and recording gradients and parameters (the slowest rank's, per run); runs a rank failed (the expected
errors of cases torch must refuse among them: no seconds come back to split); the driver's seconds in the oracle;
the messages between driver and ranks and the waiting for the slowest rank (a run's wall time less its slowest
rank's busy time); and the driver's other work (expectations, merging traces).  Each as seconds and as a share of
the total.  With ``--targets`` it does so per fuzz target (its own strategy's cases) and world size, each beside
the bare loop on the same cases: cases a minute of both and their ratio, and the phases that take the most.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import warnings

from parityfuzz.case import Case


def generate(n: int, world_sizes: tuple[int, ...], seed: int = 0, target: str = "", **options) -> list[Case]:
    """``n`` cases drawn with a fixed seed by the fuzz strategy (``strategies.cases(world_sizes=world_sizes,
    **options)``), or by fuzz target ``target``'s (:func:`parityfuzz.frontends.targets.strategy`)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    from parityfuzz.frontends import targets
    from parityfuzz.strategies import cases

    out: list[Case] = []
    strategy = targets.strategy(target, world_sizes) if target else cases(world_sizes=world_sizes, **options)

    @hseed(seed)
    @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case):
        out.append(case)

    collect()
    return out[:n]


def _bare_rank(rank: int, world_size: int, store_path: str, payload: list[str], results) -> None:
    import torch
    import torch.distributed as dist

    from parityfuzz.systems import RankContext
    from parityfuzz.run.train import run_system

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=r".*returned a view tensor.*")  # as the executor's ranks do
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world_size), rank=rank, world_size=world_size)
    ctx = RankContext(rank=rank, world_size=world_size, device=torch.device("cpu"))
    cases = [Case.from_json(p) for p in payload]
    originals = {n: getattr(dist, n) for n in ("all_gather_single", "reduce_scatter_single")}
    dist.barrier()
    start = time.perf_counter()
    for i, case in enumerate(cases):
        for role in ("reference", "system"):  # (a checkpoint's or a restart's scratch: one directory a case)
            run_system(case, role, ctx, record=False, scratch=os.path.join(os.path.dirname(store_path), str(i), role))
            for n, fn in originals.items():  # delays patch these per case
                setattr(dist, n, fn)
        ctx.release_groups()
    dist.barrier()
    results.put((rank, time.perf_counter() - start))
    dist.destroy_process_group()


def bare_seconds(cases: list[Case], world_size: int) -> float:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as d:
        payload = [c.to_json() for c in cases]
        procs = [ctx.Process(target=_bare_rank, args=(r, world_size, os.path.join(d, "store"), payload, results))
                 for r in range(world_size)]
        for p in procs:
            p.start()
        times = [results.get(timeout=1800)[1] for _ in procs]
        for p in procs:
            p.join()
    return max(times)


def executor_seconds(cases: list[Case], world_size: int) -> tuple[float, dict]:
    from parityfuzz.executor import Executor
    from parityfuzz.judge.verify import verify_case

    verdicts: dict[str, int] = {}
    with Executor() as ex:
        ex.pool(world_size)  # start-up excluded
        start = time.perf_counter()
        for case in cases:
            v = verify_case(case, ex)
            verdicts[v.kind] = verdicts.get(v.kind, 0) + 1
        return time.perf_counter() - start, verdicts


def pool_starts(sizes: list[int], n: int, seed: int) -> list[dict]:
    """Per world size and start method: the first start, a restart, and cases per minute over ``n`` generated cases
    with start-up included and pools replaced after every failing case (:data:`START_METHODS`, spawn first)."""
    from parityfuzz.executor import Executor
    from parityfuzz.executor.pool import START_METHODS, RankPool
    from parityfuzz.judge.verify import verify_case

    rows = []
    for ws in sizes:
        cases = generate(n, (ws,), seed)
        row = {"world_size": ws, "cases": len(cases)}
        for method in reversed(START_METHODS):
            started = time.perf_counter()
            RankPool(ws, "gloo", start_method=method).close()
            row[f"{method}_start_s"] = time.perf_counter() - started
            started = time.perf_counter()
            RankPool(ws, "gloo", start_method=method).close()
            row[f"{method}_restart_s"] = time.perf_counter() - started
            verdicts: dict[str, int] = {}
            with Executor(start_method=method, reuse_after_errors=False) as ex:
                started = time.perf_counter()
                for case in cases:
                    v = verify_case(case, ex)
                    verdicts[v.kind] = verdicts.get(v.kind, 0) + 1
                seconds = time.perf_counter() - started
                row[f"{method}_restarts"] = ex.restarts
            row[f"{method}_cases_per_min"] = 60 * len(cases) / seconds
            row["verdicts"] = verdicts
        rows.append(row)
    return rows


def profile(sizes: list[int], n: int, seed: int) -> dict:
    """Seconds per phase of :func:`parityfuzz.judge.verify.verify_case` over ``n`` generated cases per world size
    (see the module's docstring), pool start-up excluded."""
    return profile_cases({ws: generate(n, (ws,), seed) for ws in sizes})


def profile_cases(by_size: dict[int, list[Case]]) -> dict:
    """:func:`profile` over the given cases of each world size."""
    from collections import Counter

    from parityfuzz.executor import Executor
    from parityfuzz.executor.worker import RELEASE, RESTORE, SECONDS
    from parityfuzz.judge import verify

    phases: Counter = Counter()
    run_segments, compare = Executor.run_segments, verify.compare

    def timed_run_segments(self, case, timeout_s=None, roles=("reference", "system"), probe=False):
        began = time.perf_counter()
        segments = run_segments(self, case, timeout_s, roles, probe)
        wall = time.perf_counter() - began
        busy = 0.0
        for outcomes in segments:
            done = [o.result for o in outcomes if o.status == "ok"]
            if len(done) < len(outcomes):  # (a rank raised, crashed or hung: no seconds to split it by)
                phases["runs that failed (expected errors among them)"] += wall / len(segments)
                busy += wall / len(segments)
                continue
            per_rank = [sum(r[SECONDS].values()) for r in done]
            busy += max(per_rank)
            for role in done[0][SECONDS]:
                if role in (RESTORE, RELEASE):
                    phases[f"ranks: {role}"] += max(r[SECONDS].get(role, 0.0) for r in done)
                    continue
                kind = "noise samples" if role.startswith("perturbed_reference") else role
                slowest = max(done, key=lambda r: r[SECONDS][role])
                parts = slowest[role].seconds
                phases[f"{kind}: setup"] += parts.get("setup", 0.0)
                phases[f"{kind}: record"] += parts.get("record", 0.0)
                phases[f"{kind}: train"] += slowest[SECONDS][role] - sum(parts.values())
        phases["messages and waiting"] += max(0.0, wall - busy)
        phases["_runs"] += wall
        return segments

    def timed_compare(*args, **kwargs):
        began = time.perf_counter()
        try:
            return compare(*args, **kwargs)
        finally:
            phases["oracle"] += time.perf_counter() - began

    total, count = 0.0, 0
    Executor.run_segments, verify.compare = timed_run_segments, timed_compare
    try:
        for ws, cases in by_size.items():
            with Executor() as ex:
                ex.pool(ws)  # start-up excluded
                for case in cases:
                    began = time.perf_counter()
                    verify.verify_case(case, ex)
                    total += time.perf_counter() - began
                    count += 1
    finally:
        Executor.run_segments, verify.compare = run_segments, compare
    phases["driver: other"] = max(0.0, total - phases.pop("_runs") - phases["oracle"])
    return {"cases": count, "seconds": round(total, 2), "cases_per_min": round(60 * count / total, 1),
            "phases": {k: {"seconds": round(v, 2), "share": round(v / total, 3)}
                       for k, v in sorted(phases.items(), key=lambda kv: -kv[1])}}


def target_profiles(names: list[str], sizes: list[int], n: int, seed: int, log=print) -> list[dict]:
    """Per fuzz target and world size, side by side over the same ``n`` cases (drawn by the target's strategy,
    fixed seed; those whose checkpoint resumes at another world size left out: the bare loop runs one pool): the
    executor's cases a minute and where their time goes (:func:`profile`), and the bare loop's (each case's
    reference and system trained once per rank in persistent processes, nothing recorded, shipped or compared:
    the limit here).  Only cases that train on both sides are timed (:func:`trains`)."""
    rows = []
    for name in names:
        for ws in sizes:
            cases = trains([c for c in generate(n, (ws,), seed, name)
                            if not c.checkpoint or c.resumed().world_size == c.world_size], ws)
            if not cases:
                rows.append({"target": name, "world_size": ws, "cases": 0})
                continue
            executor = profile_cases({ws: cases})  # the very cases the bare loop trains
            bare = bare_seconds(cases, ws)
            row = {"target": name, "world_size": ws, "cases": len(cases),
                   "executor_cases_per_min": executor["cases_per_min"],
                   "bare_cases_per_min": round(60 * len(cases) / bare, 1), "phases": executor["phases"]}
            row["ratio"] = round(row["executor_cases_per_min"] / row["bare_cases_per_min"], 2)
            rows.append(row)
            log(f"{name} ws={ws}: {row['executor_cases_per_min']} cases/min, bare {row['bare_cases_per_min']}")
    return rows


def trains(cases: list[Case], world_size: int) -> list[Case]:
    """The cases whose reference and system both train on every rank: the bare loop cannot run the others (a rank
    that raises leaves the others waiting in a collective), so neither side times them."""
    from parityfuzz.executor import Executor

    with Executor() as ex:
        return [c for c in cases if all(o.status == "ok" for seg in ex.run_segments(c) for o in seg)]


def print_target_profiles(rows: list[dict]) -> None:
    print(f"{'target':<11}{'ws':>3}{'cases':>6}{'cases/min':>10}{'bare/min':>9}{'ratio':>6}  where the time goes")
    for r in rows:
        if not r["cases"]:
            print(f"{r['target']:<11}{r['world_size']:>3}{0:>6}  (the target draws no case of this world size "
                  "in one pool)")
            continue
        top = ", ".join(f"{k} {v['share']:.0%}" for k, v in list(r["phases"].items())[:4])
        print(f"{r['target']:<11}{r['world_size']:>3}{r['cases']:>6}{r['executor_cases_per_min']:>10.1f}"
              f"{r['bare_cases_per_min']:>9.1f}{r['ratio']:>6.2f}  {top}")


def attached_seconds(cases: list[Case], world_size: int) -> tuple[float, dict]:
    """:func:`executor_seconds` on ranks launched by one torchrun job on this machine, attached to the driver."""
    import socket
    import subprocess

    from parityfuzz.executor import Executor
    from parityfuzz.judge.verify import verify_case

    def port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    driver = f"127.0.0.1:{port()}"
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            f"--nproc-per-node={world_size}", "-m", "parityfuzz.executor.attach", driver],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    verdicts: dict[str, int] = {}
    try:
        with Executor(attach=driver) as ex:
            ex.pool(world_size)  # start-up excluded
            start = time.perf_counter()
            for case in cases:
                v = verify_case(case, ex)
                verdicts[v.kind] = verdicts.get(v.kind, 0) + 1
            seconds = time.perf_counter() - start
    finally:
        try:
            job.wait(60)
        except subprocess.TimeoutExpired:
            job.kill()
    return seconds, verdicts


def soak_check(n: int, world_size: int, seed: int, log=print) -> dict:
    from parityfuzz.executor import Executor
    from parityfuzz.judge.verify import verify_case

    def figures(ex) -> list[dict]:
        return ex.pool(world_size).resources()

    cases = generate(n, (world_size,), seed)
    meshes = sorted({c.mesh.shape for c in cases})
    verdicts: dict[str, int] = {}
    with Executor() as ex:
        verify_case(cases[0], ex)
        before = figures(ex)
        peak = {k: 0.0 for k in before[0]}
        start = time.perf_counter()
        for i, case in enumerate(cases[1:], 2):
            v = verify_case(case, ex)
            verdicts[v.kind] = verdicts.get(v.kind, 0) + 1
            for rank in figures(ex):
                peak = {k: max(peak[k], rank[k]) for k in peak}
            if i % 250 == 0:
                log(f"  {i}/{len(cases)} cases, rank 0 now {figures(ex)[0]}, recycles {ex.recycles}")
        after = figures(ex)
        return {"cases": len(cases), "world_size": world_size, "mesh_shapes": [list(m) for m in meshes],
                "seconds": round(time.perf_counter() - start, 1), "verdicts": verdicts,
                "pool_restarts": ex.restarts, "pool_recycles": ex.recycles, "ceiling": ex.ceiling,
                "before": before, "after": after, "peak": peak}


def shrink_errors(seed: int, max_shrink_runs: int = 40) -> dict:
    """Shrink the same error-verdict fault with pools respawned after every error, then kept where in step."""
    from pathlib import Path

    from parityfuzz.engine import Fuzzer, FuzzOptions
    from parityfuzz.executor import Executor
    from parityfuzz.strategies import cases

    rows = {}
    for mode, reuse in (("respawn", False), ("reuse", True)):
        with tempfile.TemporaryDirectory() as tmp, Executor(reuse_after_errors=reuse) as ex:
            ex.pool(2)  # start-up excluded
            options = FuzzOptions(corpus_dir=Path(tmp), seed=seed, max_cases=80, shrink_budget_s=900,
                                  max_shrink_runs=max_shrink_runs, max_reduce_runs=0, stop_after=1)
            stats = Fuzzer(options, ex, log=lambda m: None).fuzz(
                "errors", cases(world_sizes=(2,), system="tests.faults:RaiseWithLayerNorm"), budget_s=900)
            f = stats.failures[0]
            rows[mode] = {"cases_to_find": f.cases_to_find, "shrink_runs": f.shrink_runs,
                          "shrink_seconds": round(f.shrink_seconds, 2), "pool_restarts": ex.restarts,
                          "pools_kept_after_errors": ex.reuses, "case": f.case.case_id()}
    rows["ratio"] = round(rows["respawn"]["shrink_seconds"] / rows["reuse"]["shrink_seconds"], 2)
    return rows


def side_by_side(sizes: list[int], n: int, seed: int, ways) -> list[dict]:
    """Per world size, the same ``n`` generated cases run both ways (``(name, seconds(cases, world_size) ->
    (seconds, verdicts))``): each way's cases per minute and seconds, the first's throughput over the second's,
    and the first way's verdicts (or a note where the two ways' verdicts differ)."""
    rows = []
    for ws in sizes:
        cases = generate(n, (ws,), seed)
        row = {"world_size": ws, "cases": len(cases)}
        figures = [(name, *measure(cases, ws)) for name, measure in ways]
        for name, seconds, _ in figures:
            row[f"{name}_cases_per_min"], row[f"{name}_seconds"] = 60 * len(cases) / seconds, seconds
        (_, first_s, first_v), (_, second_s, second_v) = figures
        row["ratio"] = second_s / first_s
        row["verdicts"] = first_v if second_v in (None, first_v) else f"differ: {first_v} vs {second_v}"
        rows.append(row)
    return rows


def _shown(result: dict, as_json: bool, table) -> int:
    """Print a benchmark's ``result`` as one JSON object or as its ``table``; exit 0."""
    if as_json:
        print(json.dumps(result))
    else:
        table(result)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parityfuzz.frontends.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=60, help="cases per world size (default 60)")
    parser.add_argument("--world-sizes", default="2,4", help="comma-separated (default 2,4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--soak-check", action="store_true",
                        help="check per-rank memory, threads and descriptors stay flat over many cases")
    parser.add_argument("--shrink-errors", action="store_true",
                        help="shrink an error-verdict fault with pools respawned, then kept, after errors")
    parser.add_argument("--attached", action="store_true",
                        help="the same cases on the local pool and on torchrun-launched ranks attached to the driver")
    parser.add_argument("--pool-starts", action="store_true",
                        help="pool start and restart times and cases per minute, ranks spawned against forked")
    parser.add_argument("--profile", action="store_true", help="where a case's time goes, phase by phase")
    parser.add_argument("--targets", nargs="?", const="all", default=None, metavar="NAMES",
                        help="--profile per fuzz target (comma-separated; default all), each beside the bare loop")
    parser.add_argument("--schedule", action="store_true",
                        help="the even schedule against the adaptive one over every target, faults planted in three")
    parser.add_argument("--faults", nargs="?", const="all", default=None, metavar="NAMES",
                        help="the project's test faults planted one at a time under the user's command (every target, "
                             "adaptive): found, first find, shrunk size (comma-separated fault names; default all)")
    parser.add_argument("--budget", type=float, default=480.0,
                        help="--schedule, --faults: seconds per run (default 480; 420 is the user's figure)")
    parser.add_argument("--seeds", default="1,2", help="--schedule, --faults: fuzz seeds (default 1,2)")
    parser.add_argument("--full-budget", action="store_true",
                        help="--faults: run every target for the whole budget even after the fault is found (by "
                             "default a run ends at its first find, which the rest of the budget cannot change)")
    args = parser.parse_args(argv)
    given = " ".join(argv if argv is not None else sys.argv)
    if args.faults is not None:
        from parityfuzz.frontends import fault_bench

        chosen = fault_bench.FAULTS if args.faults == "all" else tuple(
            f for f in fault_bench.FAULTS if f[3] in args.faults.split(","))
        if not chosen:
            parser.error(f"--faults: none of {args.faults!r} is a benchmark fault (known: "
                         f"{', '.join(f[3] for f in fault_bench.FAULTS)})")
        sizes = tuple(int(w) for w in args.world_sizes.split(",")) if "--world-sizes" in given else (1, 2, 3, 4)
        return _shown(fault_bench.run(chosen, [int(s) for s in args.seeds.split(",")], args.budget, sizes,
                                      log=(lambda m: None) if args.json else print,
                                      stop_when_found=not args.full_budget), args.json, fault_bench.print_table)
    if args.schedule:
        from parityfuzz.frontends import schedule_bench

        sizes = tuple(int(w) for w in args.world_sizes.split(",")) if "--world-sizes" in given else (1, 2, 4)
        return _shown(schedule_bench.compare([int(s) for s in args.seeds.split(",")], args.budget, sizes,
                                             log=(lambda m: None) if args.json else print), args.json,
                      schedule_bench.print_table)
    if args.shrink_errors:
        result = shrink_errors(args.seed)
        if args.json:
            print(json.dumps(result))
        else:
            for mode in ("respawn", "reuse"):
                r = result[mode]
                print(f"{mode:>8}: found after {r['cases_to_find']} cases, shrunk in {r['shrink_runs']} runs / "
                      f"{r['shrink_seconds']}s, {r['pool_restarts']} pool restarts, "
                      f"{r['pools_kept_after_errors']} pools kept after an error (case {r['case']})")
            print(f"shrink time respawn/reuse: {result['ratio']}")
        return 0
    try:
        sizes = [int(w) for w in args.world_sizes.split(",")]
    except ValueError:
        parser.error(f"--world-sizes: expected comma-separated integers, got {args.world_sizes!r}")
    if args.soak_check:
        n = args.cases if "--cases" in (argv if argv is not None else sys.argv) else 2000
        ws = sizes[-1] if "--world-sizes" in " ".join(argv if argv is not None else sys.argv) else 4
        result = soak_check(n, ws, args.seed, log=(lambda m: None) if args.json else print)
        if args.json:
            print(json.dumps(result))
        else:
            print(f"{result['cases']} cases at world size {ws}, meshes {result['mesh_shapes']}, "
                  f"{result['seconds']}s, verdicts {result['verdicts']}, pool restarts {result['pool_restarts']}, "
                  f"recycles at the ceiling {result['ceiling']}: {result['pool_recycles']}")
            print(f"peak over the run (any rank): {result['peak']}")
            print(f"{'rank':>4} {'RSS MiB before':>15} {'after':>7} {'threads before':>15} {'after':>6} "
                  f"{'fds before':>11} {'after':>6}")
            for r, (b, a) in enumerate(zip(result["before"], result["after"])):
                print(f"{r:>4} {b['rss_mib']:>15} {a['rss_mib']:>7} {b['threads']:>15} {a['threads']:>6} "
                      f"{b['fds']:>11} {a['fds']:>6}")
        return 0
    if args.profile and args.targets is not None:
        from parityfuzz.frontends import targets

        names = targets.names() if args.targets == "all" else args.targets.split(",")
        unknown = [t for t in names if t not in targets.names()]
        if unknown:
            parser.error(f"--targets: no fuzz target {', '.join(unknown)} (the targets: {', '.join(targets.names())})")
        rows = target_profiles(names, sizes, args.cases, args.seed, log=(lambda m: None) if args.json else
                               (lambda m: print(m, file=sys.stderr, flush=True)))
        if args.json:
            print(json.dumps({"rows": rows}))
        else:
            print_target_profiles(rows)
        return 0
    if args.profile:
        result = profile(sizes, args.cases, args.seed)
        if args.json:
            print(json.dumps(result))
            return 0
        print(f"{result['cases']} cases, {result['seconds']}s ({result['cases_per_min']} cases/min), world sizes "
              f"{sizes}")
        for name, p in result["phases"].items():
            print(f"{name:>28} {p['seconds']:>9.2f}s {p['share']:>7.1%}")
        return 0
    if args.pool_starts:
        rows = pool_starts(sizes, args.cases, args.seed)
        if args.json:
            print(json.dumps({"rows": rows}))
            return 0
        print(f"{'world size':>10} {'start method':>12} {'first start s':>13} {'restart s':>9} {'cases/min':>9} "
              f"{'pool restarts':>13}")
        for r in rows:
            for method in ("spawn", "forkserver"):
                print(f"{r['world_size']:>10} {method:>12} {r[method + '_start_s']:>13.2f} "
                      f"{r[method + '_restart_s']:>9.2f} {r[method + '_cases_per_min']:>9.1f} "
                      f"{r[method + '_restarts']:>13}")
            print(f"{'':>10} {'ratio':>12} {r['spawn_start_s'] / r['forkserver_start_s']:>13.1f} "
                  f"{r['spawn_restart_s'] / r['forkserver_restart_s']:>9.1f} "
                  f"{r['forkserver_cases_per_min'] / r['spawn_cases_per_min']:>9.2f}   verdicts {r['verdicts']}")
        return 0
    if args.attached:  # attached throughput / local
        ways = (("attached", attached_seconds), ("local", executor_seconds))
    else:  # the share of the bare loop's throughput the harness keeps
        ways = (("executor", executor_seconds), ("bare", lambda cases, ws: (bare_seconds(cases, ws), None)))
    rows = side_by_side(sizes, args.cases, args.seed, ways)
    if args.json:
        print(json.dumps({"rows": rows}))
    else:
        (a, _), (b, _) = ways
        print(f"{'world size':>10} {'cases':>6} {a + '/min':>13} {b + '/min':>13} {'ratio':>6} verdicts")
        for r in rows:
            print(f"{r['world_size']:>10} {r['cases']:>6} {r[a + '_cases_per_min']:>13.1f} "
                  f"{r[b + '_cases_per_min']:>13.1f} {r['ratio']:>6.2f} {r['verdicts']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
