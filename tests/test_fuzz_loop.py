"""The whole loop: a short fuzz run finds an injected fault, shrinks it, and writes it to the corpus;
the same budget against correct FSDP2 reports nothing."""

import pytest
from hypothesis import HealthCheck, find, settings

from parityfuzz.case import ModelSpec, Node
from parityfuzz.engine import Fuzzer, FuzzOptions, precondition, simplest_features
from parityfuzz.engine.soak import remember
from parityfuzz.judge.verdict import Divergence, Verdict
from parityfuzz.judge.verify import verify_case
from parityfuzz.strategies import cases
from parityfuzz.triage import corpus
from parityfuzz.triage import FOUND_IN_RUN, NEW, Found, explain
from tests.known import record, register
from tests.test_case import simple

#: Time caps that a healthy run never reaches: the case and shrink-run counts bound these runs, so they are the
#: same on a loaded CI machine as here.
BUDGET_S = 300.0
SHRINK_BUDGET_S = 300.0


def body_modules(case) -> int:
    """Modules of the model body below its top-level container."""
    return sum(1 for _ in case.model.body.walk("body")) - 1


def fuzz(executor, tmp_path, system, seed=1, max_cases=80, max_shrink_runs=150, world_sizes=(2,), strategy=None,
         budget_s=BUDGET_S, case_timeout_s=None, max_reduce_runs=0, locate=False, stop_after=1):
    """A short fuzz run that stops at its first failure (``stop_after``, pytest's ``-x``: 0 goes on for the whole
    budget, as a run does by default); the reduction to a 1-minimal case and locating where a mismatch begins
    are off unless asked (``max_reduce_runs``, ``locate``): the tests of what shrinking finds would pay for them
    (CI time), the tests of each ask for it."""
    options = FuzzOptions(corpus_dir=tmp_path, seed=seed, shrink_budget_s=SHRINK_BUDGET_S, max_cases=max_cases,
                          max_shrink_runs=max_shrink_runs, case_timeout_s=case_timeout_s,
                          max_reduce_runs=max_reduce_runs, locate=locate, stop_after=stop_after)
    fuzzer = Fuzzer(options, executor, log=print)
    return fuzzer.fuzz(system, strategy if strategy is not None else cases(world_sizes=world_sizes, system=system),
                       budget_s=budget_s)


def _under(case, module: str, paths) -> bool:
    """Whether ``module`` is one of the modules at ``paths`` or inside one (every module is inside the root)."""
    return any(p == "" or module == p or module.startswith(p + ".") for p in paths)


#: Faults acting in the gradients of some modules: which modules (``(case, module) -> bool``).
LOCATED = {
    "OddLinearGradDrop": lambda c, m: dict(c.model.module_paths()).get(m) == "linear" and c.model.output_width(m) % 2,
    "TwiceGradDrop": lambda c, m: _under(c, m, [p for p, n in c.model.body.walk("body") if n.kind == "twice"]),
    "CheckpointedGradDrop": lambda c, m: _under(c, m, [k.path for k in c.plan.checkpoints]),
}


