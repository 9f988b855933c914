"""Preconditions of the known torch bugs of the pipeline family (``corpus/known_bugs.toml`` names them
``pipeline:<function>``): what the shrunk cases of each bug needed.  Each takes a case and says whether the bug
can show in it."""

from __future__ import annotations

from parityfuzz.case import Case, under
from parityfuzz.families.pipeline.schedules import SPLIT_BACKWARD


#: Module kinds whose output is a view: ``F.linear`` over a 3-D activation returns a view of its 2-D product
#: (a Linear, and the MLP and attention blocks that end in one).
_VIEW_OUTPUT = ("linear", "mlp", "attention")
#: Module kinds whose output is a new tensor whatever their input.
_FRESH_OUTPUT = ("act", "layernorm", "rmsnorm", "scale", "residual")


def _output_is_view(node, input_is_view: bool) -> bool:
    """Whether ``node``'s output is a view, given whether its input is (statically, from the model tree)."""
    kind = node.kind
    if kind in _VIEW_OUTPUT:
        return True
    if kind in _FRESH_OUTPUT:
        return False
    if kind == "dropout":  # p == 0 gives its input back
        return input_is_view if node.p == 0 else False
    if kind in ("seq", "block"):
        for child in node.children:
            input_is_view = _output_is_view(child, input_is_view)
        return input_is_view
    if kind == "twice":
        return _output_is_view(node.children[0], _output_is_view(node.children[0], input_is_view))
    if kind == "gate":  # on some steps its child's output, on others its input
        return _output_is_view(node.children[0], input_is_view) or input_is_view
    return True  # (a kind this table does not know yet: as if a view, so the bug is not reported anew)


def _stage_output_is_view(case: Case, stage: list[str]) -> bool:
    nodes = dict(case.model.body.walk("body"))
    view = False  # a stage's input is a fresh receive buffer (or the model's input)
    for unit in stage:
        view = unit == "head" or (unit != "inp" and _output_is_view(nodes[unit], view))
    return view


def _split_stages(case: Case) -> list[int]:
    """The stages whose backward a split-backward schedule splits on some microbatch: every stage but the first
    (stage.py, backward_one_chunk: 'Skip the backward for the first stage since we will perform the weight update
    with autograd.backward in backward_weight_one_chunk'); under ScheduleDualPipeV none on a pipeline of one rank,
    whose order (schedules.py, ScheduleDualPipeV._calculate_single_rank_operations) runs every backward of stage 1
    in full (its only input step is stage 0's), and every stage but the first over two ranks or more (each has an
    input step: a first microbatch in its 'I1W1F1' phase, or a last in its 'B1B0' one)."""
    plan = case.plan
    if plan.schedule not in SPLIT_BACKWARD:
        return []
    pp = case.mesh.axis_size("pp")
    if plan.schedule == "dualpipev" and pp == 1:
        return []
    return list(range(1, plan.num_stages(pp)))


def _first_split_stages(case: Case) -> list[int]:
    """The stages whose first backward (microbatch 0) is split, its input step running right after the stage's
    forward: every split stage under ScheduleInterleavedZeroBubble and ScheduleZBVZeroBubble (they split every
    backward); under ScheduleDualPipeV stages pp + 1 .. 2 pp - 1, the second stage of ranks 0 .. pp - 2, whose
    'I1W1F1' phase splits its first pp - 1 - rank microbatches (the others run full backwards before their input
    step, or have none)."""
    split = _split_stages(case)
    if case.plan.schedule == "dualpipev":
        return [s for s in split if s > case.mesh.axis_size("pp")]
    return split


def _units_of(case: Case, stages: list[int]) -> list[str]:
    """The top-level modules of ``stages``."""
    units = case.plan.stage_units(case.model)
    return [unit for s in stages if s < len(units) for unit in units[s]]


def _split_units(case: Case) -> list[str]:
    """The top-level modules of the stages whose backward a split-backward schedule splits (:func:`_split_stages`)."""
    return _units_of(case, _split_stages(case))


