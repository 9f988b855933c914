"""Corpus files: written atomically, named by content hash, read strictly with errors naming file and field."""

import dataclasses
import json
from pathlib import Path

import pytest

from parityfuzz import corpus
from parityfuzz.case import Case
from parityfuzz.verdict import Divergence, Verdict
from tests.test_case import simple

MISMATCH = Verdict("mismatch", Divergence(step=0, what="grad", tensor="body.0.weight", max_abs=1.0, max_rel=1.0))


def test_record_and_load_round_trip(tmp_path):
    case = simple()
    path = corpus.record(tmp_path, case, MISMATCH, expect="fail", note="odd widths lose gradients")
    assert path == tmp_path / "fsdp2" / f"{case.case_id()}.json"
    entry = corpus.load(path)
    assert entry.case == case and entry.expect == "fail" and entry.verdict == MISMATCH
    assert entry.note == "odd widths lose gradients"
    doc = json.loads(path.read_text())
    assert doc["torch_version"] and doc["parityfuzz_version"] and doc["id"] == case.case_id()
    assert corpus.discover(tmp_path) == [path]


def test_record_keeps_an_existing_file(tmp_path):
    path = corpus.record(tmp_path, simple(), MISMATCH, note="first")
    corpus.record(tmp_path, simple(), Verdict("crash"), note="second")
    assert corpus.load(path).note == "first"


def test_record_leaves_no_temporary_files(tmp_path):
    corpus.record(tmp_path, simple(), MISMATCH)
    assert [p.name for p in (tmp_path / "fsdp2").iterdir()] == [f"{simple().case_id()}.json"]


def test_system_names_with_colons_make_safe_directories(tmp_path):
    path = corpus.record(tmp_path, simple(system="tests.faults:OddLinearGradDrop"), MISMATCH)
    assert path.parent.name == "tests.faults-OddLinearGradDrop"


def test_bare_case_file_loads_as_expect_pass(tmp_path):
    path = tmp_path / "bare.json"
    path.write_text(simple().to_json())
    entry = corpus.load(path)
    assert entry.expect == "pass" and entry.case == simple()


def _valid_doc(tmp_path):
    return json.loads(corpus.record(tmp_path / "src", simple(), MISMATCH).read_text())


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(expect="maybe"), "expect"),
    (lambda d: d.update(extra=1), "extra"),
    (lambda d: d.update(corpus_format=7), "corpus_format"),
    (lambda d: d.pop("case"), "case"),
    (lambda d: d["case"].update(schema=3), "case.schema"),
    (lambda d: d["case"]["train"].update(optimizer="lion") if "train" in d["case"]
     else d["case"].update(train={"optimizer": "lion"}), "case.train.optimizer"),
    (lambda d: d["case"].update(colour="red"), "case.colour"),
    (lambda d: d["verdict"].update(kind="meh"), "verdict.kind"),
])
def test_malformed_files_name_file_and_field(tmp_path, mutate, field):
    doc = _valid_doc(tmp_path)
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(corpus.CorpusError) as info:
        corpus.load(path)
    assert info.value.field == field
    assert str(path) in str(info.value)


