"""Preconditions of the known torch bugs of the zero family (``corpus/known_bugs.toml`` names them
``zero:<function>``): what the shrunk cases of each bug needed. Each takes a case and says whether the bug can
show in it."""

from __future__ import annotations

from parityfuzz.case import Case
from parityfuzz.case.checkpoint import stateless_at_the_save


def ddp_static_graph_with_no_sync(case: Case) -> bool:
    return case.plan.static_graph and case.train.microbatches > 1


def sgd_foreach_nesterov_changes_gradients(case: Case) -> bool:
    """SGD with nesterov momentum through its foreach implementation, with no weight decay and no ``maximize``
    (either copies the gradients first), under loss scaling (the harness records the gradients after the
    optimizer step only there, where it must unscale them first): ZeroRedundancyOptimizer's owner of a parameter
    alone adds the momentum buffer into its ``.grad``."""
    t = case.train
    return (t.optimizer == "sgd" and t.nesterov and t.foreach and not t.weight_decay and not t.maximize
            and bool(t.loss_scale))


def live_load_keeps_local_state(case: Case) -> bool:
    """A rollback through ZeRO's own way (the checkpoint loaded into the live optimizer) with a stateful optimizer
    (momentum, Adam), where some parameter gets its state after the save: a freeze lifted at a step from the save's
    to the rollback's, or a gated module (it may first be used there; by reading, not run)."""
    c, t = case.checkpoint, case.train
    if not (c and c.rollback_at and c.save == "zero" and c.load_way == "zero"):
        return False
    if not t.keeps_optimizer_state():
        return False
    return bool(stateless_at_the_save(case)) or bool(case.model.gates())
