"""The check to run where a GPU is: every family's CUDA path, in one command.

    python -m parityfuzz.frontends.devicecheck [--sample N] [--budget S] [--targets A,B] [--corpus-dir DIR]
                                               [--findings DIR] [--report PATH] [--cpu]

Where CUDA exists it (1) replays a sample of the corpus: up to N files per family whose world size the GPUs hold
(one GPU per rank), on CUDA under NCCL, each read as ``parityfuzz versions`` reads a replay (passes, fails as
recorded, fails otherwise, regression); (2) fuzzes every target for S seconds at the world sizes the GPUs allow
(1 on a single GPU: every family's CUDA path, inductor generating Triton), writing what it finds to ``--findings``;
(3) prints one table of both (``--budget 0``: the replay alone).  Exit 0: every replay as its record says and
nothing found; 1: something to look at (the table says what); 2: no CUDA device, nothing run.  ``--cpu`` runs the
same check on CPU ranks under gloo: how the command's own test runs it on a machine without a GPU (CI never has
one).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from parityfuzz.triage import corpus, replay

#: World sizes a check fuzzes at, up to the GPUs there are (one per rank).
WORLD_SIZES = (1, 2, 4, 8)
#: Where the repository keeps its corpus (the default replayed).
DEFAULT_CORPUS = Path(__file__).resolve().parents[1].parent / "corpus"


def world_sizes(gpus: int, cpu: bool) -> tuple[int, ...]:
    """The world sizes the check runs: those the GPUs hold, one GPU a rank; on the CPU (``--cpu``), 1 and 2."""
    return (1, 2) if cpu else tuple(w for w in WORLD_SIZES if w <= gpus)


def sample(files: list[Path], per_family: int, sizes: tuple[int, ...], seed: int = 0) -> list[Path]:
    """Up to ``per_family`` corpus files of each family (its folder) whose case, and the case a checkpoint event
    resumes, runs at one of ``sizes``; the same files for the same corpus and seed."""
    by_family: dict[str, list[Path]] = {}
    for path in files:
        case = corpus.load(path).case
        resumed = case.resumed() if case.checkpoint else case
        if case.world_size in sizes and resumed.world_size in sizes:
            by_family.setdefault(path.parent.name, []).append(path)
    rng = random.Random(seed)
    return [p for family in sorted(by_family) for p in sorted(rng.sample(by_family[family],
                                                                          min(per_family, len(by_family[family]))))]


def replay_sample(paths: list[Path], backend: str, log=print) -> list[dict]:
    """Replay each file on ``backend``'s ranks: ``{"file", "family", "outcome", "signature", "seconds"}`` each."""
    from parityfuzz.executor import Executor
    from parityfuzz.judge.verify import verify_case

    rows = []
    with Executor(backend=backend) as executor:
        for i, path in enumerate(paths, 1):
            entry = corpus.load(path)
            began = time.monotonic()
            verdict = verify_case(entry.case, executor, replay.timeout_for(entry, None))
            rows.append({"file": f"{path.parent.name}/{path.name}", "family": path.parent.name,
                         "outcome": replay.outcome(entry, verdict),
                         "signature": None if verdict.ok else verdict.bug_signature(),
                         "seconds": round(time.monotonic() - began, 1)})
            log(f"[{i}/{len(paths)}] {rows[-1]['file']}: {rows[-1]['outcome']} ({rows[-1]['seconds']}s)")
    return rows


def fuzz(sizes: tuple[int, ...], budget_s: float, targets: list[str], findings: Path, report: Path) -> dict:
    """Every selected fuzz target for ``budget_s`` seconds in all at ``sizes``: the run's ``--fuzz-report``."""
    from parityfuzz.frontends.cli import _pytest, targets as target_files

    args = [f"--world-sizes={','.join(map(str, sizes))}", f"--fuzz-budget={budget_s:g}", f"--corpus-dir={findings}",
            f"--fuzz-report={report}", "-q", "-p", "no:cacheprovider"]
    if targets:
        args += ["-k", " or ".join(targets)]
    _pytest(target_files(), args)
    return json.loads(report.read_text()) if report.exists() else {"targets": {}, "failures": []}


