"""The pipeline family's plan written out: the model split into this rank's stages (the harness's ``Stage``,
copied), each stage's tensor-parallel styles, activation checkpoints and ``fully_shard`` in the order
:class:`parityfuzz.families.pipeline.system.PipelineSystem` applies them, a ``PipelineStage`` per stage on the ``pp`` group
and the plan's schedule; a step is one ``schedule.step``.  The reference is DDP fed the plan's microbatches one
after another, the gradients divided by their count where ``scale_grads``
(:class:`parityfuzz.families.pipeline.system.PipelineReference`), or under the plan's ``MixedPrecisionPolicy`` the harness's
emulation of it with one group per stage (:class:`parityfuzz.families.pipeline.system.PipelineMixedPrecisionReference`).  Each rank records the stages it holds and says the
others are held elsewhere, as the harness does.  Where the run unfreezes
parameters, the stages and schedule are built anew around the same modules (``Pipelined.rebuild``), as the harness
does; an evaluation forward is ``schedule.eval``.  A checkpoint event saves and loads each rank's stages as one module
named as the whole model (``Pipelined.state_module``, ``holds``), as the harness does."""

from __future__ import annotations

import inspect

from parityfuzz.case import Case
from parityfuzz.case.dtypes import promise
from parityfuzz.parts.fully_shard import export as fully_shard_export
from parityfuzz.export import reference
from parityfuzz.export.reference import dtype_literal
from parityfuzz.export.model import classes_used
from parityfuzz.export.parts import Parts, function
from parityfuzz.families.pipeline import SCHEDULES, PipelinePlan
from parityfuzz.families.pipeline.calls import stage_calls
from parityfuzz.families.pipeline.precision import fully_shard_groups
from parityfuzz.run.calls import statement
from parityfuzz.parts.activation_checkpoint import export as ac_export
from parityfuzz.parts.tensor_parallel import apply as tp_apply
from parityfuzz.parts.tensor_parallel import export as tp_export
from parityfuzz.run import build
from parityfuzz.families.pipeline import system

IMPORTS = ("from torch.distributed import pipelining\nfrom torch.distributed.pipelining.microbatch import TensorChunkSpec\n"
           + fully_shard_export.IMPORTS + tp_export.IMPORTS)

PIPELINED = '''
class Pipelined(nn.Module):
    """This rank's stage modules, a PipelineStage around each on the pp group and the plan's schedule over them;
    its parameters and buffers are named as the case names them, and ``elsewhere`` lists what other ranks hold."""

    def __init__(self, whole, modules, mine, mesh, device):
        super().__init__()
        self.stage_modules = nn.ModuleList(modules)
        self.group = group = mesh.get_group("pp")
        count = len(STAGE_UNITS)
        self.has_first, self.has_last = 0 in mine, count - 1 in mine
        self.last_rank = next(r for r, held in enumerate(STAGES_OF_RANK) if count - 1 in held)
        params = {case_name(n) for n, _ in whole.named_parameters()} - {n for n, _ in self.named_parameters()}
        buffers = {case_name(n) for n, _ in whole.named_buffers()} - {n for n, _ in self.named_buffers()}
        self.elsewhere = {"grad": sorted(params), "param": sorted(params) + ["buffer:" + n for n in sorted(buffers)]}
        self.mine, self.count, self.mesh, self.device = mine, count, mesh, device
        self.held = [unit for index in mine for unit in STAGE_UNITS[index]]
        # (not a submodule: each module is in the stage modules once)
        self.__dict__["state_view"] = Stage(whole, self.held)
        self.rebuild()

    def state_module(self):
        """This rank's stages as one module named as the whole model is: what a checkpoint saves and loads (the same
        module objects, so FSDP2's state-dict hooks run), as the harness's PipelineSystem.state_module."""
        return self.state_view

    def holds(self, name):
        """Whether this rank's state dict holds the case's parameter or buffer ``name``."""
        return any(name == unit or name.startswith(unit + ".") for unit in self.held)

    def rebuild(self):
        """A PipelineStage around each stage module and the schedule over them (anew once parameters are unfrozen: a
        PipelineStage infers its metadata, requires_grad among it, at its first step)."""
        get_mesh = lambda names, layout: self.mesh[names if len(names) > 1 else names[0]]  # DTensor activations
        stages = [pipelining.PipelineStage(m, i, self.count, self.device, group=self.group, get_mesh=get_mesh)
                  for i, m in zip(self.mine, self.stage_modules)]
        split = {"args_chunk_spec": (TensorChunkSpec(SPLIT_DIM),)} if SPLIT_DIM else {}
        self.schedule = SCHEDULE(stages[0] if SINGLE_STAGE else stages, n_microbatches=PIPELINE_MICROBATCHES,
                                 loss_fn=chunk_loss(loss_fn, SPLIT_DIM), scale_grads=SCALE_GRADS, **split)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        for module in self.stage_modules:
            for name, p in module.named_parameters():
                yield case_name(name), p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        for module in self.stage_modules:
            for name, b in module.named_buffers():
                yield case_name(name), b


def apply_plan(model, mesh, device):
    """The pipeline plan (parityfuzz.families.pipeline.system): this rank's stages, under the schedule."""
    mine = STAGES_OF_RANK[mesh.get_local_rank("pp")]
    modules = [stage_module(model, index, mesh) for index in mine]
    return Pipelined(model, modules, mine, mesh, device)
'''

