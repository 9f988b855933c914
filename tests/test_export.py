"""The standalone reproducer (parityfuzz.export): a torch-only script, run under torchrun, whose exit code is the fuzzer's
verdict, for the corpus's files and for faults injected inside torch; and a clear refusal for what it cannot
write out yet.

Each torchrun job costs ~6-9 s on a 2-core machine: CI runs three corpus files and one fault on its hand-written
case; ``--export-all`` runs every corpus file the export covers (all 81) and every fault, fuzz-found cases included
(the figures are in the issue notes)."""

from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parityfuzz import families
from parityfuzz.case import MeshSpec, TrainSpec
from parityfuzz.case.checkpoint import Checkpoint
from parityfuzz.export import ExportError, export, refusal
from parityfuzz.families.fsdp2 import FSDP2Plan
from parityfuzz.parts.fully_shard import Wrap
from parityfuzz.judge.verify import verify_case
from parityfuzz.triage import corpus
from tests.test_case import simple
from tests.test_zero import zero_case

ROOT = Path(__file__).resolve().parents[1]


def torchrun(script: Path, world_size: int, *launch: str) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node=N [launch...] script`` from a directory of its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)} if launch else {k: v for k, v in os.environ.items()
                                                                   if k != "PYTHONPATH"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world_size}",
           *launch, str(script)]
    return subprocess.run(cmd, cwd=script.parent, env=env, capture_output=True, text=True, timeout=400)


def exported_corpus() -> list[Path]:
    """The corpus files of the exported families the export writes out (the others are refused: below)."""
    files = [p for p in corpus.discover(ROOT / "corpus") if families.get(p.parent.name).export]
    return [p for p in files if refusal(corpus.load(p).case) is None]


def sample(files: list[Path]) -> list[Path]:
    """CI's share (time): the first fsdp2 mismatch without mixed precision (the script's oracle at work on a real
    torch bug), the first mismatch of a checkpoint event (the harness's invariants of a save and load, copied into
    the script) and the first FSDP1 file with mixed precision that passes (its reference, the harness's emulation
    of FSDP1's policy, copied)."""
    def entry(p):
        return corpus.load(p)

    def mismatch(p, checkpointed):
        return entry(p).verdict.kind == "mismatch" and bool(entry(p).case.checkpoint) == checkpointed

    return [next(p for p in files if p.parent.name == "fsdp2" and mismatch(p, False)
                 and not entry(p).case.mixed_precision()),
            next(p for p in files if mismatch(p, True)),
            next(p for p in files if p.parent.name == "fsdp1" and entry(p).case.mixed_precision()
                 and entry(p).verdict.kind == "pass")]


#: Faults inside torch whose fuzz-found case the script must show: (family, fault, world sizes, CI runs it); CI
#: runs the fault on its hand-written case instead (a fuzz run and two torchrun jobs cost ~15 s each).  Not here,
#: by nature: ZeroOverlapOnGloo (overlap is refused), LateGradDrift and ReplicateUnderFullyShardUnaveraged (they read the step or the model from the
#: harness's system), LayerNormOutputOff and GeluBackwardOff (they patch an op the script's reference runs in the
#: same process).
INSIDE_TORCH = [("fsdp2", "UnevenShardGradOff", (2,), False), ("fsdp2", "ReducesInBf16", (2,), False),
                ("fsdp2_tp", "RowwiseOutputNotReduced", (2,), False),
                ("fsdp2_tp", "SequenceParallelGradNotReduced", (2,), False),
                ("fsdp1_tp", "TensorParallelShardNotReduced", (4,), False),
                ("fsdp1", "HybridSkipsInterAllReduce", (4,), False),
                ("fsdp2_tp", "ReducesInBf16UnderTP", (4,), False),
                ("fsdp1", "NoShardOrigParamsGradUnreduced", (2,), False), ("zero", "ZeroBucketFromWrongRank", (2, 3), False)]
#: The same on hand-written cases (tests/test_faults_in_fsdp2.FAULTS, tests/test_checkpoint.FAULTS: faults in the
#: state-dict code, acting at a checkpoint event's load): (fault, CI runs it).
HAND_WRITTEN = [("ReducesInBf16", True), ("UnevenShardGradOff", False), ("ReplicaNotAllReduced", False),
                ("OutputLeftInBf16", False), ("ShortShardLoadedAtWrongOffset", False),
                ("OptimizerStateOfRenamedParamSwapped", False),
                ("ZeroLoadSkipsTheLastOfEachPartition", True)]  # ZeRO's way, rolled back: the clean control passes


