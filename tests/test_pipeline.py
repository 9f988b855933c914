"""The ``pipeline`` family: every schedule torch 2.13 ships trains like the unsplit model under DDP fed the same
microbatches (alone and with FSDP2 per stage), the schedules' refusals of a microbatch count are expected errors,
the plan's validity rules hold, and faults inside ``torch.distributed.pipelining`` (tests/faults/) are found by
short fuzz runs and shrunk to cases that still show them."""

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

from parityfuzz import families
from parityfuzz.case import Case, MeshSpec, ModelSpec, Node, TrainSpec
from parityfuzz.case.compiled import Compile
from parityfuzz.case.errors import CaseError
from parityfuzz.case.training import Freeze
from parityfuzz.parts.activation_checkpoint import ActivationCheckpoint
from parityfuzz.parts.tensor_parallel import Parallelize
from parityfuzz.families.pipeline import SCHEDULES, PipelinePlan, expected_error
from parityfuzz.parts.fully_shard import Policy
from parityfuzz.families.pipeline.schedules import SPLIT_BACKWARD
from parityfuzz.judge.verify import locate, verify_case
from parityfuzz.rules import RuleViolation
from parityfuzz.strategies import cases
from tests.shrinking import the_fault
from tests.test_fuzz_loop import fuzz

#: Four top-level modules whose outputs are not views (torch's zero-bubble schedules cannot take views: the known
#: bug ``pipeline-zero-bubble-stage-output-view``), a parameter in each.
NO_VIEWS = ModelSpec(in_dim=4, body=Node("seq", children=(
    Node("seq", children=(Node("linear", out=8), Node("act", fn="tanh"))),
    Node("seq", children=(Node("linear", out=4), Node("layernorm"))),
    Node("seq", children=(Node("linear", out=4), Node("act", fn="gelu"))),
    Node("seq", children=(Node("linear", out=3), Node("act", fn="relu"))))))


def pipeline_case(schedule: str, pp: int = 2, dp: int = 1, micro: int = 4, steps: int = 3, **plan) -> Case:
    per_rank = {"single": 1}.get(SCHEDULES[schedule][1], 2)
    stages = pp * per_rank
    cuts = tuple(range(1, stages)) if stages <= 4 else ()
    mesh = MeshSpec((pp,), ("pp",)) if dp == 1 else MeshSpec((pp, dp), ("pp", "dp_shard"))
    return Case(seed=3, world_size=pp * dp, model=NO_VIEWS, mesh=mesh,
                plan=PipelinePlan(schedule=schedule, microbatches=micro, stages_per_rank=per_rank, cuts=cuts, **plan),
                train=TrainSpec(steps=steps, optimizer="adam", batch=micro, seq_len=2, loss="mean", lr=0.01))


@pytest.mark.parametrize("schedule, dp", [
    ("gpipe", 1), ("1f1b", 2), ("looped_bfs", 1), ("interleaved_1f1b", 2), ("interleaved_zero_bubble", 1),
    ("zbv", 1), ("dualpipev", 1)])
def test_every_schedule_trains_like_the_unsplit_model(executor, schedule, dp):
    case = pipeline_case(schedule, dp=dp).validate()
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()


def test_summed_gradients_accumulated_over_two_steps_and_no_reshard_after_forward(executor):
    """Two schedule.step() calls per optimizer step, fully_shard per stage accumulating across them (with
    scale_grads=True torch divides the first call's share again: the known bug
    pipeline-scale-grads-over-accumulated-steps, corpus/pipeline/20b382b39c2ee9bf.json)."""
    case = pipeline_case("1f1b", dp=2, micro=3, scale_grads=False, reshard_after_forward=False)
    case = dataclasses.replace(case, train=dataclasses.replace(case.train, batch=3, loss="sum", microbatches=2))
    verdict = verify_case(case.validate(), executor)
    assert verdict.ok, verdict.describe()


