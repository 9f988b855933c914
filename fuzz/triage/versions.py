"""The corpus on several torch versions: which known bugs each one still has, and whether a passing file regressed.

    parityfuzz versions run [-o DIR] [--corpus-dir DIR] [--timeout S] [-k TEXT]
    parityfuzz versions table [DIR] [--write | --check]

``run`` replays every corpus file on the installed torch (the one whose Python runs the command) and writes
``DIR/torch-<version>.json`` (default DIR: ``corpus/versions``), one entry per file: its expectation, the record that
lists it, its outcome (:mod:`parityfuzz.triage.replay`: passes, fails as recorded, fails otherwise, or a regression of
an ``expect: pass`` file), the verdict's signature and seconds.  The file is rewritten after every case, so an
interrupted run keeps what it replayed; ``-k`` replays only the files whose path contains TEXT, updating their
entries in an existing results file and keeping the others.

``table`` reads every results file in DIR and renders one Markdown table, a row per known-bug record and a column per
torch version (the oldest first), then the ``expect: pass`` files that fail on some version; ``--write`` puts it in
``docs/known-bugs.md`` (``--doc`` names another file) between ``<!-- versions:start -->`` and
``<!-- versions:end -->``, ``--check`` exits 1 where that file differs.  Exit codes: 0 done, 1 ``--check`` found a
difference, 2 bad input.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

from parityfuzz.triage import corpus, replay
from parityfuzz.triage.known import DEFAULT_PATH, KnownBug, shipped, version_key
from parityfuzz.triage.table import replace_section, write_or_check

CORPUS = DEFAULT_PATH.parent
RESULTS = CORPUS / corpus.VERSIONS_DIR
#: The Markdown file holding the table (the reference pages the README links to live in ``docs/``).
DOC = DEFAULT_PATH.parents[1] / "docs" / "known-bugs.md"
MARKERS = ("<!-- versions:start -->", "<!-- versions:end -->")

#: A record's outcome on one version, from its files' outcomes.
FIXED = "passes (fixed)"
PARTLY = "partly fixed"


def results_path(directory: Path, torch_version: str) -> Path:
    return directory / f"torch-{torch_version}.json"


def run(corpus_dir: Path, out_dir: Path, timeout_s: float | None = None, only: str = "",
        log=print) -> Path:
    """Replay the corpus at ``corpus_dir`` on the installed torch; the results file written."""
    import torch

    from parityfuzz import __version__
    from parityfuzz.executor import Executor
    from parityfuzz.judge.verify import verify_case

    files = [p for p in corpus.discover(corpus_dir) if only in str(p.relative_to(corpus_dir))]
    path = results_path(out_dir, torch.__version__)
    doc = {"torch": torch.__version__, "parityfuzz": __version__, "python": sys.version.split()[0],
           "date": datetime.date.today().isoformat(), "files": {}}
    if only and path.exists():  # a partial replay updates the results file's other entries, keeps them
        doc["files"] = json.loads(path.read_text())["files"]
    bugs = shipped()
    with Executor() as executor:
        for i, file in enumerate(files, 1):
            name = str(file.relative_to(corpus_dir))
            entry = corpus.load(file)
            began = time.monotonic()
            verdict = verify_case(entry.case, executor, replay.timeout_for(entry, timeout_s))
            result = replay.outcome(entry, verdict)
            record = next((b.id for b in bugs if b.lists(file)), None)
            doc["files"][name] = {"expect": entry.expect, "record": record, "outcome": result,
                                  "signature": None if verdict.ok else verdict.bug_signature(),
                                  "seconds": round(time.monotonic() - began, 1)}
            if result in (replay.FAILS_OTHERWISE, replay.REGRESSION):
                doc["files"][name]["description"] = verdict.describe()[:500]
            corpus.write_atomic(path, json.dumps(doc, indent=1) + "\n")
            log(f"[{i}/{len(files)}] {name}: {result} ({time.monotonic() - began:.1f}s)")
    return path


def load_results(directory: Path) -> list[dict]:
    """Every results file in ``directory``, the oldest torch first."""
    docs = []
    for p in sorted(directory.glob("torch-*.json")):
        try:
            doc = json.loads(p.read_text())
            doc["files"], doc["torch"]  # noqa: B018 (both required)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{p}: not a results file of 'parityfuzz versions run': {e}") from None
        docs.append(doc)
    return sorted(docs, key=lambda d: version_key(d["torch"]))


def record_outcome(outcomes: list[str]) -> str:
    """A record's outcome on one version from its files' (an empty list: not replayed there)."""
    if not outcomes:
        return "not replayed"
    if all(o == replay.FAILS_AS_RECORDED for o in outcomes):
        return replay.FAILS_AS_RECORDED
    if all(o == replay.PASSES for o in outcomes):
        return FIXED
    other = sum(o == replay.FAILS_OTHERWISE for o in outcomes)
    if other:
        return f"{replay.FAILS_OTHERWISE} ({other} of {len(outcomes)} files)"
    return f"{PARTLY} ({sum(o == replay.PASSES for o in outcomes)} of {len(outcomes)} files pass)"


def render(docs: list[dict], bugs: tuple[KnownBug, ...]) -> str:
    """The Markdown table of ``docs`` (results files, oldest torch first)."""
    versions = [d["torch"] for d in docs]
    rows = ["| record | kind | " + " | ".join(f"torch {v}" for v in versions) + " |",
            "|---|---|" + "---|" * len(versions)]
    for bug in bugs:
        cells = []
        for d in docs:
            outcomes = [f["outcome"] for f in d["files"].values() if f.get("record") == bug.id]
            missing = len(bug.files) - len(outcomes)
            cells.append(record_outcome(outcomes) + (f" ({missing} of {len(bug.files)} files not replayed)"
                                                     if outcomes and missing > 0 else ""))
        rows.append(f"| `{bug.id}` | {bug.kind} | " + " | ".join(cells) + " |")
    counts = []
    for d in docs:
        files = d["files"].values()
        fails = [f for f in files if f["expect"] == "fail"]
        counts.append(f"{sum(f['outcome'] == replay.FAILS_AS_RECORDED for f in fails)} of {len(fails)} fail as "
                      f"recorded; {sum(f['outcome'] == replay.PASSES for f in fails)} pass")
    rows.append("| *expect: fail files* | | " + " | ".join(counts) + " |")
    regressions = [f"- torch {d['torch']}: `{name}` ({f.get('description', f['signature'])})"
                   for d in docs for name, f in sorted(d["files"].items()) if f["outcome"] == replay.REGRESSION]
    passing = [f"{sum(f['expect'] == 'pass' for f in d['files'].values())} on torch {d['torch']}" for d in docs]
    tail = ["", f"`expect: pass` files replayed: {', '.join(passing)}; "
                + ("those that fail:" if regressions else "none fails.")] + regressions
    return "\n".join(rows + tail)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="parityfuzz versions", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_p = commands.add_parser("run", help="replay the corpus on the installed torch and write its results file")
    run_p.add_argument("-o", "--output", type=Path, default=RESULTS, metavar="DIR")
    run_p.add_argument("--corpus-dir", type=Path, default=CORPUS, metavar="DIR")
    run_p.add_argument("--timeout", type=float, default=None, metavar="S", help="per-case timeout")
    run_p.add_argument("-k", dest="only", default="", metavar="TEXT", help="only the files whose path contains TEXT")
    table_p = commands.add_parser("table", help="render the results files as one Markdown table")
    table_p.add_argument("directory", type=Path, nargs="?", default=RESULTS, metavar="DIR")
    table_p.add_argument("--doc", "--readme", dest="doc", type=Path, default=DOC,
                         help="the Markdown file holding the table (default: docs/known-bugs.md)")
    action = table_p.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="put the table into the --doc file")
    action.add_argument("--check", action="store_true", help="exit 1 where the --doc file's table differs")
    args = parser.parse_args(argv)
    if args.command == "run":
        if not args.corpus_dir.is_dir():
            parser.error(f"--corpus-dir: {str(args.corpus_dir)!r} is not a directory")
        if args.timeout is not None and args.timeout <= 0:
            parser.error(f"--timeout: must be > 0, got {args.timeout}")
        path = run(args.corpus_dir, args.output, args.timeout, args.only)
        print(f"wrote {path}")
        return 0
    try:
        docs = load_results(args.directory)
        if not docs:
            raise ValueError(f"{args.directory}: no torch-*.json results files (parityfuzz versions run writes them)")
        table = render(docs, shipped())
        if not (args.write or args.check):
            print(table)
            return 0
        new = replace_section(args.doc.read_text(), *MARKERS, table)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return write_or_check(args.doc, new, args.check,
                          f"the versions table differs from {args.directory}: run parityfuzz versions table --write")


if __name__ == "__main__":
    sys.exit(main())
