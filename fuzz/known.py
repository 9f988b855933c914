"""Open torch bugs the fuzzer has found, as preconditions on a case.

A failing case that meets a known bug's precondition is counted as that bug
("known torch bug, <name>" in the run summary) instead of failing the run: the cases are
still generated and run, and each bug stays tracked by its ``expect: fail``
corpus file, which replays as a strict xfail and turns loud (XPASS) when torch
fixes it.  Remove the entry then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fuzz.case import Case


@dataclass(frozen=True)
class KnownBug:
    name: str  # no colon: the run summary keys notes by the text before the first one
    corpus_file: str
    applies: Callable[[Case], bool]


def _hsdp_deferred_all_reduce_with_gated_params(case: Case) -> bool:
    return case.train.no_all_reduce and any(n.kind == "gate" for _, n in case.model.body.walk("body"))


KNOWN_BUGS = (
    # set_requires_all_reduce(False) on HSDP keeps a group's reduce-scattered gradients in
    # partial_reduce_output; a parameter used on some microbatches only changes the group's buffer layout
    # (size-mismatch RuntimeError) or leaves no gradient on the all-reduce microbatch, whose post-backward
    # then returns early and drops the held partial sum (silently missing gradient).
    KnownBug("fsdp2 HSDP set_requires_all_reduce(False) with a parameter unused on some microbatches",
             "corpus/fsdp2/914c660278fd8a93.json, corpus/fsdp2/67543a90b0f9adfe.json",
             _hsdp_deferred_all_reduce_with_gated_params),
)


def known_bug(case: Case) -> KnownBug | None:
    """The known bug whose precondition ``case`` meets, if any."""
    return next((b for b in KNOWN_BUGS if b.applies(case)), None)