@pytest.mark.parametrize("schedule, cuts, checkpoints", [
    ("1f1b", (2,), (ActivationCheckpoint("body.1", api="wrapper", before=False, reentrant=True),
                    ActivationCheckpoint("body.2.0", api="composable"))),
    ("interleaved_zero_bubble", (1, 2, 3), (ActivationCheckpoint("body.1", api="apply"),
                                            ActivationCheckpoint("body.3.0", api="wrapper", before=False)))])
def test_activation_checkpoints_inside_fully_sharded_stages_train_like_the_unsplit_model(executor, schedule, cuts,
                                                                                          checkpoints):
    """(A zero-bubble schedule with fully_shard per stage keeps its parameters unsharded after forward: with
    reshard_after_forward=True it loses weight gradients, the known bug
    pipeline-zero-bubble-fsdp-reshard-after-forward.)"""
    case = pipeline_case(schedule, dp=2, steps=2, reshard_after_forward=False, checkpoints=checkpoints)
    case = dataclasses.replace(case, plan=dataclasses.replace(case.plan, cuts=cuts)).validate()
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()


#: (schedule, the stages' policy): bfloat16 compute reducing and accumulating in float32, float32 outputs cast back
#: at every stage's entry, a float16 reduction, a split backward accumulating in its compute dtype (with a float32
#: reduce_dtype it accumulates in bfloat16 all the same: the known bug pipeline-zero-bubble-fsdp-accumulates-in-param-dtype).
MIXED = [
    ("1f1b", Policy(param_dtype="bfloat16", reduce_dtype="float32")),
    ("gpipe", Policy(param_dtype="bfloat16", output_dtype="float32")),
    ("interleaved_1f1b", Policy(param_dtype="bfloat16", reduce_dtype="float16")),
    ("interleaved_zero_bubble", Policy(param_dtype="bfloat16"))]


def mixed_case(schedule: str, policy: Policy, micro: int = 4) -> Case:
    """NO_VIEWS over pp 2 x dp_shard 2 under ``policy``, with clipping and an evaluation pass (no reshard after
    forward: the zero-bubble schedules lose weight gradients otherwise, a known bug)."""
    case = pipeline_case(schedule, dp=2, micro=micro, steps=3, precision=policy, reshard_after_forward=False)
    return dataclasses.replace(case, train=dataclasses.replace(case.train, clip=0.5, eval=True)).validate()


@pytest.mark.parametrize("schedule, policy", MIXED)
def test_mixed_precision_stages_train_like_the_emulated_policy_bit_for_bit(executor, schedule, policy):
    """Every stage's fully_shard under one MixedPrecisionPolicy trains like the unsplit model through the emulation
    of the policy with one group per stage, within the model's own rounding floor (no noise is measured on a pass)."""
    case = mixed_case(schedule, policy)
    assert case.reference_name() == "pipeline_mp_reference"
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()
    assert {"mp=uniform", "precision=bfloat16", "pp:schedule=" + schedule} <= case.features()


def test_an_output_dtype_no_later_stage_casts_from_is_refused_and_never_drawn():
    """FSDP2 casts a module's floating-point inputs to param_dtype only (MixedPrecisionPolicy): without one, a
    stage's float32 output reaches the next float64 stage uncast and its Linear raises a dtype mismatch in torch
    and in the reference alike, a plan error.  The 30-minute run of seed 20261126 reported it as an error of the
    reference before the family refused it (shrunk: two stages of one rank, output_dtype=float32 alone)."""
    model = ModelSpec(body=Node("seq", children=(Node("linear", out=1), Node("linear", out=1))))
    case = Case(seed=0, world_size=1, model=model, mesh=MeshSpec((1, 1), ("pp", "dp_shard")),
                plan=PipelinePlan(schedule="looped_bfs", stages_per_rank=2, cuts=(1,),
                                  precision=Policy(output_dtype="float32")), train=TrainSpec())
    with pytest.raises(CaseError, match="casts forward inputs to param_dtype only") as e:
        case.validate()
    assert e.value.field == "plan.precision.output_dtype"
    for policy in (Policy(param_dtype="bfloat16", output_dtype="float32"), Policy(output_dtype="float64")):
        dataclasses.replace(case, plan=dataclasses.replace(case.plan, precision=policy)).validate()


