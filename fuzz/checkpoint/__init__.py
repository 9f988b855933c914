"""A checkpoint event on a rank (:mod:`parityfuzz.case.checkpoint` says what a case asks for): the system under
test saves and loads the way the case names (:mod:`.dcp`, or the module a family's record names for its own ways), the reference through its trusted
path (:mod:`.trusted`), and the invariants every save and load must keep are checked (:mod:`.invariants`).

The family records map a way's name to the module that saves and loads it; :func:`save` and :func:`load` are
what the trainer calls.
"""

from __future__ import annotations

import importlib
import os

from parityfuzz.case import Case
from parityfuzz.case.checkpoint import ways

def _way(name: str, verb: str):
    """The save or load function of the way ``name`` (:func:`parityfuzz.case.checkpoint.ways`: its module)."""
    return getattr(importlib.import_module(ways()[name].module), f"{verb}_{name}")


def state_of(name: str):
    """How the snapshot reads the full state of a system that saves or loads the way ``name``: its module's
    ``state_<name>`` where it has one, else :func:`parityfuzz.checkpoint.invariants.full_state`."""
    from parityfuzz.checkpoint import invariants

    return getattr(importlib.import_module(ways()[name].module), f"state_{name}", invariants.full_state)


def save(system, case: Case, directory: str, trusted: bool = False) -> list[tuple]:
    """Save ``system``'s model, optimizer and LR scheduler into ``directory`` (made here): the case's way for
    the system under test, the trusted path for a reference.  The system under test also leaves a snapshot
    of its full state, which the load is checked against.  Returns the invariants the save broke
    (:func:`parityfuzz.checkpoint.invariants.take`)."""
    from parityfuzz.checkpoint import invariants, trusted as trusted_path

    os.makedirs(directory, exist_ok=True)
    invariants.take()
    if trusted:
        trusted_path.save(system, directory)
        return []
    invariants.save_snapshot(system, directory, state_of(case.checkpoint.save))
    _way(case.checkpoint.save, "save")(system, case, directory)
    trusted_path.save_scheduler(system, directory)
    return invariants.take()


def load(system, case: Case, directory: str, trusted: bool = False) -> list[tuple]:
    """Load what :func:`save` left in ``directory`` into a fresh ``system`` of the resumed case; for the system
    under test, check the loaded state against the saved snapshot.  Returns the invariants the load broke."""
    from parityfuzz.checkpoint import invariants, trusted as trusted_path

    if not os.path.isdir(directory):
        raise FileNotFoundError(f"checkpoint directory {directory} is missing: nothing was saved there")
    invariants.take()
    if trusted:
        trusted_path.load(system, directory)
        return []
    _way(case.checkpoint.load_way, "load")(system, case, directory)
    trusted_path.load_scheduler(system, directory)
    invariants.check_snapshot(system, directory, state_of(case.checkpoint.load_way))
    return invariants.take()
