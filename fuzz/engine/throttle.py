"""Spending less on known bugs: once a target's run has met a known torch bug a few times, the cases that meet that
bug's precondition (:meth:`parityfuzz.triage.known.KnownBug.applies`) run one in :data:`KEEP_ONE_IN`; the others are
skipped before they run (they count as passing, and as skipped under the bug in the run summary and the report).

Never none: the one in :data:`KEEP_ONE_IN` that runs sees the bug's fix (the case then passes, and the bug is no
longer met more often than the others), a regression near it, or another failure of the same cases (a failure of
another signature is reported as new, as ever).  The choice is the run's order of cases, not a random draw: the
same seed skips the same cases.  Shrinking never skips a candidate.
"""

from __future__ import annotations

from collections import Counter

from parityfuzz.case import Case
from parityfuzz.triage import KNOWN_BUG, Explanation
from parityfuzz.triage import known
from parityfuzz.triage.known import KnownBug

#: Times a known bug is met in a target's run before the cases meeting its precondition are throttled.
MET_BEFORE_THROTTLE = 3
#: Of the cases meeting a throttled bug's precondition, the share that still runs: one in this many.
KEEP_ONE_IN = 8


class Throttle:
    """One target's meetings with known bugs, and the cases it skips for them."""

    def __init__(self, bugs: tuple[KnownBug, ...] | None = None):
        self.bugs = known.shipped() if bugs is None else bugs
        #: Failures each known bug explained (by id).
        self.met: Counter = Counter()
        #: Cases that met a throttled bug's precondition, and of them those skipped (by the bug's title).
        self.matched: Counter = Counter()
        self.skipped: Counter = Counter()

    def note(self, why: Explanation | None) -> None:
        """Count a case's explanation (a failure a known bug explains is a meeting)."""
        if why is not None and why.kind == KNOWN_BUG:
            self.met[why.bug.id] += 1

    def skip(self, case: Case) -> str:
        """The title of the throttled bug whose precondition ``case`` meets, where the case is to be skipped; ``""``
        where it runs (no throttled bug's precondition, or its turn of one in :data:`KEEP_ONE_IN`)."""
        cases = (case, case.resumed()) if case.checkpoint else (case,)  # (as KnownBug.explains looks at them)
        hot = next((b for b in self.bugs if self.met[b.id] >= MET_BEFORE_THROTTLE
                    and any(b.applies(c) for c in cases)), None)
        if hot is None:
            return ""
        self.matched[hot.title] += 1
        if self.matched[hot.title] % KEEP_ONE_IN == 1:
            return ""
        self.skipped[hot.title] += 1
        return hot.title
