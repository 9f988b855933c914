"""Cases of the ``zero`` family: ``ZeroRedundancyOptimizer`` over a DDP model, on every rank of a 1-D mesh.

Drawn in this order: world size (3 included where asked: ZeRO's greedy partition then gives ranks uneven
loads), the model, the training spec (any optimizer, parameter groups, scheduler, weight decay, foreach,
frozen modules, microbatches under DDP's ``no_sync()``), then the optimizers' ``nesterov`` (SGD with momentum,
on a coin) and ``maximize`` (rare), ZeRO's ``parameters_as_bucket_view`` and DDP's ``gradient_as_bucket_view``
and ``static_graph`` (not with gates or parameters unfrozen mid-training), and on rare coins: the overlap with
DDP (``hook_with_zero_step`` or its interleaved form, ``shard_buckets``; the training spec is then cut to what
it allows: one microbatch, no clipping, scheduler, groups, frozen modules or evaluation), the last parameter
group joining through ``add_param_group`` mid-training, or a state-dict round trip mid-training.

Shrinking: toward world size 2, a one-Linear model, SGD, every flag off.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from parityfuzz.case import Case, MeshSpec
from parityfuzz.families.zero import ZeroPlan
from parityfuzz.strategies.cases import finish
from parityfuzz.strategies.coins import RARE
from parityfuzz.strategies.meshes import world_sizes
from parityfuzz.strategies.models import models
from parityfuzz.strategies.training import training


@st.composite
def cases(draw, allowed: tuple[int, ...], system: str, reference: str, max_depth: int, max_steps: int,
          perturb: bool, swarm: frozenset[str] | None = None) -> Case:
    ws = draw(world_sizes(allowed))
    model = draw(models(max_depth))
    train = draw(training(model, max_steps=max_steps, swarm=swarm))
    train = dataclasses.replace(train, nesterov=train.momentum > 0 and draw(st.booleans()), maximize=draw(RARE))
    gated = bool(model.gates())
    static = not gated and not any(f.until for f in train.frozen) and draw(st.booleans())
    plan = ZeroPlan(parameters_as_bucket_view=draw(st.booleans()), gradient_as_bucket_view=draw(st.booleans()),
                    static_graph=static)
    extra = draw(st.sampled_from(("overlap", "late_group", "reload"))) if draw(RARE) else ""
    if extra == "late_group" and not (train.groups and any(train.group_of(m + ".weight") != len(train.groups) - 1
                                                           for m in model.param_modules())):
        extra = "reload"  # no groups, or the last holds every parameter: nothing would train before it joins
    if extra == "overlap" and not gated:
        plan = dataclasses.replace(plan, overlap=draw(st.sampled_from(("hook", "interleaved"))),
                                   shard_buckets=draw(st.booleans()), parameters_as_bucket_view=False)
        # (the step runs inside the backward: no scaler can step it)
        train = dataclasses.replace(train.unscaled(), microbatches=1, clip=0.0, scheduler="", groups=(), frozen=(),
                                    eval=False)
    elif extra == "late_group" and train.groups and train.steps > 1:
        plan = dataclasses.replace(plan, late_group=draw(st.integers(1, train.steps - 1)))
        train = dataclasses.replace(train, scheduler="", frozen=())
    elif extra == "reload" and train.steps > 1:
        plan = dataclasses.replace(plan, reload_at=draw(st.integers(1, train.steps - 1)),
                                   consolidate_to=draw(st.integers(0, ws - 1)), reload_live=draw(st.booleans()))
    return finish(draw, world_size=ws, model=model, mesh=MeshSpec((ws,), ("dp_shard",)), plan=plan, train=train,
                  system=system, reference=reference, perturb=perturb, swarm=swarm)
