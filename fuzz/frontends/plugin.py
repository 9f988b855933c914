"""pytest integration: options, Hypothesis profiles, the fuzz session, the summary and the report.

Loaded by its ``pytest11`` entry point wherever parityfuzz is installed.  Options (see DESIGN.md's contract):
``--fuzz-budget``, ``--shrink-budget``, ``--reduce-budget``, ``--corpus-dir``, ``--world-sizes``,
``--fuzz-seed``, ``--fuzz-report``, ``--case-timeout``, ``--fuzz-max-cases``, ``--fuzz-db``, ``--fuzz-attach``,
``--fuzz-schedule``.

The selected fuzz targets that name themselves in their ``fuzz_target`` marker share ``--fuzz-budget`` by one
schedule (:mod:`parityfuzz.engine.schedule`, ``--fuzz-schedule``): it runs them all, in slices, when the first of
them runs; each test then passes or fails with its own target's findings.

Under pytest-xdist (``pytest -n 4 fuzz/``) each worker fuzzes its share of the targets on its own ranks, every
target getting the share of ``--fuzz-budget`` it would get if the targets were spread evenly over the workers (the
budget stays wall-clock).  Under ``--dist load`` (the default of ``-n``) the named targets are dealt into one
group per worker and each group is sent whole to one worker (:mod:`parityfuzz.frontends.xdist_groups`), which runs
one schedule over it, as a run without xdist does over every target; the workers' reports come back to the
controller, which prints and writes one, each worker's schedule in it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest
from hypothesis import Verbosity, settings

from parityfuzz import engine
from parityfuzz.case.mesh import DEFAULT_WORLD_SIZES
from parityfuzz.engine import Fuzzer, FuzzOptions
from parityfuzz.engine.stats import THIN
from parityfuzz.executor.devices import fuzzer_share
from parityfuzz.frontends import targets, xdist_groups

DEFAULT_BUDGET_S = 30.0
#: Seconds a fuzz target's pytest-timeout allows beyond its deadline (:meth:`FuzzOptions.deadline_s`).
TIMEOUT_MARGIN_S = 600
SUPPORTED_WORLD_SIZES = (1, 2, 3, 4, 8)

settings.register_profile("dev", max_examples=50, deadline=None, report_multiple_bugs=False)
settings.register_profile("ci", max_examples=50, deadline=None, report_multiple_bugs=False, print_blob=True,
                          verbosity=Verbosity.normal)
settings.register_profile("soak", max_examples=500, deadline=None, report_multiple_bugs=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("parityfuzz")
    g.addoption("--fuzz-budget", metavar="SECONDS", default=None,
                help=f"wall-clock seconds of case generation, shared by all fuzz targets (default {DEFAULT_BUDGET_S:g})")
    g.addoption("--shrink-budget", metavar="SECONDS", default="300",
                help="extra seconds a found failure may spend shrinking (default 300)")
    g.addoption("--reduce-budget", metavar="SECONDS", default="120",
                help="seconds a shrunk failure may spend being reduced to a 1-minimal case, every single "
                     "simplification tried (default 120; 0 turns the reduction off)")
    g.addoption("--corpus-dir", metavar="DIR", default=None,
                help="where failures are written and replays read (default: corpus/ in the repository)")
    g.addoption("--world-sizes", metavar="N,N", default=None,
                help="world sizes strategies may choose, e.g. 2,4 (default 1,2,4; 3 and 8 only when asked)")
    g.addoption("--fuzz-seed", metavar="N", default=None, help="seed for a reproducible run")
    g.addoption("--fuzz-report", metavar="PATH", default=None, help="write a JSON summary of the run here")
    g.addoption("--case-timeout", metavar="SECONDS", default=None,
                help="per-case timeout (default: scaled with the case's steps and world size)")
    g.addoption("--fuzz-db", metavar="DIR|redis://HOST:PORT", default=None,
                help="Hypothesis's example database shared with other fuzzers (a directory every one of them sees, "
                     "or Redis): a failure one found replays first in the others")
    g.addoption("--fuzz-attach", metavar="HOST:PORT", default=None,
                help="run cases on ranks launched by torchrun (`torchrun ... -m parityfuzz.executor.attach HOST:PORT` "
                     "on every node) instead of spawning them here; --world-sizes must be torchrun's world size")
    g.addoption("--fuzz-max-failures", metavar="N", default=None,
                help="stop each target after N distinct failures (default: fuzz on for the whole budget; -x and "
                     "--maxfail=N stop the first target, and pytest, at the first or Nth)")
    g.addoption("--fuzz-schedule", choices=("adaptive", "even"), default="adaptive",
                help="how the targets share --fuzz-budget: adaptive (default; slices to the targets finding the "
                     "most new per second, a floor for each) or even (an equal share each, in turn)")
    g.addoption("--fuzz-max-cases", metavar="N", default=None,
                help="stop each target after N cases whatever the budget says (with --fuzz-seed: the same run on "
                     "any machine)")


def _number(name: str, raw, cast=float, minimum=0):
    try:
        value = cast(raw)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"--{name}: expected a number, got {raw!r}") from None
    if value < minimum:
        raise pytest.UsageError(f"--{name}: must be >= {minimum}, got {raw!r}")
    return value


def options_from_config(config: pytest.Config) -> FuzzOptions:
    """Parse and check the options; a bad value is a one-line UsageError naming the option."""
    get = config.getoption
    budget = _number("fuzz-budget", get("fuzz_budget") or DEFAULT_BUDGET_S)
    shrink = _number("shrink-budget", get("shrink_budget"))
    reduce = _number("reduce-budget", get("reduce_budget"))
    seed = None if get("fuzz_seed") is None else _number("fuzz-seed", get("fuzz_seed"), int)
    timeout = None if get("case_timeout") is None else _number("case-timeout", get("case_timeout"),
                                                                 float, minimum=1)
    max_cases = None if get("fuzz_max_cases") is None else _number("fuzz-max-cases", get("fuzz_max_cases"), int,
                                                                   minimum=1)
    stop_after = get("maxfail") or 0
    if get("fuzz_max_failures") is not None:
        stop_after = _number("fuzz-max-failures", get("fuzz_max_failures"), int, minimum=1)
    ws_raw = get("world_sizes")
    if ws_raw is None:
        world_sizes = DEFAULT_WORLD_SIZES
    else:
        try:
            world_sizes = tuple(sorted({int(p) for p in ws_raw.split(",") if p.strip()}))
        except ValueError:
            raise pytest.UsageError(f"--world-sizes: expected comma-separated integers, got {ws_raw!r}") from None
        bad = [w for w in world_sizes if w not in SUPPORTED_WORLD_SIZES]
        if not world_sizes or bad:
            raise pytest.UsageError(f"--world-sizes: supported sizes are {', '.join(map(str, SUPPORTED_WORLD_SIZES))}, "
                                    f"got {ws_raw!r}")
    corpus_raw = get("corpus_dir")
    corpus_dir = Path(corpus_raw) if corpus_raw else Path(config.rootpath) / "corpus"
    if corpus_raw and not corpus_dir.is_dir():
        raise pytest.UsageError(f"--corpus-dir: {corpus_raw!r} is not a directory")
    attach = get("fuzz_attach")
    if attach:
        from parityfuzz.executor.attach import parse_address

        try:
            parse_address(attach)
        except ValueError as e:
            raise pytest.UsageError(f"--fuzz-attach: {e}") from None
        if ws_raw is None or len(world_sizes) != 1:
            raise pytest.UsageError("--fuzz-attach: give --world-sizes=N, the world size of the torchrun job")
    database = get("fuzz_db") or ""
    if database:
        from parityfuzz.engine.database import DatabaseError, open_database

        try:
            open_database(database)
        except (DatabaseError, OSError) as e:
            raise pytest.UsageError(f"--fuzz-db: {e}") from None
    return FuzzOptions(budget_s=budget, shrink_budget_s=shrink, corpus_dir=corpus_dir, world_sizes=world_sizes,
                       seed=seed, case_timeout_s=timeout, max_cases=max_cases, reduce_budget_s=reduce,
                       database=database, stop_after=stop_after)


class FuzzSession:
    """Per pytest run: the options, one executor shared by fuzz targets and corpus replays, the fuzzer."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.options = options_from_config(config)
        self._executor = None
        self._fuzzer = None
        self.targets_total = 0
        self.targets_done = 0
        self.budget_used = 0.0
        #: The fuzz targets schedules run together: group -> (name -> ``world_sizes -> strategy``), the selected
        #: items whose ``fuzz_target`` marker names a target (:func:`scheduled_targets`), in one group ("") or,
        #: under pytest-xdist, in the group each was dealt to (:func:`pytest_collection_modifyitems`).
        self.scheduled: dict[str, dict] = {}
        #: The groups whose schedule has run.
        self.groups_run: set[str] = set()
        #: Every selected named target's strategy maker, scheduled or not (name -> ``world_sizes -> strategy``).
        self.makers: dict = {}
        # A case count (--fuzz-max-cases) makes a seeded run the same anywhere: slices cut by the clock would not.
        self.adaptive = fuzz_schedule(config) == "adaptive" and self.options.max_cases is None

    @property
    def executor(self):
        if self._executor is None:
            from parityfuzz.executor import Executor

            self._executor = Executor(timeout_s=self.options.case_timeout_s,
                                      attach=self.config.getoption("fuzz_attach") or "")
        return self._executor

    @property
    def fuzzer(self) -> Fuzzer:
        if self._fuzzer is None:
            self._fuzzer = Fuzzer(self.options, self.executor, log=self.log, dimensions=targets.dimensions)
        return self._fuzzer

    def log(self, message: str) -> None:
        """Write a line to the terminal right away, past pytest's output capture."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        if reporter is None:
            print(message, flush=True)
            return
        if capman is not None:
            with capman.global_and_fixture_disabled():
                reporter.write_line(f"[parityfuzz] {message}")
        else:
            reporter.write_line(f"[parityfuzz] {message}")

    def next_budget(self) -> float:
        """An even share of what is left of the generation budget for the next target run on its own (under xdist,
        of the budget times the workers: they run side by side)."""
        _, workers = fuzzer_share()  # pytest-xdist's workers (1 without xdist)
        if workers > 1:
            return min(self.options.budget_s, self.options.budget_s * workers / max(1, self.targets_total))
        left_targets = max(1, self.targets_total - self.targets_done)
        return max(0.0, (self.options.budget_s - self.budget_used) / left_targets)

    def run_target(self, name: str, make_strategy=None) -> None:
        """Fail the test with every shrunk failure of target ``name``.  A target the run's schedule holds
        (:attr:`scheduled`) was fuzzed by it, with the others, when the first of them ran; any other (``make_strategy``
        given: ``world_sizes -> strategy``) is fuzzed now, on its own, for an even share of what is left."""
        group = next((g for g, members in self.scheduled.items() if name in members), None)
        if group is not None:
            if group not in self.groups_run:
                self._run_schedule(group)
            stats = self.fuzzer.targets[name]
        else:
            if make_strategy is None:
                from parityfuzz.frontends import targets

                make_strategy = self.makers.get(name) or targets.maker(name)
            stats = self.fuzzer.fuzz(name, make_strategy(self.options.world_sizes), self.next_budget())
            self.budget_used += stats.generate_seconds
        self.targets_done += 1
        # a known torch bug never gets here (it counts as passing, under what explains it): every failure is news
        if stats.failures:
            pytest.fail("\n\n".join(format_failure(f) for f in stats.failures), pytrace=False)

    def _run_schedule(self, group: str) -> None:
        """Fuzz the targets of ``group`` by one schedule over their budget (:mod:`parityfuzz.engine.schedule`)."""
        import time

        from parityfuzz.engine.schedule import run_schedule

        self.groups_run.add(group)
        runs = {name: self.fuzzer.start(name, make(self.options.world_sizes))
                for name, make in self.scheduled[group].items()}
        opts = self.options
        deadline = time.monotonic() + self.schedule_deadline_s(len(runs))
        _, workers = fuzzer_share()
        if workers > 1:  # each target its share of the budget spread over the workers, as one on its own
            budget = self.next_budget() * len(runs)
        else:  # the share of what is left the scheduled targets would get one by one: unnamed targets keep theirs
            left = max(1, self.targets_total - self.targets_done)
            budget = max(0.0, opts.budget_s - self.budget_used) * min(1.0, len(runs) / left)
        try:
            # (-x / --maxfail=N stop the run at the first or Nth failure; --fuzz-max-failures ends each target alone)
            run_schedule(runs, budget, adaptive=self.adaptive, log=self.log, deadline=deadline,
                         stop_after=self.config.getoption("maxfail") or 0,
                         on_schedule=lambda schedule: setattr(self.fuzzer, "schedule", schedule))
        finally:
            self.budget_used += sum(r.stats.generate_seconds for r in runs.values())

    def schedule_deadline_s(self, targets: int) -> float:
        """Wall-clock seconds ``targets`` scheduled targets may take together: the budget plus one shrink and one
        reduction per target (each run keeps to its own: :meth:`TargetRun.run`), and a minute a target for the case
        running at the end of each slice."""
        opts = self.options
        return opts.budget_s + targets * (opts.deadline_s(0.0) + 60)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()


def format_failure(f) -> str:
    from parityfuzz.export import refusal
    from parityfuzz.frontends.show import describe_case

    parts = [f"parityfuzz: {f.target}: {f.verdict.describe()}",
             *([f"the mismatch {f.verdict.origin.describe()}"] if f.verdict.origin else []),
             f"minimal case in {f.corpus_path} (found after {f.cases_to_find} cases in "
             f"{f.seconds_to_find:.1f}s, shrunk in {f.shrink_runs} runs / {f.shrink_seconds:.1f}s)",
             f"replay it: parityfuzz repro {f.corpus_path}"]
    if refusal(f.case) is None:
        parts.append(f"without parityfuzz: parityfuzz export {f.corpus_path} -o repro.py && "
                     f"torchrun --nproc-per-node={f.case.world_size} repro.py")
    if f.duplicate_of:
        parts.append(f"(the corpus already has this very case: {f.duplicate_of}, "
                     + (f"known issue {f.known_issue}, but no corpus/known_bugs.toml record explains this failure)"
                        if f.known_issue else "not triaged yet)"))
    if f.interrupted:
        parts.append("(the run was interrupted while shrinking: this case may not be minimal)")
    r = f.reduction
    if r is not None:
        parts.append(f"reduced in {r.runs} runs / {r.seconds:.1f}s ({len(r.steps)} simplifications"
                     + (f": {'; '.join(r.steps)}" if r.steps else "") + "): "
                     + ("1-minimal, every part left is needed" if r.minimal else
                        "interrupted before it was 1-minimal" if r.interrupted else
                        "the reduce budget ran out before it was 1-minimal"))
    parts += ["", describe_case(f.case), "",
             f.case.to_json(indent=2)]
    for r in f.verdict.ranks:
        text = r.get("traceback") or r.get("log") or ""
        if text:
            parts += ["", f"--- rank {r['rank']} ({r.get('status')}) ---", text.rstrip()[-3000:]]
    return "\n".join(parts)


_SESSION = pytest.StashKey[FuzzSession]()
#: Under xdist, on the controller: each worker's run report, by worker id.
_WORKER_REPORTS = pytest.StashKey[dict]()
#: Under xdist with load scheduling, on the controller: the directory of the workers' groups of named targets.
_GROUPS_DIR = pytest.StashKey[str]()


class _XdistController:
    """On the xdist controller: collects each worker's report as the worker shuts down."""

    def __init__(self, reports: dict):
        self.reports = reports

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        groups = node.config.stash.get(_GROUPS_DIR, None)
        if groups is not None:  # (where the worker writes its groups of named targets)
            node.workerinput[xdist_groups.KEY] = groups

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config, log):
        groups = config.stash.get(_GROUPS_DIR, None)
        return None if groups is None else xdist_groups.make_scheduler(config, log, groups)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        report = getattr(node, "workeroutput", {}).get("parityfuzz_report")
        if report:
            self.reports[node.gateway.id] = json.loads(report)


