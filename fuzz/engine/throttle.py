"""Spending less on known bugs: once a target's run has met a known torch bug a few times, or spent a minute on its
failures however few (a hang costs its case's whole timeout, over a minute for a compiled 4-rank case), the cases
that meet that bug's precondition (:meth:`parityfuzz.triage.known.KnownBug.applies`) run one in
:data:`KEEP_ONE_IN`; the others are skipped before they run (they count as passing, and as skipped under the bug in
the run summary and the report).

A case that meets the precondition of a known bug that hangs (a record with a hang signature) runs under a short
timeout (:meth:`Throttle.hang_timeout`) from the first: the bug's precondition says the case may hang so, and a
hang costs the full timeout otherwise.  What runs past it is that hang as :func:`parityfuzz.triage.explain` sees
it; the price is that a case of that region slower than the short timeout is taken for the hang (counted under the
bug, never reported), inside the region the precondition already marks.

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
from parityfuzz.triage.known import KnownBug, signature_kind

#: Times a known bug is met in a target's run before the cases meeting its precondition are throttled.
MET_BEFORE_THROTTLE = 3
#: Seconds a target's run spends on a known bug's failures before they are throttled, met fewer times or not.
SECONDS_BEFORE_THROTTLE = 60.0
#: The least timeout of a case that meets a known hang's precondition (:meth:`Throttle.hang_timeout`).
KNOWN_HANG_TIMEOUT_FLOOR_S = 20.0
#: Of the cases meeting a throttled bug's precondition, the share that still runs: one in this many.
KEEP_ONE_IN = 8


class Throttle:
    """One target's meetings with known bugs, and the cases it skips for them."""

    def __init__(self, bugs: tuple[KnownBug, ...] | None = None):
        self.bugs = known.shipped() if bugs is None else bugs
        #: The known bugs that hang (a record with a hang signature).
        self.hangs = tuple(b for b in self.bugs if any(signature_kind(dict(s.fields)) == "hang" for s in b.signatures))
        #: Failures each known bug explained (by id), and the seconds their runs took.
        self.met: Counter = Counter()
        self.spent: Counter = Counter()
        #: Cases that met a throttled bug's precondition, and of them those skipped (by the bug's title).
        self.matched: Counter = Counter()
        self.skipped: Counter = Counter()

    def note(self, why: Explanation | None, seconds: float = 0.0) -> None:
        """Count a case's explanation (a failure a known bug explains is a meeting) and the ``seconds`` its run took."""
        if why is not None and why.kind == KNOWN_BUG:
            self.met[why.bug.id] += 1
            self.spent[why.bug.id] += seconds

    def _throttled(self, bug: KnownBug) -> bool:
        return self.met[bug.id] >= MET_BEFORE_THROTTLE or self.spent[bug.id] >= SECONDS_BEFORE_THROTTLE

    def skip(self, case: Case) -> str:
        """The title of the throttled bug whose precondition ``case`` meets, where the case is to be skipped; ``""``
        where it runs (no throttled bug's precondition, or its turn of one in :data:`KEEP_ONE_IN`)."""
        hot = next((b for b in self.bugs if self._throttled(b) and b.meets(case)), None)
        if hot is None:
            return ""
        self.matched[hot.title] += 1
        if self.matched[hot.title] % KEEP_ONE_IN == 1:
            return ""
        self.skipped[hot.title] += 1
        return hot.title

    def hang_timeout(self, case: Case, full: float, slowest_pass: float) -> float:
        """The timeout of ``case``: ``full`` (its own), or where it meets the precondition of a known bug that hangs,
        the longer of :data:`KNOWN_HANG_TIMEOUT_FLOOR_S` and three times ``slowest_pass`` (the slowest case the
        target has passed), never above ``full``."""
        if not any(b.meets(case) for b in self.hangs):
            return full
        return min(full, max(KNOWN_HANG_TIMEOUT_FLOOR_S, 3 * slowest_pass))
