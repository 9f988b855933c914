"""The reduction after Hypothesis's shrink: single simplifications of a case (plain data), and the pass that
keeps those still failing the same way until the case is 1-minimal."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from parityfuzz.case import Case
from parityfuzz.case.reduce import simplifications, size
from parityfuzz.engine.reduce import reduce_failure
from parityfuzz.judge.verdict import Divergence, Verdict
from parityfuzz.strategies import cases

PASS = Verdict("pass")


def mismatch(tensor="body.0.weight"):
    return Verdict("mismatch", Divergence(step=0, what="grad", tensor=tensor, max_abs=1.0, max_rel=1.0))


CASE = Case.from_dict({
    "seed": 3, "world_size": 4, "mesh": {"shape": [4]},
    "model": {"body": {"kind": "seq", "children": [
        {"kind": "linear", "out": 6}, {"kind": "act", "fn": "relu"},
        {"kind": "residual", "children": [{"kind": "seq", "children": [{"kind": "linear", "out": 6},
                                                                        {"kind": "layernorm"}]}]},
        {"kind": "linear", "out": 3}]}, "input": "embedding", "vocab": 8},
    "plan": {"family": "fsdp2", "wraps": [{"path": "body.0"}, {"path": "body.2.inner.0"}, {"path": "body.3"},
                                                {"path": ""}]},
    "train": {"steps": 4, "microbatches": 2, "momentum": 0.9}, "schema": 2,
}).validate()


def by_what(case):
    return dict(simplifications(case))


def test_each_simplification_is_valid_and_smaller():
    found = by_what(CASE)
    assert found
    for what, smaller in found.items():
        assert smaller.validate() is smaller, what
        assert size(smaller.to_dict()) < size(CASE.to_dict()), what


def test_removing_a_module_renames_the_plan_paths_as_the_builder_renames_the_modules():
    found = by_what(CASE)
    removed = found["body.1 removed"]  # the ReLU: the modules after it move up one place
    assert [w.path for w in removed.plan.wraps] == ["body.0", "body.1.inner.0", "body.2", ""]
    gone = found["body.3 removed"]  # a wrapped module: its wrap goes too
    assert [w.path for w in gone.plan.wraps] == ["body.0", "body.2.inner.0", ""]
    assert [c.kind for c in gone.model.body.children] == ["linear", "act", "residual"]
    assert "body.0 removed" not in found  # the residual after it would get another width: invalid


def test_a_container_is_replaced_by_its_child_with_the_paths_below_it():
    lifted = by_what(CASE)["body.2 replaced by its child inner"]
    assert lifted.model.body.children[2].kind == "seq"
    assert [w.path for w in lifted.plan.wraps] == ["body.0", "body.2.0", "body.3", ""]


def test_lists_settings_numbers_the_input_and_the_world_size():
    found = by_what(CASE)
    assert [w.path for w in found["plan.wraps[1] removed"].plan.wraps] == ["body.0", "body.3", ""]
    assert found["train.momentum at its default"].train.momentum == 0
    assert found["train.steps 4 -> 2"].train.steps == 2
    assert found["train.microbatches at its default"].train.microbatches == 1
    dense = found["dense input instead of the embedding and head"]
    assert dense.model.input == "dense" and dense.model.vocab == 0
    halved = found["world_size 4 -> 2"]
    assert halved.world_size == 2 and halved.mesh.shape == (2,)
    assert "seed at its default" not in found and "plan.family at its default" not in found


@settings(max_examples=40, suppress_health_check=list(HealthCheck), deadline=None)
@given(cases(world_sizes=(2, 4)))
def test_every_family_s_cases_simplify_to_valid_smaller_cases(case):
    before = size(case.to_dict())
    for what, smaller in simplifications(case):
        assert Case.from_json(smaller.to_json()).validate() == smaller, what
        assert size(smaller.to_dict()) < before, what


def needs_layernorm_and_two_steps(case: Case) -> Verdict:
    """A stand-in bug: a mismatch wherever the model has a LayerNorm and trains two steps or more."""
    norm = any(n.kind == "layernorm" for _, n in case.model.body.walk("body"))
    return mismatch() if norm and case.train.steps >= 2 else PASS


def test_the_reduction_ends_1_minimal():
    runs = []

    def judge(case):
        runs.append(case)
        return needs_layernorm_and_two_steps(case)

    out = reduce_failure(CASE, mismatch(), judge)
    assert out.minimal and not out.interrupted and out.runs == len(runs) and out.steps
    assert [n.kind for _, n in out.case.model.body.walk("body")] == ["layernorm"] or \
        [n.kind for _, n in out.case.model.body.walk("body")][1:] == ["layernorm"]
    assert out.case.train.steps == 2 and len(out.case.plan.wraps) == 1 and out.case.world_size == 1
    for what, smaller in simplifications(out.case):  # 1-minimal: every single simplification passes
        assert needs_layernorm_and_two_steps(smaller).ok, what
    print(f"{len(out.steps)} simplifications kept in {out.runs} runs: {out.steps}")


def test_another_failure_is_not_the_same_failure():
    """Only the same kind of failure (its bug signature) is kept: a candidate failing otherwise is not."""
    def judge(case):
        if any(n.kind == "layernorm" for _, n in case.model.body.walk("body")):
            return mismatch()
        return Verdict("error", ranks=({"rank": 0, "role": "system", "type": "RuntimeError"},))

    out = reduce_failure(CASE, mismatch(), judge)
    assert out.minimal and any(n.kind == "layernorm" for _, n in out.case.model.body.walk("body"))


def test_a_budget_or_an_interrupt_stops_it_with_the_smallest_failure_so_far():
    out = reduce_failure(CASE, mismatch(), needs_layernorm_and_two_steps, max_runs=3)
    assert out.runs == 3 and not out.minimal
    assert needs_layernorm_and_two_steps(out.case) == mismatch()
    calls = []

    def interrupted(case):
        calls.append(case)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return needs_layernorm_and_two_steps(case)

    out = reduce_failure(CASE, mismatch(), interrupted)
    assert out.interrupted and not out.minimal and out.runs == 4
    assert not needs_layernorm_and_two_steps(out.case).ok


def test_the_case_json_names_nothing_removed():
    """After a module's removal no plan or training entry names a path the model no longer has."""
    for what, smaller in simplifications(CASE):
        paths = {p for p, _ in smaller.model.module_paths()}
        text = json.dumps({k: v for k, v in smaller.to_dict().items() if k != "model"})
        for token in json.loads(json.dumps([s for s in _strings(json.loads(text))])):
            if token.startswith("body"):
                assert token in paths, (what, token)


