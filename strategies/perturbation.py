"""Collective perturbation: delays on random ranks of the system under test.

Up to two delays, each on one rank, before every all-gather or reduce-scatter,
after the forward or before the optimizer step (the seeds' ``delay_*`` flags,
as sleeps), to expose ordering and synchronisation bugs.

Shrinking: toward no delay; a delay toward rank 0, before all-gathers, 5 ms.
"""

from __future__ import annotations

from hypothesis import strategies as st

from parityfuzz.case import DELAY_POINTS, Delay


def delays(world_size: int) -> st.SearchStrategy[tuple[Delay, ...]]:
    one = st.builds(Delay, rank=st.integers(0, world_size - 1), where=st.sampled_from(DELAY_POINTS),
                    ms=st.sampled_from((5, 1, 20)))
    return st.lists(one, max_size=2).map(tuple)
