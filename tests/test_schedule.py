"""The schedule that shares one budget over several targets (parityfuzz.engine.schedule): on stand-in targets
whose yields are known, then on real ones through pytest."""

import json
import re
import textwrap
from types import SimpleNamespace

import pytest

from parityfuzz.engine.schedule import FLOOR, MIN_SLICE_S, Gains, Schedule, first_cases, gains_of, run_schedule
from tests.test_cli import pytest_run


def simulate(schedule: Schedule, gains_per_s) -> Schedule:
    """Run ``schedule`` to its end on stand-ins whose cases take a second each: at second ``at`` of a target's own
    time, its cases find ``gains_per_s(t, at)`` new pairs each (as new pairs, and as the Good-Turing count of pairs
    met once that predicts as much for the next case)."""
    while (choice := schedule.next()) is not None:
        name, seconds, reason = choice
        at = schedule.spent[name]
        cases = max(1, round(seconds))
        new = sum(gains_per_s(name, at + i) for i in range(cases)) * seconds / cases
        schedule.record(name, seconds, Gains(pairs=round(new), cases=cases,
                                             singletons=round(gains_per_s(name, at + seconds) * (at + seconds))),
                        reason)
    return schedule


def pairs_found(schedule: Schedule) -> int:
    return sum(s.gains.pairs for s in schedule.slices)


def test_the_even_schedule_gives_each_target_one_equal_slice_in_turn():
    s = simulate(Schedule(["a", "b", "c"], 300, adaptive=False), lambda t, at: 10)
    assert [(x.target, x.seconds) for x in s.slices] == [("a", 100), ("b", 100), ("c", 100)]


def test_a_target_after_others_overran_the_budget_still_gets_its_first_cases():
    """A case is never cut, so the targets before the last may spend the whole budget (a CI run under
    --fuzz-max-cases reported a target with 0 cases); the rest still each get a slice that runs a case."""
    for adaptive, budget in ((False, 30), (True, 600)):
        schedule = Schedule(["a", "b", "c"], budget, adaptive=adaptive)
        given = []
        while (choice := schedule.next()) is not None:
            name, seconds, reason = choice
            given.append((name, seconds, first_cases(reason)))
            schedule.record(name, budget if name == "a" else seconds, Gains(cases=1), reason)  # "a" overran it all
        assert [(n, s) for n, s, _ in given][1:] == [("b", 0.0), ("c", 0.0)]
        assert all(cases >= 1 for _, _, cases in given)


def test_time_goes_where_new_behaviour_is_found_and_no_target_starves():
    # "rich" keeps finding; "dry" finds nothing after its first slice; "late" finds nothing for 60 s, then more
    rates = {"rich": lambda at: 20, "dry": lambda at: 5 if at < 30 else 0, "late": lambda at: 0 if at < 60 else 40}
    s = simulate(Schedule(["rich", "dry", "late"], 1800), lambda t, at: rates[t](at))
    assert s.adaptive and sum(s.spent.values()) == pytest.approx(1800)
    # every target was explored first, one slice each
    assert [(x.target, x.reason) for x in s.slices[:3]] == [("rich", "first"), ("dry", "first"), ("late", "first")]
    # the floor: whatever a target yields, it keeps its share of FLOOR, spread evenly (less one slice of slack), and
    # a dry target gets no more than that
    floor = FLOOR / 3 * 1800
    assert floor - s.slice_s <= s.spent["dry"] <= floor + s.slice_s
    assert {x.reason for x in s.slices if x.target == "dry"} == {"first", "floor"}
    # a target that starts yielding late wins the time from the one that yields less
    assert s.spent["late"] > 2 * s.spent["rich"] and s.spent["rich"] >= floor - s.slice_s
    assert s.summary()["late"]["best"] > s.summary()["rich"]["best"]


def test_with_diminishing_returns_the_marginal_rates_even_out_and_more_is_found_than_evenly():
    # two targets whose new pairs a case fall off with the time they got, one three times richer
    rates = {"a": lambda at: 30 / (1 + at / 100), "b": lambda at: 10 / (1 + at / 100)}
    s = simulate(Schedule(["a", "b"], 1800), lambda t, at: rates[t](at))
    even = simulate(Schedule(["a", "b"], 1800, adaptive=False), lambda t, at: rates[t](at))
    # the optimum evens the marginal rates: 30 / (1 + a/100) = 10 / (1 + b/100) with a + b = 1800 gives b = 400,
    # below b's floor (450): b gets its floor and a the rest
    assert s.spent["b"] == pytest.approx(FLOOR / 2 * 1800, abs=s.slice_s)
    assert pairs_found(s) > 1.05 * pairs_found(even)
    # three targets of which none needs the floor: the final marginal rates are within one slice of each other
    rates3 = {"a": lambda at: 30 / (1 + at / 100), "b": lambda at: 20 / (1 + at / 100), "c": lambda at: 12 / (1 + at / 100)}
    s = simulate(Schedule(list(rates3), 1800, slice_s=10), lambda t, at: rates3[t](at))
    final = [rates3[t](s.spent[t]) for t in rates3]
    assert max(final) / min(final) < 1.25, (s.spent, final)


