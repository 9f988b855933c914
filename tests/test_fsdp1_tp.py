"""The fsdp1_tp family: tensor parallelism, then FSDP1 on the data-parallel sub-mesh (as PyTorch's FSDP1 + TP
tests apply them) trains like DDP; a fault inside FSDP1 that only shows under tensor parallelism is found and
shrunk to it; uneven tensor-parallel shards are refused, not drawn."""

import dataclasses
from pathlib import Path

import pytest

from parityfuzz.case import CaseError, MeshSpec, ModelSpec, Node, TrainSpec
from parityfuzz.families.fsdp1_tp import FSDP1TPPlan, uneven_shards
from parityfuzz.parts.tensor_parallel import Parallelize
from parityfuzz.judge.verify import verify_case
from tests.shrinking import found_and_shrunk
from tests.test_case import simple

# MLP(8 -> 4 -> 8), LayerNorm, Linear(8 -> 8): an MLP split colwise/rowwise, a norm, a Linear gathering its output.
BODY = Node("seq", children=(Node("mlp", hidden=4), Node("layernorm"), Node("linear", out=8)))
MLP = (Parallelize("body.0.fc1", "colwise"), Parallelize("body.0.fc2", "rowwise"))
SEQUENCE = (Parallelize("body.0.fc1", "colwise"), Parallelize("body.0.fc2", "rowwise", output_layout="shard_seq"),
            Parallelize("body.1", "sequence"), Parallelize("body.2", "colwise", input_layout="shard_seq",
                                                           output_layout="replicate"))


def tp_case(shape=(2, 2), tp=MLP, **plan):
    mesh = MeshSpec(shape, ("dp_shard", "tp"))
    return simple(world_size=mesh.size, mesh=mesh, model=ModelSpec(body=BODY, in_dim=8),
                  plan=FSDP1TPPlan(tp=tp, **plan),
                  train=TrainSpec(steps=3, batch=2, seq_len=2, lr=0.05, optimizer="adam", microbatches=2)).validate()


@pytest.mark.parametrize("sharding, use_orig_params, tp, extra", [
    ("FULL_SHARD", True, MLP, {"wraps": ("body.0",)}),
    ("FULL_SHARD", False, SEQUENCE, {"no_sync": True}),  # (with use_orig_params=True: a known torch bug)
    ("SHARD_GRAD_OP", True, SEQUENCE, {"wrapping": "module_class", "wrap_kinds": ("mlp",)}),
])
def test_tensor_parallel_then_fsdp1_trains_like_ddp(executor, sharding, use_orig_params, tp, extra):
    case = tp_case(sharding=sharding, use_orig_params=use_orig_params, tp=tp, **extra)
    assert case.reference_name() == "ddp"
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()


def test_plans_fsdp1_tp_refuses_are_invalid_and_uneven_shards_are_named():
    with pytest.raises(CaseError, match="plan.sharding"):  # a hybrid strategy would need a 3-D mesh
        tp_case(sharding="HYBRID_SHARD", hybrid_via="mesh")
    with pytest.raises(CaseError, match="plan.tp"):  # the fsdp2_tp family's style rules hold
        tp_case(tp=(Parallelize("body.1", "colwise"),))
    # (the hidden activations of width 3 stay a DTensor: plain uneven shards break tp.even-local-shards)
    dtensor_hidden = (dataclasses.replace(MLP[0], use_local_output=False), MLP[1])
    uneven = dataclasses.replace(tp_case(tp=dtensor_hidden), model=ModelSpec(body=Node("seq", children=(
        Node("mlp", hidden=3), Node("layernorm"), Node("linear", out=8))), in_dim=8)).validate()
    assert uneven_shards(uneven) == ["body.0.fc1", "body.0.fc2"] and uneven_shards(tp_case()) == []


def test_a_fault_only_tensor_parallelism_shows_is_found_and_shrunk(executor, tmp_path):
    f, modules = found_and_shrunk(executor, tmp_path, "fsdp1_tp", "TensorParallelShardNotReduced", (4,))
    assert f.verdict.kind == "mismatch"
    assert f.case.mesh.axis_size("dp_shard") > 1 and f.case.plan.sharding != "NO_SHARD", f.case.to_json(indent=1)
    assert modules <= 3, f.case.to_json(indent=1)


