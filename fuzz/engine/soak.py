"""Soak rounds: a failure found earlier in the run is not shrunk again when it shows up in a later round.

A later failure counts as already found only when it fails the same way (:meth:`Verdict.bug_signature`) as
an earlier shrunk failure and the case has every feature that failure's case has beyond the simplest case
(its :func:`precondition`, never empty).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, Verbosity, find, settings
from hypothesis import strategies as st

from parityfuzz.case import Case
from parityfuzz.verdict import PASS, Verdict


def simplest_features(strategy: st.SearchStrategy[Case]) -> frozenset[str]:
    """The features of the case every draw shrinks toward (world size 2, one Linear, defaults)."""
    quiet = settings(database=None, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
                     verbosity=Verbosity.quiet)
    return find(strategy, lambda case: True, settings=quiet).features()


def precondition(case: Case, baseline: frozenset[str]) -> frozenset[str]:
    """What a shrunk failing case has beyond the simplest case: the features its bug needs (as far as the
    shrinker could tell)."""
    return case.features() - baseline


@dataclass(frozen=True)
class Found:
    """A failure found earlier in a soak run: what its shrunk case needs beyond the simplest case, what kind
    of failure it is, and where it was written."""

    precondition: frozenset[str]
    bug_signature: str
    corpus_file: str


def already_found(case: Case, verdict: Verdict, found_before: list[Found]) -> Verdict:
    """A failure of the same kind as one found earlier in the run, in a case meeting that failure's (non-empty)
    precondition, as a pass saying which."""
    if verdict.ok:
        return verdict
    features = case.features()
    signature = verdict.bug_signature()
    for f in found_before:
        if f.precondition and f.precondition <= features and f.bug_signature == signature:
            return Verdict(PASS, note=f"already found in this run: {signature}, a case with "
                                      f"{', '.join(sorted(f.precondition))} like {f.corpus_file}")
    return verdict


