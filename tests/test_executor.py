"""The executor: persistent ranks, results as data, and every way a case can go wrong becomes a verdict."""

import dataclasses
import os
import time

import pytest

from parityfuzz.case import ModelSpec, Node
from parityfuzz.judge.verify import verify_case
from tests.test_case import simple


def fault(name: str, **kw):
    return simple(system=f"tests.faults:{name}", **kw)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_ranks_persist_across_cases(executor):
    assert verify_case(simple(), executor).ok
    pids = executor.pools[2].pids()
    assert verify_case(simple(seed=1), executor).ok
    assert executor.pools[2].pids() == pids


def test_results_come_back_as_data_per_rank(executor):
    outcomes = executor.run(simple())
    assert [o.rank for o in outcomes] == [0, 1] and all(o.status == "ok" for o in outcomes)
    ref0, ref1 = outcomes[0].result["reference"], outcomes[1].result["reference"]
    assert len(ref0.losses) == 1 and ref0.grads and ref0.params
    assert ref0.grads[0].keys() == ref1.grads[0].keys()  # every rank ships its own copy of plain (DDP) tensors
    assert ref1.grads[0]["body.0.weight"].shard is None and ref1.grads[0]["body.0.weight"].value.shape == (4, 4)
    sut0, sut1 = outcomes[0].result["system"], outcomes[1].result["system"]
    piece0, piece1 = sut0.params[0]["body.0.weight"], sut1.params[0]["body.0.weight"]
    assert piece0.shard.coord == (0,) and piece1.shard.coord == (1,)  # FSDP2 pieces come from every rank
    assert piece0.value.shape == (2, 4) and piece0.shard.global_shape == (4, 4)
    assert float(ref0.losses[0].value) != float(ref1.losses[0].value)  # each rank trains on its own inputs


@pytest.mark.parametrize("name, kind, needle", [
    ("RaiseOnRank1", "error", "injected failure on rank 1"),
    ("ExitOnRank0", "crash", "exit code 3"),
    ("AbortOnRank1", "crash", "exit code -6"),
    ("MismatchedCollectiveSize", "crash", "exit code -6"),  # gloo aborts on a size mismatch
])
def test_failures_become_verdicts_and_the_pool_recovers(executor, name, kind, needle):
    old_pids = executor.pool(2).pids()
    verdict = verify_case(fault(name), executor, timeout_s=20)
    assert verdict.kind == kind, verdict.describe()
    assert needle in verdict.describe()
    if kind == "error":
        entry = next(r for r in verdict.ranks if r["status"] == "error")
        assert entry["role"] == "system" and "RuntimeError" in entry["traceback"]
    assert verify_case(simple(), executor).ok  # a fresh pool answers the next case
    time.sleep(0.5)
    assert not any(alive(p) for p in old_pids)


@pytest.mark.parametrize("name, where", [
    ("SleepOnRank1", "misbehave"),
    ("MismatchedCollectiveKind", "broadcast"),  # blocks until the process-group timeout
])
def test_hang_is_a_verdict_with_stacks(executor, name, where):
    old_pids = executor.pool(2).pids()
    start = time.monotonic()
    verdict = verify_case(fault(name), executor, timeout_s=3)
    assert time.monotonic() - start < 15
    assert verdict.kind == "hang"
    hung = [r for r in verdict.ranks if r["status"] == "hang"]
    assert hung and any(where in r["log"] for r in hung), "faulthandler stack of the stuck rank"
    assert verify_case(simple(), executor).ok
    time.sleep(0.5)
    assert not any(alive(p) for p in old_pids)


def test_a_pool_runs_on_after_an_error_on_every_rank_in_step():
    """Every rank raised outside the collectives, their process groups in step: the same ranks run the next
    case, and it trains exactly as on a fresh pool."""
    from parityfuzz.executor import Executor

    def losses(ex, case):
        return [float(x.value) for x in ex.run(case)[0].result["system"].losses]

    norm = simple(system="tests.faults:RaiseWithLayerNorm",
                  model=ModelSpec(body=Node("seq", children=(Node("linear", out=4), Node("layernorm")))))
    case = dataclasses.replace(simple(), train=dataclasses.replace(simple().train, steps=3, optimizer="adam"))
    with Executor() as fresh:
        expected = losses(fresh, case)
    with Executor() as ex:
        pids = ex.pool(2).pids()
        verdict = verify_case(norm, ex, timeout_s=20)
        assert verdict.kind == "error" and len(verdict.ranks) == 2 and "LayerNorm" in verdict.describe()
        assert "collectives" not in verdict.ranks[0]  # the pool's bookkeeping stays out of the verdict
        assert ex.reuses == 1 and ex.restarts == 0 and ex.pools[2].pids() == pids
        assert losses(ex, case) == expected and ex.pools[2].pids() == pids


def test_a_pool_out_of_step_after_errors_is_replaced():
    """Every rank raised, but rank 0 issued one collective more than the others: replaced (a half-done
    collective must not meet the next case); so is every pool where reuse is turned off."""
    from parityfuzz.executor import Executor

    with Executor() as ex:
        pids = ex.pool(2).pids()
        verdict = verify_case(fault("RaiseAfterACollectiveOnRank0"), ex, timeout_s=20)
        assert verdict.kind == "error" and ex.reuses == 0
        assert verify_case(simple(), ex).ok and ex.restarts == 1 and ex.pools[2].pids() != pids
    with Executor(reuse_after_errors=False) as ex:
        assert verify_case(simple(system="no.such.module:Thing"), ex, timeout_s=20).kind == "error"
        assert verify_case(simple(), ex).ok and ex.restarts == 1 and ex.reuses == 0


