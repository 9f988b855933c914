"""Cases of the ``pipeline`` family: a schedule of ``torch.distributed.pipelining`` over stages of the model, on a
``(pp,)`` mesh, or ``(pp, dp_shard)`` with each stage ``fully_shard``-ed where the world holds several pipelines.

Drawn in this order: world size, the pipeline's size (a divisor of it; the rest is ``dp_shard``), the schedule (every
one torch 2.13 ships) and its stages per rank (one for the single-stage schedules, two for the V-shaped ones, one or
two for the looped ones), a model with at least as many top-level modules as stages (no dropout: see the family's
validation), the cuts between stages, the microbatch count (1 to twice the stage count: below, equal to and above
it, a multiple of it or not; where the schedule refuses the count the case expects its error), the training spec,
the dimension the schedule splits (the batch, or in one case of three the sequence: ``args_chunk_spec``), the mesh
and its tensor-parallel plan (below), then the training spec made ``micro`` microbatches along that dimension
(:func:`microbatched`; what pipelining does not take left out), ``scale_grads`` and
``fully_shard``'s ``reshard_after_forward``; where the pipeline leaves more than one rank, how they split between
``dp_shard`` and ``tp`` (every factorization: data parallelism alone first), and on a ``tp`` axis the fsdp2_tp
family's tensor-parallel plan over the whole model (:func:`parityfuzz.parts.tensor_parallel.strategy.tp_plans`;
the sequence made a multiple of ``tp`` on a coin, for sequence parallelism); activation checkpoints inside the
stages; and over ``(pp, dp_shard)`` torchtitan's composition in two cases in three (``fully_shard`` on every block of
a stage, then on the stage, with bfloat16 compute and float32 reductions), else a ``MixedPrecisionPolicy`` for every
stage's ``fully_shard`` (:func:`stage_precision`) and the blocks in their own ``fully_shard`` on a coin.

:func:`resumed` draws a pipeline plan for a case of any family, which a checkpoint load may resume into.

Shrinking: toward world size 2 with a pipeline of 2, no ``tp`` axis, ``gpipe``, a short dense model, the earliest cuts, one
microbatch, ``scale_grads=True``, no mixed precision, and the training spec's own simplest values.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from parityfuzz.case import Case, MeshSpec, ModelSpec, Node, under
from parityfuzz.case.training import input_requires_grad
from parityfuzz.parts.activation_checkpoint import CHECKPOINT_APIS, ActivationCheckpoint
from parityfuzz.families.pipeline import FAMILY, SCHEDULES, PipelinePlan, expected_error, units
from parityfuzz.parts.fully_shard import Policy
from parityfuzz.strategies.cases import finish
from parityfuzz.strategies.coins import OFTEN
from parityfuzz.parts.fully_shard.strategy import LOW
from parityfuzz.parts.tensor_parallel.strategy import sequence_for_tp, tp_plans, tp_training
from parityfuzz.strategies.meshes import world_sizes
from parityfuzz.strategies.models import LEAVES, VOCABS, WIDTHS, bodies
from parityfuzz.strategies.training import training

#: Leaves a pipelined model may hold (no dropout: the family's validation says why).
PIPELINE_LEAVES = tuple(k for k in LEAVES if k not in FAMILY.refused_leaves)
#: The checkpoint APIs with a reentrant form (the composable checkpoint has none).
REENTRANT_APIS = tuple(a for a in CHECKPOINT_APIS if a != "composable")


@st.composite
def pipeline_models(draw, stages: int, max_depth: int) -> ModelSpec:
    """A dense or embedding-input model (untied head) whose body holds enough children for ``stages`` stages, each
    child a sub-body of its own (:func:`parityfuzz.strategies.models.bodies`)."""
    kind = draw(st.sampled_from(("dense", "embedding")))
    in_dim = draw(st.sampled_from(WIDTHS))
    least = max(1, stages - (2 if kind == "embedding" else 0))
    width, children = in_dim, []
    for _ in range(draw(st.integers(least, least + 2))):
        child = draw(bodies(width, max(0, max_depth - 1), leaves=PIPELINE_LEAVES))
        children.append(child)
        width = child.out_width(width)
    body = Node("seq", children=tuple(children))
    if kind == "dense":
        return ModelSpec(body=body, input="dense", in_dim=in_dim)
    return ModelSpec(body=body, input="embedding", in_dim=in_dim, vocab=draw(st.sampled_from(VOCABS)))


@st.composite
def checkpoints(draw, model: ModelSpec, first: tuple[str, ...] = (), train=None) -> tuple[ActivationCheckpoint, ...]:
    """Up to two activation checkpoints of modules inside the stages (``finish`` makes the eligible ones
    reentrant: :mod:`parityfuzz.parts.activation_checkpoint.strategy`); ``first``: the first stage's units, where the swarm switched
    ``reentrant`` on: then at least one checkpoint, inside them (a reentrant checkpoint's only place: its rule), the
    first one where it can be reentrant (its input requires grad under ``train``, a wrapper API)."""
    paths = [path for path, _ in model.module_paths() if path]
    if first:
        paths = [p for p in paths if p != "inp" and under(p, first)] or paths
        able = [p for p in paths if input_requires_grad(model, train, p)]
        if able:  # (the first checkpoint drawn among them; shrinking keeps it there)
            head = draw(st.sampled_from(able))
            rest = draw(st.lists(st.sampled_from([p for p in paths if p != head]), unique=True, max_size=1)) \
                if len(paths) > 1 else []
            return (ActivationCheckpoint(head, api=draw(st.sampled_from(REENTRANT_APIS)),
                                         before=not draw(st.booleans())),
                    *(ActivationCheckpoint(p, api=draw(st.sampled_from(CHECKPOINT_APIS)),
                                           before=not draw(st.booleans())) for p in rest))
    picked = draw(st.lists(st.sampled_from(paths), unique=True, min_size=1 if first else 0, max_size=2)) \
        if first or draw(st.booleans()) else []
    return tuple(ActivationCheckpoint(path, api=draw(st.sampled_from(CHECKPOINT_APIS)), before=not draw(st.booleans()))
                 for path in picked)


@st.composite
def stage_precision(draw, model: ModelSpec, train, titan: bool = False) -> Policy:
    """A ``MixedPrecisionPolicy`` for every stage's ``fully_shard``: torchtitan's default (``mixed_precision_param``
    bfloat16, ``mixed_precision_reduce`` float32) where ``titan``, else one in two draws in three (none on the first
    coin, where it shrinks): ``param_dtype`` a lower precision than the model's or none, ``reduce_dtype`` none,
    float32, the model's or a low one; then ``output_dtype`` none, float32 (with a ``param_dtype``) or the model's;
    ``cast_forward_inputs=False`` where the family's validation allows it (the stages receive what they compute
    in)."""
    master = train.dtype
    if titan:
        param, reduce = ("bfloat16" if master != "bfloat16" else ""), "float32"
    elif not draw(OFTEN):
        return Policy()
    else:
        param = draw(st.sampled_from(tuple(d for d in LOW if d != master) + ("",)))
        reduce = draw(st.sampled_from(("",) + tuple(dict.fromkeys(("float32", master, "bfloat16", "float16")))))
    # (without a param_dtype a stage casts no input: an output_dtype other than the model's would reach the next
    # stage uncast, which the family's validation refuses)
    output = draw(st.sampled_from(("",) + tuple(dict.fromkeys(("float32", master) if param else (master,)))))
    mp = Policy(param_dtype=param, reduce_dtype=reduce, output_dtype=output)
    compute = mp.compute(master)
    must_cast = mp.output(master) != compute or (model.input != "embedding" and compute != master)
    return mp if must_cast or not draw(st.booleans()) else dataclasses.replace(mp, cast_forward_inputs=False)


@st.composite
def microbatched(draw, train, micro: int, split_dim: int):
    """``train`` (its batch and sequence: one microbatch's) as ``micro`` microbatches split along ``split_dim``: the
    batch ``micro`` times one or two rows, or the sequence ``micro`` times its length (no padding under a mean loss
    there: rule ``pipeline.no-microbatch-of-padding-alone``); a summed loss's learning rate stays per term."""
    if split_dim == 0:
        batch = micro * draw(st.integers(1, 2))
        lr = train.lr * train.batch / batch if train.loss == "sum" else train.lr
        return dataclasses.replace(train.unscaled(), batch=batch, lr=lr)
    seq = micro * train.seq_len
    lr = train.lr * train.seq_len / seq if train.loss == "sum" else train.lr
    pad = train.pad if train.loss == "sum" else 0.0
    return dataclasses.replace(train.unscaled(), seq_len=seq, lr=lr, pad=pad)


@st.composite
def cases(draw, allowed: tuple[int, ...], system: str, reference: str, max_depth: int, max_steps: int,
          perturb: bool, swarm: frozenset[str] | None = None) -> Case:
    ws = draw(world_sizes(allowed))
    reentrant = bool(swarm and "reentrant" in swarm)
    schedule = draw(st.sampled_from(tuple(SCHEDULES)))
    pp = draw(st.sampled_from([p for p in (2, 2, 4, 4, 3, 8, 1) if ws % p == 0]))  # one stage: rare
    layout = SCHEDULES[schedule][1]
    per_rank = {"single": 1, "v": 2}.get(layout) or draw(st.sampled_from((2, 1)))
    stages = pp * per_rank
    model = draw(pipeline_models(stages, max_depth))
    count = len(units(model))
    cuts = tuple(sorted(draw(st.lists(st.integers(1, count - 1), min_size=stages - 1, max_size=stages - 1,
                                      unique=True)))) if stages > 1 else ()
    micro = draw(st.integers(1, 2 * stages))
    train = draw(training(model, max_steps=max_steps, swarm=swarm))
    # the batch, or (one in three) the sequence where the schedule takes args_chunk_spec
    split_dim = draw(st.sampled_from((0, 0, 1))) if schedule != "looped_bfs" else 0
    rest = ws // pp
    tp = draw(st.sampled_from([t for t in range(1, rest + 1) if rest % t == 0]))
    dp = rest // tp
    axes = [("pp", pp)] + [(name, size) for name, size in (("dp_shard", dp), ("tp", tp)) if size > 1]
    mesh = MeshSpec(tuple(size for _, size in axes), tuple(name for name, _ in axes))
    styles, loss_parallel = (), False
    if tp > 1:  # (over the sequence a microbatch holds, which the stages' styles shard)
        train = draw(sequence_for_tp(train, tp))
        styles, loss_parallel = draw(tp_plans(model, tp, train.seq_len))
    train = dataclasses.replace(draw(microbatched(train, micro, split_dim)), nonroot="", autocast="",
                                to_float64=False)
    if tp > 1:
        train = tp_training(train, loss_parallel, low_precision=False)
    first = tuple(units(model)[:cuts[0]] if cuts else units(model)) if reentrant else ()
    # torchtitan's composition over (pp, dp_shard), drawn in two cases in three there (shrinks to the general draws):
    # fully_shard on each block of a stage, then on the stage, each with torchtitan's default policy
    titan = dp > 1 and tp == 1 and draw(OFTEN)
    plan = PipelinePlan(schedule=schedule, microbatches=micro, split_dim=split_dim, stages_per_rank=per_rank, cuts=cuts,
                        scale_grads=not draw(st.booleans()), reshard_after_forward=not draw(st.booleans()),
                        checkpoints=draw(checkpoints(model, first, train)), tp=styles, loss_parallel=loss_parallel,
                        precision=draw(stage_precision(model, train, titan)) if dp > 1 and tp == 1 else Policy())
    if "dp_shard" in mesh.names and (titan or draw(st.booleans())):
        # (otherwise the blocks of a stage in their own fully_shard with the stage's policy in one case in two)
        plan = dataclasses.replace(plan, shard_units=True, unit_reshard_after_forward=not draw(st.booleans()))
    return finish(draw, world_size=ws, model=model, mesh=mesh, plan=plan, train=train, system=system,
                  reference=reference, perturb=perturb, swarm=swarm)


@st.composite
def resumed(draw, case: Case, sizes: list[int]) -> dict:
    """A pipeline plan over ``case``'s model on a ``(pp,)`` or ``(pp, dp_shard)`` mesh of one of ``sizes`` (the case's
    world size first): what a checkpoint load may resume a case of any family into
    (:mod:`parityfuzz.strategies.checkpoint`, which keeps the case's own plan where the family's validation refuses
    the model or the training spec).  Every stage count the model's top-level modules allow; the microbatch
    counts that divide the batch and that the schedule takes (else ``gpipe`` with one)."""
    # A tied head shares the embedding's weight, and a parameter sits in one stage (the family's rules): its model
    # resumes into one stage, the rest of the ranks sharding it (it would keep its own plan otherwise).
    count = 1 if case.model.tie_head else len(units(case.model))
    ws = draw(st.sampled_from(sizes))
    choices = [(pp, schedule, per_rank) for pp in (2, 4, 3, 8, 1) if ws % pp == 0
               for schedule, (_, layout) in SCHEDULES.items()
               for per_rank in ({"single": (1,), "v": (2,)}.get(layout) or (1, 2)) if pp * per_rank <= count]
    choices = choices or [(1, "gpipe", 1)]  # (a model of one top-level module: one stage, the rest dp_shard)
    pp, schedule, per_rank = draw(st.sampled_from(choices))
    stages = pp * per_rank
    cuts = tuple(sorted(draw(st.lists(st.integers(1, count - 1), min_size=stages - 1, max_size=stages - 1,
                                      unique=True)))) if stages > 1 else ()
    mesh = MeshSpec((pp,), ("pp",)) if ws == pp else MeshSpec((pp, ws // pp), ("pp", "dp_shard"))
    plan = PipelinePlan(schedule=schedule, microbatches=1, stages_per_rank=per_rank, cuts=cuts)
    batch = case.train.batch
    fits = [m for m in range(1, batch + 1) if batch % m == 0 and expected_error(
        dataclasses.replace(case, world_size=ws, mesh=mesh, plan=dataclasses.replace(plan, microbatches=m)),
        "cpu") is None]
    if not fits:
        plan = dataclasses.replace(plan, schedule="gpipe", stages_per_rank=1, cuts=cuts[:pp - 1])
        fits = [1]
    plan = dataclasses.replace(plan, microbatches=draw(st.sampled_from(fits)), scale_grads=not draw(st.booleans()),
                               reshard_after_forward=not draw(st.booleans()))
    return {"world_size": ws, "mesh": mesh, "plan": plan}