def table(device: str, replayed: list[dict], fuzzed: dict) -> str:
    """The check's one table: the replay per family, the fuzz per target, what to look at."""
    lines = [f"device check: {device}", "", "corpus replay (a sample per family):",
             f"  {'family':<12}{'files':>6}{'passes':>8}{'as recorded':>13}{'otherwise':>11}{'regression':>12}"]
    for family in sorted({r["family"] for r in replayed}):
        n = Counter(r["outcome"] for r in replayed if r["family"] == family)
        lines.append(f"  {family:<12}{sum(n.values()):>6}{n[replay.PASSES]:>8}{n[replay.FAILS_AS_RECORDED]:>13}"
                     f"{n[replay.FAILS_OTHERWISE]:>11}{n[replay.REGRESSION]:>12}")
    lines += ["", "fuzz:" if fuzzed.get("targets") else "fuzz: not run (--budget 0)"]
    lines += [f"  {'target':<12}{'cases':>6}{'pass':>6}{'failures':>10}"] if fuzzed.get("targets") else []
    failures = Counter(f.get("target") for f in fuzzed.get("failures", []))
    for name, t in sorted(fuzzed.get("targets", {}).items()):
        lines.append(f"  {name:<12}{t.get('cases', 0):>6}{t.get('verdicts', {}).get('pass', 0):>6}"
                     f"{failures[name]:>10}")
    look = [f"{r['file']}: {r['outcome']} ({r['signature'] or 'passed'})" for r in replayed
            if r["outcome"] in (replay.FAILS_OTHERWISE, replay.REGRESSION)]
    look += [f"{f.get('target')}: {f.get('bug_signature')} -> {f.get('corpus_file')}"
             for f in fuzzed.get("failures", [])]
    lines += ["", "to look at:" if look else "nothing to look at: every replay as recorded, nothing found"]
    lines += [f"  {item}" for item in look]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parityfuzz.frontends.devicecheck",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=3, metavar="N", help="corpus files replayed per family (3)")
    parser.add_argument("--budget", type=float, default=300.0, metavar="S",
                        help="seconds of fuzzing, shared by the targets (300; 0: replay only)")
    parser.add_argument("--targets", default="", metavar="A,B", help="fuzz only these targets (default: all)")
    parser.add_argument("--corpus-dir", type=Path, default=DEFAULT_CORPUS, help="the corpus to sample (corpus/)")
    parser.add_argument("--findings", type=Path, default=Path("devicecheck-findings"),
                        help="where the fuzz writes what it finds (devicecheck-findings/)")
    parser.add_argument("--report", type=Path, help="also write the check's results here as JSON")
    parser.add_argument("--cpu", action="store_true", help="run the check on CPU ranks under gloo (a test of the "
                        "command on a machine without a GPU)")
    args = parser.parse_args(argv)
    if args.sample < 0 or args.budget < 0:
        parser.error("--sample and --budget must be >= 0")
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not gpus and not args.cpu:
        print("devicecheck: no CUDA device here: nothing run (--cpu runs the same check on CPU ranks)")
        return 2
    sizes = world_sizes(gpus, args.cpu)
    backend = "gloo" if args.cpu else "nccl"
    device = (f"torch {torch.__version__}, " + ("CPU ranks under gloo" if args.cpu else
              f"CUDA {torch.version.cuda}, {gpus} x {torch.cuda.get_device_name(0)} under NCCL")
              + f"; world sizes {', '.join(map(str, sizes))}")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    log(f"devicecheck: {device}")
    paths = sample(corpus.discover(args.corpus_dir), args.sample, sizes) if args.sample else []
    replayed = replay_sample(paths, backend, log)
    fuzzed: dict = {"targets": {}, "failures": []}
    if args.budget:
        args.findings.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="parityfuzz-devicecheck-") as scratch:
            fuzzed = fuzz(sizes, args.budget, [t for t in args.targets.split(",") if t], args.findings,
                          Path(scratch) / "report.json")
    print(table(device, replayed, fuzzed))
    if args.report:
        args.report.write_text(json.dumps({"device": device, "replayed": replayed, "fuzzed": fuzzed}, indent=1))
    bad = any(r["outcome"] in (replay.FAILS_OTHERWISE, replay.REGRESSION) for r in replayed)
    return 1 if bad or fuzzed.get("failures") else 0


if __name__ == "__main__":
    sys.exit(main())