def pytest_generate_tests(metafunc):
    every = metafunc.config.getoption("export_all")
    if "corpus_file" in metafunc.fixturenames:
        files = exported_corpus()
        chosen = files if every else sample(files)
        metafunc.parametrize("corpus_file", chosen, ids=[f"{p.parent.name}/{p.stem}" for p in chosen])
    if "fault_case" in metafunc.fixturenames:
        chosen = [("hand-written", "fsdp2", f, ()) for f, ci in HAND_WRITTEN if every or ci]
        chosen += [("fuzz-found", *f[:3]) for f in INSIDE_TORCH if every or f[3]]
        metafunc.parametrize("fault_case", chosen, ids=[f"{c[2]}-{c[0]}" for c in chosen])


def check_outcome(result: subprocess.CompletedProcess, verdict) -> None:
    """The script's exit code is the verdict's (0 pass, else 1), and it failed the same way."""
    out = result.stdout + result.stderr
    if verdict is None or verdict.kind == "pass":
        assert result.returncode == 0 and "parity:" in result.stdout, out[-3000:]
        return
    assert result.returncode != 0, out[-3000:]
    if verdict.kind == "mismatch":
        d = verdict.divergence
        assert f"DIVERGENCE {d.where()} {d.what} {d.tensor}" in result.stdout, (d, out[-3000:])
    elif verdict.kind == "error":  # the same exception, raised in the same torch function
        first = verdict.ranks[0]
        message = (first["message"].splitlines() or [""])[0][:60]
        function = first.get("torch_frame", "").rpartition(":")[2]
        assert first["type"] in out and message in out and f", in {function}\n" in out, (first, out[-3000:])


@pytest.mark.parametrize("kind", ["fsdp2_tp", "fsdp2 mixed precision", "fsdp1 mixed precision"])
def test_the_script_imports_only_torch_and_the_standard_library(kind):
    family, _, mixed = kind.partition(" ")
    path = next(p for p in exported_corpus()
                if p.parent.name == family and corpus.load(p).case.mixed_precision() == bool(mixed))
    tree = ast.parse(export(corpus.load(path).case))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported - sys.stdlib_module_names == {"torch"}, imported


def test_the_plan_is_written_out_as_torch_calls():
    case = simple(plan=FSDP2Plan(wraps=(Wrap("body.0", reshard_after_forward=False, offload=True), Wrap(""))))
    script = " ".join(export(case.validate()).split())  # (a long call's arguments one per line)
    assert ('fully_shard(resolve(model, "body.0"), mesh=mesh, reshard_after_forward=False, '
            "offload_policy=CPUOffloadPolicy(pin_memory=torch.cuda.is_available()))") in script
    assert "fully_shard(model, mesh=mesh, reshard_after_forward=True)" in script  # torch's root default differs


def test_a_pipeline_plan_is_written_out_stage_by_stage():
    from parityfuzz.parts.activation_checkpoint import ActivationCheckpoint
    from tests.test_pipeline import pipeline_case

    case = pipeline_case("interleaved_1f1b", dp=2, reshard_after_forward=False, checkpoints=(
        ActivationCheckpoint("body.2.0", api="composable"), ActivationCheckpoint("body.3", api="wrapper", before=False)))
    script = export(case.validate())
    assert "SCHEDULE = pipelining.ScheduleInterleaved1F1B" in script
    assert "STAGE_UNITS = [['body.0'], ['body.1'], ['body.2'], ['body.3']]" in script
    assert "STAGES_OF_RANK = [[0, 2], [1, 3]]" in script
    stage = script[script.index("def stage_module"):script.index("class Pipelined")]
    shard = "fully_shard(model, mesh=dp_mesh, reshard_after_forward=False)"
    third, fourth = stage[stage.index("if index == 2:"):stage.index("if index == 3:")], stage[stage.index("if index == 3:"):]
    assert third.index("apply_checkpoint(model, 'body.2.0')") < third.index(shard)  # each stage's calls in order
    assert fourth.index(shard) < fourth.index("apply_checkpoint(model, 'body.3', 'wrapper')")
    assert script.index("def apply_checkpoint(") < script.index("def stage_module")  # the harness's own, copied


