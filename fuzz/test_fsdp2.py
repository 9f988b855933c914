"""Fuzz target: FSDP2 ``fully_shard`` must train exactly like DDP."""

import pytest

from parityfuzz.strategies import cases


@pytest.mark.fuzz_target
def test_fsdp2_matches_ddp(fuzz_session):
    fuzz_session.run_target("fsdp2", lambda world_sizes: cases(family="fsdp2", world_sizes=world_sizes))
