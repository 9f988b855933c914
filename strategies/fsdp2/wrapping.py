"""Wrap policies: which modules get ``fully_shard`` and with which settings.

Any subset of the model's modules is wrapped, and always the root.  Tied
embedding/head weights stay with the root (FSDP2 needs a shared parameter in
one group).  ``reshard_after_forward`` is True, False, or an int that is a
non-trivial divisor of the shard group size.

Each module is wrapped with probability 1/2 (a coin per module, so large trees
see mixed plans rather than mostly the root alone).  CPU offload (close to a
no-op on a CPU) is drawn on a rare case-level coin, then on a coin per module.  Activation checkpointing picks up to three modules
(composable, wrapper or ``apply_activation_checkpointing``, before or after ``fully_shard``), and explicit
prefetching sets, on up to two wrapped modules, forward and backward lists of
up to two wrapped modules.

With per-rank gates in the model, ``set_reduce_scatter_unused_params(True)``
is set on every wrapped module (FSDP2 needs it for control flow that differs
per rank).

Shrinking: each coin shrinks toward "not wrapped" and "no offload" (only the
root wrapped); ``reshard_after_forward`` toward True, FSDP2's default;
checkpoint and prefetch lists toward empty, their picks toward the root (the
first path), checkpointing toward the composable API before ``fully_shard``.
"""

from __future__ import annotations

from hypothesis import strategies as st

from parityfuzz.case import MeshSpec, ModelSpec
from parityfuzz.families.fsdp2 import FSDP2Plan, Prefetch, Wrap
from parityfuzz.parts.activation_checkpoint import CHECKPOINT_APIS, ActivationCheckpoint
from parityfuzz.strategies.coins import RARE


def reshard_choices(shard_size: int) -> list:
    return [True, False] + [d for d in range(2, shard_size) if shard_size % d == 0]


def wrappable_paths(model: ModelSpec) -> list[str]:
    """Non-root modules ``fully_shard`` may take: not a tied embedding or head alone, nothing inside a
    per-rank gate (ranks would all-gather it unevenly)."""
    excluded = {"", "inp", "head"} if model.tie_head else {""}
    rank_gated = [f"{path}." for path in model.rank_gates()]
    return [path for path, _ in model.module_paths()
            if path not in excluded and not path.startswith(tuple(rank_gated))]


@st.composite
def plans(draw, model: ModelSpec, mesh: MeshSpec) -> FSDP2Plan:
    paths = wrappable_paths(model)
    # Checkpoints first: their picks are indices that survive the tree shrinking, the coins after them do not.
    all_paths = [path for path, _ in model.module_paths()]
    picked = draw(st.lists(st.sampled_from(all_paths), unique=True, max_size=3))
    checkpoints = []
    for path in picked:
        api = draw(st.sampled_from(CHECKPOINT_APIS if path else ("composable",)))
        checkpoints.append(ActivationCheckpoint(path, api=api, before=not draw(st.booleans())))
    choices = reshard_choices(mesh.axis_size("dp_shard"))
    offload = draw(RARE)  # on a CPU close to a no-op: a case-level rare coin, then one per module
    wraps = [Wrap(p, draw(st.sampled_from(choices)), offload=draw(st.booleans()) and offload)
             for p in paths if draw(st.booleans())]
    wraps.append(Wrap("", draw(st.sampled_from(choices)), offload=draw(st.booleans()) and offload))
    wrapped = [w.path for w in wraps]
    prefetch = []
    if len(wrapped) > 1:
        targets = st.lists(st.sampled_from(wrapped), unique=True, max_size=2).map(tuple)
        for path in draw(st.lists(st.sampled_from(wrapped), unique=True, max_size=2)):
            forward, backward = draw(targets), draw(targets)
            if forward or backward:
                prefetch.append(Prefetch(path, forward=forward, backward=backward))
    rank_flow = model.per_rank_flow()
    return FSDP2Plan(wraps=tuple(wraps), checkpoints=tuple(checkpoints), prefetch=tuple(prefetch),
                     reduce_scatter_unused=rank_flow, post_optim_event=draw(RARE))