def test_a_low_precision_accumulation_in_the_schedules_own_order_is_within_the_measured_noise(executor):
    """ScheduleLoopedBFS runs a step's microbatch backwards last to first, an order torch does not document: with
    gradients accumulated in bfloat16 (reduce_dtype) the sum rounds one bfloat16 ulp away from the reference's
    first-to-last sum.  The noise samples add them in the reverse order, so the difference is measured as noise,
    not reported (the 30-minute run of seed 20261210 reported it, before); a float32 reduce_dtype's documented
    accumulation stays checked at float32's rounding (the known zero-bubble bug is still found: corpus)."""
    model = ModelSpec(body=Node("linear", out=1), input="embedding", vocab=4)
    case = Case(seed=0, world_size=1, model=model, mesh=MeshSpec((1, 1), ("pp", "dp_shard")),
                plan=PipelinePlan(schedule="looped_bfs", microbatches=2, stages_per_rank=2, cuts=(1,),
                                  precision=Policy(reduce_dtype="bfloat16")),
                train=TrainSpec(batch=2)).validate()
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()


def test_stages_accumulating_in_the_compute_dtype_are_found(executor):
    """The oracle sees the dtype the stages accumulate their microbatches' gradients in: FSDP2 adding them up in
    bfloat16 instead of the policy's float32 reduce_dtype is a mismatch (and plain DDP is no reference for it)."""
    case = mixed_case(*MIXED[0])
    verdict = verify_case(dataclasses.replace(case, system="tests.faults:StageAccumulatesInComputeDtype"), executor)
    assert verdict.kind == "mismatch" and verdict.divergence.check == "value", verdict.describe()
    with pytest.raises(CaseError) as e:
        dataclasses.replace(case, reference="pipeline_reference").validate()
    assert e.value.field == "reference"


def test_a_stage_policy_needs_fully_shard_and_one_dtype_per_stage():
    good = mixed_case("gpipe", Policy(param_dtype="bfloat16"))
    for change, field in (
            (dict(mesh=MeshSpec((2,), ("pp",)), world_size=2), "plan.precision"),  # no dp_shard: no fully_shard
            (dict(plan=dataclasses.replace(good.plan, precision=Policy(param_dtype="bfloat16",
                                                                               cast_forward_inputs=False))),
             "plan.precision.cast_forward_inputs"),  # the first stage receives the model's float32 input
            (dict(plan=dataclasses.replace(good.plan, precision=Policy(param_dtype="half"))),
             "plan.precision.param_dtype")):
        with pytest.raises(CaseError) as e:
            dataclasses.replace(good, **change).validate()
        assert e.value.field == field, e.value
    tokens = ModelSpec(body=NO_VIEWS.body, input="embedding", in_dim=4, vocab=8)  # token ids: nothing to cast
    dataclasses.replace(good, model=tokens, plan=dataclasses.replace(good.plan, cuts=(2, ), precision=Policy(
        param_dtype="bfloat16", cast_forward_inputs=False))).validate()


def first_stage_frozen_case() -> Case:
    """Two stages, the first one's only parameters frozen for step 0 (under gpipe)."""
    model = ModelSpec(in_dim=4, body=Node("seq", children=(Node("seq", children=(Node("linear", out=2),)),
                                                           Node("linear", out=1))))
    return Case(seed=0, world_size=2, model=model, mesh=MeshSpec((2,), ("pp",)), plan=PipelinePlan(cuts=(1,)),
                train=TrainSpec(steps=2, eval=True, frozen=(Freeze("body.0", until=1),))).validate()


