"""Ranks launched by torchrun and attached to the driver (parityfuzz.executor.attach): two torchrun "nodes" on
this machine (two torchrun processes, ``--nnodes=2``, one rank each), the same verdicts as the local pool for a
passing case, a mismatch, errors, a crashed rank and a hung rank (with its stacks), torchrun restarting the
group after each broken case, and the job ending cleanly when the driver is done."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from parityfuzz.case import MeshSpec, ModelSpec, Node
from parityfuzz.executor import Executor
from parityfuzz.judge.verify import verify_case
from parityfuzz.triage import corpus
from tests.test_case import simple
from tests import subprocess_environ

ROOT = Path(__file__).resolve().parents[1]
# torch 2.13's restarts hang with the rendezvous store shared with the ranks (see parityfuzz.executor.attach)
ENV = subprocess_environ(PYTHONPATH=str(ROOT), TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_nodes(driver: str, tmp_path: Path, nodes: int = 2, per_node: int = 1) -> list[subprocess.Popen]:
    endpoint = f"127.0.0.1:{free_port()}"
    return [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}",
                              f"--nproc-per-node={per_node}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
                              "--max-restarts=5", "-m", "parityfuzz.executor.attach", driver,
                              f"--log-dir={tmp_path}"],
                             env=ENV, stdout=open(tmp_path / f"node{i}.log", "w"), stderr=subprocess.STDOUT)
            for i in range(nodes)]


def ended(nodes: list[subprocess.Popen], tmp_path: Path) -> list[int]:
    codes = []
    for i, node in enumerate(nodes):
        try:
            codes.append(node.wait(60))
        except subprocess.TimeoutExpired:
            node.kill()
            codes.append(f"still running: {(tmp_path / f'node{i}.log').read_text()[-2000:]}")
    return codes


def at(verdict, rank: int) -> dict:
    return next(r for r in verdict.ranks if r["rank"] == rank)


def test_attached_ranks_on_two_torchrun_nodes_give_the_local_verdicts_and_come_back_after_failures(tmp_path):
    driver = f"127.0.0.1:{free_port()}"
    case = simple(world_size=2, mesh=MeshSpec((2,))).validate()
    faulty = lambda fault: dataclasses.replace(case, system=f"tests.faults:{fault}")  # noqa: E731
    nodes = torchrun_nodes(driver, tmp_path)
    try:
        with Executor(attach=driver, timeout_s=30) as ex:
            assert verify_case(case, ex).kind == "pass"
            assert ex.pools[2].hello[1]["restart"] == "0"
            odd = dataclasses.replace(faulty("OddLinearGradDrop"), model=ModelSpec(body=Node("linear", out=3)))
            mismatch = verify_case(odd.validate(), ex)
            assert mismatch.kind == "mismatch" and mismatch.divergence.check == "value", mismatch.describe()
            error = verify_case(faulty("RaiseOnRank1"), ex)  # out of step: the group is restarted
            assert error.kind == "error" and at(error, 1)["type"] == "RuntimeError", error.describe()
            crash = verify_case(faulty("AbortOnRank1"), ex)
            assert crash.kind == "crash" and at(crash, 1)["status"] == "crash", crash.describe()
            assert verify_case(case, ex).kind == "pass"  # on a restarted group
            hang = verify_case(faulty("SleepOnRank1"), ex, 8)
            assert hang.kind == "hang", hang.describe()
            # the stacks came back: rank 1 asleep in the fault, rank 0 waiting for it
            assert "in misbehave" in at(hang, 1)["log"] and "most recent call first" in at(hang, 0)["log"]
            assert verify_case(case, ex).kind == "pass"
            restarts = {h["restart"] for h in ex.pools[2].hello}
        assert restarts == {"3"}, restarts  # one restart per broken case
        local = verify_case(faulty("RaiseOnRank1"), executor := Executor())
        executor.close()
        assert error.signature() == local.signature()  # the local pool's verdict
    finally:
        codes = ended(nodes, tmp_path)
    assert codes == [0, 0], codes  # the driver closed the pool: the job ended cleanly


FAULT_TARGET = textwrap.dedent("""
    import pytest
    from parityfuzz.strategies import cases

    @pytest.mark.fuzz_target
    def test_odd(fuzz_session):
        fuzz_session.run_target("odd", lambda ws: cases(world_sizes=ws, system="tests.faults:OddLinearGradDrop",
                                                        within=(), max_steps=3))
""")


def test_a_fuzz_run_on_attached_ranks_finds_and_shrinks_a_fault(tmp_path):
    """``-x``: the run ends at its first shrunk finding (a run that goes on is test_cli's; 142 s of CI time without
    it)."""
    (tmp_path / "test_odd.py").write_text(FAULT_TARGET)
    driver = f"127.0.0.1:{free_port()}"
    nodes = torchrun_nodes(driver, tmp_path, nodes=1, per_node=2)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_odd.py", f"--fuzz-attach={driver}",
             "-x", "--world-sizes=2", "--fuzz-seed=3", "--fuzz-budget=60", "--shrink-budget=30", "--reduce-budget=0",
             f"--corpus-dir={tmp_path}", f"--fuzz-report={tmp_path / 'run.json'}", f"--rootdir={tmp_path}"],
            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    finally:
        codes = ended(nodes, tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 1 and "mismatch" in out, out[-3000:]
    failure = json.loads((tmp_path / "run.json").read_text())["failures"][0]
    assert corpus.load(failure["corpus_file"]).verdict.kind == "mismatch"
    assert codes == [0], codes


def test_attach_needs_one_world_size():
    target = str(ROOT / "fuzz" / "test_families.py") + "::test_family_trains_like_its_reference[zero]"
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--fuzz-attach=127.0.0.1:1",
                             target], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert result.returncode == 4 and "--fuzz-attach: give --world-sizes=N" in result.stderr, result.stderr


@pytest.mark.parametrize("address", ["nohost", "host:port", ":80"])
def test_a_bad_attach_address_is_named(address):
    from parityfuzz.executor.attach import parse_address

    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_address(address)
