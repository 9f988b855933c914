"""The fully_shard part written out (the fsdp2 family's export, which fsdp2_tp, pipeline and composable build on):
the plan's own calls (:meth:`parityfuzz.parts.fully_shard.FullyShardPlan.calls`: activation checkpoints,
``fully_shard`` per wrap, prefetching), printed, which :class:`parityfuzz.parts.fully_shard.system.FSDP2System`
runs; the accumulation switches; and the emulating reference ``ddp_mp``, copied by source."""

from __future__ import annotations

import inspect

from parityfuzz.case import Case
from parityfuzz.export.parts import Parts, function
from parityfuzz.parts.fully_shard import FullyShardPlan, switch_calls
from parityfuzz.parts.activation_checkpoint import export as ac_export
from parityfuzz.run.calls import statement

IMPORTS = (ac_export.IMPORTS + "from torch.distributed.fsdp import (CPUOffloadPolicy, MixedPrecisionPolicy, "
           "fully_shard,\n    register_fsdp_forward_method)\n")


def refusal(case: Case) -> str | None:
    return None


def plan_lines(plan: FullyShardPlan, mesh: str = "mesh") -> list[str]:
    """The plan's calls as the script's lines, ``mesh`` the script's name of the mesh ``fully_shard`` takes."""
    return [statement(call) for call in plan.calls(mesh)]


def switches_source(first: list, every: list, doc: str) -> str:
    """``accumulate(model, micro, last)``: the switch calls ``first`` (at a step's first microbatch) and ``every``
    (at every microbatch) printed, with the harness's ``set_post_optim_event`` where a call names it."""
    lines = [statement(c) for c in every]
    if first:
        lines.insert(0, "if micro == 0:\n" + "\n".join("    " + statement(c).replace("\n", "\n    ") for c in first))
    source = function("accumulate(model, micro, last)", doc, lines, "return contextlib.nullcontext()")
    if any(c.fn == "set_post_optim_event" for c in first):
        from parityfuzz.parts.fully_shard.system import set_post_optim_event

        source = inspect.getsource(set_post_optim_event) + "\n\n" + source
    return source


def accumulate_source(case: Case) -> str:
    """FSDP2's switches around each microbatch (:func:`parityfuzz.parts.fully_shard.switch_calls`), printed."""
    return switches_source(*switch_calls(case.plan, case.train.microbatches),
                           "FSDP2's switches around each microbatch.")


def after_backward_source() -> str:
    """FSDP2's invariant after a step's last backward, the system's own check copied."""
    from parityfuzz.parts.fully_shard import system
    from parityfuzz.systems import base

    return "\n\n".join([inspect.getsource(base.InvariantViolation), inspect.getsource(system.check_resharded),
                        "def after_backward(model, last):\n    if last and WRAPPED:\n"
                        "        check_resharded(((case_name(n), p) for n, p in model.named_parameters()),\n"
                        '                        "after the last backward of a step")\n'])


def parts(case: Case, mesh_line: str = "") -> Parts:
    plan = case.plan
    lines = ([mesh_line] if mesh_line else []) + plan_lines(plan)
    apply_plan = function("apply_plan(model, mesh, device)", "FSDP2 as the case's plan says (parityfuzz.parts.fully_shard.system).",
                          lines,
                          "return model")
    forward = ("def forward(model, batch):\n    return model.forward_alt(batch)\n" if plan.forward_method
               else "def forward(model, batch):\n    return model(batch)\n")
    return Parts(imports=IMPORTS,
                 apply_plan=f"WRAPPED = {bool(plan.wraps)}\n\n\n" + ac_export.definitions(plan.checkpoints) + apply_plan,
                 accumulate=accumulate_source(case), after_backward=after_backward_source(), forward=forward)


# ---- the reference ddp_mp (this family's): FSDP2's MixedPrecisionPolicy emulated, copied from the harness


def reference_title(case: Case) -> str:
    return "replicated training doing what FSDP2's MixedPrecisionPolicy promises"


def reference_source(case: Case, styles: str = "", precision: str = "FSDP2Precision") -> tuple:
    """``(where it is copied from, the classes to copy, the construction, the contexts)``.  ``ddp_mp_tp``'s writer
    builds on it: ``styles`` are the lines that apply the plan's tensor-parallel styles to the reference's own
    model first, ``precision`` the emulating class constructed."""
    return "parityfuzz.parts.fully_shard.reference", emulation_classes(), _precision_reference(case, styles, precision), \
        "reference_step_context = reference_loss_context = contextlib.nullcontext\n"


def emulation_classes() -> list:
    """The harness's emulation of FSDP2's ``MixedPrecisionPolicy`` and what it uses, to copy by source."""
    from parityfuzz.parts.fully_shard import reference as mp
    from parityfuzz.systems import masters

    return [masters.cast_floats, masters.divide_factors, masters.Masters, mp._PostBackward, mp._register_post_backward,
            mp._Group, mp.FSDP2Precision]


def _precision_reference(case: Case, styles: str, precision: str) -> str:
    """The policies and the construction (after ``styles``)."""
    from parityfuzz.export.reference import dtype_literal as dtype, groups

    plan = case.plan
    policies = ",\n    ".join(
        f'dict(path="{w.path}", param_dtype={dtype(w.param_dtype)}, reduce_dtype={dtype(w.reduce_dtype)}, '
        f"output_dtype={dtype(w.output_dtype)}, cast_forward_inputs={w.cast_forward_inputs})" for w in plan.wraps)
    return (f"#: Each fully_shard call's MixedPrecisionPolicy (the system under test's, above).\n"
            f"POLICIES = [\n    {policies},\n]\n\n\n"
            "def reference(inner, device, mesh):\n" + styles +
            f"    return {precision}(inner, POLICIES, {', '.join(groups(case))}, "
            f"unsynced={sorted(plan.no_sync)!r},\n"
            f"        reduce_scatter_unused={plan.reduce_scatter_unused}, no_all_reduce={plan.no_all_reduce})\n")
