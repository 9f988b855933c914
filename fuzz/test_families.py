"""Fuzz targets, one per registered family (:func:`parityfuzz.families.records`): its systems must train exactly
like its reference, as its record's ``target`` says.  The ids are the family names (``-k fsdp2`` selects
``fsdp2`` and ``fsdp2_tp``; ``test_family_trains_like_its_reference[fsdp2]`` the one).  Each carries its target's
name in its ``fuzz_target`` marker: the run's schedule shares the budget over the selected targets by what they
find (:mod:`parityfuzz.engine.schedule`)."""

import pytest

from parityfuzz import families


def pytest_generate_tests(metafunc):
    if "family" in metafunc.fixturenames:
        metafunc.parametrize("family", [pytest.param(f.name, id=f.name, marks=pytest.mark.fuzz_target(f.name))
                                        for f in families.records()])


def test_family_trains_like_its_reference(fuzz_session, family):
    fuzz_session.run_target(family)
