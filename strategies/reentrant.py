"""Reentrant activation checkpointing (``checkpoint_impl=CheckpointImpl.REENTRANT``, torch's
``checkpoint(use_reentrant=True)``) on the checkpoints a family plan drew: a training-loop dimension every family
with wrapper-API checkpoints takes (fsdp2, fsdp2_tp, fsdp1, fsdp1_tp; the composable API has no reentrant form).

About one eligible checkpoint in three, where torch documents the reentrant variant trains: the checkpointed
module's input requires grad on every forward (``checkpointing.reentrant-input-requires-grad``).  Shrinks toward
non-reentrant.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from parityfuzz.case import Case
from parityfuzz.case.training import input_requires_grad

#: The coin that makes an eligible checkpoint reentrant: 1 in 3, shrinking to non-reentrant.
REENTRANT = st.sampled_from((False, False, True))


def eligible(case: Case, c) -> bool:
    """Whether the checkpoint ``c`` of ``case``'s plan may be reentrant."""
    return c.api != "composable" and input_requires_grad(case.model, case.train, c.path)


@st.composite
def reentrant(draw, case: Case):
    """``case``'s plan with some of its eligible checkpoints reentrant (the plan itself where none is)."""
    checkpoints = getattr(case.plan, "checkpoints", ())
    if not any(eligible(case, c) for c in checkpoints):
        return case.plan
    marked = tuple(dataclasses.replace(c, reentrant=eligible(case, c) and draw(REENTRANT)) for c in checkpoints)
    return dataclasses.replace(case.plan, checkpoints=marked)
