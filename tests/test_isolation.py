"""Every case starts from the same rank state: order does not matter, replays agree."""

import dataclasses

from parityfuzz.case import ModelSpec, Node, TrainSpec
from parityfuzz.judge.verify import verdict_from_outcomes
from tests.test_case import simple

MLP_MODEL = ModelSpec(body=Node("seq", children=(Node("mlp", hidden=5), Node("linear", out=3))))
CASES = {
    "a": simple(model=MLP_MODEL),
    "b": simple(model=MLP_MODEL, seed=7, train=TrainSpec(steps=3, optimizer="adam")),
    "c": simple(seed=3, train=TrainSpec(steps=2, optimizer="adamw", zero_grad="alternate")),
    "polluter": simple(model=MLP_MODEL, system="tests.faults:Polluter"),
}


def losses_of(outcomes) -> list[list[tuple[str, float]]]:
    """Each rank's losses of the system under test, with their dtypes."""
    return [[(rec.dtype, float(rec.value)) for rec in o.result["system"].losses] for o in outcomes]


def run_in_order(executor, order):
    out = {}
    for name in order:
        outcomes = executor.run(CASES[name])
        verdict = verdict_from_outcomes(CASES[name], outcomes)
        losses = losses_of(outcomes) if verdict.kind != "error" else None
        out[name] = (verdict.kind, losses)
    return out


def test_two_orders_give_the_same_verdicts_and_numbers(executor):
    forward = run_in_order(executor, ["a", "b", "polluter", "c", "a"])
    backward = run_in_order(executor, ["polluter", "c", "b", "a"])
    for name in ("a", "b", "c"):
        assert forward[name] == backward[name], name
    assert forward["a"][0] == "pass" and forward["polluter"][0] == "mismatch"


def test_polluter_changes_are_undone_before_the_next_case(executor):
    clean = run_in_order(executor, ["a"])["a"]
    after = run_in_order(executor, ["polluter", "a"])["a"]
    assert after == clean  # the patched gelu would change a's losses, the default dtype its dtypes


def test_ten_replays_ten_identical_verdicts(executor):
    case = dataclasses.replace(CASES["b"], train=TrainSpec(steps=4, optimizer="adam", loss="mean"))
    results = []
    for _ in range(10):
        outcomes = executor.run(case)
        results.append((verdict_from_outcomes(case, outcomes).kind, losses_of(outcomes)))
    assert all(r == results[0] for r in results) and results[0][0] == "pass"


def test_mesh_layouts_in_any_order_in_one_pool(executor):
    """torch's own process-group bookkeeping must survive the restore (group names stay unique)."""
    from parityfuzz.case import MeshSpec

    hsdp = ("dp_replicate", "dp_shard")
    layouts = [MeshSpec((1, 4), hsdp), MeshSpec((2, 2), hsdp), MeshSpec((4, 1), hsdp), MeshSpec((4,))]
    for mesh in layouts + layouts[::-1]:
        case = simple(world_size=4, mesh=mesh).validate()
        verdict = verdict_from_outcomes(case, executor.run(case))
        assert verdict.ok, (mesh, verdict.describe())


def test_a_mask_a_failed_case_left_in_dtensor_does_not_reach_the_next_case(executor):
    """A RowwiseParallel embedding's output carries a mask in its MaskPartial placement, which DTensor's sharding
    propagation caches and reuses for every later op of the same schema. A case that fails before the reduction
    releases the mask leaves it materialized; the rank must forget it, or the next case with that embedding
    fails with 'MaskBuffer has been materialized with conflicting data' (the sixth 30-minute run)."""
    from parityfuzz.case import Case

    def tp_case(seed, system=""):
        return Case.from_dict({
            "seed": seed, "world_size": 2, "system": system,
            "model": {"body": {"kind": "linear", "out": 4}, "input": "embedding", "vocab": 8},
            "mesh": {"names": ["dp_shard", "tp"], "shape": [1, 2]},
            "plan": {"family": "fsdp2_tp", "tp": [{"path": "inp", "style": "rowwise", "input_layout": "replicate"}]},
            "schema": 2}).validate()

    failed = tp_case(1, "tests.faults:LeavesAMaskBehind")
    verdict = verdict_from_outcomes(failed, executor.run(failed))
    assert verdict.kind == "error" and "right after the embedding" in verdict.ranks[0]["message"]
    for seed in (2, 3):
        case = tp_case(seed)
        assert verdict_from_outcomes(case, executor.run(case)).kind == "pass", seed
