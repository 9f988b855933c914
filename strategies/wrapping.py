"""Wrap policies: which modules get ``fully_shard`` and with which settings.

Any subset of the model's modules is wrapped, and always the root.  Tied
embedding/head weights stay with the root (FSDP2 needs a shared parameter in
one group).  ``reshard_after_forward`` is True, False, or an int that is a
non-trivial divisor of the shard group size.

Each module is wrapped with probability 1/2 (a coin per module, so large trees
see mixed plans rather than mostly the root alone).

Shrinking: each coin shrinks toward "not wrapped" (only the root wrapped), and
each ``reshard_after_forward`` toward True, FSDP2's default.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fuzz.case import MeshSpec, ModelSpec, PlanSpec, Wrap


def reshard_choices(shard_size: int) -> list:
    return [True, False] + [d for d in range(2, shard_size) if shard_size % d == 0]


def wrappable_paths(model: ModelSpec) -> list[str]:
    excluded = {"", "inp", "head"} if model.tie_head else {""}
    return [path for path, _ in model.module_paths() if path not in excluded]


@st.composite
def plans(draw, model: ModelSpec, mesh: MeshSpec) -> PlanSpec:
    paths = wrappable_paths(model)
    choices = reshard_choices(mesh.shape[-1])
    wraps = [Wrap(p, draw(st.sampled_from(choices))) for p in paths if draw(st.booleans())]
    wraps.append(Wrap("", draw(st.sampled_from(choices))))
    return PlanSpec(wraps=tuple(wraps))
