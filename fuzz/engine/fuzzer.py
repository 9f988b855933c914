"""The fuzz loop: Hypothesis draws cases until the budget is spent, shrinks failures, records them.

Hypothesis has no wall-clock budget, so the property itself keeps time:

- while no failure is known, a draw after the generation deadline stops the run
  (a skip exception, which Hypothesis re-raises at once without shrinking);
- once a failure is known, Hypothesis shrinks it; each shrink step runs a real
  case until the shrink deadline, after which untried cases count as passing so
  the shrinker ends quickly with the smallest failure found so far;
- every executed case's verdict is cached by its JSON, so Hypothesis's replays
  cost nothing and always see the same answer (no flakiness from the clock);
- while a HANG shrinks, each candidate gets a short timeout (a few times the
  slowest passing case), not the full per-case timeout;
- a shrink may slip from the failure first found to another one (a smaller case
  failing some other way): the round's first failing case is then recorded too,
  so a finding is never traded for another;
- after Hypothesis's shrink, each failure is reduced to a 1-minimal case
  (:mod:`parityfuzz.engine.reduce`: every single simplification tried on the case
  itself) within its own budget, before it is recorded;
- a slice of a target's run (:class:`TargetRun`; a schedule gives targets slices:
  :mod:`parityfuzz.engine.schedule`) has a wall-clock deadline
  (:meth:`FuzzOptions.deadline_s`: its generation seconds plus one shrink and one
  reduction): however many failures it finds, shrinking and reducing stop there and
  what was found is recorded as it is; under an adaptive schedule a round cut by
  the end of a slice waits for the target's next one instead of ending
  (:mod:`parityfuzz.engine.resumable`);
- Ctrl-C or SIGTERM during the run still records the smallest failure seen so
  far (marked as interrupted) before the interrupt propagates.

What a run counts is :mod:`parityfuzz.engine.stats`; how soak rounds skip failures already found is
:mod:`parityfuzz.engine.soak`; failures as exceptions and records are :mod:`parityfuzz.engine.outcomes`.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import unittest
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hypothesis import HealthCheck, Phase, event, given, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from parityfuzz.case import Case
from parityfuzz.case.mesh import DEFAULT_WORLD_SIZES
from parityfuzz.engine.generation import fuzzing
from parityfuzz.engine import resumable
from parityfuzz.engine.database import open_database
from parityfuzz.engine.outcomes import FAILURE_TYPES, CaseFailed, Failure, case_failures
from parityfuzz.engine.reduce import Reduction, reduce_failure
from parityfuzz.engine.schedule import NEAR_MISS
from parityfuzz.engine.soak import precondition, remember, simplest_features
from parityfuzz.engine.stats import TargetStats
from parityfuzz.engine.throttle import Throttle
from parityfuzz.executor import Executor, default_timeout
from parityfuzz.judge.verdict import PASS, Verdict, harness_error
from parityfuzz.judge.verify import locate, verify_case
from parityfuzz.triage import IN_CORPUS, Explanation, Found, corpus, explain
from parityfuzz.triage.known import known_bug


#: Set by the plugin's SIGINT/SIGTERM handler.  A KeyboardInterrupt that lands while Python runs a finalizer
#: (``__del__``, a weakref callback) is only printed, never raised; the property checks this flag before
#: every case, so such an interrupt still stops the run at the next case instead of being lost.
interrupt_requested = threading.Event()


class _BudgetSpent(unittest.SkipTest):
    """Stops generation; Hypothesis re-raises skips without shrinking."""


@dataclass
class FuzzOptions:
    budget_s: float = 30.0
    shrink_budget_s: float = 300.0
    corpus_dir: Path = Path("corpus")
    world_sizes: tuple[int, ...] = DEFAULT_WORLD_SIZES
    seed: int | None = None
    case_timeout_s: float | None = None
    progress_every_s: float = 10.0
    #: Stop generating after this many cases per target, and shrinking after this many runs per failure,
    #: whatever the clock says: a run bounded by these is the same on a loaded machine (tests use them).
    max_cases: int | None = None
    max_shrink_runs: int | None = None
    #: Floor of the per-candidate timeout while shrinking a HANG.
    hang_shrink_timeout_s: float = 5.0
    #: The reduction to a 1-minimal case after Hypothesis's shrink: seconds and runs per failure (0: none).
    reduce_budget_s: float = 120.0
    max_reduce_runs: int | None = None
    #: Say where each recorded mismatch begins (:func:`parityfuzz.judge.verify.locate`: one probed re-run per failure).
    locate: bool = True
    #: Hypothesis's example database shared with other fuzzers (:mod:`parityfuzz.engine.database`): a directory
    #: or a ``redis://`` URL; "" for none.
    database: str = ""
    #: Stop a target after this many distinct failures (pytest's ``-x`` / ``--maxfail=N``); 0 goes on for the whole
    #: budget, failures already found in this run counting as passing.
    stop_after: int = 0

    def deadline_s(self, budget_s: float) -> float:
        """Wall-clock seconds a target given ``budget_s`` of generation may take: the budget plus one shrink and one
        reduction.  Later failures shrink in what is left of that; a runner's own timeout (the plugin's
        pytest-timeout) leaves a margin beyond it for the case running then and for recording."""
        return budget_s + self.shrink_budget_s + self.reduce_budget_s


#: Cases Hypothesis draws in one round at most.  Within a budget this small Hypothesis runs one targeting pass
#: (hill-climbing on :attr:`Verdict.closeness` from the round's closest case) halfway through the round; with
#: an unbounded round it interleaves passes for as long as they improve the score, which on noisy closeness
#: took over a 20-minute run (92% of its cases were neighbours of one world-size-3 case).  Only a near miss
#: (:data:`NEAR_MISS`) reports a score: a round that met none has nothing to climb and draws what the strategies
#: draw to its end.  (Scored on every case, the pass climbed from whatever came closest and spent half of each
#: round on the neighbours of one case: their swarm configuration, so the training-loop dimensions that case had
#: switched off fell to a few percent of a target's cases.)
ROUND_CASES = 250


def hypothesis_settings(database=None) -> settings:
    """The current Hypothesis profile (its verbosity, ``report_multiple_bugs``, ...), opened up for budgeted
    fuzzing in rounds of :data:`ROUND_CASES`; with a shared ``database`` each round first replays what it holds.
    (With ``report_multiple_bugs=False``, the default profiles', Hypothesis reports the smallest failure of a round
    alone; the round's first failing case is recorded too where it fails another way: :func:`_with_first`.  With
    True, Hypothesis goes on generating for a while after a failure, cases this loop counts as shrink runs.)"""
    parent = settings()
    return settings(
        parent,
        max_examples=ROUND_CASES,
        deadline=None,
        database=database,
        derandomize=False,
        phases=((Phase.reuse,) if database is not None else ()) + (Phase.explicit, Phase.generate, Phase.target,
                                                                   Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )


class Fuzzer:
    """Fuzzes targets on one executor, writing shrunk failures to the corpus."""

    def __init__(self, options: FuzzOptions, executor: Executor, log: Callable[[str], None] = print,
                 dimensions: Callable[[str], dict] | None = None):
        self.options = options
        #: ``target name -> {dimension: "" where it draws it, else why not}`` (the frontend's
        #: :func:`parityfuzz.frontends.targets.dimensions`): what each target's coverage of the table is read against.
        self.dimensions = dimensions
        #: (a round paused between slices runs in a thread of its own; its executor calls run on the driver)
        self.executor = resumable.OnDriver(executor)
        self.log = log
        self.seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**32)
        self.targets: dict[str, TargetStats] = {}
        #: Where the targets were run by one schedule (:func:`parityfuzz.engine.schedule.run_schedule`): it.
        self.schedule = None
        self.started = time.monotonic()  # the timeline's zero
        self.database = open_database(options.database) if options.database else None

    def fuzz(self, name: str, strategy: st.SearchStrategy[Case], budget_s: float) -> TargetStats:
        """Fuzz one target for ``budget_s`` seconds of generation, in one slice (:class:`TargetRun`)."""
        run = self.start(name, strategy)
        run.run(budget_s)
        return run.finish()

    def start(self, name: str, strategy: st.SearchStrategy[Case]) -> "TargetRun":
        """A target's run, to be given slices of generation time (:meth:`TargetRun.run`) by a schedule
        (:mod:`parityfuzz.engine.schedule`), then :meth:`TargetRun.finish`-ed."""
        try:
            support = self.dimensions(name) if self.dimensions is not None else {}
        except KeyError:  # a target of the user's own: its dimensions are counted, not read against a table
            support = {}
        self.targets[name] = TargetStats(name, support=support)
        return TargetRun(self, name, strategy)

    def _round(self, name: str, strategy: st.SearchStrategy[Case], stats: TargetStats, cache: dict[str, Verdict],
               found_before: list[Found], budget_s: float, seed: int,
               deadline: float = float("inf"), throttle: Throttle | None = None,
               cases_floor: int = 0) -> tuple[list[Failure], bool]:
        """One Hypothesis run; returns the failures it found and recorded, and whether it ended by drawing all
        its cases.  Nothing new starts after ``deadline`` (the target's, :meth:`FuzzOptions.deadline_s`); generation
        goes on past ``budget_s`` until the target has run ``cases_floor`` cases in all.  Until a
        failure is found, a case meeting the precondition of a known bug ``throttle`` has seen often may be skipped
        (:mod:`parityfuzz.engine.throttle`)."""
        throttle = throttle if throttle is not None else Throttle()
        opts = self.options
        start = time.monotonic()
        clock = _Clock(start, min(start + budget_s, deadline), deadline, start, cases_floor=cases_floor)
        found: dict = {}  # "at": first failure time, "cases": cases this round ran until then, "kind"
        best: dict = {}  # the latest (so smallest) failing case, kept if the run is interrupted
        cases_before, shrink_runs_before = stats.cases, stats.shrink_runs
        slowest_pass = [0.0]
        last_progress = [start]

        def prop(case: Case) -> None:
            if interrupt_requested.is_set():
                raise KeyboardInterrupt("interrupted (an earlier interrupt was swallowed on its way)")
            key = case.to_json()
            verdict = cache.get(key)
            if verdict is None:
                now = time.monotonic()
                if not found and ((now >= clock.gen_deadline and (stats.cases >= clock.cases_floor
                                                                  or now >= clock.deadline))
                                  or _reached(stats.cases, opts.max_cases)):
                    self._pause_or_stop(clock, stats, _reached(stats.cases, opts.max_cases))
                    now = time.monotonic()
                if found and (now >= found["shrink_until"]
                              or _reached(stats.shrink_runs - shrink_runs_before, opts.max_shrink_runs)):
                    found["spent"] = True  # Hypothesis's shrinker stops after this call (generation.fuzzing)
                    return  # shrink budget spent: untried cases count as passing
                skipped_for = "" if found else throttle.skip(case)
                if skipped_for:
                    stats.throttled[skipped_for] += 1
                    return  # a known bug met often: counts as passing, not run
                timeout = opts.case_timeout_s
                if found.get("kind") == "hang":
                    timeout = max(opts.hang_shrink_timeout_s, 3 * slowest_pass[0])
                elif not found:
                    timeout = throttle.hang_timeout(case, timeout or default_timeout(case), slowest_pass[0])
                self.executor.pool(case.world_size)  # (re)start the pool outside the timed part
                began = time.monotonic()
                verdict, why = self._explained(case, cache.setdefault(key, self._run(case, timeout)), found_before)
                took = time.monotonic() - began
                throttle.note(why, took)
                if verdict.ok:
                    slowest_pass[0] = max(slowest_pass[0], took)
                else:
                    best.update(case=case, verdict=verdict)
                stats.count(case, verdict, time.monotonic() - self.started, why, took, shrinking=bool(found))
                if found:
                    stats.shrink_runs += 1
                if not verdict.ok and not found:
                    at = time.monotonic()
                    found.update(at=at, cases=stats.cases - cases_before, kind=verdict.kind,
                                 first=CaseFailed(case, verdict),
                                 shrink_until=min(at + opts.shrink_budget_s, clock.deadline))
                    self.log(f"{name}: {verdict.kind} found after {found['cases']} cases "
                             f"({clock.since_start(at):.1f}s); shrinking (up to {found['shrink_until'] - at:.0f}s)")
                if time.monotonic() - last_progress[0] >= opts.progress_every_s:
                    last_progress[0] = time.monotonic()
                    phase = "shrinking" if found else f"{max(0.0, clock.gen_deadline - last_progress[0]):.0f}s left"
                    self.log(f"{name}: {stats.cases} cases, {dict(stats.verdicts)} ({phase})")
            else:  # cached: the verdict of an earlier round may be a failure found since
                verdict, _ = self._explained(case, verdict, found_before)
            for tag in sorted(case.features() | frozenset(verdict.tags)):
                event(tag)
            event(f"verdict={verdict.kind}")
            if verdict.closeness >= NEAR_MISS:  # worth exploring around: the round's targeting pass climbs from it
                target(min(verdict.closeness, 1e3), label="closeness to the tolerance")
            if not verdict.ok:
                raise FAILURE_TYPES[verdict.kind](case, verdict)

        prop._hypothesis_internal_add_digest = f"parityfuzz target {name}".encode()  # its own database key
        # The seed first: Hypothesis's @seed turns the database off, and our settings, applied over it, turn the
        # shared one back on (a seeded run then also replays what the other fuzzers found).
        test = hypothesis_settings(self.database)(hypothesis_seed(seed)(given(strategy)(prop)))
        failures: list[CaseFailed] = []
        exhausted = False
        try:
            with fuzzing(shrink_spent=lambda: found.get("spent", False)):
                test()
            exhausted = True
        except _BudgetSpent:
            pass
        except KeyboardInterrupt:
            self._record(name, stats, clock, found, stats.shrink_runs - shrink_runs_before, seed,
                         _with_first([CaseFailed(best["case"], best["verdict"])] if best else [], found),
                         interrupted=True)
            self.log(stats.summary_line() + " (interrupted)")
            raise
        except BaseException as e:  # noqa: BLE001 - sorted below
            failures = case_failures(e)
            if not failures:
                raise
            failures = _with_first(failures, found)
        shrink_runs = stats.shrink_runs - shrink_runs_before
        shrunk = time.monotonic()
        reductions = []
        for f in failures:
            timeout = max(opts.hang_shrink_timeout_s, 3 * slowest_pass[0]) if f.verdict.kind == "hang" \
                else opts.case_timeout_s  # a hang's candidates get the short timeout, as while it shrank
            reductions.append(self._reduce(name, f, stats, cache, found_before, timeout,
                                           min(opts.reduce_budget_s, clock.deadline - time.monotonic())))
            if reductions[-1] is not None and reductions[-1].interrupted:
                break  # what was reduced so far is recorded, then the interrupt goes on
        recorded = self._record(name, stats, clock, found, shrink_runs, seed, failures, reductions=reductions,
                                shrunk=shrunk)
        if any(r is not None and r.interrupted for r in reductions):
            self.log(stats.summary_line() + " (interrupted)")
            raise KeyboardInterrupt("interrupted while reducing")
        return recorded, exhausted

    @staticmethod
    def _pause_or_stop(clock: "_Clock", stats: TargetStats, reached_max_cases: bool) -> None:
        """The round's generation time is spent: stop it (:class:`_BudgetSpent`), or, where it runs in a thread a
        schedule resumes (:mod:`parityfuzz.engine.resumable`), wait there for the target's next slice; the seconds
        generated so far are charged to the target first, the seconds waited never."""
        thread = resumable.current()
        if thread is None or reached_max_cases:
            event("not run: budget spent")
            raise _BudgetSpent()
        paused = time.monotonic()
        stats.generate_seconds += paused - clock.segment
        clock.segment = paused
        try:
            seconds, clock.deadline, clock.cases_floor = thread.pause()
        except resumable.RoundEnded:
            clock.segment = time.monotonic()
            event("not run: budget spent")
            raise _BudgetSpent() from None
        resumed = time.monotonic()
        clock.paused += resumed - paused
        clock.segment = resumed
        clock.gen_deadline = min(resumed + seconds, clock.deadline)
        if interrupt_requested.is_set():
            raise KeyboardInterrupt("interrupted while the round waited for its next slice")

    def _reduce(self, name: str, failure: CaseFailed, stats: TargetStats, cache: dict[str, Verdict],
                found_before: list[Found], timeout: float | None, budget_s: float) -> Reduction | None:
        """The failure reduced to a 1-minimal case within ``budget_s`` (None where the options turn the reduction
        off, or where the target's deadline left no time for it)."""
        opts = self.options
        if opts.reduce_budget_s <= 0 or opts.max_reduce_runs == 0:
            return None
        if budget_s <= 0:
            self.log(f"{name}: the target's deadline leaves no time to reduce the {failure.verdict.kind}: "
                     "recording it as shrunk")
            return None

        def judge(case: Case) -> Verdict:
            if interrupt_requested.is_set():
                raise KeyboardInterrupt("interrupted while reducing")
            key = case.to_json()
            if key not in cache:
                self.executor.pool(case.world_size)
                cache[key] = self._run(case, timeout)
            return self._explained(case, cache[key], found_before)[0]

        self.log(f"{name}: reducing the shrunk {failure.verdict.kind} to a 1-minimal case (up to {budget_s:.0f}s)")
        out = reduce_failure(failure.case, failure.verdict, judge, budget_s, opts.max_reduce_runs)
        stats.reduce_runs += out.runs
        stats.reduce_seconds += out.seconds
        self.log(f"{name}: {len(out.steps)} simplifications in {out.runs} runs ({out.seconds:.1f}s)"
                 + ("; 1-minimal" if out.minimal else "; budget spent before it was 1-minimal"))
        return out

    def _run(self, case: Case, timeout: float | None) -> Verdict:
        """Run and check a case: its verdict as the oracle gave it (what explains a failure is asked apart), the
        noise of a mismatch that a known bug's record explains left unmeasured (:func:`verify_case`: such a case
        counts as passing whatever the noise).  An exception of the harness's own is the case's verdict
        (:func:`harness_error`), not the end of every target's run: a 10-minute run ended when the oracle could not
        assemble a malformed DTensor."""
        try:
            return verify_case(case, self.executor, timeout,
                               known=lambda verdict: known_bug(case, verdict) is not None)
        except Exception as e:  # (KeyboardInterrupt and SystemExit pass)
            return harness_error(e)

    @staticmethod
    def _explained(case: Case, verdict: Verdict,
                   found_before: list[Found]) -> tuple[Verdict, Explanation | None]:
        """The verdict the search sees, and what explains a failure (:func:`parityfuzz.triage.explain`): a
        failure that is a known torch bug, or one this run already found, counts as passing."""
        if verdict.ok:
            return verdict, None
        why = explain(case, verdict, found_before)
        return (Verdict(PASS) if why.silences else verdict), why

    def _record(self, name: str, stats: TargetStats, clock: "_Clock", found: dict, shrink_runs: int, seed: int,
                failures: list[CaseFailed], interrupted: bool = False, reductions: list[Reduction | None] = (),
                shrunk: float | None = None) -> list[Failure]:
        """Account a round's time and write its failures (reduced, where they were) to the corpus."""
        end = shrunk if shrunk is not None else time.monotonic()
        if found:
            stats.generate_seconds += found["at"] - clock.segment
            stats.shrink_seconds += end - found["at"]
        else:
            stats.generate_seconds += end - clock.segment
        note = f"found by parityfuzz (target {name}, fuzz seed {self.seed}, round seed {seed}); triage me"
        if interrupted:
            note += "; the run was interrupted while shrinking, so this case may not be minimal"
        recorded = []
        for f, r in itertools.zip_longest(failures, reductions):
            if r is not None:
                f = CaseFailed(r.case, r.verdict)
            if not interrupted:  # (an interrupt runs no more cases)
                f = self._confirm_hang(name, f, found.get("first"))
            f = CaseFailed(f.case, self._locate(name, f))
            why = explain(f.case, f.verdict, corpus_dir=self.options.corpus_dir)
            duplicate = why.kind == IN_CORPUS  # the very same case is a corpus file already: not written twice
            path = why.corpus_file if duplicate else corpus.record(self.options.corpus_dir, f.case, f.verdict,
                                                                   expect="fail", note=note)
            recorded.append(Failure(
                target=name, case=f.case, verdict=f.verdict, corpus_path=path,
                cases_to_find=found.get("cases", 0), seconds_to_find=clock.since_start(found.get("at", end)),
                shrink_runs=shrink_runs, shrink_seconds=end - found.get("at", end),
                duplicate_of=why.corpus_file if duplicate else None, known_issue=why.known_issue,
                interrupted=interrupted,
                reduction=r, found_at=found.get("at", end) - self.started))
        stats.failures.extend(recorded)
        return recorded

    def _confirm_hang(self, name: str, failure: CaseFailed, first: CaseFailed | None) -> CaseFailed:
        """A hang is shrunk under a short timeout (a few times the slowest passing case), so a shrunk "hang" may
        only be slow: it is recorded only if it hangs again under the full case timeout; otherwise the case as
        first found (which hung under that timeout) is recorded instead."""
        if failure.verdict.kind != "hang" or first is None or first.case == failure.case:
            return failure
        again = self._run(failure.case, self.options.case_timeout_s)
        if again.kind == "hang":
            return failure
        self.log(f"{name}: the shrunk hang ends under the full case timeout ({again.kind}): recording the case "
                 "as found instead")
        return first

    def _locate(self, name: str, failure: CaseFailed) -> Verdict:
        """The failure's verdict with where its mismatch begins (:func:`parityfuzz.judge.verify.locate`); as it was where
        locating fails (the failure is recorded all the same)."""
        if failure.verdict.kind != "mismatch" or not self.options.locate:
            return failure.verdict
        try:
            verdict = locate(failure.case, self.executor, failure.verdict)
        except Exception as e:  # noqa: BLE001 - a failure is never lost to its diagnosis
            self.log(f"{name}: could not locate where the mismatch begins: {type(e).__name__}: {e}")
            return failure.verdict
        if verdict.origin is not None:
            self.log(f"{name}: the mismatch {verdict.origin.describe()}")
        return verdict

    def report(self) -> dict:
        import torch

        from parityfuzz import __version__

        targets = {n: s.to_dict() for n, s in self.targets.items()}
        verdicts: Counter = Counter()
        for s in self.targets.values():
            verdicts.update(s.verdicts)
        return {
            "parityfuzz_version": __version__,
            "torch_version": torch.__version__,
            "fuzz_seed": self.seed,
            "budget_seconds": self.options.budget_s,
            "world_sizes": list(self.options.world_sizes),
            "cases_run": sum(s.cases for s in self.targets.values()),
            "generate_seconds": round(sum(s.generate_seconds for s in self.targets.values()), 2),
            "shrink_seconds": round(sum(s.shrink_seconds for s in self.targets.values()), 2),
            "verdicts": dict(verdicts),
            "targets": targets,
            "failures": [f for t in targets.values() for f in t["failures"]],
            **({"schedule": self.schedule.to_dict()} if self.schedule is not None else {}),
        }


class TargetRun:
    """One target's run, resumable: each :meth:`run` is a slice of generation time.

    A round is one Hypothesis run: it draws up to :data:`ROUND_CASES` cases until a failure is found (then shrinks
    it) or its generation time is spent.  Another round follows, with a fresh seed derived from the fuzz seed
    and the round's number, until the slice is spent, unless ``options.stop_after`` distinct failures were found
    (``-x``: the first).  In later rounds a failing case counts as passing
    ("already found in this run") when it fails the same way (:meth:`Verdict.bug_signature`) as an earlier shrunk
    failure and has every feature that failure's case has beyond the simplest case's (its :func:`precondition`,
    never empty): the same bug seen again, under another tensor name or step.  So each round looks for, and
    shrinks toward, a failure that needs something else, and one finding (a false alarm among them) never hides
    the next.  What the run has met (the verdict cache, failures found, known bugs met often: :class:`Throttle`)
    carries over from slice to slice.

    With ``pausable`` (a schedule that gives the target many slices), a round cut by the end of a slice waits, in
    a thread of its own (:mod:`parityfuzz.engine.resumable`), and the next slice goes on with it where it stopped:
    slicing then costs the search nothing (a fresh round would start again from small examples, and a round
    cut at every slice would never reach its targeting phase).  Without, a later slice starts the next round.

    The run, in one slice or many, ends by :meth:`FuzzOptions.deadline_s` of its generation seconds whatever it
    finds (what its slices took beyond generation counts against the one shrink and one reduction): shrinks and
    reductions are cut to what is left of it, and no round starts after it.  :meth:`finish` ends a paused round.
    """

    def __init__(self, fuzzer: Fuzzer, name: str, strategy: st.SearchStrategy[Case]):
        self.fuzzer = fuzzer
        self.name = name
        self.strategy = strategy
        #: Whether a round cut by a slice's end waits for the next slice (set by the schedule).
        self.pausable = False
        self.stats = fuzzer.targets[name]
        self.throttle = Throttle()
        self.cache: dict[str, Verdict] = {}
        self.found_before: list[Found] = []
        self.baseline = None  # the simplest case's features, drawn once a failure needs a precondition
        self.rounds = 0
        #: Seconds the run's slices took beyond their generation (shrinking, reducing, recording).
        self.beyond_generation = 0.0
        #: The round waiting for the next slice, if any.
        self.paused: resumable.RoundThread | None = None

    @property
    def done(self) -> bool:
        """Whether the run has nothing more to do whatever time it is given: ``--fuzz-max-cases`` reached, or
        ``stop_after`` distinct failures found."""
        opts = self.fuzzer.options
        return _reached(self.stats.cases, opts.max_cases) or bool(
            opts.stop_after and len(self.stats.failures) >= opts.stop_after)

    def run(self, seconds: float, deadline: float = float("inf"), min_cases: int = 0) -> None:
        """Fuzz for ``seconds`` more of generation, and for at least ``min_cases`` more cases (a schedule's first
        slice of a target: its yield estimate needs a few).  The slice ends by those seconds plus what is left of
        the run's one shrink and one reduction (:meth:`FuzzOptions.deadline_s`: a run given its whole budget in one
        slice, or in many, takes at most as long), or by ``deadline`` (:func:`time.monotonic`) if that comes
        first."""
        stats, opts = self.stats, self.fuzzer.options
        began, generated = time.monotonic(), stats.generate_seconds
        beyond = max(0.0, opts.deadline_s(0.0) - self.beyond_generation)
        deadline = min(deadline, began + seconds + beyond)
        try:
            self._rounds(seconds, deadline, stats.cases + min_cases)
        finally:
            self.beyond_generation += max(0.0, time.monotonic() - began - (stats.generate_seconds - generated))

    def _rounds(self, seconds: float, deadline: float, cases_floor: int) -> None:
        fuzzer, stats = self.fuzzer, self.stats
        until = stats.generate_seconds + seconds
        while not self.done:
            if self.paused is not None:
                outcome = self._go_on(self.paused, (until - stats.generate_seconds, deadline, cases_floor))
            else:
                outcome = self._new_round(until - stats.generate_seconds, deadline, cases_floor)
            if outcome is None:
                return  # paused at the end of the slice: the next slice goes on with it
            failures, exhausted = outcome
            if failures and self.baseline is None:
                self.baseline = simplest_features(self.strategy)
            for f in failures:
                self.found_before = remember(self.found_before, Found(precondition(f.case, self.baseline),
                                                                      f.verdict.bug_signature(), str(f.corpus_path)))
            more = stats.generate_seconds < until or stats.cases < cases_floor
            if more and time.monotonic() >= deadline:
                fuzzer.log(f"{self.name}: the run's deadline (its generation, one shrink and one reduction) is "
                           "reached: no further round")
                more = False
            if not (more and (failures or exhausted)):
                break

    def _new_round(self, budget_s: float, deadline: float, cases_floor: int) -> tuple[list[Failure], bool] | None:
        """Start the next round with ``budget_s`` of generation: its failures and whether it drew all its cases,
        or None where it paused."""
        fuzzer = self.fuzzer
        number = self.rounds
        self.rounds += 1
        seed = fuzzer.seed if number == 0 else random.Random(f"{fuzzer.seed}:{number}").randrange(2**32)
        if number and self.found_before:
            fuzzer.log(f"{self.name}: round {number + 1} (seed {seed}), {budget_s:.0f}s of generation left; "
                       "failures already found count as passing")

        def body():
            return fuzzer._round(self.name, self.strategy, self.stats, self.cache, self.found_before, budget_s, seed,
                                 deadline, self.throttle, cases_floor)

        if not self.pausable:
            return body()
        return self._go_on(resumable.RoundThread(body, self.name, on_interrupt=interrupt_requested.set))

    def _go_on(self, thread: resumable.RoundThread, value=None, end: bool = False):
        """Let a round thread run (resumed with ``value``, or ended: ``end``) until it pauses (None: it is kept
        for the next slice) or ends (its outcome)."""
        self.paused = None
        kind, outcome = thread.end() if end else thread.resume(value)
        if kind == "paused":
            self.paused = thread
            return None
        return outcome

    def close(self) -> None:
        """End a paused round (its generation time was charged already; it found nothing, or it would not have
        paused)."""
        if self.paused is not None:
            self._go_on(self.paused, end=True)

    def finish(self) -> TargetStats:
        """End the run (:meth:`close`) and log its summary."""
        self.close()
        self.fuzzer.log(self.stats.summary_line())
        return self.stats


@dataclass
class _Clock:
    """A round's time.  Its generation seconds are charged to its target as they pass (at each pause, and when it
    ends: :meth:`Fuzzer._record`); the seconds it waits paused between slices are charged to nothing."""

    start: float
    #: When generation stops (or pauses), and when the target's run must end (its slice's deadline).
    gen_deadline: float
    deadline: float
    #: When the stretch of running since the round's start or its last pause began.
    segment: float
    #: Seconds waited paused so far.
    paused: float = 0.0
    #: Generation goes on past ``gen_deadline`` (not past ``deadline``) until the target has run this many cases.
    cases_floor: int = 0

    def since_start(self, t: float) -> float:
        """Seconds the round ran from its start to ``t`` (pauses left out)."""
        return t - self.start - self.paused


def _with_first(failures: list[CaseFailed], found: dict) -> list[CaseFailed]:
    """The round's failures and, where the shrink slipped from the failure first found to others that fail
    another way (:meth:`Verdict.bug_signature`), that first failing case as well: Hypothesis keeps one shrunk
    case per exception type and line, and with ``report_multiple_bugs=False`` reports the smallest alone, so a
    mismatch that shrinks into another mismatch, or into a smaller error, would otherwise be lost."""
    first = found.get("first")
    if first is None or any(f.verdict.bug_signature() == first.verdict.bug_signature() for f in failures):
        return failures
    return [*failures, first]


def _reached(count: int, limit: int | None) -> bool:
    return limit is not None and count >= limit


