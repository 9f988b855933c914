"""The zero family's plan written out: DDP with the plan's ``gradient_as_bucket_view`` and ``static_graph``,
``no_sync()`` on the non-last microbatches, and ``ZeroRedundancyOptimizer`` around the case's optimizer in its
parameter groups, whose partitions are checked to cover every parameter once (the harness's check, copied), as
:class:`parityfuzz.families.zero.system.ZeroSystem` does.

Refused by name: ``overlap`` (its reference skips the warm-up steps), ``late_group`` and ``reload_at`` (steps
where both systems change their optimizer), which the script's shared loop does not take yet."""

from __future__ import annotations

import inspect

from parityfuzz.case import Case
from parityfuzz.export.parts import Parts, function
from parityfuzz.families.zero import ZeroPlan
from parityfuzz.families.zero import system
from parityfuzz.run.calls import statement

IMPORTS = "from torch.distributed.optim import ZeroRedundancyOptimizer\n"


def refusal(case: Case) -> str | None:
    plan: ZeroPlan = case.plan
    found = [what for cond, what in ((plan.overlap, "overlap_with_ddp (its reference skips the warm-up steps)"),
                                     (plan.late_group, "a late parameter group"),
                                     (plan.reload_at, "a reload of the consolidated optimizer state")) if cond]
    return f"it uses {', '.join(found)}, which the export does not write out yet" if found else None


def parts(case: Case) -> Parts:
    plan: ZeroPlan = case.plan
    ddp = ", ".join(f"{k}={v!r}" for k, v in plan.ddp_options().items())
    apply_plan = function("apply_plan(model, mesh, device)", "DDP as the zero family's plan says "
                          "(parityfuzz.families.zero.system).", [f"return ddp(model, device, {ddp})"])
    optimizer = function("make_zero_optimizer(named)", "ZeroRedundancyOptimizer around the case's optimizer, in its "
                         "parameter groups.", [
                             "def zero(groups, cls=OPTIMIZER, **kwargs):",
                             "    return " + statement(plan.optimizer_call()).replace("\n", "\n    "),
                             "optim, scheduler = make_optimizer(named, cls=zero)",
                             "check_partition(optim, named)",
                             "return optim, scheduler"])
    invariant = ("class InvariantViolation(AssertionError):\n    pass\n\n\n"
                 + inspect.getsource(system.check_partition))
    accumulate = ("def accumulate(model, micro, last):\n"
                  "    return contextlib.nullcontext() if last else model.no_sync()\n")
    return Parts(imports=IMPORTS, apply_plan=apply_plan + "\n\n" + invariant + "\n\n" + optimizer,
                 accumulate=accumulate, optimizer="make_zero_optimizer")
