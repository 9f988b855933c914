"""Mixed precision: the emulating reference agrees with FSDP2 exactly where it should and the oracle
still tells a wrong low-precision run apart."""

import dataclasses

import pytest
import torch
from hypothesis import given, settings

from parityfuzz.case import Case, CaseError, MeshSpec, ModelSpec, Node, TrainSpec
from parityfuzz.case.dtypes import check_consistent, precision
from parityfuzz.families.fsdp2 import FSDP2Plan
from parityfuzz.parts.fully_shard import Wrap
from parityfuzz.judge.verify import verify_case, traces
from parityfuzz.strategies import cases
from parityfuzz.systems.masters import divide_factors
from tests.test_case import simple

MLP_BODY = Node("seq", children=(Node("linear", out=8), Node("act", fn="gelu"), Node("layernorm"),
                                 Node("twice", children=(Node("linear", out=8),)), Node("linear", out=3)))


def mp_case(wraps, ws=2, mesh=None, no_sync=(), no_all_reduce=False, **train) -> Case:
    return simple(world_size=ws, mesh=mesh or MeshSpec((ws,)), model=ModelSpec(body=MLP_BODY),
                  plan=FSDP2Plan(wraps=tuple(wraps), no_sync=no_sync, no_all_reduce=no_all_reduce),
                  reference="ddp_mp",
                  train=TrainSpec(dtype="float32", steps=3, lr=0.1, batch=2, seq_len=2, **train)).validate()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_divide_factors_are_fsdp2s(dtype, n):
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import _get_gradient_divide_factors

    class Group:
        def size(self):
            return n

    pre, post, rs_op, _ = _get_gradient_divide_factors(Group(), None, dtype, "cpu")
    assert divide_factors(dtype, n) == (pre, post, rs_op)


