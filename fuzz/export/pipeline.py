"""The pipeline family's plan written out: the model split into this rank's stages (the harness's ``Stage``,
copied), each stage's activation checkpoints and ``fully_shard`` in the order
:class:`parityfuzz.systems.pipeline.PipelineSystem` applies them, a ``PipelineStage`` per stage on the ``pp`` group
and the plan's schedule; a step is one ``schedule.step``.  The reference is DDP fed the plan's microbatches one
after another, the gradients divided by their count where ``scale_grads``
(:class:`parityfuzz.systems.pipeline.PipelineReference`).  Each rank records the stages it holds and says the
others are held elsewhere, as the harness does.

Refused by name: a parameter unfrozen during the run (the harness builds its stages anew then), which the
script's shared loop does not do for a pipeline."""

from __future__ import annotations

import inspect

from parityfuzz.case import Case
from parityfuzz.case.model import under
from parityfuzz.export import reference
from parityfuzz.export.fsdp2 import checkpoint_line, function
from parityfuzz.export.model import classes_used
from parityfuzz.export.parts import Parts
from parityfuzz.families.pipeline import SCHEDULES, PipelinePlan
from parityfuzz.run import build
from parityfuzz.systems import pipeline as system

IMPORTS = ("from torch.distributed import pipelining\n"
           "from torch.distributed.fsdp import fully_shard\n"
           "from torch.distributed._composable import checkpoint\n"
           "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (\n"
           "    CheckpointImpl, apply_activation_checkpointing, checkpoint_wrapper)\n"
           "import functools\n")

PIPELINED = '''
class Pipelined(nn.Module):
    """This rank's stage modules, a PipelineStage around each on the pp group and the plan's schedule over them;
    its parameters and buffers are named as the case names them, and ``elsewhere`` lists what other ranks hold."""

    def __init__(self, whole, modules, mine, group, device):
        super().__init__()
        self.stage_modules = nn.ModuleList(modules)
        self.group = group
        count = len(STAGE_UNITS)
        self.has_first, self.has_last = 0 in mine, count - 1 in mine
        self.last_rank = next(r for r, held in enumerate(STAGES_OF_RANK) if count - 1 in held)
        params = {case_name(n) for n, _ in whole.named_parameters()} - {n for n, _ in self.named_parameters()}
        buffers = {case_name(n) for n, _ in whole.named_buffers()} - {n for n, _ in self.named_buffers()}
        self.elsewhere = {"grad": sorted(params), "param": sorted(params) + ["buffer:" + n for n in sorted(buffers)]}
        stages = [pipelining.PipelineStage(m, i, count, device, group=group) for i, m in zip(mine, modules)]
        self.schedule = SCHEDULE(stages[0] if SINGLE_STAGE else stages, n_microbatches=PIPELINE_MICROBATCHES,
                                 loss_fn=loss_fn, scale_grads=SCALE_GRADS)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        for module in self.stage_modules:
            for name, p in module.named_parameters():
                yield case_name(name), p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        for module in self.stage_modules:
            for name, b in module.named_buffers():
                yield case_name(name), b


def apply_plan(model, mesh, device):
    """The pipeline plan (parityfuzz.systems.pipeline): this rank's stages, under the schedule."""
    mine = STAGES_OF_RANK[mesh.get_local_rank("pp")]
    modules = [stage_module(model, index, mesh) for index in mine]
    return Pipelined(model, modules, mine, mesh.get_group("pp"), device)
'''

SYSTEM_PASS = '''
def system_pass(model, x, y, scaler, spike, micro, last):
    """One schedule.step: the input where this rank holds the first stage, the target and a list for the losses
    where it holds the last; the last stage's microbatch losses added up, sent to every rank of the pipeline."""
    losses = []
    model.schedule.step(*((x,) if model.has_first else ()),
                        **({"target": y, "losses": losses} if model.has_last else {}))
    total = pipeline_loss_total(losses) if model.has_last else torch.zeros((), dtype=DTYPE, device=x.device)
    dist.broadcast(total, group=model.group, group_src=model.last_rank)
    return total
'''

CLIP = '''
def clip(model, params, max_norm):
    clip_over_pipeline(params, max_norm, DTYPE, model.group)
'''

