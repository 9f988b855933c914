"""The fsdp1 family's plan written out: other initial weights off rank 0 for ``sync_module_states``, checkpointing
before wrapping, the manual nested ``FullyShardedDataParallel`` instances (children first), the root instance
with the plan's auto-wrap policy, checkpointing after; ``no_sync()`` on the non-last microbatches, FSDP1's own
``clip_grad_norm_``; parameters read through ``summon_full_params`` and gradients from each instance's flat
parameter (:class:`parityfuzz.parts.fsdp1.system.FSDP1System`, whose reading code the script copies)."""

from __future__ import annotations

import inspect

from parityfuzz.case import Case
from parityfuzz.export.parts import Parts, function
from parityfuzz.parts.fsdp1 import FSDP1WrapPlan
from parityfuzz.parts.fsdp1.calls import wrap_calls
from parityfuzz.run.calls import statement
from parityfuzz.parts.activation_checkpoint import export as ac_export
from parityfuzz.systems import base
from parityfuzz.parts.fsdp1 import system

IMPORTS = (ac_export.IMPORTS +
           "from torch.distributed.fsdp import (BackwardPrefetch, CPUOffload, FullyShardedDataParallel as FSDP,\n"
           "                                    MixedPrecision, ShardingStrategy)\n"
           "from torch.distributed.fsdp.wrap import ModuleWrapPolicy, lambda_auto_wrap_policy, "
           "size_based_auto_wrap_policy\n")


def refusal(case: Case) -> str | None:
    plan: FSDP1WrapPlan = case.plan
    if plan.ignored:
        return "ignored modules (FSDP1 trains each rank's copy on its own), which the export does not write out yet"
    return None


START_ELSEWHERE = '''if dist.get_rank() != 0:  # sync_module_states: FSDP1 must broadcast rank 0's weights over these
    g = torch.Generator().manual_seed(1000 + dist.get_rank())
    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            if t.is_floating_point():
                t.add_(torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype))'''


def plan_lines(case: Case, mesh: str = "") -> list[str]:
    """The plan's calls (:func:`parityfuzz.parts.fsdp1.calls.wrap_calls`) as the script's lines, after other initial
    weights off rank 0 where FSDP1 must broadcast rank 0's; ``mesh``: the script's name of a ``device_mesh``."""
    plan: FSDP1WrapPlan = case.plan
    return ([START_ELSEWHERE] if plan.sync_module_states else []) + [statement(c) for c in wrap_calls(case, mesh)]


def helpers(case: Case) -> str:
    """The harness's helpers the calls name (copied)."""
    plan: FSDP1WrapPlan = case.plan
    used = (["wrap_at"] if plan.wrapping == "manual" and plan.wraps else []) + \
        (["one_of"] if plan.wrapping == "lambda" else [])
    return "".join(inspect.getsource(getattr(system, name)) + "\n\n" for name in used)


#: fsdp1_tp: each flat gradient read is a rank's tensor-parallel shard, put back on tp as its parameter is.
ON_TP = """    for name, (mesh, placements, shape, stride) in TP_PLACEMENTS.items():
        if grads.get(name) is not None and not isinstance(grads[name], DTensor):
            grads[name] = DTensor.from_local(grads[name], mesh, placements, run_check=False, shape=shape,
                                             stride=stride)
"""


def records_source(tensor_parallel: bool = False) -> str:
    """FSDP1's parameters through ``summon_full_params``; its gradients from the flat parameters (the harness's
    code, copied), put back on ``tp`` under ``tensor_parallel``."""
    return "\n\n".join([
        "def parameters(model, named):\n"
        "    with FSDP.summon_full_params(model, writeback=False):\n"
        "        return {case_name(n): whole(p.detach().clone()) for n, p in model.named_parameters()}\n",
        "def gradients(model, named):\n"
        "    grads = {}\n"
        "    for prefix, module in model.named_modules():\n"
        "        if isinstance(module, FSDP) and module._handle is not None:\n"
        '            grads.update(_flat_gradients(module, case_name(prefix + "." if prefix else "")))\n'
        + (ON_TP if tensor_parallel else "") +
        "    return {name: whole(g) for name, g in grads.items()}\n",
        inspect.getsource(system._flat_gradients),
        inspect.getsource(base.InvariantViolation),
        inspect.getsource(system._check_gradient_shape),
        "_GRAD_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)\n",
    ])


def parts(case: Case) -> Parts:
    plan: FSDP1WrapPlan = case.plan
    apply_plan = ac_export.definitions(plan.checkpoints) + helpers(case) + function(
        "apply_plan(model, mesh, device)", "FSDP1 as the case's plan says (parityfuzz.parts.fsdp1.system).",
        plan_lines(case), "return model")
    accumulate = ("def accumulate(model, micro, last):\n"
                  f"    return model.no_sync() if {plan.no_sync} and not last else contextlib.nullcontext()\n")
    clip = "def clip(model, params, max_norm):\n    model.clip_grad_norm_(max_norm)\n"
    return Parts(imports=IMPORTS, apply_plan=apply_plan, accumulate=accumulate, clip=clip, records=records_source())


# ---- the reference ddp_mp_fsdp1 (this family's): FSDP1's MixedPrecision emulated, copied from the harness


def reference_title(case: Case) -> str:
    return "replicated training doing what FSDP1's MixedPrecision promises"


def reference_source(case: Case) -> tuple:
    """``(where it is copied from, the classes to copy, the construction, the contexts)``."""
    from parityfuzz.export.reference import groups
    from parityfuzz.run.build import build_model
    from parityfuzz.parts.fsdp1 import reference as fsdp1_mp
    from parityfuzz.systems import masters

    shard, replicate = groups(case)
    args = {**fsdp1_mp.arguments(case, build_model(case)), "shard_group": shard, "replicate_group": replicate}
    units = args.pop("units")
    rendered = ",\n".join(f"        {k}={v if k.endswith('_group') else repr(v)}" for k, v in args.items())
    construct = (f"#: The modules FSDP1 makes instances of (the root: \"\"), by its wrapping policy's rule.\n"
                 f"UNITS = {units!r}\n\n\n"
                 "def reference(inner, device, mesh):\n"
                 f"    return FSDP1Precision(\n        inner, UNITS,\n{rendered})\n")
    classes = [masters.cast_floats, masters.divide_factors, masters.Masters, fsdp1_mp._Unit, fsdp1_mp.FSDP1Precision]
    return "parityfuzz.parts.fsdp1.reference", classes, construct, \
        "reference_step_context = reference_loss_context = contextlib.nullcontext\n"