CASES = {
    "bf16 everywhere": [Wrap("", param_dtype="bfloat16")],
    "fp16 with fp32 reduce and output": [Wrap("", param_dtype="float16", reduce_dtype="float32",
                                              output_dtype="float32")],
    "fp32 island in a bf16 model": [Wrap("body.2", param_dtype="float32", output_dtype="bfloat16"),
                                    Wrap("", param_dtype="bfloat16")],
    "module called twice, fp16 reduce": [Wrap("body.3", param_dtype="bfloat16", reduce_dtype="float16",
                                              output_dtype="float16"), Wrap("", param_dtype="float16")],
    "reduce-only policy": [Wrap("body.0", reduce_dtype="bfloat16"), Wrap("")],
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("ws, mesh", [(2, (2,)), (4, (4,)), (4, (2, 2))])
def test_fsdp2_matches_the_emulation(executor, name, ws, mesh):
    names = ("dp_shard",) if len(mesh) == 1 else ("dp_replicate", "dp_shard")
    case = mp_case(CASES[name], ws=ws, mesh=MeshSpec(mesh, names))
    assert verify_case(case, executor).ok


def test_accumulation_in_reduce_dtype_with_sync_off(executor):
    wraps = [Wrap("body.3", param_dtype="bfloat16", reduce_dtype="float32", output_dtype="bfloat16"),
             Wrap("", param_dtype="bfloat16")]
    for no_sync in (("",), ("body.3", ""), ()):
        case = mp_case(wraps, ws=2, microbatches=3, no_sync=no_sync)
        assert_same_gradients_bit_for_bit(executor.run(case), steps=3)


def assert_same_gradients_bit_for_bit(outcomes, steps: int) -> None:
    ref, sut = traces(outcomes, "reference"), traces(outcomes, "system")
    for step in range(steps):
        names = ref.names(step, "grad")
        assert names and names == sut.names(step, "grad")
        for name in names:
            assert (ref.full(step, "grad", name).value == sut.full(step, "grad", name).value).all(), (step, name)


def test_emulation_without_a_policy_is_ddp(executor):
    case = dataclasses.replace(simple(model=ModelSpec(body=MLP_BODY), train=TrainSpec(steps=2, microbatches=2),
                                      plan=FSDP2Plan(no_sync=("",))),
                               reference="ddp_mp", system="ddp")
    assert verify_case(case, executor).ok


def test_low_precision_fault_is_caught_and_plain_policies_are_not_flagged(executor):
    case = mp_case(CASES["bf16 everywhere"])
    assert verify_case(dataclasses.replace(case, system="tests.faults:LowPrecisionGradSummed"), executor).kind == "mismatch"
    assert verify_case(dataclasses.replace(case, plan=FSDP2Plan(wraps=(Wrap(""),)), reference="ddp",
                                     system="tests.faults:LowPrecisionGradSummed"), executor).ok


def test_plain_ddp_is_refused_as_a_mixed_precision_reference():
    with pytest.raises(CaseError) as e:
        dataclasses.replace(mp_case(CASES["bf16 everywhere"]), reference="ddp").validate()
    assert e.value.field == "reference"
    with pytest.raises(CaseError) as e:
        mp_case([Wrap("", param_dtype="half")])
    assert e.value.field == "plan.wraps[0].param_dtype"


def test_precision_is_the_least_precise_dtype():
    assert precision(mp_case(CASES["fp32 island in a bf16 model"])) == "bfloat16"
    assert precision(mp_case(CASES["reduce-only policy"])) == "bfloat16"
    assert precision(mp_case([Wrap("", param_dtype="float16", reduce_dtype="bfloat16")])) == "bfloat16"
    assert precision(mp_case([Wrap("", param_dtype="float16")])) == "float16"
    assert precision(simple()) == "float64"


@settings(max_examples=200)
@given(cases())
def test_generated_policies_keep_activation_dtypes_consistent(case):
    """A module computing in another dtype than its inputs arrive in casts them, and casts its outputs back."""
    if case.mixed_precision():
        assert case.reference_name() == "ddp_mp"
        assert check_consistent(case) is None


@pytest.mark.parametrize("wraps, field", [
    ([Wrap("", param_dtype="bfloat16", cast_forward_inputs=False)], "plan.wraps[0].cast_forward_inputs"),
    ([Wrap("body.2", param_dtype="float32"), Wrap("", param_dtype="bfloat16")], "plan.wraps[0].output_dtype"),
    ([Wrap("body.2", param_dtype="float32", output_dtype="float16"), Wrap("", param_dtype="bfloat16")],
     "plan.wraps[0].output_dtype"),
    ([Wrap("body.2", param_dtype="float32", output_dtype="bfloat16", cast_forward_inputs=False),
      Wrap("", param_dtype="bfloat16")], "plan.wraps[0].cast_forward_inputs"),
])
def test_a_policy_that_leaves_a_layer_two_dtypes_is_refused(wraps, field):
    with pytest.raises(CaseError) as e:
        mp_case(wraps)
    assert e.value.field == field


def test_reduce_scatter_only_microbatches_on_hsdp(executor):
    wraps = [Wrap("body.2", param_dtype="bfloat16", reduce_dtype="float16", output_dtype="float32"),
             Wrap("", param_dtype="float32", reduce_dtype="bfloat16")]
    case = mp_case(wraps, ws=4, mesh=MeshSpec((2, 2), ("dp_replicate", "dp_shard")), microbatches=3, no_all_reduce=True)
    assert_same_gradients_bit_for_bit(executor.run(case), steps=3)


def test_the_emulating_reference_holds_deferred_sums_per_parameter(executor):
    """HSDP with ``set_requires_all_reduce(False)`` and a parameter unused on one microbatch (a gate): the
    reference's held reduce-scatter sums change layout between microbatches.  It kept one flat buffer and crashed
    adding them (a 20-minute run's false alarm); it now holds them per parameter and trains (FSDP2 itself fails
    there: a known bug)."""
    gated = Node("seq", children=(Node("gate", period=2, children=(Node("layernorm"),)), Node("linear", out=4)))
    case = simple(world_size=2, mesh=MeshSpec((2, 1), ("dp_replicate", "dp_shard")), model=ModelSpec(body=gated),
                  plan=FSDP2Plan(wraps=(Wrap("", param_dtype="bfloat16"),), no_all_reduce=True),
                  train=TrainSpec(lr=0.0025, microbatches=2, steps=2), reference="ddp_mp").validate()
    verdict = verify_case(dataclasses.replace(case, system="ddp_mp"), executor)
    assert verdict.ok, verdict.describe()


def test_a_held_sum_joins_the_next_reduction_that_carries_a_gradient(executor):
    """HSDP with ``set_requires_all_reduce(False)``, a module called twice: on the last microbatch the second
    call's post-backward runs before autograd has accumulated the parameter's gradient (one AccumulateGrad for
    both uses), so it has nothing to reduce.  The reference all-reduced the held bf16 sum there and added the
    later reduction to it in fp32, a rounding torch documents nowhere; FSDP2 adds the held sum to the next
    reduction with a gradient, in reduce_dtype.  The fuzzer reported the 0.19% difference as a finding (the
    issue-30 run, corpus/fsdp2/f99fed4c77cb6ff3.json): a false alarm, now bit for bit."""
    twice = Node("seq", children=(Node("twice", children=(Node("scale", out=1),)),))
    wraps = (Wrap("body", param_dtype="float16", output_dtype="bfloat16"),
             Wrap("body.0", param_dtype="bfloat16", output_dtype="float16"),
             Wrap("body.0.inner", param_dtype="bfloat16"), Wrap("", param_dtype="bfloat16"))
    case = simple(world_size=2, seed=1, mesh=MeshSpec((1, 2), ("dp_replicate", "dp_shard")),
                  model=ModelSpec(body=twice), plan=FSDP2Plan(wraps=wraps, no_all_reduce=True),
                  train=TrainSpec(microbatches=2)).validate()
    assert case.case_id() == "f99fed4c77cb6ff3"
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()
