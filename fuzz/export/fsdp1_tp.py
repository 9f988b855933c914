"""The fsdp1_tp family's plan written out: ``parallelize_module`` per style on the ``tp`` sub-mesh, then the FSDP1
plan with ``device_mesh`` the ``dp_shard`` sub-mesh; gradients read from FSDP1's flat parameters are each rank's
tensor-parallel shard, put back on ``tp`` before they are compared (:class:`fuzz.systems.fsdp1_tp.FSDP1TPSystem`)."""

from __future__ import annotations

import dataclasses

from fuzz.case import Case
from fuzz.export import fsdp1, fsdp2
from fuzz.export.fsdp2_tp import IMPORTS as TP_IMPORTS, style_source
from fuzz.export.script import Parts

RECORDS = '''
def gradients(model, named):
    grads = {}
    for prefix, module in model.named_modules():
        if isinstance(module, FSDP) and module._handle is not None:
            grads.update(_flat_gradients(module, case_name(prefix + "." if prefix else "")))
    for name, (mesh, placements, shape, stride) in TP_PLACEMENTS.items():  # back on tp, as the parameter is
        if grads.get(name) is not None and not isinstance(grads[name], DTensor):
            grads[name] = DTensor.from_local(grads[name], mesh, placements, run_check=False, shape=shape,
                                             stride=stride)
    return {name: whole(g) for name, g in grads.items()}
'''


def refusal(case: Case) -> str | None:
    return fsdp1.refusal(case)


def parts(case: Case) -> Parts:
    plan = case.plan
    lines = ['tp_mesh = mesh["tp"]']
    lines += [f"parallelize_module({fsdp2._at(p.path)}, tp_mesh, {style_source(p)})" for p in plan.tp]
    lines.append("TP_PLACEMENTS.update({case_name(n): (p.device_mesh, p.placements, p.shape, p.stride())\n"
                 "                      for n, p in model.named_parameters() if isinstance(p, DTensor)})")
    lines += fsdp1.plan_lines(case, mesh='mesh["dp_shard"]')
    apply_plan = fsdp2.function("apply_plan(model, mesh, device)", "Tensor parallelism, then FSDP1 on the dp_shard "
                                "sub-mesh (fuzz.systems.fsdp1_tp).", lines, "return model")
    base = fsdp1.parts(case)
    own = base.records.split("def gradients(model, named):")[0]  # FSDP1's parameters; the flat reader below
    reader = base.records[base.records.index("def _flat_gradients"):]
    loss = "loss_parallel" if plan.loss_parallel else "contextlib.nullcontext"
    return dataclasses.replace(
        base, imports=fsdp1.IMPORTS + TP_IMPORTS, apply_plan="TP_PLACEMENTS = {}\n\n\n" + apply_plan,
        records=own + RECORDS.strip() + "\n\n\n" + reader,
        contexts=f"step_context = implicit_replication  # a model only partly tensor parallel\n"
                 f"loss_context = {loss}\n")