def _interrupt(signum, frame):
    engine.interrupt_requested.set()  # kept even if this KeyboardInterrupt is swallowed (see parityfuzz.engine)
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM stops a run like Ctrl-C does: the failure being shrunk is kept and the ranks are stopped.  Both
    # also set a flag the fuzz loop checks before every case, so an interrupt cannot be lost.
    if threading.current_thread() is threading.main_thread():
        engine.interrupt_requested.clear()
        for sig, default in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler)):
            if signal.getsignal(sig) == default:
                signal.signal(sig, _interrupt)
    config.addinivalue_line("markers", "fuzz_target(name, make_strategy=None): a parityfuzz fuzz target (shares the "
                                       "--fuzz-budget; named, it is run by the run's schedule)")
    if config.getoption("hypothesis_profile", None) is None:
        settings.load_profile("ci" if os.environ.get("CI") else "dev")
    config.stash[_SESSION] = FuzzSession(config)
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        if getattr(config.option, "dist", "no") == "load":  # (load scheduling, each group of named targets whole)
            import tempfile

            config.stash[_GROUPS_DIR] = tempfile.mkdtemp(prefix="parityfuzz-xdist-groups-")
        config.stash[_WORKER_REPORTS] = {}
        config.pluginmanager.register(_XdistController(config.stash[_WORKER_REPORTS]), "parityfuzz-xdist")


