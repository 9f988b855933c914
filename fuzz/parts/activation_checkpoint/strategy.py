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
from parityfuzz.case.model import CONTAINER_KINDS as CONTAINERS

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


#: Whether a swarm-switched plan moves its first checkpoint to a likelier place: 3 in 4, shrinking to not moving.
MOVE = st.sampled_from((False, True, True, True))
#: Module kinds whose forward draws random numbers: what a recompute must replay alike.
RANDOM = ("dropout",)


def _ranks(case: Case) -> dict[str, int]:
    """How likely a reentrant checkpoint at each body module is to meet a bug, lowest first: 0 with a random op
    inside (the recompute must replay its masks), 1 a container (a block called twice, a gate), 2 a single module
    (and, absent here, a module inside a layer: an MLP's fc1)."""
    return {path: 0 if any(n.kind in RANDOM for _, n in node.walk(path)) else 1 if node.kind in CONTAINERS else 2
            for path, node in case.model.body.walk("body")}


@st.composite
def _moved(draw, case: Case):
    """``case``'s plan with its first checkpoint moved (a wrapper-API checkpoint, :data:`MOVE`) to a place that can be
    reentrant (its input requires grad) and ranks better (:func:`_ranks`) than every checkpoint that already can;
    None where there is no such place.  For a swarm configuration that switched ``reentrant`` on: the plan's own
    checkpoints sit where it cannot (before any module with parameters) or around nothing it would change.
    Shrinks to not moving."""
    checkpoints, ranks = case.plan.checkpoints, _ranks(case)
    now = min((ranks.get(c.path, 2) for i, c in enumerate(checkpoints) if eligible(case, i)), default=3)
    taken = {c.path for c in checkpoints}
    places = [p for p in ranks if p not in taken and input_requires_grad(case.model, case.train, p)]
    best = min((ranks[p] for p in places), default=3)
    if best >= now or not draw(MOVE):
        return None
    first = checkpoints[0]
    path = draw(st.sampled_from([p for p in places if ranks[p] == best]))
    moved = (dataclasses.replace(first, path=path, api=first.api if first.api != "composable" else "wrapper"),
             *checkpoints[1:])
    plan = dataclasses.replace(case.plan, checkpoints=moved)
    return plan if eligible(dataclasses.replace(case, plan=plan), 0) and not _breaks(case, plan) else None


def _breaks(case: Case, plan) -> bool:
    """Whether ``plan`` breaks a rule ``case``'s own plan keeps (:func:`eligible` looks at the moved checkpoint's
    own rules only: a move into a region with a per-rank gate and an FSDP1 instance broke the family's
    ``plan.checkpoints`` rule, and the drawn case raised)."""
    try:
        dataclasses.replace(case, plan=plan).validate()
    except CaseError:
        try:
            case.validate()
        except CaseError:
            return False  # (refused before the move too: not the move's doing)
        return True
    return False


@st.composite
def reentrant(draw, case: Case, switched: bool | None = None):
    """``case``'s plan with some of its eligible checkpoints reentrant (the plan itself where none is).
    ``switched``: whether a swarm configuration switched ``reentrant`` on (then two eligible checkpoints in three,
    the first checkpoint moved first (:data:`MOVE`) to a likelier place where it can be, and made reentrant there:
    :func:`_moved`) or off (none); None: :data:`REENTRANT`'s coin."""
    checkpoints = getattr(case.plan, "checkpoints", ())
    moved = draw(_moved(case)) if switched and checkpoints else None
    if moved is not None:
        case = dataclasses.replace(case, plan=moved)
        checkpoints = moved.checkpoints
    chosen = [eligible(case, i) for i in range(len(checkpoints))] if switched is not False else []
    if not any(chosen):
        return case.plan
    coin = REENTRANT if switched is None else REENTRANT_ON
    marked = tuple(dataclasses.replace(c, reentrant=ok and (moved is not None and i == 0 or draw(coin)))
                   for i, (c, ok) in enumerate(zip(checkpoints, chosen)))
    return dataclasses.replace(case.plan, checkpoints=marked)
