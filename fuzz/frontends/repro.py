"""Run one case file on its own and explain it.

    python -m fuzz.repro FILE.json [--timeout SECONDS] [--json | --markdown | --export PATH]

FILE is a corpus file or a bare case JSON.  Prints the case (model tree with its
parallel plan), runs reference and system under test, and prints the verdict
with the first divergence and where it begins (the first module whose output or
output gradient differs, from a re-run with probes), or the failing ranks'
tracebacks.  With ``--markdown``
it prints a bug report to paste into an issue instead: versions, the case as a
tree with its plan, the verdict and where it begins, the first failing rank's traceback, the case
JSON and the command that reproduces it.

With ``--export PATH`` it runs nothing: it writes a standalone script that
imports only torch (``torchrun --nproc-per-node=N PATH``; :mod:`parityfuzz.export`) and
exits 0, or 2 where the case uses something the export does not write out yet.

Exit codes: 0 the case passes, 1 it fails (mismatch, error, crash or hang),
2 bad input (the message names the file and the field).
"""

from __future__ import annotations

import argparse
import json
import sys

from parityfuzz.frontends.show import describe_case
from parityfuzz.triage import corpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz.repro", description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="a corpus file or a case JSON file")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="per-case timeout")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    out.add_argument("--markdown", action="store_true", help="print an issue-ready bug report in Markdown")
    out.add_argument("--export", metavar="PATH", help="write a standalone torchrun script (imports only torch)")
    args = parser.parse_args(argv)
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout: must be > 0, got {args.timeout}")
    try:
        entry = corpus.load(args.file)
    except corpus.CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.export:
        return _export(args.file, entry, args.export)

    from parityfuzz.executor import Executor
    from parityfuzz.judge.verify import verify_case, locate

    quiet = args.json or args.markdown
    if not quiet:
        print(describe_case(entry.case))
        print(f"expectation: {entry.expect}" + (f" ({entry.known_issue or entry.note})" if entry.expect == "fail" else ""))
        print("running ...", flush=True)
    with Executor(timeout_s=args.timeout) as executor:
        verdict = locate(entry.case, executor, verify_case(entry.case, executor))
    if args.json:
        print(json.dumps({"file": args.file, "case_id": entry.case.case_id(), "expect": entry.expect,
                          "verdict": verdict.to_dict()}))
    elif args.markdown:
        from parityfuzz.executor import auto_backend

        print(markdown_report(args.file, entry, verdict, auto_backend(entry.case.world_size)))
    else:
        print(f"verdict: {verdict.describe()}")
        for line in known_bug_lines(entry.case, verdict):
            print(line)
        if verdict.origin is not None:
            print(f"the mismatch {verdict.origin.describe()}")
        for r in verdict.ranks:
            text = r.get("traceback") or r.get("log")
            if text:
                print(f"--- rank {r['rank']} ({r.get('status')}) ---\n{text.rstrip()}")
    return 0 if verdict.ok else 1


def _export(path: str, entry: corpus.Entry, target: str) -> int:
    from pathlib import Path

    from parityfuzz.export import ExportError, export

    try:
        script = export(entry.case, source=path)
    except ExportError as e:
        print(f"error: {path}: {e}", file=sys.stderr)
        return 2
    Path(target).parent.mkdir(parents=True, exist_ok=True)  # as a user names it: a new folder of reproducers
    Path(target).write_text(script)
    print(f"wrote {target}: torchrun --nproc-per-node={entry.case.world_size} {target}")
    return 0


def markdown_report(path: str, entry: corpus.Entry, verdict, backend: str) -> str:
    """A bug report in Markdown for the case of ``entry`` and the ``verdict`` it just got."""
    import platform

    import torch

    from parityfuzz import __version__

    case = entry.case
    first = next((r for r in verdict.ranks if r.get("traceback") or r.get("log")), None)
    lines = [
        f"### {case.family}: {verdict.describe()}",
        "",
        f"Found by parityfuzz {__version__}: `{path}` (case {case.case_id()}).",
        "",
        f"- torch {torch.__version__}, Python {platform.python_version()}, {platform.system()} "
        f"{platform.machine()}; backend {backend}, world size {case.world_size}",
        f"- verdict: **{verdict.kind}** (`{verdict.bug_signature()}`)",
    ]
    if verdict.origin is not None:
        lines.append(f"- where it {verdict.origin.describe()}")
    if entry.expect == "fail" and entry.known_issue:
        lines.append(f"- known issue: {entry.known_issue}")
    lines += [f"- {line}" for line in known_bug_lines(case, verdict)]
    if entry.note:
        lines += ["", f"> {entry.note}"]
    from parityfuzz.export import refusal

    lines += ["", "The case (model tree with its parallel plan; training below it):", "", "```text",
              describe_case(case), "```", "", "To reproduce:", "", "```sh",
              f"parityfuzz repro {path}", "```"]
    if refusal(case) is None:
        lines += ["", "Or without parityfuzz (the script imports only torch):", "", "```sh",
                  f"parityfuzz export {path} -o repro.py",
                  f"torchrun --nproc-per-node={case.world_size} repro.py", "```"]
    if first is not None:
        text = (first.get("traceback") or first.get("log")).rstrip()
        lines += ["", f"<details><summary>rank {first['rank']} ({first.get('status')})</summary>", "", "```text",
                  text[-4000:], "```", "", "</details>"]
    lines += ["", "<details><summary>case JSON</summary>", "", "```json", case.to_json(indent=2), "```", "",
              "</details>"]
    return "\n".join(lines)


def known_bug_lines(case, verdict) -> list[str]:
    """What the known-bug record that explains ``verdict`` says of it (nothing where none does): its id and title,
    the torch promise it breaks, its upstream report, whether the API is public, its kind."""
    from parityfuzz.triage import KNOWN_BUG, explain

    why = explain(case, verdict) if not verdict.ok else None
    if why is None or why.kind != KNOWN_BUG:
        return []
    bug = why.bug
    upstream = bug.upstream.status + (f" ({', '.join(bug.upstream.links)})" if bug.upstream.links else "")
    return [f"known torch bug {bug.id}: {bug.title} ({bug.kind}; API {bug.api})", f"torch promises: {bug.violates}",
            f"upstream: {upstream}: {bug.upstream.notes}"]

if __name__ == "__main__":
    sys.exit(main())