OPTIMIZER = '''
def make_pipeline_optimizer(named):
    """The case's optimizer over this rank's parameters (an empty group where its stages hold none)."""
    return make_optimizer(groups=param_groups(named) or [{"params": []}])
'''

RECORDS = '''
def gradients(model, named):
    return {**{name: whole(p.grad) for name, p in named}, **{name: ELSEWHERE for name in model.elsewhere["grad"]}}


def parameters(model, named):
    return {**{name: whole(p) for name, p in named}, **{name: ELSEWHERE for name in model.elsewhere["param"]}}
'''

REFERENCE_PASS = '''
def reference_pass(model, x, y, scaler, spike, last):
    """The plan's microbatches in turn (the harness's function below), DDP's sync on the step's last pass."""
    with contextlib.nullcontext() if last else model.no_sync():
        return microbatches_in_turn(model, x, y, PIPELINE_MICROBATCHES, SCALE_GRADS, MICROBATCHES > 1,
                                    lambda xs, ys: loss_fn(model(xs), ys), lambda loss: loss.backward())
'''


def refusal(case: Case) -> str | None:
    if any(f.until for f in case.train.frozen):
        return "it unfreezes parameters during the run (the harness builds its stages anew then), which the export " \
               "does not write out yet"
    return None


def constants(case: Case) -> str:
    plan: PipelinePlan = case.plan
    pp = case.mesh.axis_size("pp")
    cls, layout = SCHEDULES[plan.schedule]
    return "\n".join([
        f"STAGE_UNITS = {plan.stage_units(case.model)!r}  # each stage's top-level modules",
        f"STAGES_OF_RANK = {[plan.stages_of(pp, r) for r in range(pp)]!r}  # the stages each pipeline rank holds",
        f"SCHEDULE = pipelining.{cls}",
        f"SINGLE_STAGE = {layout == 'single'}  # the schedule takes one stage per rank (else a list)",
        f"PIPELINE_MICROBATCHES = {plan.microbatches}",
        f"SCALE_GRADS = {plan.scale_grads}",
    ]) + "\n"


def stage_source(case: Case) -> str:
    """``stage_module(whole, index, mesh)``: stage ``index``'s module, checkpointed and sharded as the plan says."""
    plan: PipelinePlan = case.plan
    sharded = "dp_shard" in case.mesh.names
    units = plan.stage_units(case.model)
    lines = ["model = Stage(whole, STAGE_UNITS[index])"]

    def checkpoints(before: bool) -> None:
        for index, owned in enumerate(units):
            held = [c for c in plan.checkpoints if under(c.path, owned) and (c.before or not sharded) == before]
            if held:
                lines.append(f"if index == {index}:")
                lines.extend("    " + checkpoint_line(c).replace("\n", "\n    ") for c in held)

    checkpoints(True)
    if sharded:
        lines.append(f'fully_shard(model, mesh=mesh["dp_shard"], reshard_after_forward={plan.reshard_after_forward})')
        checkpoints(False)
    return function("stage_module(whole, index, mesh)", "Stage ``index``: the top-level modules it owns, its "
                    "activation checkpoints and fully_shard in PipelineSystem's order.", lines, "return model")


def parts(case: Case) -> Parts:
    block = "" if "Block" in classes_used(case) else inspect.getsource(build.Block) + "\n\n"
    plan_source = "\n\n".join([constants(case), block + inspect.getsource(system.Stage),
                               inspect.getsource(system.pipeline_loss_total), stage_source(case), PIPELINED.strip()])
    clip = inspect.getsource(system.clip_over_pipeline) + "\n\n" + CLIP.strip() + "\n"
    return Parts(imports=IMPORTS, apply_plan=plan_source + "\n\n" + OPTIMIZER.strip() + "\n", clip=clip,
                 optimizer="make_pipeline_optimizer",
                 system_pass=SYSTEM_PASS.strip() + "\n", records=RECORDS.strip() + "\n")


# ---- the reference pipeline_reference (this family's): DDP fed the plan's microbatches


def reference_title(case: Case) -> str:
    return "DDP fed the plan's microbatches one after another"


def reference_text(case: Case) -> str:
    return reference.DDP + REFERENCE_PASS + "\n\n" + inspect.getsource(system.microbatches_in_turn)
