"""Validity rules of activation checkpointing that torch documents, for every family whose plan checkpoints
modules through ``checkpoint_wrapper`` / ``apply_activation_checkpointing``.

Torch-free.
"""

from __future__ import annotations

from parityfuzz.case.training import input_requires_grad
from parityfuzz.rules import Rule, require

REENTRANT_INPUT_REQUIRES_GRAD = Rule(
    "checkpointing.reentrant-input-requires-grad",
    "a reentrant checkpoint (CheckpointImpl.REENTRANT) only on a module whose input requires grad in every "
    "forward, a non-root pass's included",
    "torch/utils/checkpoint.py: checkpoint: 'At least one input and output must have ``requires_grad=True`` for "
    "the reentrant variant. If this condition is unmet, the checkpointed part of the model will not have "
    "gradients.'")

RULES = (REENTRANT_INPUT_REQUIRES_GRAD,)


def check_rules(case) -> None:
    """Every reentrant checkpoint of the plan takes an input that requires grad, whatever is frozen when and in
    a non-root pass too (fed fresh inputs)."""
    for i, c in enumerate(case.plan.checkpoints):
        if c.reentrant:
            require(input_requires_grad(case.model, case.train, c.path), REENTRANT_INPUT_REQUIRES_GRAD,
                    f"plan.checkpoints[{i}].reentrant",
                    f"nothing before {c.path!r} trains on every pass (a dense model input, frozen modules, or a "
                    "non-root pass's fresh input)")


__all__ = ["RULES", "check_rules"]
