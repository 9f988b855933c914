"""Validity rules: what torch documents as a correct plan, written down once, each citing its source.

A plan outside these rules is the user's mistake, not torch's: a divergence it shows is no finding.  The rules
are checked by :meth:`parityfuzz.case.Case.validate` (through each family's ``validate``), so the three places that
make cases obey them alike: strategies (``finish`` validates every draw: an invalid draw is an error of the
strategy, never a case that runs), the reduction pass (a candidate that does not validate is never tried) and
corpus files (``repro`` exits 2 naming the rule, the module path and the documentation it comes from).

Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from parityfuzz.case.errors import CaseError


@dataclass(frozen=True)
class Rule:
    """One documented condition on a plan."""

    #: A stable name, ``<area>.<what>``: what a refusal names and a test looks up.
    name: str
    #: The condition, as a sentence.
    says: str
    #: Where torch documents it: the API and the words, as torch 2.13's docstrings give them.
    source: str


class RuleViolation(CaseError):
    """A case outside a validity rule: a :class:`CaseError` (``repro`` exits 2) that names the rule."""

    def __init__(self, rule: Rule, field: str, detail: str):
        self.rule = rule
        super().__init__(field, f"breaks rule {rule.name} ({rule.says}; torch documents: {rule.source}): {detail}")


def require(ok: bool, rule: Rule, field: str, detail: str) -> None:
    """Raise :class:`RuleViolation` of ``rule`` at ``field`` unless ``ok``."""
    if not ok:
        raise RuleViolation(rule, field, detail)


__all__ = ["Rule", "RuleViolation", "require"]
