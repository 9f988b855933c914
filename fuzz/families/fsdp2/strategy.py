"""Cases of the ``fsdp2`` family: ``fully_shard`` plans on 1-D and HSDP meshes, trained against DDP (the
emulating reference under mixed precision).

Drawn in this order: world size, mesh, the rare per-rank control-flow coin, the model, the wrap plan, the generic
training spec, the accumulation switches, mixed-precision policies (the mesh, plan, switches and policies by the
fully_shard part's strategies, :mod:`parityfuzz.parts.fully_shard.strategy`), the seed and delays.  Each part shrinks in its own order (see
its module): toward world size 2, a one-Linear model, only the root wrapped, one step of default training and
no mixed precision.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from parityfuzz.case import Case
from parityfuzz.families.fsdp2 import FSDP2Plan
from parityfuzz.parts.fully_shard.strategy import accumulation, meshes, plans, precision_policies
from parityfuzz.strategies.cases import finish
from parityfuzz.strategies.coins import RARE
from parityfuzz.strategies.meshes import world_sizes
from parityfuzz.strategies.models import models
from parityfuzz.strategies.swarm import flag
from parityfuzz.strategies.training import training


@st.composite
def cases(draw, allowed: tuple[int, ...], system: str, reference: str, max_depth: int, max_steps: int,
          perturb: bool, swarm: frozenset[str] | None = None) -> Case:
    ws = draw(world_sizes(allowed))
    mesh = draw(meshes(ws))
    rank_flow = draw(RARE) and ws > 1  # control flow that differs per rank (in models with gates)
    model = draw(models(max_depth, rank_period=ws if rank_flow else 0))
    plan = draw(plans(model, mesh, FSDP2Plan))
    plan = dataclasses.replace(plan, post_optim_event=flag(draw, swarm, "post_optim_event",
                                                           st.just(plan.post_optim_event)))
    # A non-root pass runs through a wrapped module; not with per-rank gates (set_reduce_scatter_unused_params
    # would zero every group's gradients in it).
    nonroot = () if plan.reduce_scatter_unused else tuple(w.path for w in plan.wraps if w.path)
    train = draw(training(model, max_steps=max_steps, nonroot=nonroot, swarm=swarm))
    plan = draw(accumulation(plan, train, mesh))
    plan = draw(precision_policies(plan, model, train)) if not train.to_float64 else plan
    if plan.mixed_precision() and train.to_float64:
        train = dataclasses.replace(train, to_float64=False)  # policies name dtypes relative to the model's
    return finish(draw, world_size=ws, model=model, mesh=mesh, plan=plan, train=train, system=system,
                  reference=reference, perturb=perturb, swarm=swarm)


@st.composite
def resumed(draw, case: Case, sizes: list[int]) -> dict:
    """An FSDP2 plan on an FSDP2 mesh of one of ``sizes`` (the case's world size first) for ``case``'s model: what a
    checkpoint load may resume a case of any family into (:mod:`parityfuzz.strategies.checkpoint`)."""
    ws = draw(st.sampled_from(sizes))
    mesh = draw(meshes(ws))
    return {"world_size": ws, "mesh": mesh, "plan": draw(plans(case.model, mesh, FSDP2Plan))}
