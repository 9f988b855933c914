"""Cases of the ``composable`` family: ``fully_shard``, both ``replicate`` APIs and composable ``checkpoint``
on one module tree, in a drawn order, against DDP.

Drawn in this order: world size, mesh (FSDP2's: 1-D or HSDP), the model (no per-rank control flow), the plan
(:mod:`.plans`), the generic training spec (no non-root pass; no frozen parameter under the DDP-based
``replicate``, which takes the parameters that require gradients once), gradient sync off on non-last
microbatches on a coin, the seed and delays.

Shrinking: toward world size 2, a one-Linear model, ``fully_shard`` on the root alone, default training.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from parityfuzz.case import Case, MeshSpec, under
from parityfuzz.families.composable import ComposablePlan, Compose
from parityfuzz.strategies.cases import finish
from parityfuzz.strategies.coins import RARE
from parityfuzz.families.composable.plans import plans
from parityfuzz.parts.fully_shard.strategy import meshes
from parityfuzz.strategies.meshes import world_sizes
from parityfuzz.strategies.models import models
from parityfuzz.strategies.swarm import flag
from parityfuzz.strategies.training import training


@st.composite
def cases(draw, allowed: tuple[int, ...], system: str, reference: str, max_depth: int, max_steps: int,
          perturb: bool, swarm: frozenset[str] | None = None):
    ws = draw(world_sizes(allowed))
    mesh = draw(meshes(ws))
    model = draw(models(max_depth))
    plan = draw(plans(model))
    train = draw(training(model, max_steps=max_steps, swarm=swarm))
    ddp_managed = [m for m in model.param_modules() if plan.data_parallel().get(plan.manager(m)) == "replicate"]
    frozen = tuple(f for f in train.frozen
                   if not any(under(m, (f.path,)) or under(f.path, (m,)) for m in ddp_managed))
    train = dataclasses.replace(train, frozen=frozen)
    if train.microbatches > 1:
        plan = dataclasses.replace(plan, no_sync=draw(st.booleans()))
    if plan.data_parallel().get("") == "fully_shard":
        plan = dataclasses.replace(plan, post_optim_event=flag(draw, swarm, "post_optim_event", RARE))
    return finish(draw, world_size=ws, model=model, mesh=mesh, plan=plan, train=train, system=system,
                  reference=reference, perturb=perturb, swarm=swarm)


@st.composite
def resumed(draw, case: Case, sizes: list[int]) -> dict:
    """Plain DDP (the DDP-based ``replicate`` on the root) over a 1-D mesh of one of ``sizes``: what a checkpoint
    load may resume a case of any family into (:mod:`parityfuzz.strategies.checkpoint`)."""
    ws = draw(st.sampled_from(sizes))
    return {"world_size": ws, "mesh": MeshSpec((ws,), ("dp_shard",)),
            "plan": ComposablePlan(applies=(Compose("", "replicate"),))}
