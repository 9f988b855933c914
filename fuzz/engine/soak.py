"""Soak rounds: what a failure found in one round needs, so that later rounds count it as already found
(:class:`parityfuzz.triage.Found`, decided by :func:`parityfuzz.triage.explain`) instead of shrinking it again:
the features of its shrunk case beyond the simplest case's (never empty), made general where two rounds showed one
of them incidental (:func:`remember`).
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, Verbosity, find, settings
from hypothesis import strategies as st

from parityfuzz.case import Case
from parityfuzz.triage import Found


def simplest_features(strategy: st.SearchStrategy[Case]) -> frozenset[str]:
    """The features of the case every draw shrinks toward (world size 2, one Linear, defaults): the first case of a
    derandomized generation, whose choices are all the simplest (Hypothesis's generation starts there).  Asked
    of the shrinker instead, ``find`` took 7-10 s per target for the same case (its passes trying hundreds of
    draws below a minimum they cannot pass), in every round that found a failure."""
    quiet = settings(database=None, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
                     verbosity=Verbosity.quiet, phases=[Phase.generate], max_examples=1)
    return find(strategy, lambda case: True, settings=quiet).features()


def precondition(case: Case, baseline: frozenset[str]) -> frozenset[str]:
    """What a shrunk failing case has beyond the simplest case: the features its bug needs (as far as the
    shrinker could tell)."""
    return case.features() - baseline


def axis(feature: str) -> str:
    """The dimension a feature tag is a value of: ``wrapped`` for ``wrapped=2``, the tag itself for a flag."""
    return feature.partition("=")[0]


def remember(found: list[Found], new: Found) -> list[Found]:
    """The findings of a run once ``new`` is added: where an earlier finding of the same kind of failure needs
    what ``new`` needs but along one dimension (another value of one feature, or one flag more or less), that
    dimension is incidental (two 1-minimal failing cases differ only there) and the earlier finding's
    precondition drops it, so later rounds do not find the same bug again once per value of every incidental
    dimension (one 30-minute run wrote 16 reduced cases of one bug, varying compile form, wrapping count and
    an uneven shard).  Kinds of failure, and cases differing along two dimensions or more, stay apart; a
    precondition is never made empty."""
    for i, old in enumerate(found):
        if old.bug_signature != new.bug_signature:
            continue
        differ = {axis(f) for f in old.precondition ^ new.precondition}
        common = old.precondition & new.precondition
        if len(differ) == 1 and common:
            return [*found[:i], Found(common, old.bug_signature, old.corpus_file), *found[i + 1:]]
    return [*found, new]
