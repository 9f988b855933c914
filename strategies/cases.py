"""Whole parity cases, composed from the per-concern strategies."""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from fuzz.case import Case
from strategies.coins import RARE
from strategies.meshes import meshes, world_sizes
from strategies.models import models
from strategies.perturbation import delays
from strategies.precision import precision_policies
from strategies.training import training
from strategies.wrapping import plans


def cases(*, world_sizes: tuple[int, ...] = (1, 2, 4), system: str = "fsdp2", reference: str = "ddp",
          max_depth: int = 2, max_steps: int = 10, perturb: bool = True) -> st.SearchStrategy[Case]:
    """Valid parity cases: ``system`` trained on ``world_sizes`` ranks against ``reference`` (the emulating
    ``ddp_mp`` where a case uses mixed precision and the reference is ``ddp``).

    ``max_depth`` bounds the nesting of the model tree, ``max_steps`` the training steps; ``perturb`` draws
    delays on random ranks of the system under test.

    Examples from this strategy shrink towards world size 2, seed 0, a one-Linear model, only the root
    wrapped, one step of default training and no mixed precision: each part shrinks in its own order (see
    its module).
    """
    if not world_sizes or any(not isinstance(w, int) or isinstance(w, bool) or w < 1 for w in world_sizes):
        raise InvalidArgument(f"world_sizes={world_sizes!r} must be a non-empty tuple of positive ints")
    for name, value in (("system", system), ("reference", reference)):
        if not isinstance(value, str) or not value:
            raise InvalidArgument(f"{name}={value!r} must name a system")
    if not isinstance(max_depth, int) or max_depth < 0:
        raise InvalidArgument(f"max_depth={max_depth!r} must be an int >= 0")
    if not isinstance(max_steps, int) or not 1 <= max_steps <= 50:
        raise InvalidArgument(f"max_steps={max_steps!r} must be an int in [1, 50]")
    return _cases(tuple(world_sizes), system, reference, max_depth, max_steps, perturb)


@st.composite
def _cases(draw, allowed: tuple[int, ...], system: str, reference: str, max_depth: int, max_steps: int,
           perturb: bool) -> Case:
    ws = draw(world_sizes(allowed))
    mesh = draw(meshes(ws))
    rank_flow = draw(RARE) and ws > 1  # control flow that differs per rank (in models with gates)
    model = draw(models(max_depth, rank_period=ws if rank_flow else 0))
    plan = draw(plans(model, mesh))
    wrapped = tuple(w.path for w in plan.wraps)
    train = draw(training(model, max_steps=max_steps, wrapped=wrapped, hsdp=len(mesh.shape) == 2,
                          nonroot_pass=not plan.reduce_scatter_unused))
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