@pytest.mark.parametrize("which", ["tensor parallel", "first stage frozen"])
def test_a_pipeline_that_unfreezes_evaluates_and_shards_over_tp_exports_to_a_script_that_trains_it(tmp_path, which):
    """The torch-only script passes where the harness does (tests/test_pipeline.py): tensor-parallel styles per
    stage, a sequence-parallel norm's DTensor output crossing to the next rank, schedule.eval between steps; and the
    stages and schedule built anew on every rank where the first stage is unfrozen (without the rebuild the script
    failed: the second stage never sent its input's gradient)."""
    from tests.test_pipeline import first_stage_frozen_case, tp_pipeline_case

    case = tp_pipeline_case("gpipe", (2,)) if which == "tensor parallel" else first_stage_frozen_case()
    script = tmp_path / "repro.py"
    script.write_text(export(case))
    text = script.read_text()
    if which == "tensor parallel":
        stage = text[text.index("def stage_module"):text.index("class Pipelined")]
        assert ('parallelize_module(resolve(model, "body.1.1"), tp_mesh, SequenceParallel(use_local_output=False))'
                in stage)
    check_outcome(torchrun(script, case.world_size), None)


@pytest.mark.parametrize("fault", ["DividedByStageCount", "NonBatchChunksOutOfOrder"])
def test_a_fault_inside_pipelining_shows_in_the_exported_script(executor, tmp_path, fault):
    """A pipeline case written out (the split, the stages, the schedule, the microbatch reference, the stages other
    ranks hold): with scale_grads dividing by the stage count, or the sequence microbatches (args_chunk_spec, the
    target split to match) out of order, the script finds the fuzzer's divergence; on unmodified torch it passes."""
    from tests.test_pipeline import FAULTS

    case = FAULTS[fault][0].validate()
    verdict = verify_case(dataclasses.replace(case, system=f"tests.faults:{fault}"), executor)
    assert verdict.kind == "mismatch", verdict.describe()
    script_shows_the_fault(tmp_path, fault, case, verdict)


def test_a_mixed_precision_pipeline_exports_its_policy_and_the_emulating_reference(executor, tmp_path):
    """Every stage's fully_shard under a MixedPrecisionPolicy written out, against the harness's emulation of the
    policy with one group per stage (copied): FSDP2 accumulating the microbatches' gradients in bfloat16 instead of
    the policy's float32 reduce_dtype shows in the script as in the harness; on unmodified torch it passes."""
    from tests.test_pipeline import MIXED, mixed_case

    case = mixed_case(*MIXED[0])
    text = export(case)
    assert ('fully_shard(model, mesh=dp_mesh, reshard_after_forward=False, mp_policy=MixedPrecisionPolicy('
            'param_dtype=torch.bfloat16, reduce_dtype=torch.float32))'
            in " ".join(text.split()))  # (a long call's arguments one per line)
    assert "dict(path='stage 1', modules=['body.1', 'body.2', 'body.3']," in text and "def emulated_microbatches_in_turn" in text
    verdict = verify_case(dataclasses.replace(case, system="tests.faults:StageAccumulatesInComputeDtype"), executor)
    assert verdict.kind == "mismatch", verdict.describe()
    script_shows_the_fault(tmp_path, "StageAccumulatesInComputeDtype", case, verdict)


def test_a_pipelined_checkpoint_exports_each_ranks_stages_and_a_rollback(executor, tmp_path):
    """A DCP checkpoint of a pipelined model written out: each rank saves and loads its stages as one module named
    as the whole model (Pipelined.state_module), flattened, and checks what it holds (Pipelined.holds).  Adam's
    step left one behind by the flattened load shows in the script as in the harness; on unmodified torch the
    script passes, and so does a rollback of the same stages."""
    from tests.test_checkpoint import FAULTS

    case = FAULTS["FlattenedLoadStepBehind"][0].validate()
    assert refusal(case) is None
    verdict = verify_case(dataclasses.replace(case, system="tests.faults:FlattenedLoadStepBehind"), executor)
    assert verdict.kind == "mismatch", verdict.describe()
    script_shows_the_fault(tmp_path, "FlattenedLoadStepBehind", case, verdict)
    rollback = dataclasses.replace(case, checkpoint=dataclasses.replace(case.checkpoint, step=1, rollback_at=3))
    script = tmp_path / "rollback.py"
    script.write_text(export(rollback.validate()))
    check_outcome(torchrun(script, case.world_size), None)


