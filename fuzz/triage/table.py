"""The tables of known torch bugs in ``docs/known-bugs.md``, generated from ``corpus/known_bugs.toml``.

Each table sits in ``docs/known-bugs.md`` between ``<!-- known-bugs:<table>:start -->`` and
``<!-- known-bugs:<table>:end -->``.  ``python -m parityfuzz.triage.table`` prints them; ``--write`` puts them into
that file (``--doc`` names another); ``--check`` exits 1 where the file differs from the data (a test runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from parityfuzz.triage.known import DEFAULT_PATH, BUG_KINDS, TABLES, KnownBug, load

#: The Markdown file holding the tables (the reference pages the README links to live in ``docs/``).
DOC = DEFAULT_PATH.parents[1] / "docs" / "known-bugs.md"


def render(bugs: tuple[KnownBug, ...], table: str) -> str:
    """The markdown table of ``bugs`` listed in ``table``: the most serious kind first (:data:`BUG_KINDS`), each kind
    in the file's order."""
    rows = ["| kind | bug | upstream | corpus files |", "|---|---|---|---|"]
    for b in sorted((b for b in bugs if b.table == table), key=lambda b: BUG_KINDS.index(b.kind)):
        links = ", ".join(_link(x) for x in b.upstream.links)
        upstream = b.upstream.status + (f": {links}" if links else "") + (f"; fixed in {b.fixed_in}" if b.fixed_in else "")
        files = ", ".join(f"`{f.removesuffix('.json')}`" for f in b.files)
        rows.append(f"| {b.kind} | {b.summary} | {upstream} | {files} |")
    return "\n".join(rows)


def _link(ref: str) -> str:
    repo, number = ref.split("#")
    return f"[{repo.split('/')[-1]}#{number}](https://github.com/{repo}/issues/{number})"


def _markers(table: str) -> tuple[str, str]:
    return f"<!-- known-bugs:{table}:start -->", f"<!-- known-bugs:{table}:end -->"


def replace_section(readme: str, start: str, end: str, body: str) -> str:
    """``readme`` with what lies between the marker lines ``start`` and ``end`` replaced by ``body`` (ValueError
    where a marker is missing)."""
    pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.S)
    if not pattern.search(readme):
        raise ValueError(f"the document has no {start} ... {end} section")
    return pattern.sub(lambda _: f"{start}\n{body}\n{end}", readme)


def write_or_check(readme: Path, new: str, check: bool, stale: str) -> int:
    """Write ``new`` into ``readme`` (0), or with ``check`` say whether it already holds it (0, or 1 printing
    ``stale``)."""
    if not check:
        readme.write_text(new)
        return 0
    if new != readme.read_text():
        print(f"{readme}: {stale}", file=sys.stderr)
        return 1
    return 0


def updated(readme: str, bugs: tuple[KnownBug, ...]) -> str:
    """``readme`` with every table replaced by the one the data gives (ValueError where a marker is missing)."""
    for table in TABLES:
        readme = replace_section(readme, *_markers(table), render(bugs, table))
    return readme


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parityfuzz.triage.table", description=__doc__.split("\n")[0])
    parser.add_argument("--known-bugs", type=Path, default=DEFAULT_PATH, help="the known-bug file")
    parser.add_argument("--doc", "--readme", dest="doc", type=Path, default=DOC,
                        help="the Markdown file holding the tables (default: docs/known-bugs.md)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="put the tables into the --doc file")
    action.add_argument("--check", action="store_true", help="exit 1 where the --doc file's tables differ")
    args = parser.parse_args(argv)
    bugs = load(args.known_bugs)
    if not (args.write or args.check):
        print("\n\n".join(render(bugs, t) for t in TABLES))
        return 0
    return write_or_check(args.doc, updated(args.doc.read_text(), bugs), args.check,
                          f"the known-bug tables differ from {args.known_bugs}: run python -m "
                          "parityfuzz.triage.table --write")


if __name__ == "__main__":
    sys.exit(main())
