"""Fuzz target: FSDP1 (``FullyShardedDataParallel``) with any sharding strategy and wrapping must train exactly
like DDP."""

import pytest

from parityfuzz.strategies import cases


@pytest.mark.fuzz_target
def test_fsdp1_matches_ddp(fuzz_session):
    fuzz_session.run_target("fsdp1", lambda world_sizes: cases(family="fsdp1", world_sizes=world_sizes))
