"""Preconditions of the known torch bugs of checkpoint events in any family (``corpus/known_bugs.toml`` names them
``checkpoint:<function>``): what the shrunk cases of each bug needed. Each takes a case and says whether the bug
can show in it."""

from __future__ import annotations

from parityfuzz.case import Case
from parityfuzz.case.checkpoint import fsdp1_families


def full_load_into_a_stateless_optimizer(case: Case) -> bool:
    r = case.resumed()
    return (case.checkpoint.load_way == "full" and case.train.optimizer == "sgd" and not case.train.momentum
            and r.family not in fsdp1_families())


def broadcast_through_set_state_dict(case: Case) -> bool:
    return case.checkpoint.broadcast_from_rank0 and not case.checkpoint.separate
