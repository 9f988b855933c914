"""Cases of the ``zero`` family: ``ZeroRedundancyOptimizer`` over a DDP model, on every rank of a 1-D mesh.

Drawn in this order: world size (3 included where asked: ZeRO's greedy partition then gives ranks uneven
loads), the model, the training spec (any optimizer, parameter groups, scheduler, weight decay, foreach,
frozen modules, microbatches under DDP's ``no_sync()``), then ZeRO's ``parameters_as_bucket_view`` and DDP's
``gradient_as_bucket_view`` and ``static_graph`` (not with gates or parameters unfrozen mid-training).

Shrinking: toward world size 2, a one-Linear model, SGD, every flag off.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fuzz.case import Case, MeshSpec
from fuzz.families.zero import ZeroPlan
from strategies.cases import finish
from strategies.meshes import world_sizes
from strategies.models import models
from strategies.training import training


@st.composite
def cases(draw, allowed: tuple[int, ...], system: str, reference: str, max_depth: int, max_steps: int,
          perturb: bool) -> Case:
    ws = draw(world_sizes(allowed))
    model = draw(models(max_depth))
    train = draw(training(model, max_steps=max_steps))
    gated = any(node.kind == "gate" for _, node in model.body.walk("body"))
    static = not gated and not any(f.until for f in train.frozen) and draw(st.booleans())
    plan = ZeroPlan(parameters_as_bucket_view=draw(st.booleans()), gradient_as_bucket_view=draw(st.booleans()),
                    static_graph=static)
    return finish(draw, world_size=ws, model=model, mesh=MeshSpec((ws,), ("dp_shard",)), plan=plan, train=train,
                  system=system, reference=reference, perturb=perturb)
