"""The training-loop dimensions every system gets: they run on both systems and agree on unmodified FSDP2."""

import dataclasses

import pytest

from parityfuzz.case import Freeze, MeshSpec, ModelSpec, Node, ParamGroup, TrainSpec
from parityfuzz.families.fsdp2 import FSDP2Plan
from parityfuzz.parts.fully_shard import Wrap
from parityfuzz.judge.verify import verify_case
from tests.test_case import simple

BODY = Node("seq", children=(Node("linear", out=8), Node("act", fn="tanh"), Node("linear", out=5),
                             Node("layernorm"), Node("linear", out=4)))
PLAN = FSDP2Plan(wraps=(Wrap("body.2"), Wrap("")), no_sync=("",))  # sync off on non-last microbatches
GATED = Node("seq", children=(Node("linear", out=4), Node("gate", period=2, by_rank=True,
                                                           children=(Node("linear", out=4),)), Node("linear", out=4)))

CASES = {
    "momentum, weight decay, clipping, StepLR": TrainSpec(steps=4, momentum=0.9, weight_decay=0.1, clip=0.1,
                                                          scheduler="step", lr=0.1),
    "AdamW in parameter groups, LinearLR": TrainSpec(steps=3, optimizer="adamw", scheduler="linear", groups=(
        ParamGroup(("body.2",), lr_scale=2.0, weight_decay=0.05), ParamGroup(("body.0",), lr_scale=0.1))),
    "frozen, then unfrozen at step 2": TrainSpec(steps=4, frozen=(Freeze("body.2", until=2), Freeze("body.0"))),
    "evaluation forward after every step": TrainSpec(steps=3, eval=True, microbatches=2),
    "Adam in float32": TrainSpec(steps=4, optimizer="adam", dtype="float32", lr=0.1),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("mesh", [(2,), (2, 2)])
def test_training_loop_dimensions_agree_on_fsdp2(executor, name, mesh):
    names = ("dp_shard",) if len(mesh) == 1 else ("dp_replicate", "dp_shard")
    ws = 2 if len(mesh) == 1 else 4
    case = simple(world_size=ws, mesh=MeshSpec(mesh, names), model=ModelSpec(body=BODY), plan=PLAN,
                  train=CASES[name]).validate()
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()


def test_evaluation_passes_are_compared(executor):
    case = simple(model=ModelSpec(body=BODY), plan=PLAN, train=TrainSpec(steps=2, eval=True)).validate()
    outcomes = executor.run(case)
    passes = outcomes[0].result["system"].passes
    assert passes == [(0, ""), (0, "eval"), (1, ""), (1, "eval")]


@pytest.mark.parametrize("ws, mesh, policy", [
    (2, (2,), ""), (2, (2,), "bfloat16"), (4, (2, 2), ""),
])
def test_control_flow_that_differs_per_rank_trains_like_ddp(executor, ws, mesh, policy):
    """A child used on some ranks only: DDP with find_unused_parameters, FSDP2 with
    set_reduce_scatter_unused_params(True) (in mixed precision: the emulating reference includes the same
    zero gradients)."""
    names = ("dp_shard",) if len(mesh) == 1 else ("dp_replicate", "dp_shard")
    wraps = (Wrap("body.0", param_dtype=policy), Wrap("", param_dtype=policy))
    case = simple(world_size=ws, mesh=MeshSpec(mesh, names), model=ModelSpec(body=GATED),
                  plan=FSDP2Plan(wraps=wraps, reduce_scatter_unused=True),
                  train=TrainSpec(steps=3, dtype="float32" if policy else "float64", microbatches=2),
                  ).validate()
    assert "rank_flow" in case.features()
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()
    without = dataclasses.replace(case, plan=dataclasses.replace(case.plan, reduce_scatter_unused=False))
    assert verify_case(without, executor).kind in ("crash", "error", "hang")  # ranks reduce-scatter unevenly


def test_training_stays_bounded_so_every_step_is_compared(executor):
    """The loss has a minimum (MSE against per-rank targets): at lr 0.1 for 10 steps the reference stays
    finite and small, so the oracle compares every step (with ``out.sum()`` a model's loss passes 1e6 within
    a few steps at this lr, and the previous oracle stopped comparing there)."""
    from parityfuzz.judge.verify import traces

    case = simple(model=ModelSpec(body=BODY), plan=PLAN, train=TrainSpec(steps=10, lr=0.1, batch=4, loss="mean")).validate()
    outcomes = executor.run(case)
    ref = traces(outcomes, "reference")
    losses = [float(r.value) for i in range(10) for r in ref.losses(i)]
    assert max(losses) < 100 and losses[-1] < losses[0]
    verdict = verify_case(case, executor)
    assert verdict.ok and verdict.note == ""
