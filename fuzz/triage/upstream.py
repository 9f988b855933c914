"""Drafts a maintainer files as they are: for each known-bug record that no upstream issue reports, one Markdown
bug report in PyTorch's form, built around the record's short torch-only script.

    parityfuzz upstream [--record ID ...] -o DIR [--no-run] [--timeout S]

A record's script is ``corpus/upstream/<id>.py`` beside the known-bug file: a few dozen lines that import only
torch, build the smallest model, apply the plan, train and print the two numbers or the error, exiting 1 where
the bug shows (tests/test_upstream.py runs each under torchrun on the pinned torch, so a draft never goes stale
silently).  Its docstring names the command (``torchrun --nproc-per-node=N``).  The draft holds the title, the
summary, the script, its output on this machine's torch (unless ``--no-run``), what torch documents (the
record's ``violates``), the mechanism read in torch's source with its locations, the related reports, and
``python -m torch.utils.collect_env``.  A record without a script is listed, not drafted: exit 1 then.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from parityfuzz.triage.known import DEFAULT_PATH, KnownBug, load

#: Where each record's torch-only script lives: ``<id>.py``.
SCRIPTS = DEFAULT_PATH.parent / "upstream"
#: Lines of a script's output a draft keeps (its last ones).
OUTPUT_LINES = 40


def script_path(bug: KnownBug, scripts: Path = SCRIPTS) -> Path:
    return scripts / f"{bug.id}.py"


def world_size(script: str) -> int:
    """The rank count the script's docstring runs it with (``torchrun --nproc-per-node=N``)."""
    m = re.search(r"--nproc-per-node[= ](\d+)", script)
    if not m:
        raise ValueError("the script's docstring names no 'torchrun --nproc-per-node=N' command")
    return int(m.group(1))


def run_script(path: Path, timeout_s: float = 300.0) -> tuple[int, str]:
    """Run ``path`` under torchrun at its world size; its exit code and its standard output (torchrun's own
    messages and the ranks' tracebacks go to standard error)."""
    nproc = world_size(path.read_text())
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", str(path)],
                          capture_output=True, text=True, timeout=timeout_s)
    return done.returncode, done.stdout


def collect_env() -> str:
    return subprocess.run([sys.executable, "-m", "torch.utils.collect_env"], capture_output=True, text=True,
                          timeout=300).stdout.strip()


def _unwrapped(text: str) -> str:
    """A record's text field as one paragraph (the TOML continuations already joined it; runs of spaces folded)."""
    return re.sub(r"\s+", " ", text).strip()


def draft(bug: KnownBug, script: str, run: tuple[int, str] | None, versions: str) -> str:
    """The Markdown bug report for ``bug``: ``run`` is the script's (exit code, output), None where not run."""
    nproc = world_size(script)
    lines = [f"# {bug.title}", "", "### 🐛 Describe the bug", "", _unwrapped(bug.summary).replace(
        " (found by parityfuzz)", ""), "",
             f"The script below imports only torch; run it with `torchrun --nproc-per-node={nproc} repro.py` "
             "(CPU, gloo). It exits 1 where the bug shows and 0 where it behaves as documented.", "",
             "```python", script.rstrip(), "```", ""]
    if run is not None:
        rc, output = run
        tail = "\n".join(output.strip().splitlines()[-OUTPUT_LINES:])
        lines += [f"Output (exit code {rc}):", "", "```", tail or "(nothing printed)", "```", ""]
    lines += ["**Expected behaviour** (what torch documents): " + _unwrapped(bug.violates), "",
              "**Where it comes from** (read in torch's source): " + _unwrapped(bug.mechanism), ""]
    lines += [f"- `{where}`" for where in bug.source] + [""]
    if bug.upstream.links:
        lines += ["Related: " + ", ".join(bug.upstream.links), ""]
    lines += ["Found by parityfuzz, a randomized parity fuzzer for torch.distributed; the script above was written "
              "apart from it.", "", "### Versions", "", "```", versions, "```", ""]
    return "\n".join(lines)


def unreported(bugs: tuple[KnownBug, ...]) -> list[KnownBug]:
    """The records no upstream issue reports (every status but ``reported``)."""
    return [b for b in bugs if b.upstream.status != "reported"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="parityfuzz upstream", description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="append", metavar="ID", help="only these records (repeatable)")
    parser.add_argument("-o", "--output", required=True, type=Path, metavar="DIR")
    parser.add_argument("--no-run", action="store_true", help="leave out the scripts' output (no torchrun)")
    parser.add_argument("--timeout", type=float, default=300.0, metavar="S", help="per script (default 300)")
    parser.add_argument("--known-bugs", type=Path, default=DEFAULT_PATH)
    args = parser.parse_args(argv)
    bugs = load(args.known_bugs)
    if args.record:
        unknown = sorted(set(args.record) - {b.id for b in bugs})
        if unknown:
            parser.error(f"--record: no record {', '.join(unknown)} in {args.known_bugs}")
        bugs = tuple(b for b in bugs if b.id in args.record)
    scripts = args.known_bugs.parent / "upstream"
    chosen = unreported(bugs)
    missing = [b for b in chosen if not script_path(b, scripts).is_file()]
    drafted = [b for b in chosen if b not in missing]
    args.output.mkdir(parents=True, exist_ok=True)
    versions = collect_env() if drafted else ""
    for bug in drafted:
        path = script_path(bug, scripts)
        run = None if args.no_run else run_script(path, args.timeout)
        (args.output / f"{bug.id}.md").write_text(draft(bug, path.read_text(), run, versions))
        print(f"{args.output / (bug.id + '.md')}" + ("" if run is None else f" (its script exited {run[0]})"))
    for bug in missing:
        print(f"no torch-only script yet ({script_path(bug, scripts).relative_to(scripts.parent.parent)}): "
              f"{bug.id}", file=sys.stderr)
    print(f"{len(drafted)} of {len(chosen)} unreported records drafted", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