SYSTEM_PASS = '''
def system_pass(model, x, y, scaler, spike, micro, last):
    """One schedule.step."""
    with loss_context():
        return run_schedule(model, model.schedule.step, x, y)


def run_schedule(model, call, x, y):
    """The input where this rank holds the first stage, the target and a list for the losses where it holds the
    last; the last stage's microbatch losses added up, sent to every rank of the pipeline."""
    losses = []
    call(*((x,) if model.has_first else ()),
         **({"target": y.movedim(SPLIT_DIM, 0), "losses": losses} if model.has_last else {}))
    total = pipeline_loss_total([plain_loss(l) for l in losses]) if model.has_last else torch.zeros((), dtype=LOSS_DTYPE, device=x.device)
    dist.broadcast(total, group=model.group, group_src=model.last_rank)
    return total
'''

SYSTEM_EVALUATE = '''
def system_evaluate(model, x, y):
    """schedule.eval ("calling forward only"), its microbatch losses added up as a step's are."""
    return run_schedule(model, model.schedule.eval, x, y)
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
        return microbatches_in_turn(model, x, y, PIPELINE_MICROBATCHES, SPLIT_DIM, SCALE_GRADS, MICROBATCHES > 1,
                                    lambda xs, ys: loss_fn(model(xs), ys), lambda loss: loss.backward())


def reference_evaluate(model, x, y):
    """The plan's microbatches forward only, their losses added up."""
    return forward_only(lambda xs, ys: loss_fn(model(xs), ys), x, y, PIPELINE_MICROBATCHES, SPLIT_DIM)
'''

EMULATED_PASS = '''
def reference(inner, device, mesh):
    return FSDP2Precision(inner, POLICIES, mesh.get_group("dp_shard"), unsynced=[p["path"] for p in POLICIES])


def reference_pass(model, x, y, scaler, spike, last):
    """The plan's microbatches in turn through the emulation (the harness's function below): every step() reduces;
    the noise samples (perturbed references) run them last to first, as the harness's do."""
    return emulated_microbatches_in_turn(model, x, y, PIPELINE_MICROBATCHES, SPLIT_DIM, SCALE_GRADS,
                                         lambda xs, ys: loss_fn(model(xs), ys),
                                         lambda loss: reference_backward(model, loss), reverse=model.perturbed)


def reference_evaluate(model, x, y):
    """The plan's microbatches forward only, their losses added up."""
    return forward_only(lambda xs, ys: loss_fn(model(xs), ys), x, y, PIPELINE_MICROBATCHES, SPLIT_DIM)


reference_step_context = reference_loss_context = contextlib.nullcontext
'''


def refusal(case: Case) -> str | None:
    return None  # (a checkpoint loaded into another plan, mesh or world size: the export's generic refusal)


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
        f"SPLIT_DIM = {plan.split_dim}  # the input dimension the schedule splits into microbatches",
        f"SCALE_GRADS = {plan.scale_grads}",
        f"LOSS_DTYPE = torch.{promise(case).output('')}  # the last stage's output's, and so its losses'",
    ]) + "\n"


