"""Fuzz targets, one per registered family (:func:`parityfuzz.families.records`): its systems must train exactly
like its reference, as its record's ``target`` says.  The ids are the family names (``-k fsdp2`` selects
``fsdp2`` and ``fsdp2_tp``; ``test_family_trains_like_its_reference[fsdp2]`` the one)."""

import pytest

from parityfuzz import families
from parityfuzz.strategies import cases


def pytest_generate_tests(metafunc):
    if "family" in metafunc.fixturenames:
        records = families.records()
        metafunc.parametrize("family", [f.name for f in records], ids=[f.name for f in records])


@pytest.mark.fuzz_target
def test_family_trains_like_its_reference(fuzz_session, family):
    fuzz_session.run_target(family, lambda world_sizes: cases(family=family, world_sizes=world_sizes))
