"""The HTML report of a run (parityfuzz.frontends.report) and the seed tests' grids it shows (parityfuzz.case.seedgrids)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

from parityfuzz.case import seedgrids
from parityfuzz.case import Delay, MeshSpec
from parityfuzz.case.compiled import Compile
from parityfuzz.engine.stats import TargetStats
from parityfuzz.frontends import targets
from parityfuzz.families.fsdp2 import FSDP2Plan
from parityfuzz.parts.fully_shard import Wrap
from parityfuzz.frontends import report
from parityfuzz.judge.verdict import Divergence, Verdict
from tests.test_case import simple

ROOT = Path(__file__).resolve().parents[1]
MULTI_GROUP = next(g for g in seedgrids.grids() if g.source.endswith("test_train_parity_multi_group"))


def fsdp2(reshard, *delays: str):
    plan = FSDP2Plan(wraps=(Wrap("body.0", reshard_after_forward=reshard), Wrap("")))
    return simple(world_size=4, mesh=MeshSpec((4,)), plan=plan,
                  delays=tuple(Delay(rank=0, where=w, ms=5) for w in delays)).validate()


def test_a_case_lands_on_the_grid_points_its_features_name():
    cases = [fsdp2(True), fsdp2(2, "all_gather"), fsdp2(2, "all_gather")]
    cov = seedgrids.coverage(MULTI_GROUP, [(c.features(), 1) for c in cases])
    assert cov["points"] == 96 and cov["covered"] == 3  # the root's wrap is True too: (True, ...) twice
    counts = cov["counts"]
    plain = ("delay_after_forward=False, delay_before_all_gather={}, delay_before_reduce_scatter=False, "
             "delay_before_optim=False, compiled=eager")
    assert counts["reshard_after_forward=True, " + plain.format(False)] == 1
    assert counts["reshard_after_forward=2, " + plain.format(True)] == 2
    assert counts["reshard_after_forward=True, " + plain.format(True)] == 2  # the root of both resharding-2 cases
    assert "reshard_after_forward=False, " + plain.format(False) in cov["missing"]
    compiled = dataclasses.replace(fsdp2(True), compile=Compile("aot_eager", "blocks_after", ("body.0",)))
    cov = seedgrids.coverage(MULTI_GROUP, [(compiled.features(), 1)])  # test_compiled_fsdp's axis
    assert cov["counts"]["reshard_after_forward=True, " + plain.format(False).replace("eager", "compute_on_module")] == 1
    other_family = simple(plan=FSDP2Plan(wraps=(Wrap(""),))).features() - {"family=fsdp2"} | {"family=fsdp1"}
    assert seedgrids.coverage(MULTI_GROUP, [(frozenset(other_family), 5)])["covered"] == 0


def test_tag_patterns_prefixes_and_conjunctions():
    assert seedgrids._has(frozenset({"ckpt=composable/before"}), "ckpt=composable/*")
    assert not seedgrids._has(frozenset({"ckpt_rank0_only"}), "ckpt_rank0_only&ckpt_cpu_offload")
    assert seedgrids._values(frozenset({"x"}), (("True", "y"), ("False", ""))) == ["False"]
    assert seedgrids._values(frozenset({"x"}), (("only", "y"),)) == []  # not on this grid at all


def run_report(tmp_path) -> dict:
    stats = TargetStats("fsdp2", support=targets.dimensions("fsdp2"))
    for i, case in enumerate([fsdp2(True), fsdp2(False, "before_step"), fsdp2(2)]):
        stats.count(case, Verdict("pass") if i else Verdict("mismatch", Divergence(step=0, what="grad",
                                                                                  tensor="body.0.weight", max_abs=1, max_rel=1)), at=i * 2.5)
    finding = {"target": "fsdp2", "verdict_kind": "mismatch", "case_id": "abc123", "description": "a <bad> grad",
               "corpus_file": str(tmp_path / "corpus/fsdp2/abc123.json"), "world_size": 2, "exportable": True,
               "case_tree": "model <- fully_shard", "origin_description": "begins at step 0 in body.0",
               "first_divergence": {"tensor": "body.0.weight"}, "cases_to_find": 1, "seconds_to_find": 0.5}
    return {"parityfuzz_version": "0", "torch_version": "2", "fuzz_seed": 7, "world_sizes": [2], "cases_run": 3,
            "verdicts": {"pass": 2, "mismatch": 1}, "targets": {"fsdp2": stats.to_dict()}, "failures": [finding]}


def test_the_page_shows_targets_timeline_grids_heatmap_and_findings(tmp_path):
    data = run_report(tmp_path)
    # counted per 5-second slice of the run (a long soak's report stays small)
    assert data["targets"]["fsdp2"]["timeline"] == [[0.0, "mismatch", 1], [0.0, "pass", 1], [5.0, "pass", 1]]
    page = report.render(data)
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http" not in page  # self-contained
    assert page.count("<svg") == 2  # the timeline and the heatmap
    # (True), (False and the root True, each with before_step), (2 and the root True): 4 points
    assert re.search(r"test_train_parity_multi_group</td><td>4 / 96", page)
    assert "a &lt;bad&gt; grad" in page and "begins at step 0 in body.0" in page  # escaped text
    assert f"parityfuzz export {tmp_path}/corpus/fsdp2/abc123.json -o repro.py &amp;&amp; torchrun " \
           "--nproc-per-node=2 repro.py" in page
    # one red bar segment for the mismatch, in the first slice of the timeline
    assert re.search(r'<rect x="34.0" [^>]*fill="#e53935"><title>1 mismatch</title>', page)
    # the training-loop dimensions: every one the target draws with its share, the thin ones marked
    dims = data["targets"]["fsdp2"]["dimensions"]
    assert set(dims["shares"]) == {d for d, why in data["targets"]["fsdp2"]["dimension_support"].items() if not why}
    assert "<h3>training-loop dimensions</h3>" in page and "compile (thin)</td><td>" in page


def test_a_long_runs_timeline_is_bounded_by_its_length_not_its_cases():
    """The timeline counts cases per 5-second slice: 3,000 cases in one minute keep 12 entries, and a 12-hour soak
    at most 8,640 per verdict kind; merged reports add the counts of a slice."""
    from parityfuzz.engine.merge import _merge_target

    stats, case = TargetStats("fsdp2"), fsdp2(True)
    for i in range(3000):
        stats.count(case, Verdict("pass"), at=i * 0.02)
    timeline = stats.to_dict()["timeline"]
    assert len(timeline) == 12 and sum(n for _, _, n in timeline) == 3000
    merged = _merge_target(stats.to_dict(), stats.to_dict())["timeline"]
    assert len(merged) == 12 and sum(n for _, _, n in merged) == 6000
    assert "<svg" in report.timeline_svg([[0.0, "pass"], [2.5, "mismatch"]])  # a report written before the buckets


def test_the_command_writes_the_page_and_names_a_bad_file_and_field(tmp_path):
    run = tmp_path / "run.json"
    run.write_text(json.dumps(run_report(tmp_path)))
    out = tmp_path / "report.html"
    ok = subprocess.run([sys.executable, "-m", "parityfuzz.frontends.report", str(run), "-o", str(out)], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0 and out.read_text().count("<svg") == 2, ok.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"targets": {}, "failures": [], "verdicts": {}}))
    result = subprocess.run([sys.executable, "-m", "parityfuzz.frontends.report", str(bad), "-o", str(out)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "bad.json" in result.stderr and "'cases_run'" in result.stderr


def test_the_page_counts_the_failures_each_explanation_silenced(tmp_path):
    from parityfuzz.triage import KNOWN_BUG, Explanation
    from parityfuzz.triage.known import shipped

    data = run_report(tmp_path)
    stats = TargetStats("fsdp2")
    bug = shipped()[0]
    for _ in range(3):
        stats.count(fsdp2(True), Verdict("pass"), why=Explanation(KNOWN_BUG, "hang", bug=bug))
    assert stats.verdicts == {"pass": 3} and stats.explained == {f"known torch bug, {bug.title}": 3}
    data["targets"]["fsdp2"]["explained"] = stats.to_dict()["explained"]
    page = report.render(data)
    assert f'<td class="l">known torch bug, {report._e(bug.title)}</td><td>3</td>' in page


def test_the_page_shows_how_the_schedule_shared_the_budget():
    from parityfuzz.engine.schedule import Gains, Schedule

    schedule = Schedule(["fsdp2", "zero"], 120)
    while (choice := schedule.next()) is not None:
        name, seconds, reason = choice
        schedule.record(name, seconds, Gains(pairs=40 if name == "fsdp2" else 0, cases=4,
                                             singletons=40 if name == "fsdp2" else 0), reason)
    page = report.render({"cases_run": 0, "verdicts": {}, "targets": {}, "failures": [],
                          "schedule": schedule.to_dict()})
    rows = dict(re.findall(r'<tr><td class="l">(\w+)</td><td>(\d+)</td>', page))
    assert int(rows["fsdp2"]) > int(rows["zero"]) > 0 and int(rows["fsdp2"]) + int(rows["zero"]) == 120
    assert "adaptive: after one slice each" in page and "best, " in page
    # a run of one target has no schedule to show
    assert "<h2>schedule" not in report.render({"cases_run": 0, "verdicts": {}, "targets": {}, "failures": [],
                                                "schedule": Schedule(["fsdp2"], 60).to_dict()})


def test_a_merged_xdist_report_shows_each_workers_schedule():
    from parityfuzz.engine.schedule import Gains, Schedule

    def ran(targets):
        schedule = Schedule(targets, 60)
        while (choice := schedule.next()) is not None:
            name, seconds, reason = choice
            schedule.record(name, seconds, Gains(pairs=10, cases=2, singletons=10), reason)
        return schedule.to_dict()

    page = report.render({"cases_run": 0, "verdicts": {}, "targets": {}, "failures": [],
                          "schedules": {"gw0": ran(["fsdp2", "zero"]), "gw1": ran(["fsdp1", "pipeline"])}})
    assert "<h2>schedule on worker gw0</h2>" in page and "<h2>schedule on worker gw1</h2>" in page
    assert {"fsdp2", "zero", "fsdp1", "pipeline"} <= set(re.findall(r'<tr><td class="l">(\w+)</td><td>\d+</td>', page))
