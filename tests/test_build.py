"""Every generated case builds: the module tree, the plan's paths and each rank's inputs."""

import dataclasses

import torch
from hypothesis import given, settings

from parityfuzz.case import MeshSpec, ModelSpec, Node
from parityfuzz.run.build import batch_for, build_model
from parityfuzz.run.record import torch_dtype
from parityfuzz.strategies import cases
from tests.test_case import simple


@settings(max_examples=40)
@given(cases())
def test_generated_cases_build_and_run_forward(case):
    model = build_model(case)  # a fresh clock: gates run their child on forward 0
    paths = {name for name, _ in model.named_modules()}
    assert paths == {p for p, _ in case.model.module_paths()}
    for w in case.plan.wraps:
        model.get_submodule(w.path)
    if case.train.to_float64:  # as every system does, before or after wrapping
        model = model.to(torch.float64)
    out = model(batch_for(case, 0, 0))
    assert out.dtype == (torch.float64 if case.train.to_float64 else torch_dtype(case.train.dtype))
    assert out.shape[:2] == (case.train.batch, case.train.seq_len)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@settings(max_examples=10)
@given(cases())
def test_same_weights_for_every_build(case):
    a, b = build_model(case), build_model(case)
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert na == nb and torch.equal(pa, pb)


def test_build_does_not_touch_global_rng():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    build_model(simple())
    assert torch.equal(torch.rand(3), expected)


def test_inputs_differ_per_rank_and_step_unless_same_input():
    case = simple(world_size=2, mesh=MeshSpec((2,)))
    assert not torch.equal(batch_for(case, 0, 0), batch_for(case, 1, 0))
    # Keyed by the data-parallel index: ranks 2k and 2k+1 of a (dp_shard, tp) mesh form one tp group.
    tp = dataclasses.replace(case, world_size=4, mesh=MeshSpec((2, 2), ("dp_shard", "tp")))
    assert torch.equal(batch_for(tp, 2, 0), batch_for(tp, 3, 0)) and torch.equal(batch_for(tp, 1, 0), batch_for(case, 0, 0))
    assert torch.equal(batch_for(tp, 2, 0), batch_for(case, 1, 0))
    assert not torch.equal(batch_for(case, 0, 0), batch_for(case, 0, 1))
    assert torch.equal(batch_for(case, 1, 3), batch_for(case, 1, 3))
    same = simple(train=case.train.__class__(same_input=True))
    assert torch.equal(batch_for(same, 0, 0), batch_for(same, 1, 0))


def test_tied_head_shares_the_embedding_weight():
    case = simple(model=ModelSpec(body=Node("seq", children=(Node("linear", out=4),)), input="embedding",
                                  vocab=7, tie_head=True))
    model = build_model(case.validate())
    assert model.head.weight is model.inp.weight
    assert "head.weight" not in dict(model.named_parameters())


def test_twice_calls_its_child_twice():
    case = simple(model=ModelSpec(body=Node("twice", children=(Node("linear", out=4),))))
    model = build_model(case.validate())
    calls = []
    model.body.inner.register_forward_hook(lambda *a: calls.append(1))
    model(batch_for(case, 0, 0))
    assert len(calls) == 2


def test_gate_runs_its_child_on_every_period_th_forward():
    from parityfuzz.run.build import ForwardClock

    case = simple(model=ModelSpec(body=Node("seq", children=(Node("linear", out=4),
                                                             Node("gate", period=3, children=(Node("linear", out=4),))))))
    clock = ForwardClock()
    model = build_model(case.validate(), clock=clock)
    calls = []
    model.body[1].inner.register_forward_hook(lambda *a: calls.append(1))
    ran = []
    for step in range(3):
        for micro in range(2):
            clock.set(step, micro, 2)
            before = len(calls)
            model(batch_for(case, 0, step, micro=micro))
            ran.append(len(calls) > before)
    assert ran == [True, False, False, True, False, False]  # forward indices 0..5, multiples of 3


def test_scale_has_a_constant_buffer_and_a_3d_parameter():
    case = simple(model=ModelSpec(body=Node("seq", children=(Node("scale", out=3),))))
    model = build_model(case.validate())
    assert dict(model.named_buffers())["body.0.gain"].shape == (4,)
    assert dict(model.named_parameters())["body.0.w"].shape == (3, 1, 4)


def test_dropout_masks_match_under_checkpointing_and_a_lost_rng_state_is_caught(executor):

    from parityfuzz.case import TrainSpec
    from parityfuzz.families.fsdp2 import FSDP2Plan
    from parityfuzz.parts.fully_shard import Wrap
    from parityfuzz.parts.activation_checkpoint import ActivationCheckpoint
    from parityfuzz.judge.verify import verify_case

    body = Node("seq", children=(Node("linear", out=8), Node("dropout", p=0.5), Node("linear", out=4)))
    for api in ("composable", "wrapper", "apply"):
        case = simple(model=ModelSpec(body=body), train=TrainSpec(steps=2, batch=4, microbatches=2),
                      plan=FSDP2Plan(wraps=(Wrap("body"), Wrap("")), checkpoints=(ActivationCheckpoint("body", api=api),)))
        assert verify_case(case.validate(), executor).ok, api
        lost = verify_case(dataclasses.replace(case, system="tests.faults:CheckpointLosesRNG"), executor)
        assert lost.kind == "mismatch", api


@settings(max_examples=40)
@given(cases())
def test_every_wrapped_module_takes_its_non_root_pass_input(case):
    """``batch_for(path=...)`` feeds a non-root pass what the module sees inside the model: a forward and
    backward through each wrapped submodule alone runs (mixed-precision cases need their policies' casts,
    run on the executor)."""
    if case.mixed_precision():
        return
    model = build_model(case)
    if case.train.to_float64:
        model = model.to(torch.float64)
    for path in [w.path for w in case.plan.wraps if w.path and case.model.uses_params(w.path)]:
        module = model.get_submodule(path)
        x = batch_for(case, 0, 0, path=path)
        assert x.dtype == (torch.long if case.model.input_width(path) is None else next(module.parameters()).dtype)
        module(x).sum().backward()