def test_what_the_export_cannot_write_out_is_refused_by_name(tmp_path):
    from tests.test_fsdp1 import fsdp1_case

    ignoring = fsdp1_case((2,), wraps=("body.2",), ignored=("body.0",))
    with pytest.raises(ExportError, match="ignored modules"):
        export(ignoring)
    path = tmp_path / "case.json"
    path.write_text(ignoring.to_json())
    result = subprocess.run([sys.executable, "-m", "fuzz.repro", str(path), "--export", str(tmp_path / "r.py")],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "ignored modules" in result.stderr and not (tmp_path / "r.py").exists()
    assert "not the fsdp2 family's" in refusal(simple(system="tests.faults:OddLinearGradDrop"))
    resharded = simple(world_size=2, train=TrainSpec(steps=2), checkpoint=Checkpoint(step=1, world_size=1, mesh=MeshSpec((1,))))
    assert "a checkpoint loaded into another world size" in refusal(resharded.validate())
    assert "overlap_with_ddp" in refusal(zero_case(2, optimizer="adam", overlap="hook",
                                                 training={"groups": (), "microbatches": 1, "scheduler": ""}))
    # A corpus family without a writer says why in its record (the pipeline family, issue 33), and the refusal names it.
    for name in {p.parent.name for p in corpus.discover(ROOT / "corpus")}:
        family = families.get(name)
        assert family.export or family.missing.get("export"), name
        if not family.export:
            case = corpus.load(corpus.discover(ROOT / "corpus" / name)[0]).case
            assert family.missing["export"] in refusal(case), name


def test_corpus_file_exports_to_a_script_with_its_verdict(tmp_path, corpus_file):
    entry = corpus.load(corpus_file)
    script = tmp_path / "repro.py"
    result = subprocess.run([sys.executable, "-m", "fuzz.repro", str(corpus_file), "--export", str(script)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    check_outcome(torchrun(script, entry.case.world_size), entry.verdict)


def test_a_fault_inside_torch_shows_in_the_exported_script(executor, tmp_path, fault_case):
    """A fault's case exported (its hand-written case, tests/test_faults_in_fsdp2.py, or its fuzz-found shrunk
    one): with the fault injected the script finds the divergence the fuzzer found; on unmodified torch it passes
    (the clean control runs on the hand-written cases)."""
    source, family, fault, world_sizes = fault_case
    if source == "hand-written":
        from tests import test_checkpoint, test_faults_in_fsdp2

        if fault in test_checkpoint.FAULTS:
            case, check_kind = test_checkpoint.FAULTS[fault][0], "checkpoint"
        else:
            case, check_kind, _ = test_faults_in_fsdp2.FAULTS[fault]
        case = case.validate()
        verdict = verify_case(dataclasses.replace(case, system=f"tests.faults:{fault}"), executor)
        assert verdict.kind == "mismatch" and verdict.divergence.check == check_kind, verdict.describe()
        script_shows_the_fault(tmp_path, fault, case, verdict)
        return
    from tests.shrinking import found_and_shrunk

    shows = {"NoShardOrigParamsGradUnreduced": lambda c: c.plan.sharding == "NO_SHARD",
             "HybridSkipsInterAllReduce": lambda c: c.plan.sharding == "HYBRID_SHARD",
             "SequenceParallelGradNotReduced": lambda c: "sequence_parallel" in c.features(),
             "ReducesInBf16UnderTP": lambda c: any(w.param_dtype in ("bfloat16", "float16") and w.reduce_dtype == "float32"
                                                   for w in c.plan.wraps)}.get(fault, lambda c: True)
    f, _ = found_and_shrunk(executor, tmp_path, family, fault, world_sizes,
                            where=lambda c: refusal(dataclasses.replace(c, system="")) is None and shows(c))
    script_shows_the_fault(tmp_path, fault, f.case, f.verdict, clean_too=False)


def test_a_step_skipped_by_the_system_alone_shows_in_the_exported_script(executor, tmp_path):
    """Loss scaling with an overflow at step 1 and a stale inf flag in ShardedGradScaler (it skips step 2 too): the
    script's copy of the oracle names the skipped step as the fuzzer does; without the fault it passes (both
    systems skip step 1 alike)."""
    from tests.test_training_loop_dimensions import SCALED

    case = dataclasses.replace(SCALED, train=dataclasses.replace(SCALED.train, steps=4)).validate()
    verdict = verify_case(dataclasses.replace(case, system="tests.faults:ScalerSkipsTheStepAfterAnOverflow"), executor)
    assert verdict.kind == "mismatch" and verdict.divergence.check == "skipped_step", verdict.describe()
    script_shows_the_fault(tmp_path, "ScalerSkipsTheStepAfterAnOverflow", case, verdict)


def script_shows_the_fault(tmp_path, fault: str, case, verdict, clean_too: bool = True) -> None:
    """The case's script, with ``fault`` injected, fails as ``verdict`` says; without (``clean_too``; CI runs that
    control on one case), it passes."""
    case = dataclasses.replace(case, system="")
    script, case_file = tmp_path / "repro.py", tmp_path / "case.json"
    script.write_text(export(case))
    case_file.write_text(case.to_json())
    faulty = torchrun(script, case.world_size, str(ROOT / "tests" / "inject_fault.py"), fault, str(case_file))
    check_outcome(faulty, verdict)
    if clean_too:
        check_outcome(torchrun(script, case.world_size), None)


def test_a_rollback_exports_to_a_script_that_rolls_back_both_systems(tmp_path):
    """A rollback (the live FSDP2 system loads its DCP checkpoint two steps after the save; the reference rolls back
    through the trusted path) written out: on unmodified torch the script passes, with the loaded pass compared."""
    case = simple(train=TrainSpec(steps=4, momentum=0.9, scheduler="step"), plan=FSDP2Plan(wraps=(Wrap(""),)),
                  checkpoint=Checkpoint(step=1, save="dcp", rollback_at=3)).validate()
    assert refusal(case) is None
    script = tmp_path / "repro.py"
    script.write_text(export(case))
    check_outcome(torchrun(script, case.world_size), None)
    # The rollback is compared: a script whose system under test skips its load (the reference still rolls back)
    # fails right after it.
    skipped = tmp_path / "skipped.py"
    call = "load_turn(role, System(model, optim, scheduler, inner, device), SAVED.pop(role), loaded)"
    assert call in script.read_text()
    skipped.write_text(script.read_text().replace(call, "(SAVED.pop(role) if role == 'system' else " + call + ")"))
    result = torchrun(skipped, case.world_size)
    assert result.returncode != 0 and "DIVERGENCE step 3 (right after the checkpoint load)" in result.stdout, result.stdout[-2000:]


def switches_cases():
    """An HSDP fsdp2 case setting every one of FSDP2's switches around its microbatches, and a composable one
    setting its two."""
    from parityfuzz.families.composable import ComposablePlan, Compose
    from tests.test_training_loop_dimensions import BLOCKS

    fsdp2 = simple(world_size=4, model=BLOCKS, mesh=MeshSpec((2, 2), ("dp_replicate", "dp_shard")),
                   plan=FSDP2Plan(wraps=(Wrap("body.1"), Wrap("")), no_sync=("body.1",), no_all_reduce=True,
                                  is_last_backward=True, reshard_after_backward=False, unshard_first=True,
                                  post_optim_event=True),
                   train=TrainSpec(steps=2, microbatches=2))
    composable = simple(model=BLOCKS, train=TrainSpec(steps=2, microbatches=2), plan=ComposablePlan(
        applies=(Compose("body.1"), Compose("body.2", "replicate"), Compose("")), no_sync=True, post_optim_event=True))
    return {"fsdp2": fsdp2.validate(), "composable": composable.validate()}


@pytest.mark.parametrize("family", ["fsdp2", "composable"])
def test_the_switches_around_each_microbatch_are_the_calls_the_system_runs(tmp_path, family):
    """The script prints the calls the system runs around each microbatch (one list of calls, two backends:
    parityfuzz.run.calls), the post-optimizer event on the device the rank trains on, and trains like the harness
    says (it passes there: tests/test_training_loop_dimensions.py)."""
    case = switches_cases()[family]
    text = export(case)
    accumulate = text[text.index("def accumulate(model, micro, last):"):]
    accumulate = accumulate[:accumulate.index("\n\n\n")]
    assert "if micro == 0:" in accumulate and "set_post_optim_event(model, DEVICE)" in accumulate, accumulate
    expected = (['resolve(model, "body.1").set_requires_gradient_sync(last, recurse=False)',
                 "model.set_reshard_after_backward(last)", "model.set_requires_all_reduce(last)",
                 "model.set_is_last_backward(last)", 'resolve(model, "body.1").unshard(async_op=True)']
                if family == "fsdp2" else
                ['resolve(model, "body.1").set_requires_gradient_sync(last, recurse=False)',
                 'resolve(model, "body.2").set_requires_gradient_sync(last)',
                 "model.set_requires_gradient_sync(last, recurse=False)"])
    assert all(line in accumulate for line in expected), accumulate
    script = tmp_path / "repro.py"
    script.write_text(text)
    check_outcome(torchrun(script, case.world_size), None)
