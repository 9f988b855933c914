"""Whole parity cases, composed from the per-concern strategies.

Shrinking follows each part's own order: world size 2, seed 0, the smallest
model tree, only the root wrapped, default training settings, no mixed precision.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from fuzz.case import Case
from strategies.meshes import meshes, world_sizes
from strategies.models import models
from strategies.perturbation import delays
from strategies.precision import precision_policies
from strategies.training import training
from strategies.wrapping import plans


@st.composite
def cases(draw, allowed_world_sizes: tuple[int, ...] = (1, 2, 4), system: str = "fsdp2",
          reference: str = "ddp", max_depth: int = 2, max_steps: int = 10, perturb: bool = True) -> Case:
    ws = draw(world_sizes(allowed_world_sizes))
    mesh = draw(meshes(ws))
    model = draw(models(max_depth))
    plan = draw(plans(model, mesh))
    wrapped = tuple(w.path for w in plan.wraps)
    train = draw(training(max_steps, wrapped, hsdp=len(mesh.shape) == 2,
                          nonroot=tuple(p for p in wrapped if p and model.uses_params(p))))
    plan = draw(precision_policies(plan, model, train))
    if any(w.mixed_precision() for w in plan.wraps) and train.to_float64:
        train = dataclasses.replace(train, to_float64=False)  # policies name dtypes relative to the model's
    if reference == "ddp" and any(w.mixed_precision() for w in plan.wraps):
        reference = "ddp_mp"  # plain DDP cannot model mixed precision
    return Case(
        seed=draw(st.integers(0, 2**16)),
        world_size=ws,
        model=model,
        mesh=mesh,
        plan=plan,
        train=train,
        delays=draw(delays(ws)) if perturb else (),
        reference=reference,
        system=system,
    ).validate()