def _nodes_in(case: Case, units: list[str]) -> list:
    return [node for path, node in case.model.body.walk("body") if under(path, units)]


def zero_bubble_stage_output_view(case: Case) -> bool:
    """A schedule that runs ``stage_backward_input`` (it ``detach_``es the stage's outputs in place), with a stage
    that runs it (neither the first, whose backward is not split, nor the last, whose output is the loss) whose
    output is a view (its last module a Linear, an MLP or an attention block: F.linear over a 3-D activation
    returns a view)."""
    plan = case.plan
    return plan.schedule in SPLIT_BACKWARD and any(
        _stage_output_is_view(case, stage) for stage in plan.stage_units(case.model)[1:-1])


def zero_bubble_stage_input_without_grad(case: Case) -> bool:
    """A schedule that splits the backward, with a stage whose backward it splits (:func:`_split_stages`: under
    ScheduleDualPipeV, a pipeline of two ranks or more) whose input may not require grad (nothing trainable before
    it: parameterless or frozen modules only)."""
    frozen = frozenset(f.path for f in case.train.frozen)
    units = case.plan.stage_units(case.model)
    return any(not case.model.input_requires_grad(units[s][0], frozen) for s in _split_stages(case) if s < len(units))


def zero_bubble_module_called_twice(case: Case) -> bool:
    """A schedule that splits the backward, with a module called twice in a forward in a stage whose backward it
    splits (the shrunk cases: an attention block, an MLP; a single Linear called twice trains)."""
    return any(node.kind == "twice" and node.children[0].kind != "linear" and node.children[0].has_params()
               for node in _nodes_in(case, _split_units(case)))


def zero_bubble_expanded_gradient(case: Case) -> bool:
    """A schedule that splits the backward, with a parameter used through a broadcast (a ``scale`` module's
    ``w.sum(0)``: its gradient is an expanded view) in a stage whose first backward it splits (the weight step
    stores the expanded view as the .grad; :func:`_first_split_stages`: under ScheduleDualPipeV stages pp + 1 ..
    2 pp - 1 only, the other stages' weight steps adding into the dense .grad their full backwards stored), and
    something that writes into the stored gradient in place: a later microbatch, a later ``step()`` call of the same
    optimizer step, gradient clipping, or a later step's weight step where ``zero_grad`` keeps the gradient
    (``set_to_none=False``: ``zeros``, ``alternate``)."""
    t = case.train
    writes = (case.plan.microbatches > 1 or t.microbatches > 1 or t.clip > 0
              or (t.steps > 1 and t.zero_grad != "none"))
    return writes and any(node.kind == "scale"
                          for node in _nodes_in(case, _units_of(case, _first_split_stages(case))))


def zero_bubble_fsdp_reshard_after_forward(case: Case) -> bool:
    """A schedule that splits the backward, with ``fully_shard(reshard_after_forward=True)`` on each stage, or on the
    units inside it (``shard_units``: a unit's group is resharded after its forward alike; with the stage's False
    and the units' True the units' weights get no gradient, with both False the case trains), and parameters in a
    stage whose input step runs right after its forward (:func:`_first_split_stages`: every stage but the first
    under ScheduleInterleavedZeroBubble and ScheduleZBVZeroBubble; under ScheduleDualPipeV stages pp + 1 .. 2 pp - 1,
    whose first microbatches' gradients are lost; none on one rank) (the shrunk cases: pp 2 x dp_shard 2)."""
    plan = case.plan
    split = _units_of(case, _first_split_stages(case))
    return ("dp_shard" in case.mesh.names
            and (plan.reshard_after_forward or (plan.shard_units and plan.unit_reshard_after_forward))
            and any(under(m, split) for m in case.model.param_modules()))


