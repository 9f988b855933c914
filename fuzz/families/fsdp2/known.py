"""Preconditions of the known torch bugs of the fsdp2 family (``corpus/known_bugs.toml`` names them
``fsdp2:<function>``): what the shrunk cases of each bug needed. Each takes a case and says whether the bug can
show in it."""

from __future__ import annotations

from parityfuzz.case import Case


def hsdp_deferred_all_reduce_with_gated_params(case: Case) -> bool:
    return case.plan.no_all_reduce and bool(case.model.gates())


def mixed_precision_group_unfrozen_later(case: Case) -> bool:
    return case.mixed_precision() and any(f.until for f in case.train.frozen)


def mixed_precision_accumulation_with_gated_params(case: Case) -> bool:
    return (bool(case.model.gates()) and case.mixed_precision() and case.train.microbatches > 1
            and bool(case.plan.no_sync))


def rank_flow_with_several_groups(case: Case) -> bool:
    return case.plan.reduce_scatter_unused and len(case.plan.wraps) > 1
