"""The base of every family's plan (a tagged union member in the case, discriminated by ``family``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class Plan:
    """A family's plan: which modules get which parallel API, with which settings.  Each family subclasses
    it (its ``family`` names it in JSON)."""

    family: ClassVar[str] = ""

    def mixed_precision(self) -> bool:
        """Whether the plan computes, reduces or outputs in another dtype than the model's."""
        return False