@pytest.mark.parametrize("fault, shows", [
    ("OddLinearGradDrop", lambda c: any(n.kind == "linear" and n.out % 2 for _, n in c.model.body.walk("body"))),
    # With --long, for CI time (38 s, 82 s and 41 s on a clean clone): TwiceGradDrop's situation is covered by
    # OddLinearGradDrop's (a gradient dropped in some modules), CheckpointedGradDrop's by the checkpoint and origin
    # tests' hand-written cases, FirstMicrobatchGradDrop's by the training-loop dimensions' accumulation faults.
    pytest.param("TwiceGradDrop", lambda c: any(n.kind == "twice" for _, n in c.model.body.walk("body")),
                 marks=pytest.mark.long),
    # With --long, for CI time (27 s, 48 s and 61 s on a clean clone): an HSDP replica left unreduced is fuzzed
    # from inside torch (test_faults_in_fsdp2.py's ReplicaNotAllReduced); OffloadForgetsUpdate and BufferReset are
    # each found and shrunk to a case showing its own situation by test_a_run_goes_on_after_a_failure_and_reports_
    # another_bug, which fuzzes the two together.
    pytest.param("HSDPSkipsReplicaAllReduce", lambda c: c.mesh.names == ("dp_replicate", "dp_shard"),
                 marks=pytest.mark.long),
    pytest.param("CheckpointedGradDrop", lambda c: bool(c.plan.checkpoints), marks=pytest.mark.long),
    ("PrefetchTargetGradDrop", lambda c: bool(c.plan.prefetch)),
    pytest.param("OffloadForgetsUpdate", lambda c: any(w.offload for w in c.plan.wraps), marks=pytest.mark.long),
    pytest.param("FirstMicrobatchGradDrop", lambda c: c.train.microbatches > 1 and bool(c.plan.no_sync),
                 marks=pytest.mark.long),
    # With --long (CI time: 45 s and 50 s on a clean clone): their hand-written cases run in CI (test_build.py,
    # test_mixed_precision.py), and the training-loop dimensions' RNG and bf16 faults are fuzzed there.
    pytest.param("CheckpointLosesRNG", lambda c: bool(c.plan.checkpoints) and "has:dropout" in c.features(),
                 marks=pytest.mark.long),
    ("GatedGradDrop", lambda c: "has:gate" in c.features()),
    pytest.param("BufferReset", lambda c: "has:scale" in c.features(), marks=pytest.mark.long),
    pytest.param("LowPrecisionGradSummed", lambda c: any(w.param_dtype in ("bfloat16", "float16") for w in c.plan.wraps),
                 marks=pytest.mark.long),
    ("NonRootPassUnsynced", lambda c: bool(c.train.nonroot)),
])
def test_injected_fault_is_found_and_shrunk(executor, tmp_path, fault, shows):
    """Also: where the fault acts in the gradients of some modules only, the mismatch's origin names one."""
    system = f"tests.faults:{fault}"
    # Shrunk as a run shrinks: Hypothesis's shrink, then the reduction's single simplifications (a few runs: where
    # the shrink stopped at a local minimum, e.g. two activations it could not drop together, they finish it).
    stats = fuzz(executor, tmp_path, system, max_shrink_runs=150, max_reduce_runs=20, locate=fault in LOCATED)
    # The shrunk failure first; where the shrink slipped to another kind of tensor or check, the case first found
    # is kept after it (a fault seen on a gradient in one case may show on a parameter in a smaller one).
    f, *slipped = stats.failures
    assert len(slipped) <= 1 and all(s.verdict.kind == "mismatch" for s in slipped)
    assert all(s.verdict.bug_signature() != f.verdict.bug_signature() for s in slipped)
    print(f"{fault}: found after {f.cases_to_find} cases / {f.seconds_to_find:.1f}s, "
          f"shrunk in {f.shrink_runs} runs / {f.shrink_seconds:.1f}s to {body_modules(f.case)} modules")
    assert f.verdict.kind == "mismatch"
    # A gate drawn after other layers cannot move to the front of its chain; CheckpointLosesRNG's draw (a norm
    # before the dropout) takes the shrinker ~230 runs to drop to 3 modules (4 within these 150, in CI time); the
    # rest shrink to 1-2 modules.
    bound = {"GatedGradDrop": 5, "CheckpointLosesRNG": 4}.get(fault, 3)
    assert body_modules(f.case) <= bound, f.case.to_json(indent=1)
    assert shows(f.case), "the minimal case still shows the faulty situation"
    if fault in LOCATED:
        origin = f.verdict.origin
        assert origin is not None and origin.what == "grad" and LOCATED[fault](f.case, origin.module), origin
    assert f.case.world_size <= 2 and f.case.seed == 0  # (the reduction may go to one rank where the fault acts)
    entry = corpus.load(f.corpus_path)
    assert entry.case == f.case and entry.expect == "fail"
    assert verify_case(entry.case, executor).kind == "mismatch"  # the saved case replays to the same verdict


def test_correct_fsdp2_has_no_failures_in_the_same_budget(executor, tmp_path):
    stats = fuzz(executor, tmp_path, "fsdp2", max_cases=12)  # CI time: more fsdp2 cases run in the fuzz target
    print(stats.summary_line())
    assert stats.failures == [] and stats.verdicts["pass"] == stats.cases == 12
    assert corpus.discover(tmp_path) == []