def test_a_stage_input_that_starts_to_require_grad_trains_once_the_stages_are_rebuilt(executor):
    """The first stage frozen for a step: the second stage's input requires grad only from step 1, which a
    PipelineStage inferred once (at step 0) would not send back; the system builds its stages anew on unfreezing,
    as the DDP systems rebuild DDP (found by the fuzzer as a harness error, before the rebuild)."""
    verdict = verify_case(first_stage_frozen_case(), executor)
    assert verdict.ok, verdict.describe()


#: Tensor-parallel styles over NO_VIEWS's four children whose activations stay sharded over ``tp`` from one child to
#: the next: a colwise output (a plain local shard) into a rowwise Linear, a rowwise output reduce-scattered over the
#: sequence into a sequence-parallel LayerNorm (a DTensor out), gathered again by the colwise Linear after it.
TP_STYLES = (Parallelize("body.0.0", "colwise"),
             Parallelize("body.1.0", "rowwise", output_layout="shard_seq"),
             Parallelize("body.1.1", "sequence", use_local_output=False),
             Parallelize("body.2.0", "colwise", input_layout="shard_seq"),
             Parallelize("body.3.0", "rowwise"))


def tp_pipeline_case(schedule: str, cuts: tuple[int, ...]) -> Case:
    """NO_VIEWS under TP_STYLES on a (pp 2, tp 2) mesh, cut at ``cuts``, with an evaluation pass and clipping."""
    case = pipeline_case(schedule, steps=2, tp=TP_STYLES)
    return dataclasses.replace(case, mesh=MeshSpec((2, 2), ("pp", "tp")), world_size=4,
                               plan=dataclasses.replace(case.plan, cuts=cuts),
                               train=dataclasses.replace(case.train, eval=True, clip=0.5)).validate()


@pytest.mark.parametrize("schedule, cuts", [
    ("gpipe", (2,)),  # the sequence-parallel LayerNorm's DTensor output crosses to the next rank
    ("interleaved_1f1b", (1, 2, 3))])  # every boundary: a local shard, a DTensor, a local shard
def test_tensor_parallel_stages_pass_sharded_activations_and_train_like_the_unsplit_model(executor, schedule, cuts):
    case = tp_pipeline_case(schedule, cuts)
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()
    assert {"tp:sequence", "pp:schedule=" + schedule, "eval"} <= case.features()
    # the styles are applied and checked: a sequence-parallel norm's gradient left unreduced over tp is found
    faulty = verify_case(dataclasses.replace(case, system="tests.faults:SequenceParallelGradNotReducedInStages"),
                         executor)
    assert faulty.kind == "mismatch" and faulty.divergence.tensor.startswith("body.1.1"), faulty.describe()


def test_blocks_compiled_before_the_split_train_like_the_eager_unsplit_model(executor):
    """torch.compile (aot_eager) of an MLP block in each of the two ranks' stages, before the model is split (the
    stages hold the compiled modules), every rank's compiler capturing graphs."""
    model = ModelSpec(in_dim=4, body=Node("seq", children=(Node("mlp", hidden=8), Node("linear", out=4),
                                                           Node("mlp", hidden=6))))
    case = pipeline_case("1f1b", dp=2, micro=2, steps=2, reshard_after_forward=False)
    case = dataclasses.replace(case, model=model, plan=dataclasses.replace(case.plan, cuts=(2,)),
                               compile=Compile("aot_eager", "blocks_before", ("body.0", "body.2"))).validate()
    verdict = verify_case(case, executor)
    assert verdict.ok and "compiled nothing" not in verdict.note, verdict.describe()
    with pytest.raises(CaseError) as e:  # a rank holding no compiled module could not prove it compiled
        dataclasses.replace(case, compile=Compile("aot_eager", "blocks_before", ("body.0",))).validate()
    assert e.value.field == "compile.paths"


