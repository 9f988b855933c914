"""The test-only ``plain_ddp`` family's plan written out: DDP with its arguments, ``no_sync()`` on the non-last
microbatches."""

from parityfuzz.case import Case
from parityfuzz.export.parts import function
from parityfuzz.export.parts import Parts


def refusal(case: Case) -> str | None:
    return None


def parts(case: Case) -> Parts:
    plan = case.plan
    apply_plan = function("apply_plan(model, mesh, device)", "DDP as the plain_ddp plan says.", [
        f"return ddp(model, device, bucket_cap_mb={plan.bucket_cap_mb}, broadcast_buffers={plan.broadcast_buffers})"])
    accumulate = ("def accumulate(model, micro, last):\n"
                  "    return contextlib.nullcontext() if last else model.no_sync()\n")
    return Parts(imports="", apply_plan=apply_plan, accumulate=accumulate)