@pytest.mark.parametrize("name, world_sizes, keep, least", [
    # (10 world-size-4 cases: 15 took 123 s of CI time; the fuzz targets draw HSDP meshes and Adam too)
    ("2x2 HSDP meshes", (4,), lambda c: c.mesh.shape == (2, 2), 10),
    ("float32 with Adam or AdamW", (2, 4), lambda c: c.train.dtype == "float32" and c.train.optimizer != "sgd", 12),
    ("world size 3", (3,), lambda c: True, 10),
])
def test_no_false_alarm_where_rounding_differs_most(executor, tmp_path, name, world_sizes, keep, least):
    """Unmodified FSDP2 on the cases whose rounding differs most from DDP's: HSDP's two-level reduction,
    Adam's normalisation of float32 rounding, non-power-of-two groups with uneven and empty shards."""
    stats = fuzz(executor, tmp_path, "fsdp2", seed=7, max_cases=least,
                 strategy=cases(world_sizes=world_sizes, system="fsdp2").filter(keep))
    print(stats.summary_line())
    assert stats.failures == [] and stats.verdicts["pass"] == stats.cases == least
    assert corpus.discover(tmp_path) == []


@pytest.mark.long  # 56 s (CI time); CI keeps the baseline's determinism (below) and known-bug masking
def test_a_run_goes_on_after_a_failure_and_reports_another_bug(executor, tmp_path):
    """Under every profile (here the default one) a shrunk failure starts a new round with a fresh
    seed, in which a failure of the same kind (bug signature) in a case meeting the earlier failure's
    precondition counts as passing: a system with two independent faults gets both reported, each shrunk to
    a case showing its own situation.  A fault that shows in several ways (the buffer fault as a loss or as
    a buffer mismatch) may be reported once per way: no failure is masked by one of another kind."""
    system = "tests.faults:OffloadForgetsUpdateAndBufferReset"
    stats = fuzz(executor, tmp_path, system, max_cases=140, max_shrink_runs=30, stop_after=0)
    for f in stats.failures:
        print(f"{f.verdict.bug_signature()}: found after {f.cases_to_find} cases, {body_modules(f.case)} modules, "
              f"needs {sorted(f.case.features())}")
    shown = {("offload" in f.case.features(), "has:scale" in f.case.features()) for f in stats.failures}
    assert {(False, True), (True, False)} <= shown
    assert sum(n for label, n in stats.explained.items() if label.startswith("already found in this run")) > 0
    assert len(corpus.discover(tmp_path)) == len(stats.failures)
    baseline = simplest_features(cases(world_sizes=(2,), system=system))
    for i, later in enumerate(stats.failures):
        for earlier in stats.failures[:i]:
            needs = precondition(earlier.case, baseline)
            assert not (needs <= later.case.features()
                        and earlier.verdict.bug_signature() == later.verdict.bug_signature()), "masked, yet reported"


def test_the_soak_baseline_is_the_simplest_case_and_the_same_on_every_call():
    """Soak masking and the test above recompute the simplest case's features; an undetermined ``find`` once
    gave three different answers in 15 calls, and a CI run reported a failure the test then called masked.  The
    baseline is the case Hypothesis's shrinker ends at from any failing draw."""
    strategy = cases(world_sizes=(2,), system="tests.faults:OffloadForgetsUpdateAndBufferReset")
    assert len({simplest_features(strategy) for _ in range(3)}) == 1
    shrunk = find(strategy, lambda case: True, settings=settings(database=None, deadline=None, derandomize=True,
                                                                 suppress_health_check=list(HealthCheck)))
    assert simplest_features(strategy) == shrunk.features()


@pytest.mark.long  # 48 s (CI time); CI checks -x end to end: tests/test_cli.py's run with and without it
def test_stop_after_one_stops_at_the_first_failure(executor, tmp_path):
    """pytest's ``-x`` (``stop_after=1``): the first shrunk failure ends the target (a run goes on otherwise:
    test_a_run_goes_on_after_a_failure_and_reports_another_bug, and tests/test_cli.py for the command line)."""
    stats = fuzz(executor, tmp_path, "tests.faults:OffloadForgetsUpdateAndBufferReset", max_cases=200,
                 max_shrink_runs=20, stop_after=1)
    # One round's failures: its shrunk failure, and the case it first found where the shrink slipped from one of
    # the two faults to the other (both carry the round's finding time); no second round began.
    assert 1 <= len(stats.failures) <= 2 and stats.cases < 200
    assert len({(f.cases_to_find, f.found_at) for f in stats.failures}) == 1
    assert len({f.verdict.bug_signature() for f in stats.failures}) == len(stats.failures)


