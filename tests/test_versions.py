"""The table of torch versions (:mod:`parityfuzz.triage.versions`): a replay's results file, a record's outcome from
its files', the table, and docs/known-bugs.md (linked from the README) kept equal to the shipped results files."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from parityfuzz.triage import corpus, known, replay, versions
from parityfuzz.triage.known import shipped

CORPUS = versions.CORPUS
#: A passing file and a file failing as recorded (both 2 ranks, 2 steps: a few seconds each).
PASSING, FAILING = "fsdp2/289b46c12db58149.json", "fsdp1/23047066ba5a3d87.json"


def test_a_replay_writes_each_files_outcome_and_the_record_listing_it(tmp_path):
    for name in (PASSING, FAILING):
        (tmp_path / "corpus" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CORPUS / name, tmp_path / "corpus" / name)
    lines = []
    path = versions.run(tmp_path / "corpus", tmp_path / "out", log=lines.append)
    doc = json.loads(path.read_text())
    import torch

    assert path.name == f"torch-{torch.__version__}.json" and doc["torch"] == torch.__version__
    assert doc["files"][PASSING]["outcome"] == replay.PASSES and doc["files"][PASSING]["expect"] == "pass"
    failing = doc["files"][FAILING]
    bug = next(b for b in shipped() if b.lists(FAILING))
    assert failing["outcome"] == replay.FAILS_AS_RECORDED and failing["record"] == bug.id and failing["signature"]
    assert len(lines) == 2 and lines[-1].startswith("[2/2] ")
    # the results folder inside a corpus holds no cases
    shutil.copytree(tmp_path / "out", tmp_path / "corpus" / corpus.VERSIONS_DIR)
    assert [p.name for p in corpus.discover(tmp_path / "corpus")] == [FAILING.split("/")[1], PASSING.split("/")[1]]


@pytest.mark.parametrize("outcomes, expected", [
    ([replay.FAILS_AS_RECORDED] * 3, replay.FAILS_AS_RECORDED),
    ([replay.PASSES] * 2, versions.FIXED),
    ([replay.PASSES, replay.FAILS_AS_RECORDED], "partly fixed (1 of 2 files pass)"),
    ([replay.FAILS_AS_RECORDED, replay.FAILS_OTHERWISE, replay.PASSES], "fails otherwise (1 of 3 files)"),
    ([], "not replayed"),
])
def test_a_records_outcome_is_read_from_all_its_files(outcomes, expected):
    assert versions.record_outcome(outcomes) == expected


def _doc(torch_version, files):
    return {"torch": torch_version, "files": files}


def test_the_table_has_a_row_per_record_a_column_per_version_oldest_first_and_lists_regressions(tmp_path):
    bug = shipped()[0]
    fail = {"expect": "fail", "record": bug.id, "signature": "error:x"}
    new = _doc("2.14.1", {**{f: {**fail, "outcome": replay.PASSES, "signature": None} for f in bug.files},
                          "fsdp2/ok.json": {"expect": "pass", "record": None, "outcome": replay.REGRESSION,
                                            "signature": "mismatch:value:grad", "description": "step 0 grad ..."}})
    old = _doc("2.13.0+cpu", {**{f: {**fail, "outcome": replay.FAILS_AS_RECORDED} for f in bug.files[1:]},
                              "fsdp2/ok.json": {"expect": "pass", "record": None, "outcome": replay.PASSES,
                                                "signature": None}})
    for doc in (new, old):
        (tmp_path / f"torch-{doc['torch']}.json").write_text(json.dumps(doc))
    docs = versions.load_results(tmp_path)
    assert [d["torch"] for d in docs] == ["2.13.0+cpu", "2.14.1"]
    table = versions.render(docs, shipped())
    assert table.splitlines()[0] == "| record | kind | torch 2.13.0+cpu | torch 2.14.1 |"
    row = next(line for line in table.splitlines() if f"`{bug.id}`" in line)
    missing = f" (1 of {len(bug.files)} files not replayed)" if len(bug.files) > 1 else ""
    assert row.endswith(f"| {replay.FAILS_AS_RECORDED if missing else 'not replayed'}{missing} | {versions.FIXED} |")
    assert sum(line.startswith("| `") for line in table.splitlines()) == len(shipped())
    assert "- torch 2.14.1: `fsdp2/ok.json` (step 0 grad ...)" in table


def test_the_versions_table_is_the_shipped_results_files():
    assert versions.main(["table", "--check"]) == 0


def test_bad_input_is_refused_with_the_path(tmp_path, capsys):
    assert versions.main(["table", str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err
    (tmp_path / "torch-2.13.0.json").write_text("{}")
    assert versions.main(["table", str(tmp_path)]) == 2
    assert "torch-2.13.0.json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        versions.main(["run", "--corpus-dir", str(tmp_path / "none")])
    assert e.value.code == 2


def test_a_record_fixed_in_a_release_makes_its_files_regression_cases_from_that_release_on(monkeypatch):
    bug = dataclasses.replace(next(b for b in shipped() if b.files), fixed_in="2.14.1")
    assert bug.fixed("2.14.1+cu130") and bug.fixed("2.15.0") and not bug.fixed("2.13.0+cpu")
    assert not dataclasses.replace(bug, fixed_in="").fixed("2.99.0")
    entry = corpus.load(CORPUS / bug.files[0])
    monkeypatch.setattr(replay, "shipped", lambda: (bug,))
    assert replay.expected(entry, "2.13.0+cpu") == "fail" and replay.expected(entry, "2.14.1+cu130") == "pass"


def test_the_loader_refuses_a_fixed_in_that_is_no_release(tmp_path):
    text = (CORPUS / "known_bugs.toml").read_text()
    second = text.index("\n[[bug]]\n", text.index("\n[[bug]]\n") + 1)
    bad = text[:second].replace('\nkind = "', '\nfixed_in = "2.14"\nkind = "', 1)
    (tmp_path / "k.toml").write_text(bad)
    with pytest.raises(known.KnownBugsError, match="fixed_in"):
        known.load(tmp_path / "k.toml")


def test_every_record_fixed_in_a_release_passes_there_and_every_record_passing_says_so():
    """The shipped results files and the records agree: a record whose files all pass on a replayed release names
    the first such release as ``fixed_in``, and one that names a release passes on it."""
    docs = versions.load_results(versions.RESULTS)
    for bug in shipped():
        passing = [d["torch"] for d in docs
                   if versions.record_outcome([f["outcome"] for f in d["files"].values()
                                               if f.get("record") == bug.id]) == versions.FIXED]
        first = min(passing, key=known.version_key, default="")
        assert known.version_key(bug.fixed_in) == known.version_key(first), (bug.id, bug.fixed_in, passing)
