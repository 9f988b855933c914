"""parityfuzz as an installed tool: one package name (``parityfuzz``; the repository's ``fuzz/`` and
``strategies/`` mapped under it), the ``parityfuzz`` console command, the pytest plugin loaded by its ``pytest11``
entry point in a project of the user's own, and a user's system under test plugged in by entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib
from pathlib import Path

from parityfuzz.triage import corpus

ROOT = Path(__file__).resolve().parents[1]
#: No repository on the path: what a user's project sees of the installed package.
CLEAN = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def run(args: list[str], cwd: Path, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env or CLEAN, capture_output=True, text=True, timeout=timeout)


def parityfuzz(*args: str, cwd: Path, env=None, timeout=300) -> subprocess.CompletedProcess:
    command = Path(sys.executable).with_name("parityfuzz")
    return run([str(command), *args], cwd, env, timeout)


def test_every_folder_is_installed_as_its_package_under_parityfuzz():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {"parityfuzz": "fuzz", "parityfuzz.strategies": "strategies"}
    assert config["package-dir"] == mapped and "packages" not in config  # setup.py finds them
    folders = {f"{name}.{'.'.join(p.parent.relative_to(ROOT / folder).parts)}".rstrip("."): p.parent
               for name, folder in mapped.items() for p in (ROOT / folder).rglob("__init__.py")}
    code = ("import importlib.util, json, sys; print(json.dumps({n: importlib.util.find_spec(n).origin "
            "for n in sys.argv[1:]}))")
    found = json.loads(run([sys.executable, "-c", code, *folders], ROOT.parent).stdout)
    assert {n: Path(origin).parent for n, origin in found.items()} == folders


def test_the_built_in_families_are_the_installed_entry_points_and_every_family_folder():
    from parityfuzz import families

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][families.ENTRY_POINTS]
    folders = {p.parent.name: f"parityfuzz.families.{p.parent.name}"
               for p in (ROOT / "fuzz" / "families").glob("*/__init__.py")}
    assert listed == folders == families.installed()
    assert list(families.installed()) == sorted(folders)  # the order of the targets


def test_a_users_project_sees_parityfuzz_and_no_generic_top_level_names(tmp_path):
    code = ("import importlib.util as u, parityfuzz.strategies, parityfuzz.frontends.plugin; "
            "print([n for n in ('fuzz', 'strategies', 'tests') if u.find_spec(n)])")
    result = run([sys.executable, "-c", code], tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr


def test_the_console_command_explains_exports_and_replays_a_case(tmp_path):
    help_ = parityfuzz("--help", cwd=tmp_path)
    assert help_.returncode == 0 and all(c in help_.stdout for c in ("fuzz", "replay", "repro", "export", "report"))
    passing = next(p for p in corpus.discover(ROOT / "corpus") if p.parent.name == "fsdp2"
                   and corpus.load(p).expect == "pass" and corpus.load(p).case.world_size == 2)
    exported = parityfuzz("export", str(passing), "-o", str(tmp_path / "repro.py"), cwd=tmp_path)
    assert exported.returncode == 0 and "fully_shard(" in (tmp_path / "repro.py").read_text(), exported.stderr
    replayed = parityfuzz("repro", str(passing), "--json", cwd=tmp_path)
    assert replayed.returncode == 0 and json.loads(replayed.stdout)["verdict"]["kind"] == "pass", replayed.stdout[-2000:]
    bad = parityfuzz("repro", str(tmp_path / "missing.json"), cwd=tmp_path)
    assert bad.returncode == 2 and "missing.json" in bad.stderr


def test_parityfuzz_fuzz_runs_the_shipped_targets_from_any_directory(tmp_path):
    # a budget the case count, not the clock, bounds (the default 30 s is shared by all seven targets)
    result = parityfuzz("fuzz", "-k", "zero", "--world-sizes=2", "--fuzz-seed=1", "--fuzz-max-cases=2", "-q",
                        "--fuzz-budget=600",
                        "-p", "no:cacheprovider", cwd=tmp_path, timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "1 passed" in out and "zero: 2 cases" in out, out[-3000:]


PLUGIN = textwrap.dedent('''
    """A user's own system under test: FSDP2 that loses the gradient of every Linear with an odd output width."""
    import torch.nn as nn

    from parityfuzz.parts.fully_shard.system import FSDP2System


    class Dropper(FSDP2System):
        def gradients(self):
            for module in self.inner().modules():
                if isinstance(module, nn.Linear) and module.out_features % 2:
                    for p in module.parameters():
                        if p.grad is not None:
                            p.grad.zero_()
            return super().gradients()
''')

TARGET = textwrap.dedent('''
    import pytest

    from parityfuzz.strategies import cases


    @pytest.mark.fuzz_target
    def test_my_fsdp2(fuzz_session):
        fuzz_session.run_target("mine", lambda ws: cases(family="fsdp2", world_sizes=ws, system="dropper"))
''')


def test_a_users_project_fuzzes_its_own_system_plugged_in_by_entry_point(tmp_path):
    """The plugin loads by itself (pytest11), the system resolves by its registered name on every rank, the
    finding lands in the project's corpus and replays with the console command."""
    (tmp_path / "myplug").mkdir()
    (tmp_path / "myplug" / "__init__.py").write_text(PLUGIN)
    info = tmp_path / "myplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[parityfuzz.systems]\ndropper = myplug:Dropper\n")
    (tmp_path / "test_mine.py").write_text(TARGET)
    env = {**CLEAN, "PYTHONPATH": str(tmp_path)}
    result = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_mine.py", "--world-sizes=2",
                  "--fuzz-seed=2", "--fuzz-budget=60", "--shrink-budget=10", "--reduce-budget=0",
                  "--fuzz-max-failures=1"], tmp_path, env,
                 timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 1 and "mismatch" in out, out[-3000:]
    files = corpus.discover(tmp_path / "corpus")
    assert len(files) == 1 and corpus.load(files[0]).case.system == "dropper", out[-3000:]
    replayed = parityfuzz("repro", str(files[0]), "--json", cwd=tmp_path, env=env)
    assert replayed.returncode == 1 and json.loads(replayed.stdout)["verdict"]["kind"] == "mismatch", replayed.stdout[-2000:]
