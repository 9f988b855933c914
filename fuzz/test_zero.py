"""Fuzz target: ZeroRedundancyOptimizer over DDP must train exactly like DDP with the whole optimizer on every
rank."""

import pytest

from parityfuzz.strategies import cases


@pytest.mark.fuzz_target
def test_zero_matches_ddp(fuzz_session):
    fuzz_session.run_target("zero", lambda world_sizes: cases(family="zero", world_sizes=world_sizes))
