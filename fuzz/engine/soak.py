"""Soak rounds: what a failure found in one round needs, so that later rounds count it as already found
(:class:`parityfuzz.triage.Found`, decided by :func:`parityfuzz.triage.explain`) instead of shrinking it again:
the features of its shrunk case beyond the simplest case's (never empty).
"""

from __future__ import annotations

from hypothesis import HealthCheck, Verbosity, find, settings
from hypothesis import strategies as st

from parityfuzz.case import Case


def simplest_features(strategy: st.SearchStrategy[Case]) -> frozenset[str]:
    """The features of the case every draw shrinks toward (world size 2, one Linear, defaults)."""
    quiet = settings(database=None, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
                     verbosity=Verbosity.quiet)
    return find(strategy, lambda case: True, settings=quiet).features()


def precondition(case: Case, baseline: frozenset[str]) -> frozenset[str]:
    """What a shrunk failing case has beyond the simplest case: the features its bug needs (as far as the
    shrinker could tell)."""
    return case.features() - baseline
