"""Fuzz target: fully_shard, both replicate APIs and composable checkpoint on one module tree, in any order the
documentation allows, must train exactly like DDP, and refuse what torch documents refusing."""

import pytest

from parityfuzz.strategies import cases


@pytest.mark.fuzz_target
def test_composable_matches_ddp(fuzz_session):
    fuzz_session.run_target("composable", lambda world_sizes: cases(family="composable", world_sizes=world_sizes))
