"""Subtle faults injected inside FSDP2 itself (tests/faults/): one replica not all-reduced, a reduction in
bf16 where the policy says fp32, a gradient off by 0.5%, a drift of 0.3% from step 3 on, an output left in
bf16 where the policy says fp32.

Each is first shown on a hand-written case where it must act (and where unmodified FSDP2 passes), then found
by short fuzz runs over two fuzz seeds and shrunk to a case that still shows its situation."""

import dataclasses

import pytest

from parityfuzz.case import MeshSpec, ModelSpec, Node, TrainSpec
from parityfuzz.families.fsdp2 import FSDP2Plan
from parityfuzz.parts.fully_shard import Wrap
from parityfuzz.judge.verify import verify_case
from tests.test_case import simple
from tests.test_fuzz_loop import body_modules, fuzz

MLP = ModelSpec(body=Node("seq", children=(Node("linear", out=8), Node("act", fn="gelu"), Node("linear", out=3))))
ATTENTION = ModelSpec(body=Node("seq", children=(Node("linear", out=8), Node("attention", heads=2),
                                                  Node("layernorm"), Node("linear", out=4))))
HSDP = MeshSpec((2, 2), ("dp_replicate", "dp_shard"))
BF16_FP32_REDUCE = FSDP2Plan(wraps=(Wrap("", param_dtype="bfloat16", reduce_dtype="float32"),))

def dim0s(case) -> list[int]:
    """The dim-0 size of every parameter of the case's model (what FSDP2 shards)."""
    m, out = case.model, []
    for path, kind in m.module_paths():
        if kind in ("linear", "layernorm") and not (path == "head" and m.tie_head):
            out.append(m.output_width(path))
        elif kind == "embedding":
            out.append(m.vocab)
    out += [node.out for _, node in m.body.walk("body") if node.kind == "scale"]
    return out


#: fault -> (a case where it acts, the check the oracle must report, what a shrunk case must still show)
FAULTS = {
    "ReplicaNotAllReduced": (
        simple(world_size=4, mesh=HSDP, model=MLP), "replica",
        lambda c: len(c.mesh.shape) == 2 and c.mesh.shape[0] > 1),
    "ReducesInBf16": (
        simple(model=MLP, plan=BF16_FP32_REDUCE, reference="ddp_mp", train=TrainSpec(dtype="float32")), "value",
        lambda c: any(w.param_dtype in ("bfloat16", "float16") and w.reduce_dtype == "float32"
                      for w in c.plan.wraps)),
    "UnevenShardGradOff": (simple(model=MLP), "value", lambda c: any(d % c.mesh.shape[-1] for d in dim0s(c))),
    "LateGradDrift": (
        simple(model=ATTENTION, train=TrainSpec(steps=5, lr=0.1)), "value",
        lambda c: "has:attention" in c.features() and c.train.steps >= 4),
    "OutputLeftInBf16": (
        simple(model=MLP, reference="ddp_mp", train=TrainSpec(dtype="float32"),
               plan=FSDP2Plan(wraps=(Wrap("", param_dtype="bfloat16", output_dtype="float32"),))), "dtype",
        lambda c: any(w.output_dtype == "float32" for w in c.plan.wraps)),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_the_fault_acts_where_it_should_and_fsdp2_passes_there(executor, fault):
    case, expected, _ = FAULTS[fault]
    case = case.validate()
    assert verify_case(case, executor).ok
    verdict = verify_case(dataclasses.replace(case, system=f"tests.faults:{fault}"), executor)
    assert verdict.kind == "mismatch" and verdict.divergence.check == expected, verdict.describe()
    if fault == "LateGradDrift":
        assert verdict.divergence.step == 3
    if fault == "ReplicaNotAllReduced":
        assert verdict.divergence.ranks == (0, 2)


#: Every fault on seed 1 in CI, on seed 2 too with --long (CI time: the seed-2 runs cost ~90 s and are green); the
#: seed-1 runs of ReducesInBf16 and LateGradDrift (64 s and 27 s on a clean clone) with --long too: their
#: hand-written cases run in CI, and bf16 reductions and late drifts are fuzzed there in other families' tests.
LONG_SEED_1 = ("ReducesInBf16", "LateGradDrift")
SEEDS = [(f, 1) if f not in LONG_SEED_1 else pytest.param(f, 1, marks=pytest.mark.long) for f in FAULTS] \
    + [pytest.param(f, 2, marks=pytest.mark.long) for f in FAULTS]


@pytest.mark.parametrize("fault, seed", SEEDS)
def test_a_short_fuzz_run_finds_and_shrinks_the_fault(executor, tmp_path, fault, seed):
    _, _, shows = FAULTS[fault]
    hsdp = fault == "ReplicaNotAllReduced"  # needs a 2-D mesh with replicas: world size 4
    # Up to one round of cases (the run stops at its first failure): a bf16 fault's situation (bf16 parameters with
    # a float32 reduction or output in one policy) is about 5% of world-size-2 draws, met in clumps of neighbours.
    stats = fuzz(executor, tmp_path, f"tests.faults:{fault}", seed=seed, max_cases=250, max_shrink_runs=20,
                 world_sizes=(4,) if hsdp else (2,), locate=fault == "UnevenShardGradOff")
    # (one failure, or two where the shrink slipped to another signature of the fault and kept the first found too)
    assert 1 <= len(stats.failures) <= 2 and all(shows(g.case) for g in stats.failures), stats.summary_line()
    f = stats.failures[0]
    print(f"{fault} seed {seed}: found after {f.cases_to_find} cases / {f.seconds_to_find:.1f}s, shrunk in "
          f"{f.shrink_runs} runs / {f.shrink_seconds:.1f}s to {body_modules(f.case)} modules: {f.verdict.describe()}")
    assert f.verdict.kind in ("mismatch", "error"), f.verdict.describe()
    assert shows(f.case), f.case.to_json(indent=1)
    if fault == "UnevenShardGradOff":  # acts on the gradients whose dim 0 the shard group does not divide
        from parityfuzz.run.build import build_model

        origin = f.verdict.origin
        shape = dict(build_model(f.case).named_parameters())[origin.tensor].shape
        assert origin.what == "grad" and shape[0] % f.case.mesh.shape[-1], (origin, shape)


BF16 = FSDP2Plan(wraps=(Wrap("", param_dtype="bfloat16"),))


@pytest.mark.parametrize("fault, model, train", [
    ("UnevenShardGradOff", MLP, TrainSpec(dtype="float32")),
    ("LateGradDrift", ATTENTION, TrainSpec(steps=5, lr=0.1, dtype="float32")),
])
def test_small_faults_are_caught_under_bf16_mixed_precision(executor, fault, model, train):
    """Where the previous oracle allowed bf16's 1.6e-2 (it passed the 0.5% fault, and cleared the late drift as
    numerically unstable), the emulating reference's bit-exact agreement lets the floor stay at float32's."""
    case = simple(model=model, plan=BF16, reference="ddp_mp", train=train).validate()
    assert verify_case(case, executor).ok
    verdict = verify_case(dataclasses.replace(case, system=f"tests.faults:{fault}"), executor)
    assert verdict.kind == "mismatch" and verdict.divergence.check == "value", verdict.describe()
