"""Run one case file on its own and explain it.

    python -m fuzz.repro FILE.json [--timeout SECONDS] [--json]

FILE is a corpus file or a bare case JSON.  Prints the case (model tree with its
parallel plan), runs reference and system under test, and prints the verdict
with the first divergence or the failing ranks' tracebacks.

Exit codes: 0 the case passes, 1 it fails (mismatch, error, crash or hang),
2 bad input (the message names the file and the field).
"""

from __future__ import annotations

import argparse
import json
import sys

from fuzz import corpus
from fuzz.show import describe_case


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz.repro", description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="a corpus file or a case JSON file")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="per-case timeout")
    parser.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    args = parser.parse_args(argv)
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout: must be > 0, got {args.timeout}")
    try:
        entry = corpus.load(args.file)
    except corpus.CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    from fuzz.executor import Executor
    from fuzz.verify import check

    if not args.json:
        print(describe_case(entry.case))
        print(f"expectation: {entry.expect}" + (f" ({entry.known_issue or entry.note})" if entry.expect == "fail" else ""))
        print("running ...", flush=True)
    with Executor(timeout_s=args.timeout) as executor:
        verdict = check(entry.case, executor)
    if args.json:
        print(json.dumps({"file": args.file, "case_id": entry.case.case_id(), "expect": entry.expect,
                          "verdict": verdict.to_dict()}))
    else:
        print(f"verdict: {verdict.describe()}")
        for r in verdict.ranks:
            text = r.get("traceback") or r.get("log")
            if text:
                print(f"--- rank {r['rank']} ({r.get('status')}) ---\n{text.rstrip()}")
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