@pytest.mark.parametrize("schedule, micro", [("1f1b", 1), ("dualpipev", 3), ("interleaved_1f1b", 5)])
def test_a_microbatch_count_the_schedule_refuses_is_its_expected_error(executor, schedule, micro):
    case = pipeline_case(schedule, micro=micro)
    case = dataclasses.replace(case, train=dataclasses.replace(case.train, batch=micro)).validate()
    error = expected_error(case, "cpu")
    assert error is not None and error.type == "ValueError"
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()  # raised on every rank, matching the expected message
    assert expected_error(dataclasses.replace(case, plan=dataclasses.replace(case.plan, microbatches=4),
                                              train=dataclasses.replace(case.train, batch=4)), "cpu") is None


def test_the_plan_obeys_its_validity_rules():
    good = pipeline_case("gpipe")
    for plan, rule in (
            (dataclasses.replace(good.plan, cuts=()), "pipeline.stages-split-the-model"),
            (dataclasses.replace(good.plan, cuts=(4,)), "pipeline.stages-split-the-model"),
            (dataclasses.replace(good.plan, stages_per_rank=2, cuts=(1, 2, 3)), "pipeline.stages-per-rank"),
            (dataclasses.replace(good.plan, schedule="zbv", cuts=(1,)), "pipeline.stages-per-rank"),
            (dataclasses.replace(good.plan, microbatches=3), "pipeline.even-microbatches")):
        with pytest.raises(RuleViolation) as e:
            dataclasses.replace(good, plan=plan).validate()
        assert e.value.rule.name == rule
    reentrant = ActivationCheckpoint("body.1", api="wrapper", reentrant=True)
    zb = pipeline_case("interleaved_zero_bubble", pp=1)
    for case, path, cuts, rule in (
            (zb, "body.1", (2,), "pipeline.reentrant-only-in-the-first-stage"),  # a split backward
            (good, "body.1", (1,), "pipeline.reentrant-only-in-the-first-stage"),  # the second stage
            (good, "body.0", (2,), "checkpointing.reentrant-input-requires-grad")):  # the model's dense input
        with pytest.raises(RuleViolation) as e:
            dataclasses.replace(case, plan=dataclasses.replace(case.plan, cuts=cuts, checkpoints=(
                dataclasses.replace(reentrant, path=path),))).validate()
        assert e.value.rule.name == rule
    dataclasses.replace(good, plan=dataclasses.replace(good.plan, cuts=(2,), checkpoints=(reentrant,))).validate()
    for bad, field in ((ActivationCheckpoint(""), "plan.checkpoints[0].path"),
                       (ActivationCheckpoint("body.9"), "plan.checkpoints[0].path"),
                       (ActivationCheckpoint("body.1", reentrant=True), "plan.checkpoints[0].reentrant")):
        with pytest.raises(CaseError) as e:
            dataclasses.replace(good, plan=dataclasses.replace(good.plan, checkpoints=(bad,))).validate()
        assert e.value.field == field
    tied = ModelSpec(body=Node("seq", children=(Node("linear", out=4),)), input="embedding", in_dim=4, vocab=8,
                     tie_head=True)
    with pytest.raises(RuleViolation) as e:
        dataclasses.replace(good, model=tied, plan=dataclasses.replace(good.plan, cuts=(2,))).validate()
    assert e.value.rule.name == "pipeline.no-parameter-shared-across-stages"
    dropout = ModelSpec(body=Node("seq", children=(Node("linear", out=4), Node("dropout", p=0.5))))
    with pytest.raises(CaseError, match="no dropout"):
        dataclasses.replace(good, model=dropout).validate()
    with pytest.raises(CaseError, match="train.autocast"):
        dataclasses.replace(good, train=dataclasses.replace(good.train, autocast="bfloat16")).validate()
    with pytest.raises(CaseError) as e:  # styles need the axis they shard over
        dataclasses.replace(good, plan=dataclasses.replace(good.plan, tp=(Parallelize("body.0.0", "colwise"),))
                            ).validate()
    assert e.value.field == "plan.tp"


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(cases(family="pipeline", world_sizes=(1, 2, 4)))
def test_drawn_cases_are_valid_and_their_stages_lie_where_the_schedule_puts_them(case):
    plan, pp = case.plan, case.mesh.axis_size("pp")
    stages = plan.num_stages(pp)
    held = sorted(s for r in range(pp) for s in plan.stages_of(pp, r))
    assert held == list(range(stages))  # every stage on exactly one rank of the pipeline
    assert all(len(units) >= 1 for units in plan.stage_units(case.model))
    assert (case.train.batch, case.train.seq_len)[plan.split_dim] % plan.microbatches == 0
    mp = plan.precision  # (an output dtype a later stage would not cast from is refused: never drawn)
    assert mp.param_dtype or mp.output_dtype in ("", case.train.dtype)