def pytest_sessionfinish(session) -> None:
    """An xdist worker hands its run report to the controller."""
    fuzz = session.config.stash.get(_SESSION, None)
    if hasattr(session.config, "workeroutput") and fuzz is not None and fuzz._fuzzer is not None:
        session.config.workeroutput["parityfuzz_report"] = json.dumps(fuzz.fuzzer.report())


def scheduled_targets(items) -> dict:
    """The targets of ``items`` one schedule can run (name -> ``world_sizes -> strategy``): those whose
    ``fuzz_target`` marker names one, with its strategy (``fuzz_target(name, make_strategy)``, or a target of
    :mod:`parityfuzz.frontends.targets`)."""
    from parityfuzz.frontends import targets

    out = {}
    for item in items:
        marker = item.get_closest_marker("fuzz_target")
        if marker is None or not marker.args:
            continue
        name, *rest = marker.args
        make = rest[0] if rest else marker.kwargs.get("make_strategy")
        if make is None and name in targets.names():
            make = targets.maker(name)
        if make is not None:
            out[name] = make
    return out


@pytest.hookimpl(tryfirst=True)  # an xdist worker's groups are written before it reports its collection
def pytest_collection_finish(session: pytest.Session) -> None:
    """The budget is split over the fuzz targets that will run: after ``-k``, ``-m`` and every other
    deselection (``pytest_collection_modifyitems`` may see items that a later hook deselects)."""
    fuzz = session.config.stash[_SESSION]
    targets = [i for i in session.items if i.get_closest_marker("fuzz_target")]
    fuzz.targets_total = len(targets)
    fuzz.makers = scheduled_targets(targets)
    named = {i.nodeid: i.get_closest_marker("fuzz_target").args[0] for i in targets
             if i.get_closest_marker("fuzz_target").args}
    _, workers = fuzzer_share()
    if workers == 1:
        group_of = dict.fromkeys(named.values(), "")
    elif xdist_groups.KEY in getattr(session.config, "workerinput", {}):
        # (a worker is handed its items one at a time: it schedules a group the controller sends it whole)
        groups = xdist_groups.deal(list(named), workers)
        xdist_groups.write(session.config.workerinput[xdist_groups.KEY], session.config.workerinput["workerid"],
                           groups)
        group_of = {name: groups[nodeid] for nodeid, name in named.items()}
    else:  # another --dist: each target an even share
        group_of = {}
    fuzz.scheduled = {}
    for name, group in group_of.items():
        if name in fuzz.makers:
            fuzz.scheduled.setdefault(group, {})[name] = fuzz.makers[name]
    # A fuzz target ends by its deadline (generation, one shrink, one reduction: the fuzzer cuts later shrinks to
    # fit); a global pytest-timeout must not cut it short, so it waits that long plus a margin for the case running
    # at the deadline, confirming a hang and locating a mismatch.  The first scheduled target runs them all.
    limit = fuzz.options.deadline_s(fuzz.options.budget_s) + TIMEOUT_MARGIN_S
    if fuzz.scheduled:
        limit = max(limit, fuzz.schedule_deadline_s(max(map(len, fuzz.scheduled.values()))) + TIMEOUT_MARGIN_S)
    for item in targets:
        item.add_marker(pytest.mark.timeout(limit))


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION, None)
    if session is not None:
        session.close()
    groups = config.stash.get(_GROUPS_DIR, None)
    if groups is not None:
        import shutil

        shutil.rmtree(groups, ignore_errors=True)


