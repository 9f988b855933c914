"""Verdicts as data: PASS, or how a case failed."""

from __future__ import annotations

import re
import traceback
from dataclasses import asdict, dataclass, field

PASS, MISMATCH, ERROR, CRASH, HANG = "pass", "mismatch", "error", "crash", "hang"
VERDICT_KINDS = (PASS, MISMATCH, ERROR, CRASH, HANG)

#: What a mismatch can be (``Divergence.check``).
CHECKS = {
    "value": "values differ beyond tolerance",
    "dtype": "dtype differs from what the case promises",
    "replica": "replicas disagree",
    "missing_grad": "no gradient in the system under test",
    "extra_grad": "a gradient the reference does not have",
    "uneven_grad": "a gradient on some ranks only",
    "shape": "shapes differ",
    "local_shape": "a DTensor's local tensor does not have the shape its placements give",
    "missing": "a tensor is missing",
    "passes": "the passes of training differ",
    "collectives": "ranks issued different collectives",
    "skipped_step": "one system's GradScaler skipped the optimizer step, the other's took it",
    "no_error": "the system under test did not raise the error the case expects",
}


def pass_name(step: int, phase: str = "") -> str:
    """How reports name a pass of training: ``step 3``, ``step 3 (non-root body.1 pass)``."""
    if phase == "loaded":
        return f"step {step} (right after the checkpoint load)"
    return f"step {step}" + (f" ({phase} pass)" if phase else "")


@dataclass(frozen=True)
class Divergence:
    """The first place the system under test left the reference."""

    step: int
    what: str  # "loss", "grad", "param", "collectives" or "optimizer" (its step: skipped_step)
    tensor: str  # parameter name, or "loss[rank r]"
    max_abs: float
    max_rel: float
    detail: str = ""
    #: Which pass of the step: "" (through the root), "non-root <path>" (``TrainSpec.nonroot``) or "eval".
    phase: str = ""
    #: What the oracle found (:data:`CHECKS`): the values differ beyond tolerance, a dtype is not the one the
    #: case promises, replicas disagree, a gradient is missing or extra, ...
    check: str = "value"
    #: The ranks concerned (replicas that disagree; ranks with and without a gradient; a rank with a bad dtype).
    ranks: tuple[int, ...] = ()
    #: For a value check: the largest difference the oracle allowed (noise-derived; see ``parityfuzz.judge.oracle``).
    allowed: float = 0.0

    def where(self) -> str:
        return pass_name(self.step, self.phase)

    def describe(self) -> str:
        ranks = f" on ranks {list(self.ranks)}" if self.ranks else ""
        head = f"{self.where()} {self.what} {self.tensor}{ranks}: "
        if self.check != "value":
            return head + CHECKS.get(self.check, self.check) + (f" ({self.detail})" if self.detail else "")
        allowed = f" (allowed {self.allowed:.3g})" if self.allowed else ""
        return (head + f"max abs err {self.max_abs:.3g}{allowed}, max rel err {self.max_rel:.3g}"
                + (f" ({self.detail})" if self.detail else ""))


@dataclass(frozen=True)
class Origin:
    """Where a mismatch begins (:mod:`parityfuzz.judge.origin`): the first module, in execution order, whose forward output
    or output gradient leaves the reference's; or, where every module's agree up to the oracle's divergence,
    that divergence's own tensor (a gradient whose reduction or a parameter whose update went wrong)."""

    step: int
    phase: str
    #: The module (case path; ``model`` for the root, ``""`` where the divergence is a loss).
    module: str
    #: ``output`` or ``output grad`` (:mod:`parityfuzz.run.activations`), else the divergence's ``what``.
    what: str
    #: Which call of the module in the pass (microbatches, a module called twice); -1 where not a module's.
    call: int = -1
    #: The parameter or buffer, where the origin is the divergence's own tensor.
    tensor: str = ""
    ranks: tuple[int, ...] = ()
    max_abs: float = 0.0
    allowed: float = 0.0
    #: The collectives the pass issued on the first of ``ranks`` (``{op: count}``, as ``CommDebugMode``
    #: counts them), in the system under test and in the reference.
    system_collectives: dict = field(default_factory=dict)
    reference_collectives: dict = field(default_factory=dict)

    def describe(self) -> str:
        where = pass_name(self.step, self.phase)
        ranks = f" on ranks {list(self.ranks)}" if self.ranks else ""
        if self.call >= 0:
            call = f" (call {self.call})" if self.call else ""
            how = {"output": "its forward output differs",
                   "input grad": "the gradient its backward gives its input differs while the one reaching its "
                                 "output agrees",
                   "output grad": "the gradient reaching its output differs (computed by what consumed that "
                                  "output: the module after it, or its parent's own code)"}.get(self.what, self.what)
            head = (f"begins at {where} in {self.module}{call}: {how}{ranks} (max abs err {self.max_abs:.3g}, "
                    f"allowed {self.allowed:.3g}); everything before it in execution order agrees")
        else:
            module = f" (module {self.module})" if self.module and self.module != "model" else ""
            tensor = {"grad": f"the gradient of {self.tensor}", "param": f"{self.tensor} after the optimizer step",
                      "optimizer": "the GradScaler's decision to skip the optimizer step"
                      }.get(self.what, f"{self.what} {self.tensor}")
            cause = {"grad": ", so in that gradient's own computation or its reduction across ranks",
                     "param": ", so in the optimizer step or the update",
                     "optimizer": ", so in the gradients' reduction or unscaling (one system's hold an inf or NaN)"
                     }.get(self.what, "")
            head = (f"begins at {where} in {tensor}{module}{ranks}: every module's output and output gradient "
                    f"agree up to there{cause}")
        rank = f"rank {self.ranks[0]}" if self.ranks else "rank 0"
        return f"{head}; collectives of that pass's forward and backward on {rank}: system {_counts(self.system_collectives)}, " \
               f"reference {_counts(self.reference_collectives)}"


