"""The composable family: fully_shard, both replicate APIs and composable checkpoint composed on one tree train
like DDP, in the orders PyTorch's tests use and others; the refusals torch documents are expected errors; the
invariants on names and managed tensor types hold; a fault inside replicate is found and shrunk."""

import dataclasses

import pytest

from parityfuzz.case import CaseError, Freeze, MeshSpec, ModelSpec, Node, TrainSpec
from parityfuzz.families.composable import ComposablePlan, Compose
from parityfuzz.judge.verify import verify_case
from tests.shrinking import clean_run, found_and_shrunk
from tests.test_case import simple

# Two units (an MLP and a Linear pair) between Linears: the shape of PyTorch's CompositeParamModel.
BODY = Node("seq", children=(Node("linear", out=6), Node("mlp", hidden=4),
                             Node("seq", children=(Node("linear", out=6), Node("layernorm"))), Node("linear", out=3)))
FLAT = MeshSpec((2,), ("dp_shard",))
HSDP = MeshSpec((2, 2), ("dp_replicate", "dp_shard"))


def composed(*calls, mesh=FLAT, **train):
    train = TrainSpec(steps=3, batch=2, lr=0.05, optimizer="adam", microbatches=2, **train)
    plan = ComposablePlan(applies=tuple(Compose(path, api) for api, path in calls))
    return simple(world_size=mesh.size, mesh=mesh, plan=plan, model=ModelSpec(body=BODY, in_dim=4),
                  train=train).validate()


# PyTorch's test_fully_shard_replicate_composability configs ("1fm,1r", "1r,1fm", "1r1fm,1fm",
# "1fm1fm,1r1r,1fm"), the FSDP-based replicate in their places, and orders they do not list.
@pytest.mark.parametrize("calls, mesh", [
    ((("fully_shard", "body.1"), ("replicate", "")), FLAT),
    ((("replicate", "body.1"), ("fully_shard", "")), HSDP),
    ((("replicate", "body.1"), ("fully_shard", "body.2"), ("checkpoint", "body.2"), ("fully_shard", "")), FLAT),
    ((("fully_shard", "body.1.fc1"), ("fully_shard", "body.2.0"), ("replicate_fsdp", "body.1"),
      ("replicate_fsdp", "body.2"), ("fully_shard", "")), HSDP),
    ((("replicate", ""), ("checkpoint", "body.1"), ("fully_shard", "body.1")), FLAT),  # lazy replicate first
])
def test_compositions_train_like_ddp(executor, calls, mesh):
    case = composed(*calls, mesh=mesh, clip=0.5, foreach=True)
    assert case.reference_name() == "ddp"
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()


@pytest.mark.parametrize("calls, error", [
    ((("fully_shard", "body.1"), ("replicate", "body.1"), ("fully_shard", "")), "RuntimeError"),
    ((("fully_shard", "body.1"), ("replicate_fsdp", "body.1"), ("fully_shard", "")), "RuntimeError"),
    ((("replicate", ""), ("replicate", "")), "AssertionError"),
])
def test_documented_refusals_pass_when_torch_raises_and_fail_when_suppressed(executor, calls, error):
    case = composed(*calls)
    assert case.plan.refusal().type == error
    assert verify_case(case, executor).ok
    suppressed = verify_case(dataclasses.replace(case, system="tests.faults:ComposableRefusalSuppressed"), executor)
    assert suppressed.kind == "mismatch" and suppressed.divergence.check == "no_error", suppressed.describe()


@pytest.mark.parametrize("calls, field", [
    ((("fully_shard", ""), ("replicate", "body.1")), r"plan.applies\[1\].path"),  # after fully_shard on an ancestor
    ((("replicate_fsdp", "body.1"), ("fully_shard", "body.1"), ("fully_shard", "")), r"plan.applies\[1\].api"),
    ((("fully_shard", "body.1"),), "plan.applies"),  # the other parameters belong to no API
    ((("replicate", "body.1"), ("fully_shard", "body.1.fc1"), ("fully_shard", "body.1.fc2"), ("fully_shard", "")),
     "plan.applies"),  # a replicate left without parameters
])
def test_plans_outside_the_documented_compositions_are_refused(calls, field):
    with pytest.raises(CaseError, match=field):
        composed(*calls)


def test_a_replicate_under_fully_shard_left_unaveraged_is_found_and_shrunk(executor, tmp_path):
    f, modules = found_and_shrunk(executor, tmp_path, "composable", "ReplicateUnderFullyShardUnaveraged", (2,),
                                  seed=3)
    assert f.verdict.kind == "mismatch"
    assert "replicate<fully_shard" in f.case.features(), f.case.to_json(indent=1)
    # Within 20 shrink runs the plan comes down to the calls that show it (replicate on a child, fully_shard
    # above); the tree, whose paths the calls name, shrinks more slowly.  Seed 1 drew another first case once
    # the invariant on replicate's private parameter list went (17 modules after 20 runs); seeds 2, 3, 4 shrank
    # to 2, 3 and 1 modules.  Since the composable strategy draws the post-optimizer event, seed 2's first case is
    # another, which keeps 5 calls after 20 runs; seed 3 still shrinks.
    assert len(f.case.plan.applies) <= 4 and modules <= 8, f.case.to_json(indent=1)


def test_no_false_alarm_on_composable_cases(executor, tmp_path):
    clean_run(executor, tmp_path, "composable", 10)


def test_replicate_names_a_tied_weight_under_both_names(executor):
    """The DDP-based replicate over a tied embedding/head weight trains like DDP (a 20-minute run once made a
    false alarm of it through an invariant on replicate's private parameter list, since removed)."""
    model = ModelSpec(body=Node("seq", children=(Node("linear", out=6),)), input="embedding", in_dim=6, vocab=8,
                      tie_head=True)
    case = dataclasses.replace(composed(("replicate", "")), model=model).validate()
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()


def test_a_frozen_module_left_unsharded_by_its_forward_is_no_invariant_violation(executor):
    """``fully_shard(reshard_after_forward=False)`` on a frozen module under a ``replicate_with_fsdp`` root: after
    the forward its registered parameters are the unsharded ones (the docstring says so for ``False``), and no
    gradient computation reshards them ("After gradient computation, FSDP frees the unsharded parameters").
    The invariant demanded sharded DTensors of every fully_shard parameter after the first backward and reported
    this documented state as a torch bug (the second issue-30 run, corpus/composable/91af762ef102fadc); it now
    asks it only of parameters with a gradient, and the case trains like DDP."""
    body = Node("seq", children=(Node("mlp", hidden=1), Node("attention", heads=1)))
    plan = ComposablePlan(applies=(Compose("body.0.fc1", "fully_shard", reshard_after_forward=False),
                                   Compose("", "replicate_fsdp")))
    case = simple(world_size=1, mesh=MeshSpec((1,)), model=ModelSpec(body=body), plan=plan,
                  train=TrainSpec(frozen=(Freeze("body.0"),))).validate()
    assert case.case_id() == "91af762ef102fadc"
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()
