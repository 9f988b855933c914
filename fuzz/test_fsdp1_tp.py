"""Fuzz target: tensor parallelism, then FSDP1 (``FullyShardedDataParallel``) on the data-parallel sub-mesh, must
train exactly like DDP."""

import pytest

from parityfuzz.strategies import cases


@pytest.mark.fuzz_target
def test_fsdp1_tp_matches_ddp(fuzz_session):
    fuzz_session.run_target("fsdp1_tp", lambda world_sizes: cases(family="fsdp1_tp", world_sizes=world_sizes))
