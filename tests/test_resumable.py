"""A round paused between a schedule's slices (parityfuzz.engine.resumable): it goes on where it stopped, drawing
exactly what it would have drawn uncut; its executor calls run on the driver; an interrupt reaches it and it
records what it found before the driver raises it; an ended round leaves no thread."""

import threading
import time

import pytest

from parityfuzz.engine import Fuzzer, FuzzOptions
from parityfuzz.engine import fuzzer as engine
from parityfuzz.engine.fuzzer import TargetRun
from parityfuzz.engine.resumable import RoundEnded, RoundThread
from parityfuzz.judge.verdict import PASS, Verdict
from parityfuzz.strategies import cases


def round_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("parityfuzz round")]


class _Pools:
    """The executor as the fuzz loop sees it here: which threads called it."""

    def __init__(self):
        self.callers = set()

    def pool(self, world_size):
        self.callers.add(threading.get_ident())


@pytest.fixture
def drawn(monkeypatch):
    """The case ids the fuzz loop runs, in order (each 'run' takes 10 ms and passes)."""
    ids = []

    def judge(self, case, timeout):
        ids.append(case.case_id())
        time.sleep(0.01)
        return Verdict(PASS)

    monkeypatch.setattr(engine.Fuzzer, "_run", judge)
    return ids


def sliced_run(tmp_path, pausable: bool, slices: int, slice_s: float = 0.4):
    pools = _Pools()
    fuzzer = Fuzzer(FuzzOptions(corpus_dir=tmp_path, seed=5), pools, log=lambda *_: None)
    run = fuzzer.start("fsdp2", cases(world_sizes=(2,)))
    run.pausable = pausable
    began = time.monotonic()
    for _ in range(slices):
        run.run(slice_s)
        time.sleep(0.3)  # the driver busy elsewhere: other targets' slices
    wall = time.monotonic() - began
    return run, pools, wall


def test_a_round_paused_between_slices_draws_what_it_would_have_drawn_uncut(tmp_path, drawn):
    """Four slices of one round give the very cases the round gives in one go (a control: without pausing, each
    slice starts a fresh round, and the cases differ); the seconds waited paused are charged to nothing; the
    executor is only called from the driver; finishing leaves no thread behind."""
    run, pools, wall = sliced_run(tmp_path, pausable=True, slices=4)
    sliced = list(drawn)
    assert run.rounds == 1 and 4 < len(sliced) < engine.ROUND_CASES, len(sliced)
    assert pools.callers == {threading.get_ident()}
    assert run.stats.generate_seconds < 4 * 0.4 + 0.5 < wall, (run.stats.generate_seconds, wall)
    assert run.paused is not None and len(round_threads()) == 1
    run.finish()
    assert run.paused is None and not round_threads() and run.stats.cases == len(sliced)

    drawn.clear()
    fuzzer = Fuzzer(FuzzOptions(corpus_dir=tmp_path, seed=5, max_cases=len(sliced)), _Pools(), log=lambda *_: None)
    fuzzer.fuzz("fsdp2", cases(world_sizes=(2,)), budget_s=600)
    assert drawn == sliced

    drawn.clear()
    control, _, _ = sliced_run(tmp_path, pausable=False, slices=4)
    control.finish()
    assert control.rounds == 4 and drawn[:len(sliced)] != sliced


def test_closing_a_paused_round_ends_its_thread_and_charges_no_more_time(tmp_path, drawn):
    run, _, _ = sliced_run(tmp_path, pausable=True, slices=1)
    generated = run.stats.generate_seconds
    time.sleep(0.5)
    run.close()
    assert not round_threads() and run.stats.generate_seconds == pytest.approx(generated, abs=0.05)
    assert not run.stats.failures


def test_pause_returns_what_resume_gives_and_end_raises_in_the_round():
    seen = []

    def body():
        seen.append(thread.pause())
        seen.append(thread.pause())
        try:
            thread.pause()
        except RoundEnded:
            return "ended"

    thread = RoundThread(body, "t")
    assert thread.resume() == ("paused", None)
    assert thread.resume("a") == ("paused", None)
    assert thread.resume("b") == ("paused", None)
    assert thread.end() == ("done", "ended") and seen == ["a", "b"] and not round_threads()


