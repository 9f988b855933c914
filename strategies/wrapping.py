"""Wrap policies: which modules get ``fully_shard`` and with which settings.

Any subset of the model's modules is wrapped, and always the root.  Tied
embedding/head weights stay with the root (FSDP2 needs a shared parameter in
one group).  ``reshard_after_forward`` is True, False, or an int that is a
non-trivial divisor of the shard group size.

Each module is wrapped with probability 1/2 (a coin per module, so large trees
see mixed plans rather than mostly the root alone), with CPU offload on a
coin of its own.  Activation checkpointing picks up to three modules
(composable, wrapper or ``apply_activation_checkpointing``, before or after ``fully_shard``), and explicit
prefetching sets, on up to two wrapped modules, forward and backward lists of
up to two wrapped modules.

Shrinking: each coin shrinks toward "not wrapped" and "no offload" (only the
root wrapped); ``reshard_after_forward`` toward True, FSDP2's default;
checkpoint and prefetch lists toward empty, their picks toward the root (the
first path), checkpointing toward the composable API before ``fully_shard``.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fuzz.case import CHECKPOINT_APIS, Checkpoint, MeshSpec, ModelSpec, PlanSpec, Prefetch, Wrap


def reshard_choices(shard_size: int) -> list:
    return [True, False] + [d for d in range(2, shard_size) if shard_size % d == 0]


def wrappable_paths(model: ModelSpec) -> list[str]:
    excluded = {"", "inp", "head"} if model.tie_head else {""}
    return [path for path, _ in model.module_paths() if path not in excluded]


@st.composite
def plans(draw, model: ModelSpec, mesh: MeshSpec) -> PlanSpec:
    paths = wrappable_paths(model)
    # Checkpoints first: their picks are indices that survive the tree shrinking, the coins after them do not.
    all_paths = [path for path, _ in model.module_paths()]
    picked = draw(st.lists(st.sampled_from(all_paths), unique=True, max_size=3))
    checkpoints = []
    for path in picked:
        api = draw(st.sampled_from(CHECKPOINT_APIS if path else ("composable",)))
        checkpoints.append(Checkpoint(path, api=api, before=not draw(st.booleans())))
    choices = reshard_choices(mesh.shape[-1])
    wraps = [Wrap(p, draw(st.sampled_from(choices)), offload=draw(st.booleans()))
             for p in paths if draw(st.booleans())]
    wraps.append(Wrap("", draw(st.sampled_from(choices)), offload=draw(st.booleans())))
    wrapped = [w.path for w in wraps]
    prefetch = []
    if len(wrapped) > 1:
        targets = st.lists(st.sampled_from(wrapped), unique=True, max_size=2).map(tuple)
        for path in draw(st.lists(st.sampled_from(wrapped), unique=True, max_size=2)):
            forward, backward = draw(targets), draw(targets)
            if forward or backward:
                prefetch.append(Prefetch(path, forward=forward, backward=backward))
    return PlanSpec(wraps=tuple(wraps), checkpoints=tuple(checkpoints), prefetch=tuple(prefetch))