def _strings(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from _strings(v)



def test_a_fault_s_reported_case_is_1_minimal(executor, tmp_path):
    """A fuzz run with a fault inside torch's gradient path (any module called twice in a forward loses its
    gradient): the recorded case is reduced until every part left is needed: each single simplification of
    it, run for real, no longer fails that way."""
    from parityfuzz.judge.verify import verify_case
    from tests.test_fuzz_loop import fuzz

    stats = fuzz(executor, tmp_path, "tests.faults:TwiceGradDrop", max_cases=40, max_shrink_runs=20,
                 max_reduce_runs=None)
    assert len(stats.failures) == 1
    f = stats.failures[0]
    r = f.reduction
    kinds = [n.kind for _, n in f.case.model.body.walk("body")]
    print(f"shrunk in {f.shrink_runs} runs / {f.shrink_seconds:.1f}s, then {len(r.steps)} simplifications in "
          f"{r.runs} runs / {r.seconds:.1f}s: {kinds}, {f.case.to_json()}")
    assert r.minimal and f.case == r.case and "twice" in kinds
    assert Case.from_dict(json.loads(f.corpus_path.read_text())["case"]) == f.case  # the reduced case recorded
    signature = f.verdict.bug_signature()
    for what, smaller in simplifications(f.case):
        verdict = verify_case(smaller, executor)
        assert verdict.ok or verdict.bug_signature() != signature, what


def test_an_interrupt_while_reducing_records_the_failure_then_goes_on(executor, tmp_path):
    """Ctrl-C during the reduction: the failure (as reduced so far) is in the corpus, then the interrupt
    propagates."""
    from parityfuzz import engine
    from parityfuzz.triage import corpus
    from parityfuzz.engine import Fuzzer, FuzzOptions

    def log(message):
        if "reducing the shrunk" in message:
            engine.interrupt_requested.set()  # as the plugin's signal handler does

    options = FuzzOptions(corpus_dir=tmp_path, seed=1, max_cases=40, max_shrink_runs=5)
    fuzzer = Fuzzer(options, executor, log=log)
    try:
        with pytest.raises(KeyboardInterrupt, match="reducing"):
            fuzzer.fuzz("odd", cases(world_sizes=(2,), system="tests.faults:OddLinearGradDrop"), budget_s=60)
    finally:
        engine.interrupt_requested.clear()
    [failure] = fuzzer.targets["odd"].failures
    assert failure.reduction.interrupted and not failure.reduction.minimal
    assert [corpus.load(p).case for p in corpus.discover(tmp_path)] == [failure.case]