def test_a_target_that_stops_yielding_loses_its_share_within_a_few_slices():
    s = simulate(Schedule(["fading", "steady"], 1200), lambda t, at: 10 if t == "steady" or at < 90 else 0)
    late = [x.target for x in s.slices if x.at > 600]
    assert late.count("steady") > 2 * late.count("fading") >= 1


def test_a_small_budget_is_the_even_schedule_and_nothing_is_left_over():
    s = simulate(Schedule(["a", "b", "c", "d"], 4 * 2 * MIN_SLICE_S), lambda t, at: 1)
    assert not s.adaptive and [x.target for x in s.slices] == ["a", "b", "c", "d"]
    s = simulate(Schedule(["a", "b"], 100), lambda t, at: 1)
    assert sum(s.spent.values()) == pytest.approx(100) and min(x.seconds for x in s.slices) >= MIN_SLICE_S


def test_a_finished_target_gets_no_more_slices():
    s = Schedule(["a", "b"], 600)
    while (choice := s.next()) is not None:
        name, seconds, reason = choice
        s.record(name, seconds, Gains(pairs=100, cases=3), reason, done=name == "a")
    assert [x.target for x in s.slices].count("a") == 1 and s.spent["b"] == pytest.approx(600 - s.spent["a"])


class _StandIn:
    """A target run whose slices find what it is told, in the generation seconds they are given."""

    def __init__(self, name, rate, failures_at=()):
        from parityfuzz.engine.stats import TargetStats

        self.name, self.rate, self.failures_at = name, rate, failures_at
        self.stats = TargetStats(name)
        self.done = False

    def run(self, seconds, deadline=float("inf"), min_cases=0):
        for i in range(int(self.rate * seconds)):
            self.stats.pairs[f"{self.name}-{self.stats.generate_seconds}-{i}"] += 1
        self.stats.cases += max(1, int(seconds))
        if any(self.stats.generate_seconds <= at < self.stats.generate_seconds + seconds for at in self.failures_at):
            self.stats.failures.append(failure(f"mismatch:value:grad:{self.stats.generate_seconds}"))
        self.stats.generate_seconds += seconds

    def close(self):
        pass

    def finish(self):
        return self.stats


def failure(signature: str, known_issue=None):
    return SimpleNamespace(verdict=SimpleNamespace(bug_signature=lambda: signature), known_issue=known_issue)


def test_failures_count_once_per_kind_that_no_known_bug_explains():
    from parityfuzz.engine.stats import TargetStats

    stats = TargetStats("t")
    stats.failures += [failure("mismatch:value:grad"), failure("mismatch:value:grad"),
                       failure("error:system:RuntimeError:x.py:f"), failure("mismatch:replica:param", "known-bug")]
    stats.cases = 4
    stats.pairs.update(["a & b", "a & b", "a & c"])
    g = gains_of(stats)
    assert (g.failures, g.pairs, g.singletons, g.cases) == (2, 2, 1, 4)


def test_run_schedule_stops_at_the_failure_limit_and_files_each_targets_time():
    runs = {"a": _StandIn("a", 1, failures_at=(40,)), "b": _StandIn("b", 3)}
    logs = []
    schedule = run_schedule(runs, 600, log=logs.append, stop_after=1)
    assert sum(len(r.stats.failures) for r in runs.values()) == 1
    assert sum(schedule.spent.values()) < 600  # -x: no slice after the first failure
    assert runs["a"].stats.schedule["slices"] >= 1 and runs["b"].stats.schedule["seconds"] > 0
    assert any("new pairs" in line for line in logs)


def test_run_schedule_starts_no_slice_once_its_until_holds():
    """The fault benchmark's early end: a failure of ``b`` ends the run though ``a`` found one first."""
    runs = {"a": _StandIn("a", 1, failures_at=(20,)), "b": _StandIn("b", 1, failures_at=(60,))}
    schedule = run_schedule(runs, 600, log=lambda m: None, until=lambda: bool(runs["b"].stats.failures))
    assert len(runs["a"].stats.failures) == 1 and len(runs["b"].stats.failures) == 1
    assert sum(schedule.spent.values()) < 600
    assert run_schedule({"c": _StandIn("c", 1)}, 600, log=lambda m: None, until=lambda: False).spent["c"] == 600