#: fault -> (a hand-written case where it acts, what a shrunk case must still show)
FAULTS = {
    "SecondStageScaledTwice": (
        pipeline_case("interleaved_1f1b"),
        lambda c: c.plan.stages_per_rank > 1 and c.plan.microbatches > 1 and c.plan.scale_grads),
    "DividedByStageCount": (
        pipeline_case("gpipe", micro=4),
        lambda c: c.plan.scale_grads and c.plan.microbatches != c.plan.num_stages(c.mesh.axis_size("pp"))),
    "LastMicrobatchWeightGradLost": (
        pipeline_case("1f1b", micro=2),
        lambda c: c.plan.microbatches > 1 and c.plan.num_stages(c.mesh.axis_size("pp")) > 1),
    "WeightStepScaledTwice": (
        pipeline_case("interleaved_zero_bubble", micro=4),
        lambda c: c.plan.schedule in SPLIT_BACKWARD and c.plan.microbatches > 1 and c.plan.scale_grads),
    "NonBatchChunksOutOfOrder": (
        pipeline_case("1f1b", micro=2, split_dim=1),
        lambda c: c.plan.split_dim == 1 and c.plan.microbatches > 1),
}


def test_microbatches_split_along_the_sequence_need_an_even_split_and_no_mean_over_padding_alone():
    """args_chunk_spec=(TensorChunkSpec(1),): the sequence, not the batch, must be a multiple of the microbatch
    count; padded tokens under a mean loss are refused there (a microbatch of later positions may be padding alone);
    ScheduleLoopedBFS takes no args_chunk_spec; the schedule gets the spec."""
    case = pipeline_case("1f1b", micro=2, split_dim=1)
    tokens = dataclasses.replace(case, model=dataclasses.replace(case.model, input="embedding", vocab=4))
    for bad, field in [(dataclasses.replace(case, train=dataclasses.replace(case.train, seq_len=3)), "plan.microbatches"),
                       (dataclasses.replace(tokens, train=dataclasses.replace(tokens.train, pad=0.3)), "train.pad"),
                       (dataclasses.replace(case, plan=dataclasses.replace(case.plan, split_dim=2)), "plan.split_dim"),
                       (pipeline_case("looped_bfs", micro=2, split_dim=1), "plan.split_dim")]:
        with pytest.raises(CaseError) as e:
            bad.validate()
        assert e.value.field == field, str(e.value)
    odd_batch = dataclasses.replace(case, train=dataclasses.replace(case.train, batch=3)).validate()
    assert "pp:split=sequence" in odd_batch.features()
    assert "args_chunk_spec=(TensorChunkSpec(1),)" in "\n".join(families.get("pipeline").describe(odd_batch)[1])


#: Where a fault's divergence shows first, where not in a gradient (inputs trained toward another microbatch's
#: targets change the loss itself).
FIRST_SHOWN = {"NonBatchChunksOutOfOrder": "loss"}


@pytest.mark.parametrize("fault", FAULTS)
def test_the_fault_acts_where_it_should_and_pipelining_passes_there(executor, fault):
    case = FAULTS[fault][0].validate()
    assert verify_case(case, executor).ok
    verdict = verify_case(dataclasses.replace(case, system=f"tests.faults:{fault}"), executor)
    assert verdict.kind == "mismatch" and verdict.divergence.what == FIRST_SHOWN.get(fault, "grad"), verdict.describe()


