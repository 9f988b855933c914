"""A family is declared once: every family supplies every layer (or its record says why not), and a family added
by one registration (the test-only ``plain_ddp`` of tests/plain_ddp/) is fuzzed, replayed and exported by the
same code as the real ones."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from parityfuzz import families
from parityfuzz.export import export
from parityfuzz.judge.verdict import Verdict
from parityfuzz.strategies import cases
from parityfuzz.triage import corpus
from tests.drawing import find
from tests.test_export import torchrun

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def plain_ddp():
    """The test-only family, registered for this test (and the processes it starts)."""
    families.register("plain_ddp", "tests.plain_ddp")
    try:
        yield families.get("plain_ddp")
    finally:
        families.unregister("plain_ddp")


def supplied(family: families.Family) -> dict[str, bool]:
    """Which layers the record supplies (each importable, with what the generic code calls)."""
    export = family.export and importlib.import_module(family.export)
    module = families.MODULES[family.name]
    try:
        importlib.import_module(module + ".known")
        known = True
    except ModuleNotFoundError as e:
        if e.name != module + ".known":
            raise
        known = False
    return {"strategy": callable(getattr(importlib.import_module(family.strategy), "cases", None)),
            "systems": bool(family.systems) and family.system in family.systems,
            "export": bool(export) and callable(getattr(export, "parts", None)) and callable(getattr(export, "refusal", None)),
            "patchable": bool(family.patchable or family.patchable_classes),
            "known": known,
            "checkpoint": bool(family.checkpoint_ways),
            "rules": bool(family.rules),
            "seed_grids": bool(family.seed_grids) and all(g.family == family.name for g in family.seed_grids),
            "compiles": bool(family.compiles)}


def test_every_family_supplies_every_layer_or_says_why_not(plain_ddp):
    for family in families.records():
        layers = supplied(family)
        assert set(layers) == set(families.LAYERS)
        for layer, present in layers.items():
            assert present or family.missing.get(layer), (family.name, layer)
            assert not (present and layer in family.missing), (family.name, layer, "supplied and said missing")
        assert families.get(family.name).plan_type.family == family.name


def test_every_registry_comes_from_the_records(plain_ddp):
    from parityfuzz.executor.isolation import patchable
    from parityfuzz.systems import registry, system_class

    assert registry()["plain_ddp"] == "tests.plain_ddp.system:PlainDDPSystem"
    assert system_class("plain_ddp").__name__ == "PlainDDPSystem"
    names, classes = patchable()
    for family in families.records():
        assert {name: families.registration(name).target for name in family.systems}.items() <= registry().items()
        assert set(family.patchable) <= set(names) and set(family.patchable_classes) <= set(classes)
    families.unregister("plain_ddp")
    assert "plain_ddp" not in registry() and "plain_ddp" not in os.environ.get(families.ENVIRONMENT, "")


def test_a_test_only_family_is_fuzzed_replayed_and_exported_like_the_real_ones(plain_ddp, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    assert "plain_ddp=tests.plain_ddp" in env[families.ENVIRONMENT]  # what the subprocesses and ranks inherit

    def pytest_run(*args):
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)

    (tmp_path / "corpus").mkdir()
    fuzzed = pytest_run("fuzz/test_families.py", "-k", "plain_ddp", "--world-sizes=2", "--fuzz-seed=1",
                        "--fuzz-max-cases=4", "--fuzz-budget=600", f"--corpus-dir={tmp_path / 'corpus'}")
    out = fuzzed.stdout + fuzzed.stderr
    assert fuzzed.returncode == 0 and "1 passed" in out and "plain_ddp: 4 cases" in out, out[-3000:]

    # max_examples pinned: the plugin's profile sets another under pytest, and generation depends on it
    quiet = settings(max_examples=100, database=None, deadline=None, suppress_health_check=list(HealthCheck),
                     phases=(Phase.generate,))
    case = find(cases(family="plain_ddp", world_sizes=(2,)), lambda c: c.train.steps > 1 and c.plan.bucket_cap_mb == 1,
                quiet)
    path = corpus.record(tmp_path / "corpus", case, Verdict("pass"), expect="pass", note="a test-only family's case")
    replayed = pytest_run("fuzz/test_corpus.py", f"--corpus-dir={tmp_path / 'corpus'}", "-v")
    out = replayed.stdout + replayed.stderr
    assert replayed.returncode == 0 and f"[{path.parent.name}/{path.name}] PASSED" in out, out[-3000:]

    script = tmp_path / "repro.py"
    script.write_text(export(case, str(path)))
    assert "bucket_cap_mb=1" in script.read_text()
    ran = torchrun(script, 2)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
