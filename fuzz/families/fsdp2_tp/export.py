"""The fsdp2_tp family's plan written out: ``parallelize_module`` per style on the ``tp`` sub-mesh, then the FSDP2
plan on the data-parallel sub-mesh; the loss under ``loss_parallel()`` where the plan says, the optimizer's
zeroing and step under ``implicit_replication()`` (:class:`parityfuzz.families.fsdp2_tp.system.FSDP2TPSystem`)."""

from __future__ import annotations

from parityfuzz.case import Case
from parityfuzz.parts.fully_shard import export as fully_shard_export
from parityfuzz.export.parts import Parts, function
from parityfuzz.parts.activation_checkpoint import export as ac_export
from parityfuzz.parts.tensor_parallel import export as tp_export

IMPORTS = fully_shard_export.IMPORTS + tp_export.IMPORTS


def refusal(case: Case) -> str | None:
    return fully_shard_export.refusal(case)


def parts(case: Case) -> Parts:
    plan = case.plan
    lines = ['tp_mesh = mesh["tp"]']
    lines += tp_export.plan_lines(plan.tp)
    if plan.wraps:
        dp = tuple(a for a in case.mesh.names if a != "tp")
        lines.append(f"dp_mesh = mesh[{dp if len(dp) > 1 else dp[0]!r}]")
    lines += fully_shard_export.plan_lines(plan, mesh="dp_mesh")
    apply_plan = function("apply_plan(model, mesh, device)", "Tensor parallelism, then FSDP2 on the data-parallel "
                          "sub-mesh (parityfuzz.families.fsdp2_tp.system).", lines, "return model")
    loss = "loss_parallel" if plan.loss_parallel else "contextlib.nullcontext"
    base = fully_shard_export.parts(case)
    return Parts(imports=IMPORTS,
                 apply_plan=f"WRAPPED = {bool(plan.wraps)}\n\n\n" + ac_export.definitions(plan.checkpoints) + apply_plan,
                 accumulate=base.accumulate, after_backward=base.after_backward, forward=base.forward,
                 contexts=f"step_context = implicit_replication  # a model only partly tensor parallel\n"
                          f"loss_context = {loss}\n")


# ---- the reference ddp_mp_tp (this family's): the tensor-parallel model, FSDP2's policy emulated over dp


def reference_title(case: Case) -> str:
    return "the tensor-parallel model, FSDP2's MixedPrecisionPolicy emulated over the data-parallel ranks"


def reference_source(case: Case) -> tuple:
    # the plan's styles applied to the reference's own model first (the system's calls)
    styles = "".join(f"    {line}\n" for line in tp_export.plan_lines(case.plan.tp, mesh='mesh["tp"]', model="inner"))
    from parityfuzz.families.fsdp2_tp import system

    where, classes, construct, _ = fully_shard_export.reference_source(case, styles=styles, precision="FSDP2PrecisionTP")
    contexts = ("reference_step_context = implicit_replication  # the system's: a model only partly tensor parallel\n"
                f"reference_loss_context = {'loss_parallel' if case.plan.loss_parallel else 'contextlib.nullcontext'}\n")
    return f"{where}, parityfuzz.families.fsdp2_tp.system", classes + [system.FSDP2PrecisionTP], construct, contexts