@pytest.mark.parametrize("fault", ["DividedByStageCount", "LastMicrobatchWeightGradLost"])
def test_where_a_pipeline_mismatch_begins_is_the_gradient_the_fault_changes(executor, fault):
    """Locating the origin: the stages' metadata inference (a forward on stand-in tensors at the first step) and a
    stage's run of some of the body's children (named as the body) are no computation of the model's, so the probes
    skip them; every module's output agrees up to the faulty gradient (before, every pipeline mismatch was said to
    begin at the first forward output of the second stage)."""
    case = dataclasses.replace(FAULTS[fault][0], system=f"tests.faults:{fault}").validate()
    verdict = locate(case, executor, verify_case(case, executor))
    assert verdict.origin is not None and verdict.origin.what == "grad", verdict.origin
    assert verdict.origin.tensor == verdict.divergence.tensor


#: Cases a fault's short run may take: WeightStepScaledTwice acts only under the three split-backward schedules with
#: several microbatches and scale_grads, where most drawn stages end in a view the known zero-bubble view bug errors
#: on first (seed 2 needed more than 60 cases).
MAX_CASES = {"WeightStepScaledTwice": 150}


#: The faults whose seed-1 run takes minutes: SecondStageScaledTwice (150 s once the split-backward schedules left
#: fully_shard out), WeightStepScaledTwice (220 s); LastMicrobatchWeightGradLost's and NonBatchChunksOutOfOrder's take
#: 75 s each on a clean clone (their hand-written cases run in CI: the latter's through its exported script too).
SLOW = ("SecondStageScaledTwice", "WeightStepScaledTwice", "LastMicrobatchWeightGradLost", "NonBatchChunksOutOfOrder")


#: CI runs seed 1 of DividedByStageCount (78 s on a clean clone); the others and every seed 2 run with --long.
@pytest.mark.parametrize("fault, seed", [(f, 1) if f not in SLOW else pytest.param(f, 1, marks=pytest.mark.long)
                                         for f in FAULTS]
                         + [pytest.param(f, 2, marks=pytest.mark.long) for f in FAULTS])
def test_a_short_fuzz_run_finds_and_shrinks_the_pipeline_fault(executor, tmp_path, fault, seed):
    system = f"tests.faults:{fault}"
    stats = fuzz(executor, tmp_path, system, seed=seed, max_cases=MAX_CASES.get(fault, 60), max_shrink_runs=20,
                 strategy=cases(family="pipeline", world_sizes=(2, 4), system=system))
    f = the_fault(stats)
    assert FAULTS[fault][1](f.case), f.case.to_json(indent=1)


@pytest.mark.parametrize("schedule, unit_reshard, precision", [
    ("interleaved_1f1b", True, Policy()),
    ("1f1b", False, Policy(param_dtype="bfloat16", reduce_dtype="float32", output_dtype="float32"))])
def test_fully_shard_on_each_block_then_the_stage_trains_like_the_unsplit_model(executor, schedule, unit_reshard,
                                                                                  precision):
    """torchtitan's composition: fully_shard on every top-level module of a stage, then on the stage, each with the
    stage's MixedPrecisionPolicy (every unit casts its output to float32 and the next one back to bfloat16)."""
    case = pipeline_case(schedule, dp=2, shard_units=True, unit_reshard_after_forward=unit_reshard,
                         precision=precision)
    case = dataclasses.replace(case, train=dataclasses.replace(case.train, dtype="float32")).validate()
    assert "pp:fully_shard_units" + ("" if unit_reshard else ",no_reshard_after_forward") in case.features()
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()


