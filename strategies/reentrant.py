"""Reentrant activation checkpointing (``checkpoint_impl=CheckpointImpl.REENTRANT``, torch's
``checkpoint(use_reentrant=True)``) on the checkpoints a family plan drew: a training-loop dimension every family
with wrapper-API checkpoints takes (fsdp2, fsdp2_tp, fsdp1, fsdp1_tp, pipeline; the composable API has no reentrant form).

About one eligible checkpoint in three, where torch documents the reentrant variant trains: the checkpointed
module's input requires grad on every forward (``checkpointing.reentrant-input-requires-grad``), and the
family's own rules allow it (the pipeline family's first stage).  Shrinks toward non-reentrant.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from parityfuzz.case import Case
from parityfuzz.case.errors import CaseError
from parityfuzz.case.training import input_requires_grad

#: The coin that makes an eligible checkpoint reentrant: 1 in 3, shrinking to non-reentrant.
REENTRANT = st.sampled_from((False, False, True))


def eligible(case: Case, index: int) -> bool:
    """Whether checkpoint ``index`` of ``case``'s plan may be reentrant: a wrapper API, an input that requires grad,
    and nothing else of the family's rules against it (the pipeline family's: the first stage only)."""
    c = case.plan.checkpoints[index]
    if c.api == "composable" or not input_requires_grad(case.model, case.train, c.path):
        return False
    marked = tuple(dataclasses.replace(x, reentrant=i == index) for i, x in enumerate(case.plan.checkpoints))
    try:
        dataclasses.replace(case, plan=dataclasses.replace(case.plan, checkpoints=marked)).validate()
    except CaseError as e:
        return not e.field.startswith(f"plan.checkpoints[{index}]")
    return True


#: The coin under a swarm configuration that switched ``reentrant`` on (:mod:`parityfuzz.strategies.swarm`).
REENTRANT_ON = st.sampled_from((False, True, True))


@st.composite
def reentrant(draw, case: Case, switched: bool | None = None):
    """``case``'s plan with some of its eligible checkpoints reentrant (the plan itself where none is).
    ``switched``: whether a swarm configuration switched ``reentrant`` on (then two eligible checkpoints in three)
    or off (none); None: :data:`REENTRANT`'s coin."""
    checkpoints = getattr(case.plan, "checkpoints", ())
    chosen = [eligible(case, i) for i in range(len(checkpoints))] if switched is not False else []
    if not any(chosen):
        return case.plan
    coin = REENTRANT if switched is None else REENTRANT_ON
    marked = tuple(dataclasses.replace(c, reentrant=ok and draw(coin)) for c, ok in zip(checkpoints, chosen))
    return dataclasses.replace(case.plan, checkpoints=marked)