def test_known_bug_preconditions_count_linears_traced_alone_and_a_gathered_colwise_output():
    """The fifth 30-minute run's two compiled fsdp1_tp findings, each a known torch bug its precondition missed: an
    instance that is an ``nn.Sequential`` over a colwise and a rowwise Linear leaves each Linear a frame of its own
    (fsdp1_tp/23a7cf7e), and a colwise Linear gathering its output hands a compiled block the asynchronous
    collective's tensor (fsdp1_tp/8156fdbf).  The variations torch trains stay out."""
    from parityfuzz.case.compiled import Compile
    from parityfuzz.families.fsdp1_tp.known import compiled_tensor_parallel_linears_of_two_styles as traced_alone
    from parityfuzz.systems.compiled.known import tp_local_output_into_a_compiled_block as fed_local

    mesh = MeshSpec((2, 2), ("dp_shard", "tp"))
    seq = Node("seq", children=(Node("linear", out=2), Node("linear", out=4)))
    styles = (Parallelize("body.seq0.0", "colwise"), Parallelize("body.seq0.1", "rowwise"))
    case = simple(world_size=4, mesh=mesh, model=ModelSpec(body=Node("block", children=(seq,))),
                  plan=FSDP1TPPlan(wraps=("body.seq0",), tp=styles), compile=Compile(backend="aot_eager",
                                                                                     paths=("body",)))
    assert traced_alone(case)
    assert not traced_alone(dataclasses.replace(case, plan=dataclasses.replace(case.plan, wraps=())))  # root alone
    mlp = ModelSpec(body=Node("block", children=(Node("mlp", hidden=4),)))
    as_mlp = (Parallelize("body.mlp0.fc1", "colwise"), Parallelize("body.mlp0.fc2", "rowwise"))
    assert not traced_alone(dataclasses.replace(case, model=mlp, plan=FSDP1TPPlan(wraps=("body.mlp0",), tp=as_mlp)))

    attention = ModelSpec(body=Node("seq", children=(Node("linear", out=2), Node("attention", heads=1))))
    gathered = simple(world_size=4, mesh=mesh, model=attention, compile=Compile(backend="aot_eager",
                                                                                paths=("body.1",)),
                      plan=FSDP1TPPlan(tp=(Parallelize("body.0", "colwise", output_layout="replicate"),)))
    assert fed_local(gathered)
    assert not fed_local(dataclasses.replace(gathered, plan=FSDP1TPPlan(tp=(Parallelize("body.0", "colwise"),))))


def test_the_reentrant_recompute_precondition_takes_its_unsharded_form_and_no_more():
    """The sixth 30-minute run's fsdp1_tp finding (fsdp1_tp/45c08468): unsharded (a one-rank dp_shard axis) and in
    full precision, a frozen module under a non-reentrant checkpoint before a reentrant checkpoint in the same
    unit raises CheckpointError; the record's precondition took only sharded units or mixed precision.  The
    variations that train (run on unmodified torch: without the freezing, without either checkpoint, the second
    non-reentrant) stay out, and so does an unsharded reentrant checkpoint alone."""
    from parityfuzz.families.fsdp1.known import reentrant_checkpoint_inside_a_sharded_unit as applies
    from parityfuzz.triage import corpus

    case = corpus.load(Path(__file__).resolve().parents[1] / "corpus" / "fsdp1_tp" / "45c084684c5d7949.json").case
    assert applies(case) and case.mesh.axis_size("dp_shard") == 1 and not case.mixed_precision()
    first, second = case.plan.checkpoints
    for plan in (dataclasses.replace(case.plan, checkpoints=(first, dataclasses.replace(second, reentrant=False))),
                 dataclasses.replace(case.plan, checkpoints=(second,))):
        assert not applies(dataclasses.replace(case, plan=plan))
    assert not applies(dataclasses.replace(case, train=dataclasses.replace(case.train, frozen=())))


def test_the_recompile_precondition_takes_modules_of_one_kind_and_other_sizes():
    """The sixth 30-minute run's second fsdp1_tp finding (fsdp1_tp/94962756): the whole model compiled, two MLPs of
    other hidden widths, each colwise fc1 and rowwise fc2, an FSDP1 instance below the root: MLP.forward is
    recompiled for the second MLP's sizes.  The variations that train on unmodified torch stay out (equal widths,
    FSDP1 at the root alone, TP on one MLP), and the MLPs compiled one by one are in (they fail alike)."""
    from parityfuzz.case.compiled import Compile
    from parityfuzz.families.fsdp1_tp.known import compiled_tensor_parallel_linears_of_two_styles as applies
    from parityfuzz.triage import corpus

    case = corpus.load(Path(__file__).resolve().parents[1] / "corpus" / "fsdp1_tp" / "9496275671cb9ece.json").case
    assert applies(case)
    first, second, norm = case.model.body.children
    same = dataclasses.replace(second, hidden=first.hidden)
    assert not applies(dataclasses.replace(case, model=ModelSpec(body=dataclasses.replace(
        case.model.body, children=(first, same, norm)))))
    assert not applies(dataclasses.replace(case, plan=dataclasses.replace(case.plan, wraps=())))
    assert not applies(dataclasses.replace(case, plan=dataclasses.replace(case.plan, tp=case.plan.tp[:2])))
    one_by_one = Compile(backend="aot_eager", form="blocks_after", paths=("body.0", "body.1"))
    assert applies(dataclasses.replace(case, compile=one_by_one))
