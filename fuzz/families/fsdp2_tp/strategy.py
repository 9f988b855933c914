"""Cases of the ``fsdp2_tp`` family: tensor (and sequence) parallelism, then FSDP2 on the data-parallel
sub-mesh, trained against DDP with the ranks of a tensor-parallel group sharing their batch.

Drawn in this order: world size, mesh (:mod:`.meshes`), the model (two times in three a transformer-shaped stack,
else a generic tree with RMSNorm among its leaves; no tied head),
the FSDP2 wrap plan on the data-parallel axes (``parityfuzz.parts.fully_shard.strategy``; none for TP alone), the
generic training spec (two times in three with a sequence length tp divides, for sequence parallelism), FSDP2's
accumulation switches and mixed-precision policies (the fully_shard part's; the reference then emulates the
policy on the same tensor-parallel model), the tensor-parallel styles (:mod:`.tensor_parallel`), the seed and
delays; then, on rare coins, per-rank control flow (gates keyed by the data-parallel index, in generic models on
meshes with more than one data-parallel rank) and a non-root pass through a wrapped module the TP plan lets run
alone.

Shrinking: toward world size 2 on ``(dp_shard=1, tp=2)``, a one-Linear model, nothing parallelized, only the
root wrapped, one step of default training.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from parityfuzz.case import Case, ModelSpec, TrainSpec
from parityfuzz.families.fsdp2_tp import FSDP2TPPlan, nonroot_paths
from parityfuzz.parts.fully_shard.strategy import accumulation, plans, precision_policies
from parityfuzz.parts.tensor_parallel import PREPARE
from parityfuzz.strategies.cases import finish
from parityfuzz.strategies.coins import RARE
from parityfuzz.families.fsdp2_tp.meshes import meshes
from parityfuzz.parts.tensor_parallel.strategy import (OFTEN, overflow_outside, sequence_for_tp, tp_plans,
                                                       tp_training, transformer_models)
from parityfuzz.strategies.meshes import world_sizes
from parityfuzz.strategies.models import LEAVES, models
from parityfuzz.strategies.swarm import flag
from parityfuzz.strategies.training import training


def _no_int_reshard_over_tp(plan: FSDP2TPPlan) -> FSDP2TPPlan:
    """``reshard_after_forward=True`` where a drawn int would reshard tensor-parallel parameters to a smaller
    mesh (FSDP2 raises NotImplementedError for DTensor parameters; see ``parityfuzz.families.fsdp2_tp.validate``)."""
    owners = {plan.owner(p.path) for p in plan.tp if p.style not in PREPARE}
    return dataclasses.replace(plan, wraps=tuple(
        dataclasses.replace(w, reshard_after_forward=True)
        if w.path in owners and not isinstance(w.reshard_after_forward, bool) else w for w in plan.wraps))


@st.composite
def _nonroot(draw, model: ModelSpec, plan: FSDP2TPPlan, train: TrainSpec,
             swarm: frozenset[str] | None = None) -> TrainSpec:
    """On a rare coin (the swarm's, where it switched ``nonroot`` on), a non-root pass through a wrapped module that
    holds each group of tensor-parallel styles passing sharded activations whole or not at all
    (``parityfuzz.families.fsdp2_tp.connections``): alone, it takes and gives full tensors.  Drawn after the TP
    plan, which decides what may be cut.  Not with per-rank gates (see strategies.fsdp2), nor with loss scaling
    (DDP's non-root pass is unscaled: where the swarm switched both on, one side by a coin)."""
    if not flag(draw, swarm, "nonroot", RARE) or plan.reduce_scatter_unused:
        return train
    if train.loss_scale:
        if swarm is None or not draw(st.booleans()):
            return train
        train = train.unscaled()
    trainable = frozenset(f.path for f in train.frozen)
    paths = [p for p in nonroot_paths(plan) if model.uses_params(p, trainable)]
    return dataclasses.replace(train, nonroot=draw(st.sampled_from(paths))) if paths else train


@st.composite
def cases(draw, allowed: tuple[int, ...], system: str, reference: str, max_depth: int, max_steps: int,
          perturb: bool, swarm: frozenset[str] | None = None) -> Case:
    ws = draw(world_sizes(allowed))
    mesh = draw(meshes(ws))
    if draw(OFTEN):
        model = draw(transformer_models())
    else:  # per-rank control flow on a rare coin: gates keyed by the data-parallel index (alike over a tp group)
        rank_flow = draw(RARE) and mesh.dp_size() > 1
        model = draw(models(max_depth, rank_period=mesh.dp_size() if rank_flow else 0, leaves=LEAVES + ("rmsnorm",),
                            tie=False))
    data_parallel = mesh.names != ("tp",)
    if data_parallel:
        plan = draw(plans(model, mesh, FSDP2TPPlan))
        plan = dataclasses.replace(plan, post_optim_event=flag(draw, swarm, "post_optim_event",
                                                               st.just(plan.post_optim_event)))
    else:
        plan = FSDP2TPPlan(wraps=())
    train = draw(training(model, max_steps=max_steps, swarm=swarm))
    if data_parallel:
        plan = draw(accumulation(plan, train, mesh))
        plan = draw(precision_policies(plan, model, train)) if not train.to_float64 else plan
        if plan.mixed_precision() and train.to_float64:
            train = dataclasses.replace(train, to_float64=False)  # policies name dtypes relative to the model's
    tp_size = mesh.axis_size("tp")
    train = draw(sequence_for_tp(train, tp_size))
    tp, loss_parallel = draw(tp_plans(model, tp_size, train.seq_len))
    plan = dataclasses.replace(plan, tp=tp, loss_parallel=loss_parallel)
    # (TP alone: its own reference, no low precision; no overflow in a tensor-parallel module)
    train = overflow_outside(tp_training(train, loss_parallel, low_precision=data_parallel), tp)
    plan = _no_int_reshard_over_tp(plan)
    train = draw(_nonroot(model, plan, train, swarm))
    return finish(draw, world_size=ws, model=model, mesh=mesh, plan=plan, train=train, system=system,
                  reference=reference, perturb=perturb, swarm=swarm)