def scale_grads_over_accumulated_steps(case: Case) -> bool:
    """``scale_grads`` over several microbatches, with the training loop accumulating gradients over several
    ``step()`` calls before the optimizer steps."""
    plan = case.plan
    return plan.scale_grads and plan.microbatches > 1 and case.train.microbatches > 1


def zero_bubble_composable_checkpoint(case: Case) -> bool:
    """A schedule that splits the backward, with a module checkpointed by the composable ``checkpoint`` API (whose
    recomputation the input and the weight step each run)."""
    return case.plan.schedule in SPLIT_BACKWARD and any(c.api == "composable" for c in case.plan.checkpoints)


def eval_with_adjacent_stages_on_one_rank(case: Case) -> bool:
    """An evaluation pass (``schedule.eval``) under a multi-stage schedule where a rank holds two adjacent stages:
    a V-shaped one (its middle stages), or a looped one over a pipeline of one rank."""
    plan = case.plan
    return case.train.eval and (plan.layout() == "v" or (plan.layout() == "loop" and plan.stages_per_rank > 1
                                                         and case.mesh.axis_size("pp") == 1))


def metadata_inference_over_fsdp_with_gradients_held(case: Case) -> bool:
    """Stages ``fully_shard``-ed over ``dp_shard`` whose parameters hold gradients (``zero_grad`` zeroes them in place
    instead of dropping them) when the schedule infers metadata again: stages the system builds anew mid-training (a
    thaw: a stage input may start to require grad), or a switch between ``schedule.eval`` and ``schedule.step``."""
    return ("dp_shard" in case.mesh.names and case.train.zero_grad in ("zeros", "alternate")
            and (any(f.until for f in case.train.frozen) or case.train.eval))


def flattened_load_into_an_empty_parameter_group(case: Case) -> bool:
    """A flattened optimizer state dict (``flatten_optimizer``) loaded into a pipelined system some rank of which holds
    an optimizer with an empty parameter group: its stages hold none of a group's parameters, or none at all."""
    from parityfuzz.families.pipeline import rank_modules

    r = case.resumed()
    if not case.checkpoint.flatten_optimizer or r.family != "pipeline":
        return False
    owners = r.model.param_modules()
    for held in rank_modules(r):
        mine = [m for m in owners if under(m, held)]
        present = {r.train.group_of(f"{m}.weight") for m in mine}
        if not mine or any(i not in present for i in range(len(r.train.groups))):
            return True
    return False



def zero_bubble_fsdp_accumulates_in_param_dtype(case: Case) -> bool:
    """A schedule that splits the backward, over stages ``fully_shard``-ed with a ``MixedPrecisionPolicy`` whose
    ``reduce_dtype`` differs from the dtype the stages compute in, where a stage's weight step is followed by another
    weight step or a full backward of it with no input step between them (FSDP's post-backward, which moves .grad to
    the reduce_dtype accumulator, runs in the input step or the full backward): the two add their gradients in the
    compute dtype.  From the schedules' orders (schedules.py, ``_calculate_single_rank_operations``): over a pipeline
    of two ranks or more, ScheduleInterleavedZeroBubble with 2 microbatches or more, ScheduleZBVZeroBubble with
    more microbatches than ranks, ScheduleDualPipeV always (it takes 2 pp or more); on one rank none."""
    from parityfuzz.case.dtypes import model_dtype

    plan = case.plan
    mp = plan.precision
    pp = case.mesh.axis_size("pp")
    pairs = {"interleaved_zero_bubble": plan.microbatches > 1, "zbv": plan.microbatches > pp, "dualpipev": True}
    return (pairs.get(plan.schedule, False) and pp > 1 and "dp_shard" in case.mesh.names
            and bool(mp.reduce_dtype) and mp.reduce_dtype != mp.compute(model_dtype(case)))



#: Module kinds whose output comes out of an autograd node that also takes their parameter (``x * gain * w.sum(0)``,
#: a norm's affine): for a 3-D activation a Linear's comes out of a view node instead.
_PARAMETER_AT_OUTPUT = ("scale", "layernorm", "rmsnorm")


