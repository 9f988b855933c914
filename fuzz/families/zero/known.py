"""Preconditions of the known torch bugs of the zero family (``corpus/known_bugs.toml`` names them
``zero:<function>``): what the shrunk cases of each bug needed. Each takes a case and says whether the bug can
show in it."""

from __future__ import annotations

from parityfuzz.case import Case


def ddp_static_graph_with_no_sync(case: Case) -> bool:
    return case.plan.static_graph and case.train.microbatches > 1