@pytest.fixture(scope="session")
def fuzz_session(request) -> FuzzSession:
    return request.config.stash[_SESSION]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    workers = config.stash.get(_WORKER_REPORTS, None)
    if workers:
        _summarize_workers(terminalreporter, config, workers)
        return
    session = config.stash.get(_SESSION, None)
    if session is None or (session._fuzzer is None and not config.getoption("fuzz_report")):
        return
    fuzzer = session.fuzzer
    tr = terminalreporter
    tr.section("parityfuzz")
    tr.write_line(f"fuzz seed {fuzzer.seed} (rerun with --fuzz-seed={fuzzer.seed})")
    schedule = fuzzer.schedule
    if schedule is not None and len(schedule.targets) > 1:
        tr.write_line(f"schedule: {'adaptive' if schedule.adaptive else 'even'}, {len(schedule.slices)} slices "
                      f"of up to {schedule.slice_s:.0f}s" + _why_even(config, schedule))
    for stats in fuzzer.targets.values():
        tr.write_line(stats.summary_line())
        if stats.schedule is not None and schedule is not None and len(schedule.targets) > 1:
            t = stats.schedule
            tr.write_line(f"  time: {t['seconds']:.0f}s of generation ({t['share']:.0%} of the run) in {t['slices']} "
                          f"slice{'s' if t['slices'] != 1 else ''} ({t.get('best', 0)} for its outlook, "
                          f"{t.get('floor', 0)} for its floor); outlook {t['yield_per_s']:.2f}/s "
                          "(weighted new pairs, near misses and failures expected a second)")
        shares = ", ".join(f"{k} {v:.0%}" for k, v in stats.shares().items())
        if shares:
            tr.write_line(f"  shares of cases: {shares}")
        for line in dimension_lines(stats.dimensions()):
            tr.write_line(line, yellow=line.startswith("  WARNING"))
        common = ", ".join(f"{k} {v}" for k, v in stats.features.most_common(12))
        if common:
            tr.write_line(f"  most exercised features: {common}")
        for f in stats.failures:
            tr.write_line(f"  FAILURE {f.verdict.describe()}", red=True)
            if f.verdict.origin:
                tr.write_line(f"    it {f.verdict.origin.describe()}")
            if f.duplicate_of:
                tr.write_line(f"    this very case is already in the corpus: {f.duplicate_of}"
                              + (f" (known issue: {f.known_issue})" if f.known_issue else " (not triaged yet)"))
            tr.write_line(f"    corpus file: {f.corpus_path}  (replay: parityfuzz repro {f.corpus_path})")
    found = sum(len(stats.failures) for stats in fuzzer.targets.values())
    tr.write_line(f"{found} distinct failure{'s' if found != 1 else ''} found"
                  + (f" in {', '.join(n for n, s in fuzzer.targets.items() if s.failures)}" if found else ""),
                  red=bool(found))
    report_path = config.getoption("fuzz_report")
    if report_path:
        Path(report_path).parent.mkdir(parents=True, exist_ok=True)
        Path(report_path).write_text(json.dumps(fuzzer.report(), indent=2) + "\n")
        tr.write_line(f"report written to {report_path}")


