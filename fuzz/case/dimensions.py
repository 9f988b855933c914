"""Training-loop dimensions: the table of what a case may add to its family's plan, each one contract.

A dimension is a way users train that any family may meet (``torch.compile``, autocast, loss scaling...).  Each
has one row here: its name, the case fields that hold it, and whether a case draws it (:meth:`Dimension.on`).
A family declares the ones it does not take, with torch's reason (:attr:`parityfuzz.families.Family.unsupported`);
the strategies draw the others in swarm rounds (:mod:`parityfuzz.strategies.swarm`), and every run counts the share of
its cases that drew each one (the ``dim:<name>`` feature tags, :meth:`parityfuzz.engine.stats.TargetStats.dimensions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from parityfuzz.case.core import Case


@dataclass(frozen=True)
class Dimension:
    """One training-loop dimension: ``fields`` (dotted, as :class:`parityfuzz.case.CaseError` names them) hold it;
    ``on(case)`` says whether ``case`` draws it; ``event``: drawn by the checkpoint target only (the family
    targets train without checkpoint events)."""

    name: str
    fields: tuple[str, ...]
    on: Callable[["Case"], bool]
    summary: str
    event: bool = False


def _reentrant(case: Case) -> bool:
    return any(getattr(c, "reentrant", False) for c in getattr(case.plan, "checkpoints", ()))


def _reshards(case: Case) -> bool:
    from parityfuzz.case.checkpoint import reshards

    return bool(case.checkpoint) and reshards(case)


TABLE = (
    Dimension("compile", ("compile",), lambda c: bool(c.compile), "torch.compile of the system under test"),
    Dimension("autocast", ("train.autocast",), lambda c: bool(c.train.autocast),
              "an autocast region around each forward and its loss"),
    Dimension("loss_scale", ("train.loss_scale",), lambda c: bool(c.train.loss_scale),
              "fp16 loss scaling with the family's GradScaler"),
    Dimension("overflow", ("train.overflow_at",), lambda c: bool(c.train.overflow_at),
              "a step whose float16 gradients overflow on one data-parallel rank"),
    Dimension("reentrant", ("plan.checkpoints",), _reentrant, "reentrant activation checkpointing"),
    Dimension("token_loss", ("train.pad", "train.pad_all_dp0", "train.label_smoothing"),
              lambda c: bool(c.train.pad or c.train.pad_all_dp0 or c.train.label_smoothing),
              "padded cross-entropy tokens, a rank of padding only, label smoothing"),
    Dimension("eval", ("train.eval",), lambda c: c.train.eval, "an evaluation forward under no_grad after each step"),
    Dimension("nonroot", ("train.nonroot",), lambda c: bool(c.train.nonroot),
              "a second pass through a non-root module alone"),
    Dimension("to_float64", ("train.to_float64",), lambda c: c.train.to_float64,
              ".to(torch.float64) on a float32 model"),
    Dimension("unfreeze", ("train.frozen",), lambda c: any(f.until for f in c.train.frozen),
              "parameters frozen for the first steps, then trained"),
    Dimension("post_optim_event", ("plan.post_optim_event",), lambda c: bool(getattr(c.plan, "post_optim_event", False)),
              "FSDP2's post-optimizer event on the root"),
    Dimension("checkpoint", ("checkpoint",), lambda c: bool(c.checkpoint),
              "a checkpoint saved mid-training and loaded into a fresh system", event=True),
    Dimension("rollback", ("checkpoint.rollback_at",), lambda c: bool(c.checkpoint.rollback_at),
              "a checkpoint loaded into the live, already stepped system", event=True),
    Dimension("reshard", ("checkpoint.world_size", "checkpoint.mesh", "checkpoint.plan"), _reshards,
              "a checkpoint loaded into another plan, mesh, family or world size", event=True),
)

NAMES = tuple(d.name for d in TABLE)
BY_NAME = {d.name: d for d in TABLE}


def drawn(case: Case) -> frozenset[str]:
    """The dimensions ``case`` draws."""
    return frozenset(d.name for d in TABLE if d.on(case))


def supported(family, *, events: bool = False) -> tuple[str, ...]:
    """The dimensions ``family`` (a :class:`parityfuzz.families.Family`) takes, in table order; ``events``: with the
    checkpoint events' (the checkpoint target's), where the family has checkpoint ways."""
    return tuple(d.name for d in TABLE if d.name not in family.unsupported
                 and (not d.event or (events and family.checkpoint_ways)))


def check_unsupported(family) -> None:
    """Raise ``ValueError`` where ``family.unsupported`` names no dimension or gives no reason."""
    for name, why in family.unsupported.items():
        if name not in BY_NAME:
            raise ValueError(f"family {family.name!r}: unsupported[{name!r}] names no dimension (known: {', '.join(NAMES)})")
        if not isinstance(why, str) or not why.strip():
            raise ValueError(f"family {family.name!r}: unsupported[{name!r}] must give torch's reason")