def _counts(counts: dict) -> str:
    return ", ".join(f"{op.rpartition('.')[2]} x{n}" for op, n in counts.items()) or "none"


@dataclass(frozen=True)
class Verdict:
    kind: str
    divergence: Divergence | None = None
    #: ERROR/CRASH/HANG: one entry per affected rank (rank, role, message, traceback or log tail).
    ranks: tuple[dict, ...] = field(default_factory=tuple)
    #: Anything the verdict's reader should know (e.g. comparison stopped early).
    note: str = ""
    #: How close the system came to failing the value checks: the largest ratio of a difference to what the
    #: oracle allowed (> 1 for a value mismatch).  Hypothesis's ``target()`` steers toward near misses with it.
    closeness: float = 0.0
    #: For a mismatch, where it begins (:func:`parityfuzz.judge.verify.locate`), once located; None before.
    origin: Origin | None = None
    #: Feature tags only the run could tell (what a compiled system captured: ``compile_graphs=2-4``), counted
    #: with the case's own (:meth:`parityfuzz.case.Case.features`).
    tags: tuple[str, ...] = ()
    #: A measurement, not part of what the verdict says (left out of its equality): for a compiled case, the
    #: most seconds any rank's system under test spent compiling.
    compile_seconds: float = field(default=0.0, compare=False)

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
        return self.bug_signature()

    def bug_signature(self) -> str:
        """What kind of failure this is, without where it happened to show: for a mismatch what the oracle
        found in which kind of tensor (``mismatch:value:grad``, ``mismatch:missing_grad:grad``); for an
        error the failing role, exception type and innermost torch frame; for a crash the exit code.

        A failure counts as a known bug or as one already found in a soak run only when this matches (and
        the case meets the bug's precondition): tensor names and steps change as cases shrink, the kind of
        failure does not.
        """
        return ":".join(str(v) for v in self.signature_fields().values())

    def signature_fields(self) -> dict:
        """:meth:`bug_signature` as typed fields, the form the known-bug records match on: ``verdict`` and, for a
        mismatch, ``check`` and ``tensor`` (the kind of tensor: ``grad``, ``param``, ``loss``, ``buffer``, ...);
        for an error ``role``, ``exception`` and ``frame``; for a crash ``exitcode``."""
        if self.divergence is not None:
            d = self.divergence
            return {"verdict": self.kind, "check": d.check,
                    "tensor": "buffer" if d.tensor.startswith("buffer:") else d.what}
        first = self.ranks[0] if self.ranks else {}
        if self.kind == ERROR:
            return {"verdict": self.kind, "role": first.get("role", ""), "exception": first.get("type", ""),
                    "frame": first.get("torch_frame", "")}
        if self.kind == CRASH:
            return {"verdict": self.kind, "exitcode": first.get("exitcode")}
        return {"verdict": self.kind}

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
                         + (f": {_one_line(msg)}" if msg else ""))
        return f"{self.kind}: " + "; ".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Verdict:
        div = data.get("divergence")
        if div:
            div = {**div, "ranks": tuple(div.get("ranks", ()))}
        origin = data.get("origin")
        if origin:
            origin = Origin(**{**origin, "ranks": tuple(origin.get("ranks", ()))})
        return cls(kind=data["kind"], divergence=Divergence(**div) if div else None,
                   ranks=tuple(data.get("ranks", ())), note=data.get("note", ""),
                   closeness=data.get("closeness", 0.0), origin=origin or None, tags=tuple(data.get("tags", ())),
                   compile_seconds=data.get("compile_seconds", 0.0))


#: The role of an error the harness itself raised (:func:`harness_error`).
HARNESS = "harness"


def harness_error(error: BaseException) -> Verdict:
    """The verdict of a case whose run or judgement raised ``error`` in the harness itself (a trace it cannot
    assemble, an oracle bug): an error of role :data:`HARNESS`, with its traceback.  A parityfuzz defect to fix,
    never a torch finding (no known-bug record takes that role); a run records it, shrunk, and goes on."""
    return Verdict(ERROR, ranks=({"rank": 0, "role": HARNESS, "status": "error", "type": type(error).__name__,
                                  "message": f"{error} (raised by parityfuzz itself, not by torch: a harness defect)",
                                  "traceback": "".join(traceback.format_exception(error)), "torch_frame": ""},))


def _one_line(message: str, limit: int = 300) -> str:
    """An error message on one line (PyTorch puts the substance of some on the lines after the first:
    ``Error(s) in loading state_dict ...:`` then the missing keys), cut at ``limit`` characters."""
    text = " ".join(line.strip() for line in message.splitlines() if line.strip())
    return text if len(text) <= limit else text[:limit - 3] + "..."

