"""Preconditions of the test-only known bugs (tests/test_known_bugs.py, tests/test_fuzz_loop.py name them
``tests:<function>``; :func:`register` makes the owner ``tests`` resolve here)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from parityfuzz.triage import known


def has_scale(case) -> bool:
    return "has:scale" in case.features()


def never(case) -> bool:
    return False


def always(case) -> bool:
    return True


def register(monkeypatch, tmp_path: Path, records: str) -> tuple[known.KnownBug, ...]:
    """Add the ``[[bug]]`` records of the TOML text ``records`` to the shipped ones for this test; returns them."""
    monkeypatch.setitem(known.DIMENSIONS, "tests", "tests")
    path = tmp_path / "known_bugs.toml"
    path.write_text(records)
    added = known.load(path)
    shipped = known.shipped()
    monkeypatch.setattr(known, "shipped", lambda: shipped + added)
    return added


def record(id: str, signatures: str, precondition: str = "tests:has_scale", families: str = '["fsdp2"]') -> str:
    """One test record: everything but what the test is about is filled in (its kind, as the rule gives it)."""
    parsed = tomllib.loads(f"signatures = {signatures}")["signatures"]
    kind = known.kind_by_rule(tuple(known._signature(None, i, s) for i, s in enumerate(parsed)))
    return f'''
[[bug]]
id = "{id}"
title = "{id.replace('-', ' ')}"
families = {families}
precondition = {precondition if precondition.startswith("[") else f'"{precondition}"'}
kind = "{kind}"
apis = ["torch.nn.Module"]
api = "public"
table = "training"
files = ["fsdp2/0000000000000000.json"]
torch_seen = ["2.13.0+cpu"]
signatures = {signatures}
summary = "a test fault"
mechanism = "tests/faults/"
source = ["torch/nn/modules/module.py:Module.load_state_dict:2530"]
violates = "torch/nn/modules/module.py: a test fault breaks it"
[bug.upstream]
status = "design"
links = []
notes = "a test record"
'''