def test_truncated_and_garbage_files(tmp_path):
    good = corpus.record(tmp_path / "src", simple(), MISMATCH).read_text()
    for name, text in [("trunc.json", good[: len(good) // 2]), ("garbage.json", "\x00\x01 not json"),
                       ("list.json", "[1, 2]")]:
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(corpus.CorpusError, match=name):
            corpus.load(path)


def test_missing_file(tmp_path):
    with pytest.raises(corpus.CorpusError, match="cannot read"):
        corpus.load(tmp_path / "nope.json")


def test_known_bugs_name_triaged_shipped_corpus_files_with_their_signatures():
    """Every known bug points at shipped ``expect: fail`` files that a person triaged (``known_issue``), whose
    cases meet its precondition and whose recorded verdicts it explains."""
    from parityfuzz.known import KNOWN_BUGS

    for bug in KNOWN_BUGS:
        assert bug.corpus_files and bug.signatures
        for path in bug.corpus_files:
            entry = corpus.load(path)
            assert entry.expect == "fail" and entry.known_issue, path
            assert bug.applies(entry.case) and bug.explains(entry.case, entry.verdict), path


def test_only_the_very_same_case_is_an_existing_entry(tmp_path):
    path = corpus.record(tmp_path, simple(), MISMATCH)
    assert corpus.existing(tmp_path, simple()).path == path
    assert corpus.existing(tmp_path, simple(seed=9)) is None  # same failure signature, another case


def test_a_known_failure_replays_as_an_xfail_only_when_it_fails_as_recorded():
    """A corpus file expecting its known bug must not hide another failure of its case (a new bug, a harness
    regression): the replay xfails only on the recorded verdict's signature, or another one the known bug
    listing the file explains."""
    from parityfuzz.known import KNOWN_BUGS
    from parityfuzz.test_corpus import fails_as_recorded

    bug = next(b for b in KNOWN_BUGS if b.signatures == ("mismatch:checkpoint:loaded", "hang"))
    entry = corpus.load(bug.corpus_files[0])
    other_form = Verdict("mismatch", Divergence(step=2, what="loaded", tensor="body.0.weight", max_abs=1.0,
                                                max_rel=1.0, check="checkpoint"))
    assert entry.verdict.kind == "hang" and other_form.bug_signature() == "mismatch:checkpoint:loaded"
    assert fails_as_recorded(entry, entry.verdict)
    assert fails_as_recorded(entry, other_form)
    assert not fails_as_recorded(entry, MISMATCH)  # its case failing otherwise
    assert not fails_as_recorded(entry, Verdict("crash", ranks=({"rank": 1, "exitcode": -11},)))
    elsewhere = dataclasses.replace(entry, path=Path("corpus/fsdp2/0123456789abcdef.json"))  # listed by no bug
    assert fails_as_recorded(elsewhere, entry.verdict)
    assert not fails_as_recorded(elsewhere, other_form)


def test_every_known_bug_record_carries_its_triage():
    """Each record cites what torch promises that it breaks, its upstream report or the searches that found none,
    whether the API is public, and its kind (gradient presence is reported apart from wrong training)."""
    import re

    from parityfuzz.known import KNOWN_BUGS

    for bug in KNOWN_BUGS:
        assert bug.violates and re.search(r"torch/\S+\.py", bug.violates), bug.name
        assert re.match(r"(pytorch/pytorch#\d+|related|none found|no bug report|none needed)", bug.upstream), \
            (bug.name, bug.upstream)
        if bug.upstream.startswith("none found"):
            assert "searched" in bug.upstream, bug.name  # the search terms, so the next person can redo them
        assert bug.api.startswith(("public", "private:")), bug.name
        assert bug.kind in ("wrong training", "gradient presence"), bug.name


def test_the_dcp_load_bug_covers_a_rank_that_torch_chunk_leaves_without_a_piece():
    """A Linear of 5 outputs on 4 ranks: torch.chunk gives pieces of 2, 2, 1 and none to rank 3, whose dcp.load
    fails as the recorded dim-0-below-the-group case does (a 25-minute soak reported it as new: the predicate
    asked for a dim 0 below the shard count)."""
    from parityfuzz.known import KNOWN_BUGS

    bug = next(b for b in KNOWN_BUGS if b.name.startswith("dcp.load into FSDP1"))
    case = Case.from_dict({"seed": 0, "world_size": 4, "mesh": {"shape": [4]},
                           "model": {"body": {"kind": "linear", "out": 5}}, "plan": {"family": "fsdp1"},
                           "train": {"steps": 2, "momentum": 0.9}, "checkpoint": {"step": 1}, "schema": 2}).validate()
    assert bug.applies(case)
    even = Case.from_dict({**case.to_dict(), "model": {"body": {"kind": "linear", "out": 4}}}).validate()
    assert not bug.applies(even)  # 4 over 4: every rank holds a piece of every parameter (the bias: 1 each)
