"""The fuzz targets by name: one per registered family (:func:`parityfuzz.families.records`) and the checkpoint
round trip.  The pytest targets (``fuzz/test_*.py``) name theirs in their ``fuzz_target`` marker, so that a run's
schedule (:mod:`parityfuzz.engine.schedule`) can give any of them the next slice; the benchmark draws from the
same list."""

from __future__ import annotations

from hypothesis import strategies as st

from parityfuzz import families
from parityfuzz.case import Case

CHECKPOINT = "checkpoint"


def names() -> list[str]:
    return [f.name for f in families.records()] + [CHECKPOINT]


def maker(name: str):
    """``world_sizes -> strategy`` of target ``name`` (what a ``fuzz_target`` marker or ``run_target`` takes)."""
    return lambda world_sizes: strategy(name, world_sizes)


def strategy(name: str, world_sizes: tuple[int, ...], system: str = "") -> st.SearchStrategy[Case]:
    """The cases of target ``name`` on ``world_sizes`` ranks (``system``: a system under test of the family's own,
    e.g. a test fault)."""
    if name == CHECKPOINT:
        from parityfuzz.strategies.checkpoint import checkpointed_cases

        return checkpointed_cases(world_sizes=world_sizes, system=system)
    if name not in names():
        raise KeyError(f"no fuzz target {name!r}: the targets are {', '.join(names())}")
    from parityfuzz.strategies import cases

    return cases(family=name, world_sizes=world_sizes, system=system)
