"""What a corpus file's replay means: the outcome of one file on the installed torch.

``expect: pass`` must match its reference.  ``expect: fail`` (a known open bug) fails *as recorded* where the replay
fails with the recorded verdict's signature, or another one that a known-bug record listing the file explains
(``corpus/known_bugs.toml``: a bug that shows as a hang or a mismatch).  Failing otherwise is another failure (a new
bug, or a harness regression, that must not hide behind the old one), and passing means the bug is fixed: from the
torch release a record names as ``fixed_in`` on, its files must pass (regression cases for that release).  The
corpus replay (``fuzz/test_corpus.py``) and the table of torch versions (:mod:`parityfuzz.triage.versions`) both
read a replay this way.
"""

from __future__ import annotations

from parityfuzz.judge.verdict import Verdict
from parityfuzz.triage import KNOWN_BUG, corpus, explain
from parityfuzz.triage.known import shipped

#: A known hang is replayed with this timeout (unless the user gives one): a corpus case trains in a second or two,
#: and waiting out the default timeout (scaled for fuzzed cases) proves nothing more.
HANG_REPLAY_TIMEOUT_S = 10.0

#: The outcomes of one file's replay.
PASSES = "passes"
FAILS_AS_RECORDED = "fails as recorded"
FAILS_OTHERWISE = "fails otherwise"
REGRESSION = "regression"  # an ``expect: pass`` file that fails


def timeout_for(entry: corpus.Entry, timeout_s: float | None) -> float | None:
    """The timeout to replay ``entry`` with: the user's, or a short one for a recorded hang."""
    if timeout_s is None and entry.expect == "fail" and entry.verdict is not None and entry.verdict.kind == "hang":
        return HANG_REPLAY_TIMEOUT_S
    return timeout_s


def fails_as_recorded(entry: corpus.Entry, verdict: Verdict) -> bool:
    """Whether a known failure's replay is the failure the file records."""
    if entry.verdict is not None and verdict.bug_signature() == entry.verdict.bug_signature():
        return True
    listing = tuple(b for b in shipped() if b.lists(entry.path))
    return not verdict.ok and explain(entry.case, verdict, bugs=listing).kind == KNOWN_BUG


def expected(entry: corpus.Entry, torch_version: str | None = None) -> str:
    """``pass`` or ``fail``: the file's ``expect``, except that the file of a record fixed in ``torch_version``
    (the installed torch's by default) or before (the record's ``fixed_in``) must pass there: a regression case."""
    if entry.expect == "pass":
        return "pass"
    if torch_version is None:
        import torch

        torch_version = torch.__version__
    return "pass" if any(b.lists(entry.path) and b.fixed(torch_version) for b in shipped()) else "fail"


def outcome(entry: corpus.Entry, verdict: Verdict) -> str:
    """One of :data:`PASSES`, :data:`FAILS_AS_RECORDED`, :data:`FAILS_OTHERWISE`, :data:`REGRESSION` (a file
    that must pass on the installed torch fails: :func:`expected`)."""
    if verdict.ok:
        return PASSES
    if expected(entry) == "pass":
        return REGRESSION
    return FAILS_AS_RECORDED if fails_as_recorded(entry, verdict) else FAILS_OTHERWISE
