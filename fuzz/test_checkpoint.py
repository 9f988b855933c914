"""Fuzz target: a run that saves mid-training, loads into a fresh system (the same plan, or another plan, mesh,
family or world size) and trains on must train exactly like the uninterrupted reference."""

import pytest


@pytest.mark.fuzz_target("checkpoint")
def test_checkpoint_round_trip_matches_uninterrupted(fuzz_session):
    fuzz_session.run_target("checkpoint")
