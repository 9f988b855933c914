"""How FSDP2 is driven over a step's microbatches.

On the non-last microbatches gradient sync is turned off on all wrapped modules, only the root, a random
subset or none; ``set_is_last_backward``, ``set_reshard_after_backward`` and every wrapped module's
``unshard(async_op=True)`` first (1F1B, handles left pending) are drawn independently, and on HSDP meshes
``set_requires_all_reduce(False)`` on the non-last microbatches.  A rare coin calls the root through a
forward method registered with ``register_fsdp_forward_method``.

Shrinking: sync turned off for every wrapped module (the first choice), no other switch.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from parityfuzz.case import MeshSpec, TrainSpec
from parityfuzz.families.fsdp2 import FSDP2Plan
from parityfuzz.strategies.coins import RARE


@st.composite
def accumulation(draw, plan: FSDP2Plan, train: TrainSpec, mesh: MeshSpec) -> FSDP2Plan:
    """``plan`` with its accumulation switches and forward method drawn."""
    wrapped = tuple(w.path for w in plan.wraps)
    mode = draw(st.sampled_from(("all", "root", "subset", "none")))
    if mode == "all":
        no_sync = wrapped
    elif mode == "root":
        no_sync = ("",)
    elif mode == "subset":
        no_sync = tuple(p for p in wrapped if draw(st.booleans()))
    else:
        no_sync = ()
    micro = train.microbatches
    return dataclasses.replace(
        plan,
        no_sync=no_sync if micro > 1 else (),
        is_last_backward=draw(RARE),
        reshard_after_backward=not draw(RARE),
        unshard_first=draw(RARE),
        forward_method=draw(RARE),
        no_all_reduce=draw(RARE) and "dp_replicate" in mesh.names and micro > 1,
    )