def stage_source(case: Case) -> str:
    """``stage_module(whole, index, mesh)``: stage ``index``'s module, its calls
    (:func:`parityfuzz.families.pipeline.calls.stage_calls`, which the system runs) under ``if index == <stage>:``."""
    names = case.mesh.names
    lines = ["model = Stage(whole, STAGE_UNITS[index])  # (the stage keeps the whole model's paths)"]
    lines += ['tp_mesh = mesh["tp"]'] if "tp" in names else []
    lines += ['dp_mesh = mesh["dp_shard"]'] if "dp_shard" in names else []
    for index in range(len(case.plan.stage_units(case.model))):
        calls = stage_calls(case, index)
        if calls:
            lines.append(f"if index == {index}:")
            lines.extend("    " + statement(c).replace("\n", "\n    ") for c in calls)
    return function("stage_module(whole, index, mesh)", "Stage ``index``: the top-level modules it owns, their "
                    "tensor-parallel styles, activation checkpoints and fully_shard in PipelineSystem's order.", lines,
                    "return model")


def parts(case: Case) -> Parts:
    plan: PipelinePlan = case.plan
    block = "" if "Block" in classes_used(case) else inspect.getsource(build.Block) + "\n\n"
    plan_source = "\n\n".join([constants(case), block + inspect.getsource(system.Stage),
                               inspect.getsource(system.chunk_loss), inspect.getsource(system.pipeline_loss_total),
                               inspect.getsource(tp_apply.plain_loss),
                               ac_export.definitions(plan.checkpoints) + stage_source(case), PIPELINED.strip()])
    clip = inspect.getsource(system.clip_over_pipeline) + "\n\n" + CLIP.strip() + "\n"
    return Parts(imports=IMPORTS, apply_plan=plan_source + "\n\n" + OPTIMIZER.strip() + "\n", clip=clip,
                 optimizer="make_pipeline_optimizer",
                 system_pass=SYSTEM_PASS.strip() + "\n", system_evaluate=SYSTEM_EVALUATE.strip() + "\n", records=RECORDS.strip() + "\n",
                 contexts="step_context = implicit_replication  # a stage may be only partly tensor parallel\n"
                          f"loss_context = {'loss_parallel' if plan.loss_parallel else 'contextlib.nullcontext'}\n")


# ---- the references pipeline_reference and pipeline_mp_reference (this family's): DDP, or the emulation of FSDP2's
# MixedPrecisionPolicy with one group per stage (copied from the harness), fed the plan's microbatches


def reference_title(case: Case) -> str:
    if case.mixed_precision():
        return ("replicated training doing what FSDP2's MixedPrecisionPolicy promises, one group per stage, fed the "
                "plan's microbatches one after another")
    return "DDP fed the plan's microbatches one after another"


def reference_text(case: Case) -> str:
    shared = "\n\n" + inspect.getsource(system.forward_only)
    if not case.mixed_precision():
        return reference.DDP + REFERENCE_PASS + "\n\n" + inspect.getsource(system.microbatches_in_turn) + shared
    classes = fully_shard_export.emulation_classes()
    mp = case.plan.precision
    policies = ",\n    ".join(
        f'dict({", ".join(f"{k}={v!r}" for k, v in group.items())}, param_dtype={dtype_literal(mp.param_dtype)}, '
        f"reduce_dtype={dtype_literal(mp.reduce_dtype)}, output_dtype={dtype_literal(mp.output_dtype)}, "
        f"cast_forward_inputs={mp.cast_forward_inputs})"
        for group in fully_shard_groups(case))
    return (f"# ---- the reference: {reference_title(case)} (the harness's emulation, "
            "parityfuzz.parts.fully_shard.reference, copied)\n\n\n"
            + "\n\n".join(inspect.getsource(c) for c in classes)
            + f"\n\n#: Each fully_shard call's MixedPrecisionPolicy (the system under test's, above).\n"
            f"POLICIES = [\n    {policies},\n]\n\n" + reference.EMULATED + EMULATED_PASS + "\n\n"
            + inspect.getsource(system.emulated_microbatches_in_turn) + shared)