def fuzz_schedule(config) -> str:
    return config.getoption("fuzz_schedule", "adaptive")


def dimension_lines(coverage: dict) -> list[str]:
    """The summary's lines about the training-loop dimensions (:func:`parityfuzz.engine.stats.dimension_coverage`):
    each one's share of the cases and seconds to its first, the three commonest pairs, a warning for thin ones."""
    if not coverage["shares"]:
        return []
    first = coverage["first_seconds"]
    drawn = f" (of {coverage['drawn']} cases drawn, shrink runs apart)" if "drawn" in coverage else ""
    lines = [f"  dimensions{drawn}: " + ", ".join(f"{d} {s:.0%}" + (f" (first at {first[d]:.0f}s)" if d in first else "")
                                         for d, s in coverage["shares"].items())]
    pairs = sorted(coverage["pairs"].items(), key=lambda kv: -kv[1])[:3]
    if pairs:
        lines.append("  commonest pairs: " + ", ".join(f"{p} {s:.0%}" for p, s in pairs)
                     + f"; {len(coverage['pairs'])} pairs met")
    if coverage["thin"]:
        lines.append(f"  WARNING: dimensions in fewer than {THIN} cases: {', '.join(coverage['thin'])} (this run "
                     "barely tried them)")
    return lines


def _why_even(config, schedule) -> str:
    if schedule.adaptive or fuzz_schedule(config) == "even":
        return ""
    if config.getoption("fuzz_max_cases") is not None:
        return " (--fuzz-max-cases fixes the run: the schedule is even)"
    return " (too small a budget to adapt)"


