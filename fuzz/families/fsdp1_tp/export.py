"""The fsdp1_tp family's plan written out: ``parallelize_module`` per style on the ``tp`` sub-mesh, then the FSDP1
plan with ``device_mesh`` the ``dp_shard`` sub-mesh; gradients read from FSDP1's flat parameters are each rank's
tensor-parallel shard, put back on ``tp`` before they are compared (:class:`parityfuzz.families.fsdp1_tp.system.FSDP1TPSystem`)."""

from __future__ import annotations

import dataclasses

from parityfuzz.case import Case
from parityfuzz.parts.fsdp1 import export as fsdp1
from parityfuzz.export.parts import Parts, function
from parityfuzz.parts.activation_checkpoint import export as ac_export
from parityfuzz.parts.tensor_parallel import export as tp_export


def refusal(case: Case) -> str | None:
    return fsdp1.refusal(case)


def parts(case: Case) -> Parts:
    plan = case.plan
    lines = ['tp_mesh = mesh["tp"]']
    lines += tp_export.plan_lines(plan.tp)
    lines.append("TP_PLACEMENTS.update({case_name(n): (p.device_mesh, p.placements, p.shape, p.stride())\n"
                 "                      for n, p in model.named_parameters() if isinstance(p, DTensor)})")
    lines += ['dp_mesh = mesh["dp_shard"]', *fsdp1.plan_lines(case, mesh="dp_mesh")]
    apply_plan = ac_export.definitions(plan.checkpoints) + fsdp1.helpers(case) + function(
        "apply_plan(model, mesh, device)", "Tensor parallelism, then FSDP1 on the dp_shard sub-mesh "
        "(parityfuzz.families.fsdp1_tp.system).", lines, "return model")
    base = fsdp1.parts(case)
    loss = "loss_parallel" if plan.loss_parallel else "contextlib.nullcontext"
    return dataclasses.replace(
        base, imports=fsdp1.IMPORTS + tp_export.IMPORTS, apply_plan="TP_PLACEMENTS = {}\n\n\n" + apply_plan,
        records=fsdp1.records_source(tensor_parallel=True),
        contexts=f"step_context = implicit_replication  # a model only partly tensor parallel\n"
                 f"loss_context = {loss}\n")
