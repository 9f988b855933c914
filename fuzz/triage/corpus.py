"""The corpus: one readable JSON file per case, named by the case's content hash.

``corpus/<family>/<case id>.json`` (a plug-in system under test: ``corpus/<system>/``) holds::

    {"corpus_format": 1, "id": ..., "expect": "fail" | "pass", "known_issue": ..., "note": ...,
     "verdict": {...}, "torch_version": ..., "parityfuzz_version": ..., "found": ISO date,
     "case": {...}}

``expect: pass`` means the case must match its reference; ``fail`` marks a known
open bug (replayed as xfail).  Files are written atomically (a temporary file in
the same directory, then a rename), so a kill at any instant leaves the old file
or the new one, never half of one.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from parityfuzz import __version__
from parityfuzz.case import Case, CaseError
from parityfuzz.judge.verdict import VERDICT_KINDS, Verdict

CORPUS_FORMAT = 1
EXPECTATIONS = ("pass", "fail")
_FIELDS = {"corpus_format", "id", "expect", "known_issue", "note", "verdict", "torch_version",
           "parityfuzz_version", "found", "case"}


class CorpusError(ValueError):
    """A corpus file is unreadable or malformed; the message names the file and the field."""

    def __init__(self, path: Path | str, field: str, message: str):
        self.path, self.field = str(path), field
        super().__init__(f"{path}: {field + ': ' if field else ''}{message}")


@dataclass(frozen=True)
class Entry:
    path: Path
    case: Case
    expect: str
    verdict: Verdict | None = None
    known_issue: str | None = None
    note: str = ""


def case_dir(case: Case) -> str:
    """The corpus folder of a case: its family's, or for a plug-in system under test that system's own."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", case.system or case.family)


def entry_path(corpus_dir: Path | str, case: Case) -> Path:
    return Path(corpus_dir) / case_dir(case) / f"{case.case_id()}.json"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record(corpus_dir: Path | str, case: Case, verdict: Verdict, expect: str = "fail",
           note: str = "", known_issue: str | None = None) -> Path:
    """Write ``case`` with its verdict; an existing file for the same case is kept as it is."""
    import torch

    path = entry_path(corpus_dir, case)
    if path.exists():
        return path
    doc = {
        "corpus_format": CORPUS_FORMAT,
        "id": case.case_id(),
        "expect": expect,
        "known_issue": known_issue,
        "note": note,
        "verdict": verdict.to_dict(),
        "torch_version": torch.__version__,
        "parityfuzz_version": __version__,
        "found": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "case": case.to_dict(),
    }
    write_atomic(path, json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path


def existing(corpus_dir: Path | str, case: Case) -> Entry | None:
    """The corpus entry for this very case (same content hash), if there is a readable one.

    Only the same case counts: another case that fails with a look-alike signature may be another bug, and
    is written and reported on its own (an entry silences a failure only through ``parityfuzz.known``).
    """
    path = entry_path(corpus_dir, case)
    if not path.exists():
        return None
    try:
        return load(path)
    except CorpusError:
        return None


def load(path: Path | str) -> Entry:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise CorpusError(path, "", f"cannot read: {e.strerror}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise CorpusError(path, "", f"not valid JSON (truncated?): {e}") from None
    if not isinstance(doc, dict):
        raise CorpusError(path, "", "expected a JSON object")
    if "case" not in doc and "schema" in doc:
        doc = {"corpus_format": CORPUS_FORMAT, "expect": "pass", "case": doc}  # a bare case file
    unknown = sorted(set(doc) - _FIELDS)
    if unknown:
        raise CorpusError(path, unknown[0], f"unknown field (known: {', '.join(sorted(_FIELDS))})")
    if doc.get("corpus_format") != CORPUS_FORMAT:
        raise CorpusError(path, "corpus_format", f"expected {CORPUS_FORMAT}, got {doc.get('corpus_format')!r}")
    expect = doc.get("expect", "pass")
    if expect not in EXPECTATIONS:
        raise CorpusError(path, "expect", f"must be 'pass' or 'fail', got {expect!r}")
    if "case" not in doc:
        raise CorpusError(path, "case", "missing required field")
    try:
        case = Case.from_dict(doc["case"]).validate()
    except CaseError as e:
        raise CorpusError(path, f"case.{e.field}" if e.field else "case", e.message) from None
    verdict = None
    if doc.get("verdict") is not None:
        v = doc["verdict"]
        if not isinstance(v, dict) or v.get("kind") not in VERDICT_KINDS:
            raise CorpusError(path, "verdict.kind", f"must be one of {VERDICT_KINDS}")
        try:
            verdict = Verdict.from_dict(v)
        except TypeError as e:
            raise CorpusError(path, "verdict", str(e)) from None
    return Entry(path=path, case=case, expect=expect, verdict=verdict,
                 known_issue=doc.get("known_issue"), note=doc.get("note") or "")


#: The folder of a corpus that holds the results of replaying it on each torch version
#: (:mod:`parityfuzz.triage.versions`), not cases.
VERSIONS_DIR = "versions"


def discover(corpus_dir: Path | str) -> list[Path]:
    """Every ``*.json`` file below ``corpus_dir`` (sorted), temporary files and the versions folder's results
    (:data:`VERSIONS_DIR`) excluded."""
    root = Path(corpus_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*.json")
                  if not p.name.startswith(".") and p.relative_to(root).parts[0] != VERSIONS_DIR)