def test_units_accumulating_in_the_compute_dtype_are_found_and_the_stage_roots_alone_do_not_show_it(executor):
    """A fault inside FSDP2 that only the nested units meet: their microbatch gradients add up in bfloat16 where the
    policy (given to each unit as to the stage) says float32.  One fully_shard per stage: the fault does not act."""
    mp = Policy(param_dtype="bfloat16", reduce_dtype="float32")
    case = pipeline_case("1f1b", dp=2, micro=4, shard_units=True, precision=mp)
    case = dataclasses.replace(case, train=dataclasses.replace(case.train, dtype="float32"),
                               system="tests.faults:UnitsAccumulateInComputeDtype").validate()
    verdict = verify_case(case, executor)
    assert verdict.kind == "mismatch" and verdict.divergence.what == "grad", verdict.describe()
    stages_alone = dataclasses.replace(case, plan=dataclasses.replace(case.plan, shard_units=False)).validate()
    assert verify_case(stages_alone, executor).ok


def test_the_mixed_precision_reference_gives_each_fully_shard_call_its_group_in_the_system_s_order():
    """Under shard_units every block of a stage is its own fully_shard call before the stage's: the reference casts
    and reduces per call as well (one group per stage summed a float16 reduction over 4 ranks in another order:
    corpus/pipeline/96abebd440054a10.json), the blocks' groups first, so that they own their parameters."""
    from parityfuzz.families.pipeline.precision import fully_shard_groups

    case = pipeline_case("1f1b", dp=2, shard_units=True)
    units = case.plan.stage_units(case.model)
    assert fully_shard_groups(case) == [*({"path": u} for u in units[0]), {"path": "stage 0", "modules": list(units[0])},
                                        *({"path": u} for u in units[1]), {"path": "stage 1", "modules": list(units[1])}]
    stages = dataclasses.replace(case, plan=dataclasses.replace(case.plan, shard_units=False))
    assert fully_shard_groups(stages) == [{"path": f"stage {i}", "modules": list(u)} for i, u in enumerate(units)]


def test_blocks_sharded_inside_stages_need_fully_shard_and_a_cast_back_between_units_and_are_drawn():
    """A unit that receives the unit before's float32 output must cast it to its bfloat16 (cast_forward_inputs),
    even inside a single stage; a plan without fully_shard has no units."""
    mixed = Policy(param_dtype="bfloat16", output_dtype="float32", cast_forward_inputs=False)
    one_stage = dataclasses.replace(pipeline_case("gpipe", pp=1, dp=2, shard_units=True, precision=mixed),
                                    world_size=2)
    for case, field in [(pipeline_case("1f1b", dp=1, shard_units=True), "plan.shard_units"),
                        (one_stage, "plan.precision.cast_forward_inputs")]:
        with pytest.raises(CaseError) as e:
            dataclasses.replace(case, train=dataclasses.replace(case.train, dtype="float32")).validate()
        assert e.value.field == field, str(e.value)
    from tests.drawing import find

    find(cases(family="pipeline", world_sizes=(4,)), lambda c: c.plan.shard_units and c.mixed_precision(),
         settings=settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck), database=None))


def test_torchtitans_composition_is_a_real_share_of_the_pipelines_with_data_parallel_ranks():
    """Over (pp, dp_shard) two draws in three are torchtitan's composition: the blocks of each stage fully_shard'ed,
    then the stage, with bfloat16 compute and float32 reductions (what a fault in the units' accumulation needs,
    with several microbatches)."""
    from tests.test_swarm import draws

    drawn = [c for c in draws(cases(family="pipeline", world_sizes=(2, 3, 4)), 300, seed=1)
             if c.mesh.axis_size("dp_shard") > 1 and c.mesh.axis_size("tp") == 1]
    titan = [c for c in drawn if c.plan.shard_units and c.plan.precision.reduce_dtype == "float32"
             and c.plan.precision.compute(c.train.dtype) == "bfloat16"]
    assert len(drawn) >= 40 and len(titan) >= len(drawn) / 4, (len(titan), len(drawn))
    assert sum(c.plan.microbatches > 1 for c in titan) >= len(titan) / 4
