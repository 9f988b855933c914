"""Measure the oracle's tolerance on clean cases: how far correct FSDP2 strays from its reference, against the
noise a perturbed reference measures.

    python -m parityfuzz.frontends.calibrate [--cases 500] [--world-sizes 1,2,4] [--seed 0] [--json rows.json] [--findings DIR]

Each generated case runs the reference, the system under test and the reference from perturbed weights in
one round trip.  For every pass, loss and tensor it takes the deviation ``max |sut - ref|``, the noise
``max |perturbed - ref|`` and the scale ``max |ref|``; per dtype class it prints

- the deviation in ulps of the model's dtype at the tensor's scale (quantiles), for tensors where the noise
  is not larger (what the floor must cover), and
- for a grid of ``k`` and floor (in ulps), how many cases would fail the value check
  (``deviation > k * noise + floor * eps * scale`` somewhere): false alarms, since the system is unmodified.

It also runs the full oracle and lists every non-pass verdict on these cases (``--findings DIR`` writes each
one's case file there, to replay with ``python -m fuzz.repro``): each must be explained, as a torch bug or a
harness bug.  Cases with a finding are left out of the table, which is about what correct runs do.
``parityfuzz.judge.oracle``'s ``K`` and ``FLOOR_ULPS`` come from this table; docs/oracle.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from parityfuzz.case import dtypes
from parityfuzz.case import Case
from parityfuzz.case.mesh import DEFAULT_WORLD_SIZES
from parityfuzz.frontends.bench import generate

KS = (2, 4, 8, 16, 32)
FLOORS = (4, 8, 16, 32, 64, 128)


def dtype_class(case: Case) -> str:
    if case.mixed_precision():
        return f"mixed/{dtypes.precision(case)}"
    return dtypes.model_dtype(case) + ("/adam" if case.train.optimizer != "sgd" else "/sgd")


def run(n: int, world_sizes: tuple[int, ...], seed: int, log=print) -> dict:
    from parityfuzz.executor import Executor
    from parityfuzz.judge.oracle import measure
    from parityfuzz.judge.verify import tolerance, traces, verdict_from_outcomes

    cases = generate(n, world_sizes, seed)
    rows, findings, failed = [], [], 0
    start = time.monotonic()
    with Executor() as executor:
        for number, case in enumerate(cases):
            outcomes = executor.run(case, roles=("reference", "system", "perturbed_reference"))
            if any(o.status != "ok" for o in outcomes):
                failed += 1
                findings.append((case, verdict_from_outcomes(case, outcomes)))
                continue
            noise = traces(outcomes, "perturbed_reference")
            verdict = verdict_from_outcomes(case, outcomes, noise)
            if not verdict.ok:
                findings.append((case, verdict))
            eps = dtypes.EPS[dtypes.model_dtype(case)]
            for at, what, name, dev, measured, scale in measure(traces(outcomes, "reference"),
                                                               traces(outcomes, "system"), noise, tolerance(case)):
                rows.append({"case": number, "id": case.case_id(), "clean": verdict.ok, "class": dtype_class(case),
                             "step": at[0], "phase": at[1],
                             "what": what, "tensor": name, "dev": dev, "noise": measured, "scale": scale,
                             "eps": eps})
            if (number + 1) % 50 == 0:
                log(f"{number + 1}/{len(cases)} cases, {time.monotonic() - start:.0f}s")
    return {"cases": len(cases), "errors": failed, "rows": rows, "seconds": time.monotonic() - start,
            "findings": [{"case": case.to_dict(), "id": case.case_id(), "verdict": verdict.to_dict(),
                          "describe": verdict.describe()[:300], "bug_signature": verdict.bug_signature()}
                         for case, verdict in findings]}


def summarize(result: dict) -> str:
    rows = [r for r in result["rows"] if r["clean"]]
    by_class: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_class[r["class"]].append(r)
    lines = [f"{result['cases']} cases ({len(result['findings'])} with a finding, left out below), {len(rows)} "
             f"compared tensors, {result['seconds']:.0f}s"]
    for cls in sorted(by_class):
        group = by_class[cls]
        cases = {r["case"] for r in group}
        ulps = np.array([r["dev"] / (r["eps"] * r["scale"]) for r in group if r["scale"] > 0])
        quiet = np.array([r["dev"] / (r["eps"] * r["scale"]) for r in group if r["scale"] > 0 and r["noise"] <= 0])
        lines.append(f"\n{cls}: {len(cases)} cases, {len(group)} tensors")
        if ulps.size:
            q = np.quantile(ulps, [0.5, 0.9, 0.99, 1.0])
            lines.append(f"  deviation in ulps at scale: median {q[0]:.3g}, 90% {q[1]:.3g}, 99% {q[2]:.3g}, "
                         f"max {q[3]:.3g}")
        if quiet.size:
            lines.append(f"  where the perturbation moved nothing ({quiet.size} tensors): max {quiet.max():.3g} ulps")
        ratio = np.array([r["dev"] / r["noise"] for r in group if r["noise"] > 0 and r["dev"] > 0])
        if ratio.size:
            q = np.quantile(ratio, [0.5, 0.99, 1.0])
            lines.append(f"  deviation / measured noise: median {q[0]:.3g}, 99% {q[1]:.3g}, max {q[2]:.3g}")
        lines.append("  cases failing the value check, by k (rows) and floor ulps (columns):")
        lines.append("       " + "".join(f"{f:>7}" for f in FLOORS))
        for k in KS:
            counts = []
            for f in FLOORS:
                bad = {r["case"] for r in group if r["dev"] > k * r["noise"] + f * r["eps"] * r["scale"]}
                counts.append(len(bad))
            lines.append(f"  k={k:<4}" + "".join(f"{c:>7}" for c in counts))
    lines.append(f"\nnon-pass verdicts at the default tolerance: {len(result['findings'])}")
    lines += [f"  {f['id']}: {f['describe']}" for f in result["findings"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parityfuzz.frontends.calibrate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--world-sizes", default=",".join(map(str, DEFAULT_WORLD_SIZES)))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="also write every measured row here")
    parser.add_argument("--findings", metavar="DIR", help="write the case of every non-pass verdict here")
    args = parser.parse_args(argv)
    try:
        world_sizes = tuple(int(w) for w in args.world_sizes.split(","))
    except ValueError:
        parser.error(f"--world-sizes: expected comma-separated integers, got {args.world_sizes!r}")
    result = run(args.cases, world_sizes, args.seed, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(summarize(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    if args.findings:
        folder = Path(args.findings)
        folder.mkdir(parents=True, exist_ok=True)
        for finding in result["findings"]:
            (folder / f"{finding['id']}.json").write_text(json.dumps(finding["case"], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