def test_a_failure_meeting_a_known_bug_precondition_and_signature_passes_with_a_note(executor, tmp_path,
                                                                                   monkeypatch):
    """A failing case that meets a known torch bug's precondition and fails the way the bug does is counted
    against that bug (run goes on, nothing written).  Without the entry the same fault is a failure:
    test_injected_fault_is_found_and_shrunk[BufferReset], same seed and system.  The record names every tensor
    the fault's reset buffers reach (its hand-written case shows it on the loss; drawn ones on the buffer itself, a
    gradient or a parameter first)."""
    fields = verify_case(BUFFER_CASE, executor).signature_fields()
    assert fields == {"verdict": "mismatch", "check": "value", "tensor": "loss"}
    signature = '[{ verdict = "mismatch", check = "value", tensor = ["loss", "buffer", "grad", "param"] }]'
    # Unexplained, the mismatch is measured against the noise of 16 perturbed reference runs (3 pool calls)
    from parityfuzz.engine import fuzzer as engine
    from parityfuzz.judge.verify import KNOWN_UNMEASURED

    calls, judged = [], []
    run_segments, real_verify = executor.run_segments, engine.verify_case
    monkeypatch.setattr(executor, "run_segments", lambda case, *a, **k: calls.append(k.get("roles", ("system",)))
                        or run_segments(case, *a, **k))
    assert verify_case(BUFFER_CASE, executor).kind == "mismatch" and len(calls) == 3

    def verify(case, ex, timeout=None, known=None):  # each verdict the run judged, and whether noise was measured
        calls.clear()
        verdict = real_verify(case, ex, timeout, known=known)
        judged.append((verdict, any("perturbed" in role for roles in calls for role in roles)))
        return verdict

    monkeypatch.setattr(engine, "verify_case", verify)
    bug, = register(monkeypatch, tmp_path, record("buffers-reset-by-the-test-fault", signature))
    stats = fuzz(executor, tmp_path / "corpus", "tests.faults:BufferReset", max_cases=40)
    assert stats.failures == [] and corpus.discover(tmp_path / "corpus") == []
    assert stats.explained[f"known torch bug, {bug.title}"] > 0
    assert stats.verdicts["pass"] == stats.cases
    # explained, its noise goes unmeasured (the case counts as passing either way): no perturbed reference ran
    unmeasured = [measured for verdict, measured in judged if KNOWN_UNMEASURED in verdict.note]
    assert unmeasured and not any(unmeasured), judged


def test_another_bug_meeting_a_known_bugs_precondition_still_fails(executor, tmp_path, monkeypatch):
    """Same precondition, another kind of failure: not the known bug, so it is reported and written."""
    bug, = register(monkeypatch, tmp_path, record("gradients-lost-when-buffers-exist",
                                                  '[{ verdict = "mismatch", check = "missing_grad", tensor = "grad" }]'))
    stats = fuzz(executor, tmp_path / "corpus", "tests.faults:BufferReset", max_cases=40, max_shrink_runs=10)
    assert len(stats.failures) == 1 and stats.failures[0].verdict.bug_signature() not in bug.signature_strings()
    assert corpus.discover(tmp_path / "corpus") == [stats.failures[0].corpus_path]


BUFFER_CASE = simple(system="tests.faults:BufferReset",
                     model=ModelSpec(body=Node("seq", children=(Node("scale", out=1), Node("linear", out=4)))))


def test_soak_masking_needs_the_same_kind_of_failure_and_a_non_empty_precondition():
    mismatch = Verdict("mismatch", Divergence(step=1, what="grad", tensor="body.0.w", max_abs=1, max_rel=1))
    case = simple(model=ModelSpec(body=Node("seq", children=(Node("scale", out=1),))))
    earlier = Found(frozenset({"has:scale"}), mismatch.bug_signature(), "corpus/x.json")
    why = explain(case, mismatch, [earlier])
    assert why.kind == FOUND_IN_RUN and why.found == earlier and why.silences  # same kind, precondition met
    other = Verdict("mismatch", Divergence(step=1, what="grad", tensor="body.0.w", max_abs=1, max_rel=1,
                                           check="replica", ranks=(0, 1)))
    assert explain(case, other, [earlier]).kind == NEW  # another kind of failure in the same situation
    anything = Found(frozenset(), mismatch.bug_signature(), "corpus/y.json")
    assert explain(case, mismatch, [anything]).kind == NEW  # an empty precondition masks nothing
    elsewhere = Found(frozenset({"has:gate"}), mismatch.bug_signature(), "corpus/z.json")
    assert not explain(case, mismatch, [elsewhere]).silences