def _summarize_workers(tr, config, reports: dict) -> None:
    """The controller's summary of an xdist run: each target's figures and the merged report."""
    from parityfuzz.engine.merge import merge_reports

    merged = merge_reports(reports)
    tr.section("parityfuzz")
    seeds = ", ".join(f"{w} {s}" for w, s in merged["worker_seeds"].items())
    tr.write_line(f"{len(reports)} workers, fuzz seeds {seeds} (a target's run depends on its seed alone: rerun "
                  "one with --fuzz-seed=N -k TARGET)")
    for name, t in merged["targets"].items():
        verdicts = ", ".join(f"{n} {k}" for k, n in sorted(t["verdicts"].items())) or "none"
        tr.write_line(f"{name}: {t['cases']} cases ({verdicts}), {t['generate_seconds']:.1f}s generating")
    for f in merged["failures"]:
        tr.write_line(f"  FAILURE {f['description']}", red=True)
        tr.write_line(f"    corpus file: {f['corpus_file']}  (replay: parityfuzz repro {f['corpus_file']})")
    report_path = config.getoption("fuzz_report")
    if report_path:
        Path(report_path).parent.mkdir(parents=True, exist_ok=True)
        Path(report_path).write_text(json.dumps(merged, indent=2) + "\n")
        tr.write_line(f"report written to {report_path}")