SCHEDULED = textwrap.dedent("""
    import pytest
    from parityfuzz.strategies import cases

    @pytest.mark.fuzz_target("raising", lambda ws: cases(world_sizes=ws, system="tests.faults:RaiseOnRank1"))
    def test_raising(fuzz_session):
        fuzz_session.run_target("raising")

    @pytest.mark.fuzz_target("plain", lambda ws: cases(world_sizes=ws))
    def test_plain(fuzz_session):
        fuzz_session.run_target("plain")
""")


def test_named_targets_share_one_adaptive_schedule_and_the_report_says_how(tmp_path):
    """Two named targets through pytest (one whose system raises on rank 1 in every case): one schedule runs both when the first runs, each test fails or passes
    with its own target's findings, and the summary and the report show each target's time, slices and yield."""
    (tmp_path / "test_scheduled.py").write_text(SCHEDULED)
    report = tmp_path / "report.json"
    result = pytest_run(str(tmp_path / "test_scheduled.py"), "--fuzz-budget=30", "--world-sizes=2", "--fuzz-seed=2",
                        f"--corpus-dir={tmp_path}", "--shrink-budget=5", "--reduce-budget=0", "--fuzz-max-failures=1",
                        f"--fuzz-report={report}", f"--rootdir={tmp_path}", "-rA")
    out = result.stdout
    assert result.returncode == 1 and "1 failed, 1 passed" in out, out[-3000:]
    assert re.search(r"FAILED \S*test_scheduled.py::test_raising", out) and "schedule: adaptive" in out
    data = json.loads(report.read_text())
    sched = data["schedule"]
    assert sched["adaptive"] and set(sched["targets"]) == {"raising", "plain"}
    # the budget is spent in full: one target's findings and their shrinking take none of the other's generation
    # (the raising target fails on every case, so the test does not hang on how soon a search finds a fault under
    # load; it ends at its first finding: --fuzz-max-failures=1; the plain one gets the rest).  The budget is spent in
    # full; past it only by the case running when the last slice ends (a compiled case: seconds; a clean-clone CI run
    # measured 38 s of 32)
    spent = sum(t["seconds"] for t in sched["targets"].values())
    assert 30 - 2 <= spent <= 30 + 12, spent
    assert data["targets"]["plain"]["generate_seconds"] >= 30 / 2
    assert len(sched["slices"]) >= 2 and {s["target"] for s in sched["slices"][:2]} == {"raising", "plain"}
    assert data["targets"]["raising"]["schedule"]["slices"] >= 1 and data["failures"]
    assert "of the run) in" in out


def test_a_lone_target_gets_the_whole_budget_in_one_slice():
    s = simulate(Schedule(["a"], 1800), lambda t, at: 1)
    assert [(x.target, x.seconds) for x in s.slices] == [("a", 1800)]
    s = Schedule(["a", "b"], 600)
    name, seconds, reason = s.next()
    s.record(name, seconds, Gains(), reason, done=True)
    assert s.next() == ("b", 600 - seconds, "alone")


FOUR_NAMED = "import pytest\nfrom parityfuzz.strategies import cases\n" + "".join(textwrap.dedent(f"""

    @pytest.mark.fuzz_target("{name}", lambda ws: cases(world_sizes=ws))
    def test_{name}(fuzz_session):
        fuzz_session.run_target("{name}")
""") for name in "abcd")


def test_under_xdist_each_worker_schedules_the_group_of_targets_it_was_dealt(tmp_path):
    """Four named targets, two workers (``-n`` alone: load scheduling): the plugin deals them into one group per
    worker and the controller sends each group whole to one worker, which runs one schedule over it; the merged
    report has each worker's schedule."""
    (tmp_path / "test_four.py").write_text(FOUR_NAMED)
    report = tmp_path / "report.json"
    # (a budget that two cases of each target fit in under load: in a local CI run one slow case took a target's
    # 15-s slice whole; the run ends when every target has its two cases)
    result = pytest_run(str(tmp_path / "test_four.py"), "-n", "2", "--fuzz-max-cases=2", "--world-sizes=1",
                        "--fuzz-budget=240", "--fuzz-seed=1", f"--corpus-dir={tmp_path}", f"--fuzz-report={report}",
                        f"--rootdir={tmp_path}", "-rA")
    out = result.stdout
    assert result.returncode == 0 and "4 passed" in out, out[-3000:]
    data = json.loads(report.read_text())
    schedules = data["schedules"]
    assert set(schedules) == {"gw0", "gw1"}, schedules
    groups = [set(s["targets"]) for s in schedules.values()]
    assert sorted(map(len, groups)) == [2, 2] and set().union(*groups) == {"a", "b", "c", "d"}
    assert all(data["targets"][t]["cases"] == 2 for t in "abcd"), {t: data["targets"][t] for t in "abcd"}
