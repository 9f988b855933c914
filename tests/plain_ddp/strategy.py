"""Cases of the test-only ``plain_ddp`` family: a world size, a model, a training spec, the plan's two flags."""

from __future__ import annotations

from hypothesis import strategies as st

from parityfuzz.case import Case, MeshSpec
from parityfuzz.strategies.cases import finish
from parityfuzz.strategies.meshes import world_sizes
from parityfuzz.strategies.models import models
from parityfuzz.strategies.training import training
from tests.plain_ddp import PlainDDPPlan


@st.composite
def cases(draw, allowed: tuple[int, ...], system: str, reference: str, max_depth: int, max_steps: int,
          perturb: bool, swarm: frozenset[str] | None = None) -> Case:
    ws = draw(world_sizes(allowed))
    model = draw(models(max_depth))
    train = draw(training(model, max_steps=max_steps, swarm=swarm))
    plan = PlainDDPPlan(bucket_cap_mb=draw(st.sampled_from((25, 1))), broadcast_buffers=draw(st.booleans()))
    return finish(draw, world_size=ws, model=model, mesh=MeshSpec((ws,), ("dp_shard",)), plan=plan, train=train,
                  system=system, reference=reference, perturb=perturb, swarm=swarm)
