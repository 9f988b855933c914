"""Verdicts as data: PASS, or how a case failed."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

PASS, MISMATCH, ERROR, CRASH, HANG = "pass", "mismatch", "error", "crash", "hang"
KINDS = (PASS, MISMATCH, ERROR, CRASH, HANG)


def pass_name(step: int, phase: str = "") -> str:
    """How reports name a pass of training: ``step 3``, ``step 3 (non-root body.1 pass)``."""
    return f"step {step}" + (f" ({phase} pass)" if phase else "")


@dataclass(frozen=True)
class Divergence:
    """The first place the system under test left the reference."""

    step: int
    what: str  # "loss", "grad" or "param"
    tensor: str  # parameter name, or "loss[rank r]"
    max_abs: float
    max_rel: float
    detail: str = ""
    #: Which pass of the step: "" (through the root) or "non-root <path>" (``TrainSpec.nonroot``).
    phase: str = ""

    def where(self) -> str:
        return pass_name(self.step, self.phase)

    def describe(self) -> str:
        return (f"{self.where()} {self.what} {self.tensor}: max abs err {self.max_abs:.3g}, "
                f"max rel err {self.max_rel:.3g}{' (' + self.detail + ')' if self.detail else ''}")


@dataclass(frozen=True)
class Verdict:
    kind: str
    divergence: Divergence | None = None
    #: ERROR/CRASH/HANG: one entry per affected rank (rank, role, message, traceback or log tail).
    ranks: tuple[dict, ...] = field(default_factory=tuple)
    #: Anything the verdict's reader should know (e.g. comparison stopped early).
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.kind == PASS

    def signature(self) -> str:
        """What distinguishes one failure from another (for de-duplication of shrunk failures).

        A mismatch: where it first shows (step, what, tensor).  An error: the
        failing role, exception type and message with numbers blanked.  A crash:
        the exit code.  A hang: which roles had not answered.
        """
        if self.divergence is not None:
            d = self.divergence
            return f"{self.kind}:{d.step}{':' + d.phase if d.phase else ''}:{d.what}:{d.tensor}"
        first = self.ranks[0] if self.ranks else {}
        if self.kind == ERROR:
            message = re.sub(r"\d+", "N", (first.get("message") or "").split("\n")[0])[:200]
            return f"{self.kind}:{first.get('role', '')}:{first.get('type', '')}:{message}"
        if self.kind == CRASH:
            return f"{self.kind}:{first.get('exitcode')}"
        return self.kind

    def describe(self) -> str:
        if self.kind == PASS:
            return f"pass ({self.note})" if self.note else "pass"
        if self.divergence is not None:
            return f"{self.kind}: {self.divergence.describe()}"
        parts = []
        for r in self.ranks:
            what = r.get("type") or (f"exit code {r['exitcode']}" if r.get("exitcode") is not None else "")
            msg = r.get("message", "")
            parts.append(f"rank {r['rank']} {r.get('status', self.kind)}"
                         + (f" in {r['role']}" if r.get("role") else "") + (f": {what}" if what else "")
                         + (f": {msg.splitlines()[0][:300]}" if msg else ""))
        return f"{self.kind}: " + "; ".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Verdict:
        div = data.get("divergence")
        return cls(kind=data["kind"], divergence=Divergence(**div) if div else None,
                   ranks=tuple(data.get("ranks", ())), note=data.get("note", ""))