def test_a_dimension_two_rounds_show_incidental_leaves_the_precondition():
    """Two 1-minimal failures of one kind that differ along one dimension (another value of one feature, or one
    flag more or less) show that dimension incidental: the earlier finding drops it, and a third case that
    differs there again is already found.  Two dimensions at once, another kind of failure, or nothing left in
    common keep the findings apart (one finding never hides another)."""
    sig = "mismatch:value:grad"
    first = Found(frozenset({"compile=blocks_after", "wrapped=1", "uneven_shard", "loss_parallel"}), sig, "a.json")
    flag = remember([first], Found(frozenset({"compile=blocks_after", "wrapped=1", "loss_parallel"}), sig, "b.json"))
    assert flag == [Found(frozenset({"compile=blocks_after", "wrapped=1", "loss_parallel"}), sig, "a.json")]
    value = remember(flag, Found(frozenset({"compile=blocks_before", "wrapped=1", "loss_parallel"}), sig, "c.json"))
    assert value == [Found(frozenset({"wrapped=1", "loss_parallel"}), sig, "a.json")]
    later = frozenset({"compile=model", "wrapped=1", "loss_parallel", "has:gate"})
    assert value[0].covers(later, sig) and not first.covers(later, sig)
    two = Found(frozenset({"compile=blocks_before", "wrapped=2", "loss_parallel"}), sig, "d.json")
    assert remember(flag, two) == [*flag, two]  # compile form and wrapping both differ
    other = Found(frozenset({"compile=blocks_after", "wrapped=1"}), "mismatch:replica:grad", "e.json")
    assert remember(flag, other) == [*flag, other]
    alone = [Found(frozenset({"wrapped=1"}), sig, "f.json")]
    apart = Found(frozenset({"wrapped=2"}), sig, "g.json")
    assert remember(alone, apart) == [*alone, apart]  # nothing in common: no empty precondition


