"""The ``parityfuzz`` command: thin over the pytest plugin and :mod:`parityfuzz.frontends.repro`.

    parityfuzz fuzz [PYTEST OPTIONS]       fuzz every family's target (pytest; e.g. --fuzz-budget=600 -k fsdp2)
    parityfuzz replay [PYTEST OPTIONS]     replay the corpus as a regression suite (--corpus-dir=DIR)
    parityfuzz repro FILE [--json | --markdown] [--timeout S]
    parityfuzz export FILE -o repro.py     a standalone torchrun script that imports only torch
    parityfuzz report RUN.json -o report.html
    parityfuzz upstream -o drafts/ [--record ID] [--no-run]   bug-report drafts of the unreported known bugs
    parityfuzz versions run | table [--write]   the corpus replayed on the installed torch; the table of versions

``fuzz`` and ``replay`` run pytest over the fuzz targets shipped in the package, from the current directory
(its ``corpus/`` unless ``--corpus-dir`` says otherwise; its pytest configuration), and take every option
pytest and the plugin take; exit codes are pytest's.  The others exit as ``python -m parityfuzz.frontends.repro`` does
(0 pass, 1 a finding, 2 bad input).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # the package root, where the fuzz targets are
#: The corpus replay, which ``fuzz`` leaves out and ``replay`` runs alone.
REPLAY = "test_corpus.py"


def targets() -> list[str]:
    """The fuzz targets shipped in the package (one per family, and the checkpoint events')."""
    return [str(p) for p in sorted(PACKAGE.glob("test_*.py")) if p.name != REPLAY]


def _pytest(paths: list[str], args: list[str]) -> int:
    import pytest

    rootdir = [] if any(a == "--rootdir" or a.startswith("--rootdir=") for a in args) else [f"--rootdir={Path.cwd()}"]
    return int(pytest.main([*rootdir, *paths, *args]))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="parityfuzz", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("fuzz", help="fuzz every family (pytest options pass through)", add_help=False)
    commands.add_parser("replay", help="replay the corpus (pytest options pass through)", add_help=False)
    repro = commands.add_parser("repro", help="run one case file and explain it")
    repro.add_argument("file")
    repro.add_argument("--timeout", metavar="SECONDS")
    out = repro.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true")
    out.add_argument("--markdown", action="store_true")
    export = commands.add_parser("export", help="write a case as a standalone torchrun script")
    export.add_argument("file")
    export.add_argument("-o", "--output", required=True, metavar="PATH")
    report = commands.add_parser("report", help="render a run's JSON report as a self-contained HTML page")
    report.add_argument("run", metavar="RUN.json")
    report.add_argument("-o", "--output", required=True, metavar="PATH")
    commands.add_parser("upstream", help="write bug-report drafts of the known bugs no upstream issue reports",
                        add_help=False)
    commands.add_parser("versions", help="replay the corpus on the installed torch; the table of torch versions",
                        add_help=False)
    if argv and argv[0] in ("upstream", "versions"):  # everything after the command is its own
        from parityfuzz.triage import upstream, versions

        return {"upstream": upstream, "versions": versions}[argv[0]].main(argv[1:])
    if argv and argv[0] in ("fuzz", "replay"):  # everything after the command is pytest's
        paths = targets() if argv[0] == "fuzz" else [str(PACKAGE / REPLAY)]
        return _pytest(paths, argv[1:])
    args = parser.parse_args(argv)
    from parityfuzz.frontends import repro as repro_module

    if args.command == "repro":
        rest = [args.file] + (["--timeout", args.timeout] if args.timeout else [])
        rest += ["--json"] if args.json else ["--markdown"] if args.markdown else []
        return repro_module.main(rest)
    if args.command == "export":
        return repro_module.main([args.file, "--export", args.output])
    from parityfuzz.frontends import report as report_module

    return report_module.main([args.run, "-o", args.output])


if __name__ == "__main__":
    sys.exit(main())
