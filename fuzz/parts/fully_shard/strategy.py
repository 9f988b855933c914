"""Strategies of the fully_shard part: the mesh, the wrap plan, the mixed-precision policies and the accumulation
switches, each drawn for a plan of the family's own type (``plan_type``, or by ``dataclasses.replace`` of the
plan given); the families compose them (``strategies.fsdp2``, ``strategies.fsdp2_tp``).  Each shrinks in its own
order (see its docstring).
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from parityfuzz.case import MeshSpec, ModelSpec, TrainSpec
from parityfuzz.case.dtypes import clashing
from parityfuzz.parts.activation_checkpoint import CHECKPOINT_APIS, ActivationCheckpoint
from parityfuzz.parts.fully_shard import FullyShardPlan, Prefetch, Wrap
from parityfuzz.strategies.coins import RARE
from parityfuzz.strategies.meshes import weighted

HSDP = ("dp_replicate", "dp_shard")


def mesh_weights(world_size: int) -> dict[MeshSpec, int]:
    """Every mesh of ``world_size`` ranks with its weight, in shrinking order."""
    flat = MeshSpec((world_size,), ("dp_shard",))
    if world_size == 1:
        return {flat: 1}
    weights = {flat: 8, MeshSpec((world_size, 1), HSDP): 1}  # replicate only (shards nothing): rare, not last
    for shard in range(world_size, 1, -1):  # more sharding first
        if world_size % shard == 0:
            replicas = world_size // shard
            weights[MeshSpec((replicas, shard), HSDP)] = 10 if replicas > 1 else 4
    return weights


def meshes(world_size: int) -> st.SearchStrategy[MeshSpec]:
    """A 1-D ``(dp_shard,)`` mesh over all ranks, or a 2-D ``(dp_replicate, dp_shard)`` one, weighted by
    :func:`mesh_weights`.

    FSDP2's meshes: 1-D ``(dp_shard,)`` over all ranks, or HSDP's 2-D ``(dp_replicate, dp_shard)`` over any
    factorization of the world size, the degenerate ``(n, 1)`` and ``(1, n)`` included.  World size 1 and meshes
    whose shard axis is 1 (nothing sharded) together make about 10% of cases at the default world sizes, and at
    world size 4 the 2x2 HSDP mesh is the most common.

    Shrinking: the 1-D mesh comes first, then the replicate-only one, then the 2-D ones that shard most.
    """
    return st.sampled_from(weighted(mesh_weights(world_size)))


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
def plans(draw, model: ModelSpec, mesh: MeshSpec, plan_type: type) -> FullyShardPlan:
    """A ``plan_type`` plan: which modules get ``fully_shard`` and with which settings.

    Wrap policies: which modules get ``fully_shard`` and with which settings.

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
    return plan_type(wraps=tuple(wraps), checkpoints=tuple(checkpoints), prefetch=tuple(prefetch),
                     reduce_scatter_unused=rank_flow, post_optim_event=draw(RARE))


#: The dtypes a policy may compute in (float32 below a float64 model).
LOW = ("bfloat16", "float16", "float32")


@st.composite
def precision_policies(draw, plan: FullyShardPlan, model: ModelSpec, train: TrainSpec) -> FullyShardPlan:
    """``plan`` with mixed-precision policies on its wraps (or unchanged: the first coin).

    Mixed precision: a ``MixedPrecisionPolicy`` for each wrapped module.

    The root computes in ``param_dtype`` bf16, fp16, fp32 (below a float64 model)
    or the model's own dtype.  Every other wrapped module computes in the dtype
    its activations arrive in (that of the nearest wrapped module above it) or in
    another one; a module that differs casts its inputs (``cast_forward_inputs``)
    and casts its outputs back (``output_dtype``), as a model must for its layers
    to see matching dtypes.  ``reduce_dtype`` is drawn per module; the root may
    cast its output (e.g. to fp32 for the loss), and ``cast_forward_inputs=False``
    is drawn where it is legal (the module's inputs already have its dtype, or
    are token ids).

    Mixed precision is drawn with every optimizer: the emulating reference
    reproduces FSDP2's low-precision arithmetic bit for bit (measured), and the
    oracle judges what rounding differences remain by their measured noise.

    Under an autocast region no module computes in the other low dtype (torch's CPU kernels refuse two low dtypes in
    one op: :func:`parityfuzz.case.dtypes.check_autocast`), so autocast and mixed precision are drawn together.

    Shrinking: toward no policy at all (the first coin), then the root computing
    in bf16, children following their parent, no reduce or output dtype.
    """
    if not draw(st.booleans()):
        return plan
    master = train.dtype
    # Not the low dtype an autocast region does not cast to (dtypes.check_autocast): the two drawn together.
    low = tuple(d for d in LOW if d not in clashing(train))
    compute_choices = [d for d in low if d != master]
    computes: dict[str, str] = {}  # path -> dtype the module computes in
    new: dict[str, Wrap] = {}
    for w in sorted(plan.wraps, key=lambda w: (w.path != "", w.path.count("."), w.path)):  # parents first
        reduce = draw(st.sampled_from(("",) + tuple(dict.fromkeys(("float32", master, "bfloat16", "float16")))))
        if not w.path:
            param = draw(st.sampled_from(tuple(compute_choices) + ("",)))
            computes[""] = param or master
            token_input = model.input == "embedding"
            cast = True if computes[""] != master and not token_input else not draw(st.booleans())
            output = draw(st.sampled_from(("",) + tuple(dict.fromkeys(("float32", master)))))
            new[""] = dataclasses.replace(w, param_dtype=param, reduce_dtype=reduce, output_dtype=output,
                                          cast_forward_inputs=cast)
            continue
        entry = computes[plan.owner(w.path.rpartition(".")[0])]
        same = "" if entry == master else entry
        param = draw(st.sampled_from((same,) + tuple(d for d in dict.fromkeys(low + (master,)) if d != entry)))
        computes[w.path] = param or master
        if computes[w.path] != entry:
            cast, output = True, entry
        else:
            cast, output = not draw(st.booleans()), draw(st.sampled_from(("", entry)))
        new[w.path] = dataclasses.replace(w, param_dtype=param, reduce_dtype=reduce, output_dtype=output,
                                          cast_forward_inputs=cast)
    return dataclasses.replace(plan, wraps=tuple(new[w.path] for w in plan.wraps))


@st.composite
def accumulation(draw, plan: FullyShardPlan, train: TrainSpec, mesh: MeshSpec) -> FullyShardPlan:
    """``plan`` with its accumulation switches and forward method drawn: how FSDP2 is driven over a step's
    microbatches.

    How FSDP2 is driven over a step's microbatches.

    On the non-last microbatches gradient sync is turned off on all wrapped modules, only the root, a random
    subset or none; ``set_is_last_backward``, ``set_reshard_after_backward`` and every wrapped module's
    ``unshard(async_op=True)`` first (1F1B, handles left pending) are drawn independently, and on HSDP meshes
    ``set_requires_all_reduce(False)`` on the non-last microbatches.  A rare coin calls the root through a
    forward method registered with ``register_fsdp_forward_method``.

    Shrinking: sync turned off for every wrapped module (the first choice), no other switch.
    """
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
