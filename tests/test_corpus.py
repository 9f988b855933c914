"""Corpus files: written atomically, named by content hash, read strictly with errors naming file and field."""

import json

import pytest

from parityfuzz.judge.verdict import Divergence, Verdict
from parityfuzz.triage import corpus
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


def test_only_the_very_same_case_is_an_existing_entry(tmp_path):
    path = corpus.record(tmp_path, simple(), MISMATCH)
    assert corpus.existing(tmp_path, simple()).path == path
    assert corpus.existing(tmp_path, simple(seed=9)) is None  # same failure signature, another case