def test_a_seed_draws_the_same_cases_whatever_modules_the_process_loaded(tmp_path, monkeypatch):
    """Hypothesis draws now and then a constant from the source of the loaded local modules; the fuzzer empties
    that pool (parityfuzz.engine.generation), so a module full of constants loaded between two runs of one seed changes
    none of its cases (it did: a fixed-seed test shrank differently after another test file's imports).  The
    control shows the check has teeth: without the fix the loaded constants do change the cases."""
    import importlib
    import sys

    from parityfuzz.engine import fuzzer as engine
    from parityfuzz.engine.generation import without_span_mutations
    from parityfuzz.judge.verdict import PASS

    def drawn(max_cases: int = 100) -> list[str]:
        ids = []

        def judge(self, case, timeout):
            ids.append(case.case_id())
            return Verdict(PASS)

        monkeypatch.setattr(engine.Fuzzer, "_run", judge)
        pools = type("Pools", (), {"pool": lambda self, ws: None})()
        options = FuzzOptions(corpus_dir=tmp_path, seed=3, max_cases=max_cases)
        Fuzzer(options, pools, log=lambda *_: None).fuzz("fsdp2", cases(world_sizes=(2, 4)), budget_s=BUDGET_S)
        return ids

    loaded = []

    def load_constants(name: str, step: int) -> None:  # integers Hypothesis collects (|v| >= 100) that a case's
        values = range(100 + step, 5000, step)          # seed can take
        (tmp_path / f"{name}.py").write_text(f"VALUES = ({', '.join(map(str, values))})\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        importlib.import_module(name)
        loaded.append(name)

    try:
        first = drawn()
        load_constants("parityfuzz_test_constants_a", 7)
        assert drawn() == first and len(first) == 100
        from hypothesis.internal.conjecture import providers

        if hasattr(providers, "_get_local_constants"):  # the control: this Hypothesis has the pool
            monkeypatch.setattr(engine, "fuzzing", lambda **_: without_span_mutations())  # (the constants left in)
            before = drawn(300)
            load_constants("parityfuzz_test_constants_b", 11)
            assert drawn(300) != before
    finally:
        for name in loaded:
            sys.modules.pop(name, None)


def _dimension_sets(tmp_path, monkeypatch, family: str, seed: int, n: int = 80) -> list[frozenset[str]]:
    """The training-loop dimensions of each case a fuzz run of ``family`` draws, in order (each case passes at once)."""
    from parityfuzz.case import dimensions
    from parityfuzz.engine import fuzzer as engine
    from parityfuzz.judge.verdict import PASS

    drawn = []

    def judge(self, case, timeout):
        drawn.append(dimensions.drawn(case))
        return Verdict(PASS)

    monkeypatch.setattr(engine.Fuzzer, "_run", judge)
    pools = type("Pools", (), {"pool": lambda self, ws: None})()
    options = FuzzOptions(corpus_dir=tmp_path / f"{family}{seed}", seed=seed, max_cases=n)
    Fuzzer(options, pools, log=lambda *_: None).fuzz(family, cases(family=family, world_sizes=(1, 2, 3, 4)),
                                                    budget_s=BUDGET_S)
    return drawn


def repeats(drawn: list) -> float:
    """The share of cases whose dimensions are exactly the case's before."""
    return sum(a == b for a, b in zip(drawn, drawn[1:])) / (len(drawn) - 1)


@pytest.mark.parametrize("family", ["fsdp2", "fsdp2_tp", "fsdp1", "zero", "composable", "pipeline"])
def test_each_case_of_a_run_is_a_fresh_draw_of_its_dimensions(tmp_path, monkeypatch, family):
    """Hypothesis's span mutations (up to five variants of each generated case, keeping its first choices: its swarm
    configuration) are off in a fuzz round (parityfuzz.engine.generation): consecutive cases seldom repeat the set
    of training-loop dimensions, so a short run's shares stay near what the strategy draws.  Control: with them on,
    half of fsdp2_tp's cases repeated the case before, with half as many distinct dimension sets, and a supported
    dimension fell to 2% of 80 cases on some seeds."""
    from parityfuzz import families
    from parityfuzz.case import dimensions
    from parityfuzz.engine import fuzzer as engine
    from parityfuzz.engine.generation import without_local_constants

    fresh = _dimension_sets(tmp_path, monkeypatch, family, seed=1)
    assert len(fresh) == 80 and repeats(fresh) < 0.2, repeats(fresh)
    if family == "fsdp2_tp":
        for seed in (1, 2, 3):
            drawn = _dimension_sets(tmp_path, monkeypatch, family, seed=seed)
            for d in dimensions.supported(families.get(family)):
                assert sum(d in s for s in drawn) >= 4, (seed, d)  # 5% of 80
        monkeypatch.setattr(engine, "fuzzing", lambda **_: without_local_constants())  # the control: span mutations on
        mutated = _dimension_sets(tmp_path, monkeypatch, family, seed=1)
        assert repeats(mutated) > 0.4 and len(set(fresh)) > 1.5 * len(set(mutated)), (len(set(fresh)),
                                                                                     len(set(mutated)))


def test_an_exception_of_the_harness_is_a_finding_and_the_run_goes_on(tmp_path, monkeypatch):
    """An exception the harness itself raises while running or judging a case (a trace the oracle cannot
    assemble ended a whole 10-minute run) is that case's verdict: an error of role ``harness``, shrunk and written
    to the corpus, named as parityfuzz's own defect, and the run draws on."""
    from parityfuzz.engine import fuzzer as engine
    from parityfuzz.judge.verdict import HARNESS, PASS

    judged = []

    def verify(case, executor, timeout=None, known=None):
        judged.append(case)
        if case.world_size == 4:
            raise ValueError("a local piece does not fit its region")
        return Verdict(PASS)

    monkeypatch.setattr(engine, "verify_case", verify)
    pools = type("Pools", (), {"pool": lambda self, ws: None})()
    options = FuzzOptions(corpus_dir=tmp_path, seed=1, max_cases=40, max_shrink_runs=20, stop_after=0)
    stats = Fuzzer(options, pools, log=lambda *_: None).fuzz("fsdp2", cases(world_sizes=(2, 4)), budget_s=BUDGET_S)
    assert stats.failures
    for failure in stats.failures:  # (a later round may meet it again where its shrunk case sets no precondition)
        rank, = failure.verdict.ranks
        assert failure.verdict.kind == "error" and rank["role"] == HARNESS and rank["type"] == "ValueError"
        assert "not by torch" in failure.verdict.describe() and "Traceback" in rank["traceback"]
        assert failure.corpus_path is not None and corpus.load(failure.corpus_path).case.world_size == 4
    assert stats.verdicts["pass"] > 0 and len(judged) >= 40  # (the run went on after it)
