"""Validity rules of checkpoint events (save and load through torch's state-dict APIs) that follow from what torch
documents, and leaves undefined, about loading.

Torch-free.
"""

from __future__ import annotations

from parityfuzz.rules import Rule, require

ROLLBACK_OVER_STATE_THE_CHECKPOINT_LACKS = Rule(
    "state-dict.rollback-over-state-the-checkpoint-lacks",
    "a rollback (a load into the live, already stepped optimizer) through set_optimizer_state_dict never meets a "
    "parameter that has optimizer state in the live optimizer and none in the checkpoint (frozen through the save, "
    "trained after it): torch documents neither replacing nor keeping that state",
    "torch/distributed/checkpoint/state_dict.py: set_optimizer_state_dict: 'Load the optimizers state_dict. The "
    "counterpart of ``get_optimizer_state_dict`` ...' (nothing on state the loaded dict lacks); StateDictOptions: "
    "'``strict``: the ``strict`` option when ``set_state_dict`` calls model.load_state_dict()' (the model only). "
    "In 2.13 the full-state-dict load keeps the live entries (_load_optim_state_dict merges), the sharded load "
    "replaces them, and strict=True raises 'Missing optimizer state for parameter'")

RULES = (ROLLBACK_OVER_STATE_THE_CHECKPOINT_LACKS,)


def check_rollback(case) -> None:
    """Raise :class:`parityfuzz.rules.RuleViolation` where ``case``'s rollback breaks :data:`RULES`."""
    c, t = case.checkpoint, case.train
    stateful = t.optimizer in ("adam", "adamw") or bool(t.momentum)
    # Frozen during the steps before `until`: no state at the save (after step c.step - 1) where until >= c.step,
    # state by the rollback where it trains at a live step before it (until < rollback_at).
    late = [f.path for f in t.frozen if c.step <= f.until < c.rollback_at]
    require(not (c.rollback_at and stateful and late and c.load_way in ("full", "dcp")),
            ROLLBACK_OVER_STATE_THE_CHECKPOINT_LACKS, "checkpoint.rollback_at",
            f"{', '.join(late)} is frozen at the save (step {c.step}) and trained before the rollback at step "
            f"{c.rollback_at}, with a {t.optimizer} optimizer that keeps state")


__all__ = ["RULES", "check_rollback"]