def _output_node_takes_a_parameter(node, input_does: bool) -> bool:
    """Whether ``node``'s output comes out of an autograd node that takes a parameter, given whether its input does
    (statically, from the model tree)."""
    kind = node.kind
    if kind in _PARAMETER_AT_OUTPUT:
        return True
    if kind in ("seq", "block"):
        for child in node.children:
            input_does = _output_node_takes_a_parameter(child, input_does)
        return input_does
    if kind == "twice":
        return _output_node_takes_a_parameter(node.children[0], input_does)
    if kind == "gate":  # on some forwards its child's output, on others its input
        return _output_node_takes_a_parameter(node.children[0], input_does) or input_does
    if kind == "dropout":
        return input_does if node.p == 0 else False
    return False


def _fsdp_modules_of_split_stages(case: Case) -> list[list[str]]:
    """The modules that ``fully_shard`` makes parameter groups of in the stages whose backward is split, each as its
    top-level modules: the stage, or under ``shard_units`` each of its top-level modules that holds a parameter
    (the stage's own group then holds none)."""
    units = case.plan.stage_units(case.model)
    stages = [units[s] for s in _split_stages(case) if s < len(units)]
    if not case.plan.shard_units:
        return stages
    owners = case.model.param_modules()
    return [[unit] for stage in stages for unit in stage if any(under(m, [unit]) for m in owners)]


def zero_bubble_single_microbatch_fsdp_mixed_gradient_dtypes(case: Case) -> bool:
    """A schedule that splits the backward, with one microbatch, over stages ``fully_shard``-ed with a
    ``MixedPrecisionPolicy`` whose ``reduce_dtype`` differs from the compute dtype, where a module with an FSDP
    parameter group in a split stage (the stage, or a unit under ``shard_units``) ends in an autograd node that takes
    a parameter (a ``scale`` or a norm last) and holds another parameter-holding module before it: the weight step's
    ``autograd.grad`` for that parameter fires FSDP's pre-backward hook on the module's output, whose queued final
    callback moves the gradients already written into reduce_dtype accumulators, and the last one is then written in
    the compute dtype.  Measured: a scale or a norm alone in the module, a Tanh after it, or the two in different
    units train; 2 microbatches or reduce_dtype unset train."""
    from parityfuzz.case.dtypes import model_dtype

    plan, mp = case.plan, case.plan.precision
    if not (plan.schedule in SPLIT_BACKWARD and plan.microbatches == 1 and "dp_shard" in case.mesh.names
            and mp.reduce_dtype and mp.reduce_dtype != mp.compute(model_dtype(case))):
        return False
    nodes = dict(case.model.body.walk("body"))
    owners = case.model.param_modules()
    for module in _fsdp_modules_of_split_stages(case):
        joins = False
        for unit in module:
            joins = unit not in ("inp", "head") and _output_node_takes_a_parameter(nodes[unit], joins)
        if joins and sum(under(m, module) for m in owners) > 1:
            return True
    return False


def zero_bubble_compiled(case: Case) -> bool:
    """A schedule that splits the backward, over stage modules compiled in place (``Module.compile()``, which the
    schedules' check for ``OptimizedModule`` does not see)."""
    return case.plan.schedule in SPLIT_BACKWARD and bool(case.compile)


def mixed_precision_stage_unfrozen_later(case: Case) -> bool:
    """Stages ``fully_shard``-ed with a mixed-precision policy, and a parameter frozen at the first forward and
    unfrozen later: fsdp2's ``mixed-precision-group-unfrozen-later`` (a group's dtypes are fixed at its first
    forward from its trainable parameters) inside a pipeline.  Measured on pipeline/b32c922d (an embedding stage
    frozen for one step under param_dtype=bfloat16): no freeze, a freeze for good, or no policy train."""
    return ("dp_shard" in case.mesh.names and case.mixed_precision()
            and any(f.until for f in case.train.frozen))