def test_a_calls_exception_is_raised_in_the_round_and_the_rounds_on_the_driver():
    def body():
        with pytest.raises(ValueError, match="on the driver"):
            thread.call(lambda: (_ for _ in ()).throw(ValueError(f"on the driver {threading.get_ident()}")))
        return thread.call(threading.get_ident)

    thread = RoundThread(body, "t")
    assert thread.resume() == ("done", threading.get_ident())

    thread = RoundThread(lambda: 1 / 0, "t")
    with pytest.raises(ZeroDivisionError):
        thread.resume()


def test_an_interrupt_in_an_executor_call_reaches_the_round_which_records_then_the_driver_raises_it():
    """Ctrl-C lands on the driver, inside the executor call the round waits for: the round gets the
    KeyboardInterrupt from that call, records what it found (a later call on the driver still runs: locating the
    mismatch), then the driver raises the interrupt."""
    flagged, record = [], []

    def interrupted():
        raise KeyboardInterrupt("signal 2")

    def body():
        try:
            thread.call(interrupted)
        except KeyboardInterrupt:
            record.append(thread.call(lambda: "located"))
            raise

    thread = RoundThread(body, "t", on_interrupt=lambda: flagged.append(1))
    with pytest.raises(KeyboardInterrupt):
        thread.resume()
    assert record == ["located"] and flagged and not round_threads()


def test_a_round_that_pauses_after_an_interrupt_is_stopped_not_paused():
    """An interrupt that lands on the driver while the round draws (between executor calls) is not lost if the
    round then reaches the end of its slice: its pause raises the interrupt."""
    def body():
        try:
            thread.call(interrupted)
        except KeyboardInterrupt:
            pass  # as if swallowed, e.g. in a finalizer
        thread.pause()

    def interrupted():
        raise KeyboardInterrupt("signal 15")

    thread = RoundThread(body, "t")
    with pytest.raises(KeyboardInterrupt):
        thread.resume()
    assert not round_threads()


def test_a_target_run_not_paused_is_what_it_was(tmp_path, drawn):
    """The even schedule and a lone target: rounds end with their slice, as before (no thread)."""
    fuzzer = Fuzzer(FuzzOptions(corpus_dir=tmp_path, seed=5, max_cases=30), _Pools(), log=lambda *_: None)
    run = fuzzer.start("fsdp2", cases(world_sizes=(2,)))
    assert isinstance(run, TargetRun) and not run.pausable
    run.run(600)
    assert not round_threads() and run.paused is None and len(drawn) == 30


@pytest.mark.parametrize("pausable", [True, False])
def test_a_slice_runs_its_minimum_of_cases_whatever_its_seconds(tmp_path, drawn, pausable):
    """A schedule's first slice of a target runs a few cases however short its seconds (one slow first case is no
    estimate of a yield); later slices keep to their seconds."""
    fuzzer = Fuzzer(FuzzOptions(corpus_dir=tmp_path, seed=5), _Pools(), log=lambda *_: None)
    run = fuzzer.start("fsdp2", cases(world_sizes=(2,)))
    run.pausable = pausable
    run.run(0.001, min_cases=5)
    assert len(drawn) == 5 and run.stats.cases == 5
    run.run(0.001)
    assert len(drawn) <= 7
    run.finish()
    assert not round_threads()


def test_rounds_waiting_in_threads_leave_the_constant_pool_as_they_found_it_in_any_order():
    """Each round empties Hypothesis's pool of the loaded modules' constants (parityfuzz.engine.generation) for as
    long as it runs; paused rounds leave in whatever order the schedule ends them, and the pool comes back only
    when the last has left."""
    import contextlib

    from parityfuzz.engine.generation import without_local_constants

    from hypothesis.internal.conjecture import providers  # (the pinned Hypothesis has the pool)

    original = providers._get_local_constants
    first, second = contextlib.ExitStack(), contextlib.ExitStack()
    first.enter_context(without_local_constants())
    emptied = providers._get_local_constants
    assert emptied is not original
    second.enter_context(without_local_constants())
    first.close()  # the first round ends before the second
    assert providers._get_local_constants is emptied
    second.close()
    assert providers._get_local_constants is original
