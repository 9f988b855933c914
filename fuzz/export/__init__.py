"""A case as one standalone Python script that imports only torch: ``python -m fuzz.repro FILE --export PATH``.

The script builds the case's model with the same initial weights and inputs as the fuzzer, applies the plan with
the public torch APIs written out call by call (``fully_shard(model.body[1], mesh=..., ...)``), trains the
reference (DDP, or under mixed precision the harness's emulation of the policy: :mod:`parityfuzz.export.reference`),
the system under test and the reference again from weights perturbed by 2 ulps (three samples
of the rounding noise, as the oracle measures it), and compares them as the oracle does: every rank's loss, every gradient
and parameter present alike, in the reference's dtype, equal across replicas bit for bit, and within
``16 * noise + 32 ulps * scale`` of the reference.  It prints the first divergence and exits 1, or exits 0 on
parity; an error on any rank ends the torchrun job with a non-zero code.  ``torchrun --nproc-per-node=N``
runs it on CPU/gloo, or on CUDA/NCCL where N GPUs are present.

Each family brings one module here (its record's ``export``) that writes out its plan; a case using a feature the
export does not write out yet is refused with :class:`ExportError` naming the feature.
"""

from __future__ import annotations

import importlib

from parityfuzz import families
from parityfuzz.case import Case


class ExportError(ValueError):
    """The case uses something the export cannot write out (yet)."""


def refusal(case: Case) -> str | None:
    """Why ``case`` cannot be exported, or None."""
    from parityfuzz.export import script

    if case.system and case.system != families.get(case.family).system:
        return (f"its system under test is {case.system!r}, not the {case.family} family's (the script writes out "
                "torch's own APIs)")
    writer = families.get(case.family).export
    if not writer:
        return (f"the {case.family} family is not exported: "
                f"{families.get(case.family).missing.get('export', 'its record names no writer')}")
    return script.refusal(case) or importlib.import_module(writer).refusal(case)


def export(case: Case, source: str = "") -> str:
    """The script for ``case`` (``source`` names where the case came from, for the script's header)."""
    from parityfuzz.export import script

    why = refusal(case)
    if why:
        raise ExportError(f"cannot export case {case.case_id()}: {why}")
    return script.render(case, importlib.import_module(families.get(case.family).export).parts(case), source)
