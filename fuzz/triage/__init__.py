"""Triage: one answer to "is this failure already explained, and by what?".

:func:`explain` is the only place that decides it, for the fuzzer (judging and shrinking), its soak rounds, the
corpus replay, ``parityfuzz repro`` and the report.  The answer is an :class:`Explanation`, in this order:

- a **known torch bug** (:mod:`.known`, the records of ``corpus/known_bugs.toml``): the case meets the bug's
  precondition and the failure has one of its signatures;
- **already found in this run** (a :class:`Found` of an earlier soak round): the same kind of failure
  (:meth:`Verdict.bug_signature`) in a case with every feature the earlier shrunk case had beyond the simplest
  case (a precondition that is never empty);
- **in the corpus**: the very same case is already a corpus file (which, and whether a person triaged it);
- **new**.

Only the first two silence a failure; a corpus file that is not triaged yet, or a case failing with a
look-alike signature, never does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from parityfuzz.case import Case
from parityfuzz.judge.verdict import Verdict
from parityfuzz.triage.known import KnownBug, known_bug

KNOWN_BUG = "known bug"
FOUND_IN_RUN = "found in this run"
IN_CORPUS = "in the corpus"
NEW = "new"


@dataclass(frozen=True)
class Found:
    """A failure found earlier in a soak run: what its shrunk case needs beyond the simplest case, what kind
    of failure it is, and where it was written."""

    precondition: frozenset[str]
    bug_signature: str
    corpus_file: str

    def covers(self, features: frozenset[str], signature: str) -> bool:
        """Whether a failure of ``signature`` in a case with ``features`` is this one seen again."""
        return bool(self.precondition) and self.precondition <= features and self.bug_signature == signature


@dataclass(frozen=True)
class Explanation:
    """What explains a failure (:data:`KNOWN_BUG`, :data:`FOUND_IN_RUN`, :data:`IN_CORPUS` or :data:`NEW`) and
    which one: the bug record, the earlier finding, or the corpus file (with its ``known_issue``, if triaged)."""

    kind: str
    signature: str
    bug: KnownBug | None = None
    found: Found | None = None
    corpus_file: Path | None = None
    known_issue: str | None = None

    @property
    def silences(self) -> bool:
        """Whether the failure counts as passing: a known bug, or one this run already found and shrank."""
        return self.kind in (KNOWN_BUG, FOUND_IN_RUN)

    def label(self) -> str:
        """What the run summary counts it under (the same for every case of one bug)."""
        if self.kind == KNOWN_BUG:
            return f"known torch bug, {self.bug.title}"
        if self.kind == FOUND_IN_RUN:
            return f"already found in this run, like {self.found.corpus_file}"
        return self.kind

    def describe(self) -> str:
        if self.kind == KNOWN_BUG:
            return f"known torch bug {self.bug.id} ({self.bug.title}): {self.signature}"
        if self.kind == FOUND_IN_RUN:
            return (f"already found in this run: {self.signature}, a case with "
                    f"{', '.join(sorted(self.found.precondition))} like {self.found.corpus_file}")
        if self.kind == IN_CORPUS:
            return f"the same case is {self.corpus_file}" + (
                f" (known issue: {self.known_issue})" if self.known_issue else " (not triaged yet)")
        return f"new: {self.signature}"


def explain(case: Case, verdict: Verdict, found_before: tuple[Found, ...] | list[Found] = (),
            corpus_dir: Path | str | None = None, bugs: tuple[KnownBug, ...] | None = None) -> Explanation:
    """What explains the failure ``verdict`` of ``case`` (see the module's docstring for the order).  ``bugs``
    replaces the shipped records (tests); ``corpus_dir`` is looked in for the very same case."""
    if verdict.ok:
        raise ValueError(f"explain() takes a failure, not {verdict.describe()}")
    signature = verdict.bug_signature()
    bug = known_bug(case, verdict, bugs)
    if bug is not None:
        return Explanation(KNOWN_BUG, signature, bug=bug)
    features = case.features() if found_before else frozenset()
    found = next((f for f in found_before if f.covers(features, signature)), None)
    if found is not None:
        return Explanation(FOUND_IN_RUN, signature, found=found)
    if corpus_dir is not None:
        from parityfuzz.triage import corpus

        entry = corpus.existing(corpus_dir, case)
        if entry is not None:
            return Explanation(IN_CORPUS, signature, corpus_file=entry.path, known_issue=entry.known_issue)
    return Explanation(NEW, signature)


__all__ = ["FOUND_IN_RUN", "IN_CORPUS", "KNOWN_BUG", "NEW", "Explanation", "Found", "KnownBug", "explain"]
