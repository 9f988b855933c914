"""Fuzz target: tensor (and sequence) parallelism, then FSDP2, must train exactly like DDP over the
data-parallel ranks."""

import pytest

from parityfuzz.strategies import cases


@pytest.mark.fuzz_target
def test_fsdp2_tp_matches_ddp(fuzz_session):
    fuzz_session.run_target("fsdp2_tp", lambda world_sizes: cases(family="fsdp2_tp", world_sizes=world_sizes))