def test_process_groups_in_step():
    from parityfuzz.executor.pool import in_step

    a = {"groups_made": 3, "collectives": {"0": 10, "1": 4}}
    b = {"groups_made": 3, "collectives": {"0": 10, "2": 7}}  # another rank's own subgroup
    assert in_step([a, b]) and in_step([a, a])
    assert not in_step([a, {**b, "collectives": {"0": 11}}])  # one more collective on the default group
    assert not in_step([a, {**b, "groups_made": 4}])  # one more group made
    assert not in_step([a, None]) and not in_step([])


def test_unknown_system_is_an_error_verdict(executor):
    verdict = verify_case(simple(system="no.such.module:Thing"), executor, timeout_s=20)
    assert verdict.kind == "error" and "cannot load system" in verdict.describe()


def test_same_case_same_verdict(executor):
    case = dataclasses.replace(simple(), train=dataclasses.replace(simple().train, steps=3, optimizer="adam"))
    outcomes = [executor.run(case) for _ in range(2)]
    a, b = (o[0].result["system"] for o in outcomes)
    assert [float(x.value) for x in a.losses] == [float(x.value) for x in b.losses]


def test_pool_past_its_resource_ceiling_is_recycled():
    from parityfuzz.executor import Executor

    with Executor(ceiling={"threads": 1}) as ex:  # every rank has more than one thread
        assert verify_case(simple(), ex).ok
        assert ex.recycles == 1 and 2 not in ex.pools
        assert verify_case(simple(), ex).ok and ex.recycles == 2
    with Executor() as ex:
        assert verify_case(simple(), ex).ok
        assert ex.recycles == 0 and all(r["threads"] > 1 and r["fds"] > 0 for r in ex.pools[2].resources())


def test_unsharded_parameters_after_backward_break_the_invariant(executor):
    verdict = verify_case(fault("NeverReshardsAfterBackward"), executor, timeout_s=20)
    assert verdict.kind == "error" and "InvariantViolation" in verdict.describe()
    assert "not registered as sharded" in verdict.describe()


def test_unsharded_parameters_after_forward_break_the_invariant(executor):
    from parityfuzz.families.fsdp2 import FSDP2Plan
    from parityfuzz.parts.fully_shard import Wrap

    case = fault("NeverReshardsAfterForward", plan=FSDP2Plan(wraps=(Wrap("body"), Wrap(""))))
    verdict = verify_case(case, executor, timeout_s=20)
    assert verdict.kind == "error" and "after forward" in verdict.describe()
    assert verify_case(dataclasses.replace(case, system="fsdp2"), executor).ok


def test_no_compiled_graph_is_carried_from_one_run_to_the_next(tmp_path, monkeypatch):
    """Inductor's FX graph cache and AOTAutograd's outlive a run: an entry one rank wrote was served to another whose
    tensor-parallel shard has another shape, and a case (fsdp2_tp, an uneven colwise MLP under inductor) failed on
    its second run only.  The ranks keep both off, so a verdict is the same on every replay: a compiled case leaves
    no graph in the machine's cache (its generated kernels, keyed by their source, may stay)."""
    from parityfuzz.case.compiled import Compile
    from parityfuzz.executor import Executor

    machine_cache = tmp_path / "machine-cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(machine_cache))
    case = simple(compile=Compile(backend="inductor", form="model")).validate()
    with Executor() as ex:
        assert verify_case(case, ex).ok
    assert machine_cache.exists()  # the ranks compiled there
    assert not [p for p in machine_cache.rglob("*") if p.name in ("fxgraph", "aotautograd") and any(p.iterdir())]


def test_a_restart_trains_again_on_the_graphs_its_first_run_cached(tmp_path, monkeypatch):
    """``compile.restart``: the system under test trains, is built anew (Dynamo reset) and trains again, its
    compile served from the graphs its first run cached, every rank's, in a directory of the run's own (none lands in
    the machine's cache); the second run is the one compared.  Without it nothing is served from a graph cache."""
    from parityfuzz.case.compiled import Compile
    from parityfuzz.executor import Executor

    machine_cache = tmp_path / "machine-cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(machine_cache))
    hits = {}
    with Executor() as ex:
        for restart in (True, False):
            case = simple(compile=Compile(backend="inductor", form="model", restart=restart)).validate()
            outcomes = ex.run(case)
            assert all(o.status == "ok" for o in outcomes), outcomes
            hits[restart] = [o.result["system"].compiled["cache_hits"] for o in outcomes]
            assert verify_case(case, ex).ok
    assert all(n > 0 for n in hits[True]) and hits[False] == [0] * len(hits[False]), hits
    assert not [p for p in machine_cache.rglob("*") if p.name in ("fxgraph", "aotautograd") and any(p.iterdir())]


def test_a_crash_only_warm_ranks_show_is_given_the_verdict_of_fresh_ranks(executor):
    """A rank that crashes because an earlier case damaged its process (a heap corrupted: the 10-minute run of
    2026-11-29 met one, fsdp2_tp/adae839b, which on fresh ranks gives a known bug's mismatch) is no crash of this
    case: the case runs again on fresh ranks, whose verdict stands, noted; a case that crashes fresh ranks too
    stays a crash."""
    case = fault("ExitOnWarmRank1")
    assert verify_case(case, executor, timeout_s=20).ok  # (the first case these ranks run of this system)
    restarts = executor.restarts
    verdict = verify_case(case, executor, timeout_s=20)
    assert verdict.ok and "crashed when this case ran on ranks that had run" in verdict.note, verdict.describe()
    assert executor.restarts == restarts + 1
    crash = verify_case(fault("ExitOnRank0"), executor, timeout_s=20)
    assert crash.kind == "crash" and "crashed when" not in crash.note
