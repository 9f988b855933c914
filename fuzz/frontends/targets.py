"""The fuzz targets by name: one per registered family (:func:`parityfuzz.families.records`) and the checkpoint
round trip.  The pytest targets (``fuzz/test_*.py``) name theirs in their ``fuzz_target`` marker, so that a run's
schedule (:mod:`parityfuzz.engine.schedule`) can give any of them the next slice; the benchmark draws from the
same list."""

from __future__ import annotations

from hypothesis import strategies as st

from parityfuzz import families
from parityfuzz.case import Case

CHECKPOINT = "checkpoint"

#: Why the checkpoint target draws no loss scaling (:func:`parityfuzz.case.checkpoint.validate_checkpoint`).
NO_SCALER_IN_CHECKPOINTS = ("harness: the checkpoint keeps no GradScaler state (its scale after a skipped step), so a "
                            "loaded system would scale otherwise than the uninterrupted one")


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


def dimensions(name: str) -> dict[str, str]:
    """Every training-loop dimension (:data:`parityfuzz.case.dimensions.TABLE`) of target ``name``: ``""`` where it
    draws it, else why not (its family's reason, or the target's)."""
    from parityfuzz.case import dimensions as table
    from parityfuzz.case.checkpoint import checkpoint_families

    if name == CHECKPOINT:
        records = [families.get(f) for f in checkpoint_families()]
        out = {}
        for d in table.TABLE:
            reasons = [f"{r.name}: {r.unsupported[d.name]}" for r in records if d.name in r.unsupported]
            out[d.name] = "" if len(reasons) < len(records) else "; ".join(reasons)
        return {**out, "loss_scale": NO_SCALER_IN_CHECKPOINTS, "overflow": NO_SCALER_IN_CHECKPOINTS}
    record = families.get(name)
    return {d.name: record.unsupported.get(d.name, "") if not d.event else
            "the family targets train without checkpoint events: the checkpoint target draws them"
            for d in table.TABLE}
