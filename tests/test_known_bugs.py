"""Known bugs as data (``corpus/known_bugs.toml``) and the one answer to "is this failure explained?"
(:func:`parityfuzz.triage.explain`)."""

import ast
import dataclasses
import importlib
import json
from pathlib import Path

import pytest
import torch

from parityfuzz.case import Case
from parityfuzz.judge.verdict import Divergence, Verdict
from parityfuzz.triage import corpus
from parityfuzz.triage import FOUND_IN_RUN, IN_CORPUS, KNOWN_BUG, NEW, Found, explain, known
from parityfuzz.triage.table import updated
from tests.known import record, register
from tests.test_case import simple

CORPUS = known.DEFAULT_PATH.parent


def edited(case: dict, **edits) -> dict:
    """A deep copy of the case dict ``case`` with each edit applied: ``train__steps=2`` sets ``case["train"]["steps"]``,
    ``compile={...}`` replaces ``case["compile"]`` (``__`` separates the keys of a nested field)."""
    d = json.loads(json.dumps(case))
    for field, value in edits.items():
        where, _, key = field.rpartition("__")
        target = d
        for part in where.split("__") if where else ():
            target = target[part]
        target[key] = value
    return d
MISMATCH = Verdict("mismatch", Divergence(step=0, what="grad", tensor="body.0.weight", max_abs=1.0, max_rel=1.0))


def test_known_bugs_name_triaged_shipped_corpus_files_with_their_signatures():
    """Every known bug points at shipped ``expect: fail`` files that a person triaged (``known_issue``), whose
    cases meet its precondition (themselves, or the case a checkpoint load resumes, which trains the steps after
    it) and whose recorded verdicts it explains, recorded with a torch version it lists as seen."""
    bugs = known.shipped()
    assert len(bugs) >= 49
    for bug in bugs:
        for name in bug.files:
            entry = corpus.load(CORPUS / name)
            assert entry.expect == "fail" and entry.known_issue, name
            resumed = entry.case.resumed() if entry.case.checkpoint else entry.case
            assert bug.applies(entry.case) or bug.applies(resumed), name
            assert bug.explains(entry.case, entry.verdict), name
            assert json.loads((CORPUS / name).read_text())["torch_version"] in bug.torch_seen, name


def test_a_corpus_file_belongs_to_one_known_bug_at_most():
    files = [f for b in known.shipped() for f in b.files]
    assert len(files) == len(set(files))


def test_the_known_bug_tables_are_the_ones_the_data_gives():
    """The known-bug tables (docs/known-bugs.md, linked from the README) are generated (python -m
    parityfuzz.triage.table --write): a record edited without regenerating them fails here."""
    doc = (CORPUS.parent / "docs" / "known-bugs.md").read_text()
    assert updated(doc, known.shipped()) == doc
    bugs = known.shipped()
    changed = (dataclasses.replace(bugs[0], summary="another summary"),) + bugs[1:]
    assert updated(doc, changed) != doc


def test_a_known_failure_replays_as_an_xfail_only_when_it_fails_as_recorded():
    """A corpus file expecting its known bug must not hide another failure of its case (a new bug, a harness
    regression): the replay xfails only on the recorded verdict's signature, or another one the known bug
    listing the file explains."""
    from parityfuzz.triage.replay import fails_as_recorded

    bug = next(b for b in known.shipped() if b.signature_strings() == ["mismatch:checkpoint:loaded", "hang"])
    entry = corpus.load(CORPUS / bug.files[0])
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


def test_the_dcp_load_bug_covers_a_rank_that_torch_chunk_leaves_without_a_piece():
    """A Linear of 5 outputs on 4 ranks: torch.chunk gives pieces of 2, 2, 1 and none to rank 3, whose dcp.load
    fails as the recorded dim-0-below-the-group case does (a 25-minute soak reported it as new: the predicate
    asked for a dim 0 below the shard count)."""
    bug = next(b for b in known.shipped() if b.title.startswith("dcp.load into FSDP1"))
    case = Case.from_dict({"seed": 0, "world_size": 4, "mesh": {"shape": [4]},
                           "model": {"body": {"kind": "linear", "out": 5}}, "plan": {"family": "fsdp1"},
                           "train": {"steps": 2, "momentum": 0.9}, "checkpoint": {"step": 1}, "schema": 2}).validate()
    assert bug.applies(case)
    even = Case.from_dict({**case.to_dict(), "model": {"body": {"kind": "linear", "out": 4}}}).validate()
    assert not bug.applies(even)  # 4 over 4: every rank holds a piece of every parameter (the bias: 1 each)


def test_a_signature_field_holding_a_list_matches_any_of_its_values(monkeypatch, tmp_path):
    bug, = register(monkeypatch, tmp_path, record(
        "lists", '[{ verdict = "mismatch", check = ["value", "replica"], tensor = ["grad", "param"] }, '
                 '{ verdict = "crash", exitcode = -6 }]'))
    assert bug.signature_strings() == ["mismatch:value:grad", "mismatch:value:param", "mismatch:replica:grad",
                                       "mismatch:replica:param", "crash:-6"]

    def mismatch(check, what):
        return Verdict("mismatch", Divergence(step=0, what=what, tensor="body.0.w", max_abs=1, max_rel=1,
                                              check=check))
    assert all(s.matches(mismatch("replica", "param")) for s in bug.signatures[:1])
    assert not bug.signatures[0].matches(mismatch("missing_grad", "grad"))
    assert bug.signatures[1].matches(Verdict("crash", ranks=({"rank": 0, "exitcode": -6},)))
    assert not bug.signatures[1].matches(Verdict("crash", ranks=({"rank": 0, "exitcode": -11},)))


@pytest.mark.parametrize("change, field", [
    (lambda r: r.replace('id = "x"', 'id = "Not A Slug"'), "id"),
    (lambda r: r.replace('families = ["fsdp2"]', 'families = ["fsdp3"]'), "families"),
    (lambda r: r.replace('precondition = "tests:has_scale"', 'precondition = "tests:nothing_here"'), "precondition"),
    (lambda r: r.replace('precondition = "tests:has_scale"', 'precondition = "nobody:has_scale"'), "precondition"),
    (lambda r: r.replace('precondition = "tests:has_scale"', 'precondition = ["tests:never", "tests:nothing"]'),
     "precondition"),
    (lambda r: r.replace('kind = "hang"', 'kind = "slow"'), "kind"),
    (lambda r: r.replace('kind = "hang"', 'kind = "crash"'), "kind"),  # (not what its signature shows)
    (lambda r: r.replace('verdict = "hang"', 'verdict = "error", role = "system", exception = '
                         '"InvariantViolation", frame = "fully_shard/system.py:unlisted"'), "signatures"),
    (lambda r: r.replace('api = "public"', 'api = "internal"'), "api"),
    (lambda r: r.replace('"torch.nn.Module"', '"torch.distributed._composable.replicate"'), "api"),
    (lambda r: r.replace('"torch.nn.Module"', '"nn.Module"'), "apis"),
    (lambda r: r.replace(':Module.load_state_dict:2530', ':Module.load_state_dict'), "source"),
    (lambda r: r.replace("torch/nn/modules/module.py: ", ""), "violates"),
    (lambda r: r.replace('"fsdp2/0000000000000000.json"', '"corpus/fsdp2/x.json"'), "files"),
    (lambda r: r.replace('verdict = "hang"', 'verdict = "hang", check = "value"'), "signatures[0]"),
    (lambda r: r.replace('verdict = "hang"', 'verdict = "slow"'), "signatures[0]"),
    (lambda r: r.replace('status = "design"', 'status = "none found"'), "upstream.notes"),
    (lambda r: r.replace('status = "design"', 'status = "reported"'), "upstream.links"),
    (lambda r: r.replace('links = []', 'links = ["#12"]'), "upstream.links"),
    (lambda r: r.replace('summary = "a test fault"\n', ''), "summary"),
    (lambda r: r.replace('id = "x"\n', 'id = "x"\ncolour = "red"\n'), "colour"),
])
def test_a_malformed_record_is_refused_naming_the_file_the_record_and_the_field(monkeypatch, tmp_path, change,
                                                                                  field):
    monkeypatch.setitem(known.DIMENSIONS, "tests", "tests")
    good = record("x", '[{ verdict = "hang" }]')
    path = tmp_path / "known_bugs.toml"
    path.write_text(good)
    assert known.load(path)[0].id == "x"
    path.write_text(change(good))
    with pytest.raises(known.KnownBugsError) as e:
        known.load(path)
    assert str(path) in str(e.value) and "bug #1" in str(e.value) and f"field {field!r}" in str(e.value), e.value


def test_a_file_that_is_not_toml_or_repeats_an_id_is_refused(tmp_path, monkeypatch):
    monkeypatch.setitem(known.DIMENSIONS, "tests", "tests")
    path = tmp_path / "known_bugs.toml"
    path.write_text("[[bug]\n")
    with pytest.raises(known.KnownBugsError, match="not valid TOML"):
        known.load(path)
    path.write_text(record("x", '[{ verdict = "hang" }]') * 2)
    with pytest.raises(known.KnownBugsError, match=r"bug #2 \(x\): field 'id': also the id of bug #1"):
        known.load(path)
    with pytest.raises(known.KnownBugsError, match="cannot read"):
        known.load(tmp_path / "missing.toml")


def test_explain_answers_in_order_known_bug_found_in_this_run_in_the_corpus_new(monkeypatch, tmp_path):
    """One component, one typed answer: which bug, which earlier finding, which corpus file; never a verdict
    string to parse back."""
    from parityfuzz.case import ModelSpec, Node

    case = simple(model=ModelSpec(body=Node("seq", children=(Node("scale", out=1), Node("linear", out=4)))))
    with pytest.raises(ValueError):
        explain(case, Verdict("pass"))
    assert explain(case, MISMATCH).kind == NEW
    path = corpus.record(tmp_path / "corpus", case, MISMATCH)
    in_corpus = explain(case, MISMATCH, corpus_dir=tmp_path / "corpus")
    assert in_corpus.kind == IN_CORPUS and in_corpus.corpus_file == path and not in_corpus.silences
    earlier = Found(frozenset({"has:scale"}), MISMATCH.bug_signature(), str(path))
    found = explain(case, MISMATCH, [earlier], corpus_dir=tmp_path / "corpus")
    assert found.kind == FOUND_IN_RUN and found.found == earlier and found.silences
    bug, = register(monkeypatch, tmp_path, record("a-test-bug", '[{ verdict = "mismatch", check = "value", '
                                                                'tensor = "grad" }]'))
    why = explain(case, MISMATCH, [earlier], corpus_dir=tmp_path / "corpus")
    assert why.kind == KNOWN_BUG and why.bug == bug and why.silences
    assert why.label() == "known torch bug, a test bug" and "a-test-bug" in why.describe()
    plain = simple()  # no scale module: the precondition does not hold
    assert explain(plain, MISMATCH).kind == NEW
    other_family = dataclasses.replace(bug, families=("zero",))
    assert explain(case, MISMATCH, bugs=(other_family,)).kind == NEW


def test_a_records_kind_is_the_most_serious_its_signatures_show(monkeypatch, tmp_path):
    def kind(signatures: str) -> str:
        return register(monkeypatch, tmp_path, record("k", signatures))[0].kind

    crash = '{ verdict = "error", role = "system", exception = "RuntimeError", frame = "torch/x.py:f" }'
    assert kind(f"[{crash}]") == "crash"
    assert kind(f'[{crash}, {{ verdict = "hang" }}]') == "hang"
    assert kind('[{ verdict = "mismatch", check = "dtype", tensor = "grad" }]') == "wrong dtype"
    assert kind(f'[{crash}, {{ verdict = "mismatch", check = ["dtype", "value"], tensor = "grad" }}]') == \
        "wrong training"
    assert kind('[{ verdict = "mismatch", check = "checkpoint", tensor = "loaded" }]') == "wrong state dict"
    assert kind('[{ verdict = "error", role = "system", exception = "InvariantViolation", '
                'frame = "fully_shard/system.py:check_resharded" }]') == "memory or placement"


def _resolve(path: str):
    """The object at the dotted ``path``: the longest importable module, then attributes."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(path)


def test_every_api_a_record_names_is_in_the_installed_torch_and_labelled_by_the_rule():
    assert known.api_by_rule(("torch.distributed.fsdp.fully_shard",)) == "public"
    assert known.api_by_rule(("torch.distributed.fsdp.fully_shard", "torch.distributed._composable.replicate")) == \
        "private"
    assert known.api_by_rule(("torch.distributed.tensor.experimental.implicit_replication",)) == "experimental"
    for api in known.DOCUMENTED_EXPERIMENTAL:
        assert "experimental" in _resolve(api).__doc__, api
    for bug in known.shipped():
        for api in bug.apis:
            try:
                _resolve(api)
            except (ImportError, AttributeError) as e:
                pytest.fail(f"{bug.id}: apis names {api!r}, which torch {torch.__version__} lacks: {e}")


def _definitions(tree: ast.Module, qualname: str) -> list:
    """The class or function definitions at ``qualname`` (``Class.method``, ``function.inner``) in ``tree``, each
    name found anywhere inside the one before: several where a name is defined more than once (``typing.overload``)."""
    found = [tree]
    for name in qualname.split("."):
        found = [n for parent in found for n in ast.walk(parent) if n is not parent
                 and isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    return found


def test_every_source_location_a_record_names_is_in_the_installed_torch():
    """Each ``source`` entry's file and definition exist in the installed torch, and on the torch its records were
    read against, the line lies in that definition.  Where the records were read on another torch than the
    installed one (``torch_seen``: the project's tests pinned to 2.13, run on a later release), torch's files may
    have moved: the table of versions (``parityfuzz versions``) says what its corpus does there instead."""
    root = Path(torch.__file__).parent.parent
    read_here = [b for b in known.shipped() if torch.__version__ in b.torch_seen]
    if not read_here:
        pytest.skip(f"no record was read against torch {torch.__version__}")
    for bug in read_here:
        for where in bug.source:
            file, qualname, line = where.split(":")
            path = root / file
            assert path.is_file(), f"{bug.id}: source names {file}, which torch {torch.__version__} lacks"
            nodes = _definitions(ast.parse(path.read_text()), qualname)
            assert nodes, f"{bug.id}: {file} defines no {qualname}"
            if torch.__version__ == bug.torch_seen[0]:
                assert any(n.lineno - 3 <= int(line) <= n.end_lineno for n in nodes), \
                    f"{bug.id}: {where}: {qualname} spans lines {[(n.lineno, n.end_lineno) for n in nodes]}"


def test_the_reentrant_autocast_cache_bug_covers_the_variants_that_diverge_and_no_other():
    """The record's precondition against the variants of its corpus case measured on unmodified torch (its
    mechanism): each element the trigger needs, varied alone, trains, and each form that diverged is covered."""
    bug = next(b for b in known.shipped() if b.id == "reentrant-checkpoint-input-cast-cached-under-autocast")
    base = corpus.load(CORPUS / bug.files[0]).case.to_dict()

    def case(**edits):
        return Case.from_dict(edited(base, **edits)).validate()

    att = {"kind": "attention", "heads": 1}
    ckpt = {"path": "body", "api": "wrapper", "reentrant": True}
    body = lambda *children: {"kind": "seq", "children": list(children)}  # noqa: E731
    diverged = [case(), case(train__autocast="bfloat16", train__loss_scale=0.0),
                case(model__body=body({"kind": "residual", "children": [att]})),
                case(model__body=body({"kind": "linear", "out": 4}, {"kind": "scale", "out": 1}, att),
                     plan__checkpoints=[{**ckpt, "path": "body.2"}]),
                case(plan={"family": "fsdp1", "checkpoints": [ckpt]}, system="")]
    trained = [case(plan__checkpoints=[{**ckpt, "reentrant": False}]),
               case(model__body=body({"kind": "mlp", "hidden": 4}, att)),
               case(model__body=body({"kind": "linear", "out": 4}, att), plan__checkpoints=[{**ckpt, "path": "body.1"}])]
    assert all(bug.applies(c) for c in diverged)
    assert not any(bug.applies(c) for c in trained)


def test_the_grad_scaler_bug_needs_a_plain_gradient_that_may_come_first():
    """found_inf_reduce_handler reads the group's first gradient only.  Measured on unmodified torch: the recorded
    model fails, with its plain embedding frozen in step 0 too; with a RowwiseParallel embedding ahead of it (a
    DTensor gradient first, the head's still plain) it trains, frozen in step 0 or not.  The precondition follows."""
    bug = next(b for b in known.shipped() if b.id == "grad-scaler-over-plain-and-dtensor-gradients")
    base = corpus.load(CORPUS / "fsdp2_tp/220ebac627dc1f7a.json").case.to_dict()
    first = {"path": "inp", "style": "rowwise", "input_layout": "replicate"}
    tp_first = {**base, "plan": {**base["plan"], "tp": [first, *base["plan"]["tp"]]}}

    def frozen(d):
        return {**d, "train": {**d["train"], "frozen": [{"path": "inp", "until": 1}]}}

    assert all(bug.applies(Case.from_dict(d).validate()) for d in (base, frozen(base)))
    assert not any(bug.applies(Case.from_dict(d).validate()) for d in (tp_first, frozen(tp_first)))


def test_the_compiled_checkpointed_dropout_bug_needs_an_fsdp1_instance_after_the_dropout():
    """Measured on unmodified torch (fsdp1/d334252c, a dropout then a Linear, compiled): a non-root FSDP1 instance
    on the Linear or on the sequence holding both fails; the root alone, an instance on the checkpointed dropout
    itself, or an embedding input trains."""
    bug = next(b for b in known.shipped() if b.id == "checkpointed-dropout-compiled-as-an-inference-graph")
    base = corpus.load(CORPUS / "fsdp1/d334252ca984625d.json").case.to_dict()

    def case(wraps, **model):
        return Case.from_dict({**base, "plan": {**base["plan"], "wraps": wraps},
                               "model": {**base["model"], **model}}).validate()

    assert all(bug.applies(case(w)) for w in (["body.1"], ["body"]))
    assert not any(bug.applies(c) for c in (case([]), case(["body.0"]),
                                            case(["body.1"], input="embedding", vocab=8)))


def test_the_compiled_checkpointed_dropout_bug_needs_a_parameterless_compiled_block_there():
    """Measured on unmodified torch (fsdp1_tp/30e267bd: a dropout in a parameterless block, checkpointed and compiled
    block by block, then a Linear): it fails with FSDP1 at the root alone; a Linear inside the block, the whole model
    compiled, or no checkpoint trains."""
    bug = next(b for b in known.shipped() if b.id == "checkpointed-dropout-compiled-as-an-inference-graph")
    base = corpus.load(CORPUS / "fsdp1_tp/30e267bdd5422f57.json").case.to_dict()
    dropout = {"kind": "dropout", "p": 0.1}

    def case(block, checkpoints=({"path": "body.0.dropout0", "api": "apply"},), **compile_):
        model = {**base["model"], "body": {"kind": "seq", "children": [{"kind": "block", "children": block},
                                                                      {"kind": "linear", "out": 4}]}}
        return Case.from_dict({**base, "model": model, "plan": {"family": "fsdp1_tp", "checkpoints": list(checkpoints)},
                               "compile": {**base["compile"], **compile_}}).validate()

    assert bug.applies(Case.from_dict(base).validate()) and bug.applies(case([dropout]))
    assert not any(bug.applies(c) for c in (case([dropout, {"kind": "linear", "out": 4}]), case([dropout], ()),
                                            case([dropout], form="model", paths=[])))


def test_the_compiled_checkpointed_dropout_bug_counts_parameters_frozen_at_the_first_step():
    """Measured on unmodified torch (fsdp1_tp/446b4a4f: an MLP frozen for step 0, a checkpointed dropout, a Linear
    in its own FSDP1 instance, inductor): it fails; nothing frozen, or only the MLP's second Linear, trains."""
    bug = next(b for b in known.shipped() if b.id == "checkpointed-dropout-compiled-as-an-inference-graph")
    base = corpus.load(CORPUS / "fsdp1_tp/446b4a4ff4305dea.json").case.to_dict()

    def case(frozen):
        return Case.from_dict({**base, "train": {**base["train"], "frozen": frozen}}).validate()

    assert bug.applies(case(base["train"]["frozen"])) and bug.applies(case([{"path": "body.0", "until": 1}]))
    assert not any(bug.applies(case(f)) for f in ([], [{"path": "body.0.fc2", "until": 1}]))


def test_the_gradient_holding_compile_bug_covers_a_retrace_at_a_gates_next_use():
    """Measured on unmodified torch (fsdp1_tp/3ff4ab81: a compiled block around a gate of period 2, alike on every
    rank, 3 microbatches, one step): it fails; period 3, 1 or 2 microbatches, or no compile train; period 3 over 2
    steps fails with zero_grad(set_to_none=False) and trains with set_to_none=True."""
    bug = next(b for b in known.shipped() if b.id == "fsdp1-compiled-forward-without-grad-holding-gradients")
    base = corpus.load(CORPUS / "fsdp1_tp/3ff4ab814963e49f.json").case.to_dict()

    def case(period=2, compiled=True, **train):
        d = json.loads(json.dumps(base))
        d["model"]["body"]["children"][1]["children"][0]["period"] = period
        d["train"].update(train)
        return Case.from_dict(d if compiled else {k: v for k, v in d.items() if k != "compile"}).validate()

    assert all(bug.applies(c) for c in (case(), case(3, steps=2, zero_grad="zeros")))
    assert not any(bug.applies(c) for c in (case(3), case(microbatches=1), case(microbatches=2),
                                            case(compiled=False), case(3, steps=2, zero_grad="none")))


def test_the_local_output_bug_reaches_fsdp1_through_a_checkpointed_instance_in_a_compiled_block():
    """Measured on unmodified torch (fsdp1_tp/f5a72523: a compiled residual over a colwise and a rowwise Linear, the
    rowwise one checkpoint-wrapped before FSDP1 makes it an instance, a (2, 2) mesh): it fails, as with instances on
    both Linears; the root alone, an instance on the colwise one instead, the checkpoint after wrapping, or a (2, 1)
    mesh train."""
    bug = next(b for b in known.shipped() if b.id == "tp-local-output-into-a-compiled-block")
    base = corpus.load(CORPUS / "fsdp1_tp/f5a725235ba7a59b.json").case.to_dict()
    ckpt = base["plan"]["checkpoints"][0]

    def case(wraps=("body.0.inner.1",), before=True, mesh=(2, 2)):
        plan = {**base["plan"], "wraps": list(wraps), "checkpoints": [{**ckpt, "before": before}]}
        return Case.from_dict({**base, "plan": plan, "world_size": mesh[0] * mesh[1],
                               "mesh": {**base["mesh"], "shape": list(mesh)}}).validate()

    assert all(bug.applies(c) for c in (case(), case(("body.0.inner.0", "body.0.inner.1"))))
    assert not any(bug.applies(c) for c in (case(()), case(("body.0.inner.0",)), case(before=False),
                                            case(mesh=(2, 1))))


def test_the_partial_optimizer_state_bug_needs_a_stateless_trainable_parameter_beside_stated_ones():
    """Measured on unmodified torch (fsdp1/723e656b: an embedding, a LayerNorm frozen for step 0, the root instance,
    Adam, a full save at step 1 rolled back at step 3 through FSDP1's own optimizer state dict): it fails, also
    with the sharded recipe, a dense input or two ranks; the LayerNorm in an instance of its own, or SGD, trains."""
    bug = next(b for b in known.shipped() if b.id == "fsdp1-optim-state-dict-of-a-trainable-parameter-without-state")
    base = corpus.load(CORPUS / "fsdp1/723e656bdf2d8117.json").case.to_dict()

    def case(plan=(), train=(), **checkpoint):
        return Case.from_dict({**base, "plan": {**base["plan"], **dict(plan)}, "train": {**base["train"], **dict(train)},
                               "checkpoint": {**base["checkpoint"], **checkpoint}}).validate()

    assert all(bug.applies(c) for c in (case(), case(save="fsdp1_sharded", load="fsdp1_sharded")))
    assert not any(bug.applies(c) for c in (case(plan={"wraps": ["body.0"]}), case(train={"optimizer": "sgd"}),
                                            case(rollback_at=0)))


def test_the_local_output_bug_reaches_fsdp2_through_a_checkpointed_unit():
    """Measured on unmodified torch (fsdp2_tp/a9525c31, whole-model compile): a wrapper checkpoint on a
    RowwiseParallel Linear that is fully_shard'ed itself fails; fully_shard on the Linear before it or the root
    alone, the composable checkpoint, no checkpoint, or eager trains."""
    bug = next(b for b in known.shipped() if b.id == "tp-local-output-into-a-compiled-block")
    base = corpus.load(CORPUS / "fsdp2_tp/a9525c316e65f1c8.json").case.to_dict()
    ckpt = base["plan"]["checkpoints"][0]

    def case(compiled=True, **plan):
        d = {**base, "plan": {**base["plan"], **plan}}
        return Case.from_dict(d if compiled else {k: v for k, v in d.items() if k != "compile"}).validate()

    assert all(bug.applies(c) for c in (case(), case(checkpoints=[{**ckpt, "api": "wrapper"}])))
    assert not any(bug.applies(c) for c in (
        case(compiled=False), case(checkpoints=[]), case(wraps=[{"path": ""}]),
        case(wraps=[{"path": "body.0"}, {"path": ""}]), case(checkpoints=[{**ckpt, "api": "composable"}])))


def test_the_dtensor_symint_hash_bug_needs_a_parallel_block_compiled_after_another_shape():
    """Measured on unmodified torch (fsdp2_tp/0ff563ba reduced: a plain one-head attention, then a two-head one
    colwise/rowwise, each compiled): it fails; the two the other way round, the parallel one compiled alone, a
    plain two-head one before it, or the whole model compiled, train."""
    bug = next(b for b in known.shipped() if b.id == "compiled-fsdp1-tp-block-recompiled-with-dynamic-shapes")
    base = corpus.load(CORPUS / "fsdp2_tp/0ff563ba5a000dba.json").case.to_dict()
    tp = [t for t in base["plan"]["tp"] if t["path"].startswith("body.2")]
    reduced = {**base, "world_size": 2, "mesh": {"shape": [1, 2], "names": ["dp_shard", "tp"]},
               "plan": {"family": "fsdp2_tp", "wraps": [{"path": ""}], "tp": tp},
               "train": {"steps": 1, "batch": 4, "seq_len": 2}}

    def case(paths, form="blocks_after", swap=False):
        d = json.loads(json.dumps({**reduced, "compile": {"backend": "aot_eager", "form": form, "paths": paths}}))
        if swap:
            children = d["model"]["body"]["children"]
            children[0]["heads"], children[2]["heads"] = 2, 1
            d["plan"]["tp"] = [{**t, "path": t["path"].replace("body.2", "body.0")} for t in d["plan"]["tp"]]
        return Case.from_dict(d).validate()

    assert bug.applies(Case.from_dict(base).validate()) and bug.applies(case(["body.0", "body.2"]))
    assert not any(bug.applies(c) for c in (case(["body.0", "body.2"], swap=True), case(["body.2"]),
                                            case(["body.2", "body.4"]), case([], form="model")))


def test_the_single_microbatch_zero_bubble_dtype_mix_needs_a_parameter_at_an_fsdp_module_s_output():
    """Measured on unmodified torch (pipeline/f85112e2 reduced: ScheduleZBVZeroBubble, one microbatch, reduce_dtype
    float32 over float64 stages): a split stage's FSDP module ending in a gain or a norm with another parameter
    before it fails, either zero-bubble schedule, with the blocks fully_shard'ed too; the gain or the norm alone, a
    Tanh after it, the two gains in two fully_shard'ed blocks, or reduce_dtype unset train."""
    bug = next(b for b in known.shipped()
               if b.id == "pipeline-zero-bubble-single-microbatch-fsdp-mixed-gradient-dtypes")
    base = corpus.load(CORPUS / bug.files[0]).case.to_dict()
    scale, tanh = {"kind": "scale", "out": 3}, {"kind": "act", "fn": "tanh"}
    seq = lambda *children: {"kind": "seq", "children": list(children)}  # noqa: E731

    def case(stage, *after, **plan):
        model = {**base["model"], "body": seq(base["model"]["body"]["children"][0], stage, *after)}
        cuts = [1, 2, 4] if after else base["plan"]["cuts"]
        return Case.from_dict({**base, "model": model, "plan": {**base["plan"], "cuts": cuts, **plan}}).validate()

    failed = [case(seq(scale, scale)), case(seq(scale, {"kind": "layernorm"})), case(seq(scale, tanh, scale)),
              case(seq(scale, scale), tanh, shard_units=True),
              case(seq(scale), seq(scale), shard_units=False),
              case(seq({"kind": "linear", "out": 4}, scale), schedule="interleaved_zero_bubble")]
    trained = [case(seq(scale)), case(seq({"kind": "layernorm"})), case(seq(scale, tanh)),
               case(seq(scale), seq(scale), shard_units=True),
               case(seq({"kind": "linear", "out": 4}, scale), precision={"cast_forward_inputs": False})]
    assert all(bug.applies(c) for c in failed)
    assert not any(bug.applies(c) for c in trained)


def test_the_dtensor_cache_key_bug_needs_a_restart_over_a_wrapped_uneven_colwise_unit():
    """Measured on unmodified torch (fsdp2_tp/b295a65c reduced: an MLP of hidden 3 over tp 2, compiled by inductor and
    restarted on its warm graph caches): fully_shard on the colwise fc1 fails, with fc2 too, the block or the whole
    model compiled; fully_shard at the root only, on the MLP or on fc2 alone, hidden 4, or no restart train."""
    bug = next(b for b in known.shipped() if b.id == "aot-autograd-cache-key-ignores-a-dtensor-s-local-shape")
    base = corpus.load(CORPUS / bug.files[0]).case.to_dict()

    def case(*wrapped, hidden=3, **compile_):
        model = {**base["model"], "body": {"kind": "seq", "children": [{"kind": "mlp", "hidden": hidden}]}}
        plan = {**base["plan"], "wraps": [{"path": p} for p in (*wrapped, "")]}
        return Case.from_dict({**base, "model": model, "plan": plan,
                               "compile": {**base["compile"], **compile_}}).validate()

    failed = [case("body.0.fc1"), case("body.0.fc1", "body.0.fc2"),
              case("body.0.fc1", form="model", paths=[])]
    trained = [case(), case("body.0"), case("body.0.fc2"), case("body.0.fc1", hidden=4),
               case("body.0.fc1", restart=False)]
    assert all(bug.applies(c) for c in failed)
    assert not any(bug.applies(c) for c in trained)


def test_the_dtensor_symint_hash_bug_reaches_fsdp1_through_linears_of_two_styles():
    """Measured on unmodified torch (fsdp1_tp/ea291d66: one attention block, compiled): FSDP1 instances on its
    colwise q and rowwise o fail, the whole model compiled too; q and k as the instances, o alone, or the block as
    the instance train."""
    bug = next(b for b in known.shipped() if b.id == "compiled-fsdp1-tp-block-recompiled-with-dynamic-shapes")
    base = corpus.load(CORPUS / "fsdp1_tp/ea291d6641340e6e.json").case.to_dict()

    def case(wraps, **compile_):
        return Case.from_dict({**base, "plan": {**base["plan"], "wraps": wraps},
                               "compile": {**base["compile"], **compile_}}).validate()

    assert all(bug.applies(c) for c in (case(["body.q", "body.o"]),
                                        case(["body.q", "body.o"], form="model", paths=[])))
    assert not any(bug.applies(c) for c in (case(["body.q", "body.k"]), case(["body.o"]), case(["body"])))


def test_the_n_ary_mul_bug_needs_both_attention_blocks_compiled_with_instances_of_both_styles():
    """Measured on unmodified torch (fsdp1_tp/5079fcd7: two attention blocks over dp_shard 2 x tp 2, FSDP1 instances
    on body.0.o, body.1.q and body.1.k): both blocks compiled fails, by aot_eager or inductor; only body.0 compiled,
    body.0.o not an instance, or no tensor parallelism trains.  The precondition is the one of the two records with
    the same trigger (the signature tells the three apart), so it still covers two variants measured to train
    (body.1.q not an instance, one local head in body.1): no narrower rule was measured."""
    bug = next(b for b in known.shipped() if b.id == "proxy-tracer-rebuilds-a-product-of-three-symbols-with-binary-mul")
    base = corpus.load(CORPUS / bug.files[0]).case.to_dict()

    def case(wraps=("body.0.o", "body.1.q", "body.1.k"), paths=("body.0", "body.1"), backend="aot_eager", tp=True):
        plan = {**base["plan"], "wraps": list(wraps), "tp": base["plan"]["tp"] if tp else []}
        return Case.from_dict({**base, "plan": plan,
                               "compile": {**base["compile"], "paths": list(paths), "backend": backend}}).validate()

    assert all(bug.applies(c) for c in (case(), case(backend="inductor")))
    assert not any(bug.applies(c) for c in (case(paths=("body.0",)), case(wraps=("body.1.q", "body.1.k")),
                                            case(tp=False)))


def test_the_composable_checkpoint_rerun_bug_needs_a_layout_changing_input_hook_on_the_checkpointed_module():
    """Measured on unmodified torch (fsdp2_tp/166c89c8: a rowwise Linear with sequence-sharded output, then a Linear
    prepared Shard(1) -> Replicate and checkpointed by the composable API): with fully_shard at the root, or the
    checkpoint before it, it fails; checkpoint_wrapper, apply_activation_checkpointing, the checkpoint on the
    rowwise Linear or the root, or no checkpoint train."""
    bug = next(b for b in known.shipped()
               if b.id == "composable-checkpoint-recompute-reruns-a-tensor-parallel-input-hook")
    base = corpus.load(CORPUS / bug.files[0]).case.to_dict()

    def case(path="body.1", api="composable", before=False, wrapped=False):
        mesh = {"shape": [1, 2], "names": ["dp_shard", "tp"]} if wrapped else base["mesh"]
        plan = {**base["plan"], "checkpoints": [{"path": path, "api": api, "before": before}] if path is not None
                else [], "wraps": [{"path": ""}] if wrapped else []}
        return Case.from_dict({**base, "mesh": mesh, "plan": plan}).validate()

    failed = [case(), case(wrapped=True), case(wrapped=True, before=True)]
    trained = [case(api="wrapper"), case(api="apply"), case(path="body.0"), case(path=""), case(path=None)]
    assert all(bug.applies(c) for c in failed)
    assert not any(bug.applies(c) for c in trained)


def test_the_pending_all_gather_bug_reaches_fsdp2_through_a_frozen_first_unit_across_non_last_backwards():
    """Measured on unmodified torch (fsdp2/09a8b8d5: an embedding frozen, reshard_after_forward=2 over 4 ranks, the
    root unsharded after forward, 2 microbatches with set_is_last_backward): it fails; nothing frozen,
    reshard_after_forward=True, set_is_last_backward unused, or one microbatch train."""
    bug = next(b for b in known.shipped() if b.id == "fsdp2-forward-prefetch-left-pending-survives-reshard")
    base = corpus.load(CORPUS / "fsdp2/09a8b8d54b272358.json").case.to_dict()

    def case(frozen=({"path": "inp"},), raf=2, last=True, micro=2):
        wraps = [{**base["plan"]["wraps"][0], "reshard_after_forward": raf}, *base["plan"]["wraps"][1:]]
        return Case.from_dict({**base, "plan": {**base["plan"], "wraps": wraps, "is_last_backward": last},
                               "train": {**base["train"], "frozen": list(frozen), "microbatches": micro}})

    assert bug.applies(case().validate())
    assert not any(bug.applies(c) for c in (case(frozen=()), case(raf=True), case(last=False), case(micro=1)))


def test_the_checkpointed_dropout_inference_graph_bug_reaches_fsdp2_through_a_composable_checkpoint_s_break():
    """Measured on unmodified torch (fsdp2/9228b337: a dropout checkpoint-wrapped, a ReLU under the composable
    checkpoint, a Linear, the model compiled): it fails; either checkpoint alone, or both by one API, trains."""
    bug = next(b for b in known.shipped() if b.id == "checkpointed-dropout-compiled-as-an-inference-graph")
    base = corpus.load(CORPUS / "fsdp2/9228b337592dfa4d.json").case.to_dict()

    def case(*checkpoints):
        return Case.from_dict({**base, "plan": {**base["plan"], "checkpoints": [
            {"path": path, "api": api} for path, api in checkpoints]}}).validate()

    assert bug.applies(case(("body.1", "composable"), ("body.0", "wrapper")))
    assert not any(bug.applies(c) for c in (case(("body.0", "wrapper")), case(("body.1", "composable")),
                                            case(("body.1", "wrapper"), ("body.0", "wrapper")),
                                            case(("body.1", "composable"), ("body.0", "composable"))))


def test_the_rank0_only_bug_needs_a_shard_group_smaller_than_the_world():
    """Measured on unmodified torch (fsdp1_tp/88e4086a: one Linear, FULL_STATE_DICT(rank0_only=True)): dp_shard 1 x
    tp 2 fails; dp_shard 2 x tp 1, or rank0_only off, trains."""
    bug = next(b for b in known.shipped() if b.id == "fsdp1-hybrid-rank0-only")
    base = corpus.load(CORPUS / "fsdp1_tp/88e4086036f3683b.json").case.to_dict()

    def case(shape=(1, 2), rank0_only=True):
        return Case.from_dict({**base, "mesh": {**base["mesh"], "shape": list(shape)},
                               "checkpoint": {**base["checkpoint"], "rank0_only": rank0_only}}).validate()

    assert bug.applies(case())
    assert not any(bug.applies(c) for c in (case((2, 1)), case(rank0_only=False)))


def test_the_unfrozen_mixed_precision_group_bug_reaches_pipelined_stages():
    """Measured on unmodified torch (pipeline/b32c922d): an embedding stage frozen for the first step under
    param_dtype=bfloat16 fails; no freeze, a freeze for good, or no policy train."""
    bug = next(b for b in known.shipped() if b.id == "mixed-precision-group-unfrozen-later")
    base = corpus.load(CORPUS / "pipeline/b32c922df716041f.json").case.to_dict()

    def case(frozen=({"path": "inp", "until": 1},), **plan):
        plan = {k: v for k, v in {**base["plan"], **plan}.items() if v is not None}
        return Case.from_dict({**base, "plan": plan, "train": {**base["train"], "frozen": list(frozen)}}).validate()

    assert bug.applies(case())
    assert not any(bug.applies(c) for c in (case(()), case(({"path": "inp"},)), case(precision=None)))


def test_the_dtensor_view_guard_bug_needs_one_output_hook_over_two_widths_after_a_graph_break():
    """Measured on unmodified torch (fsdp2_tp/ab1e2a2b): it fails from the second call; one call, no compile,
    fully_shard at the root only, 7 -> 4 outputs, seq_len 2, or tensor parallelism on the last two only train."""
    bug = next(b for b in known.shipped() if b.id == "dynamo-dtensor-output-view-specialized-without-a-guard")
    base = corpus.load(CORPUS / bug.files[0]).case.to_dict()

    def case(compiled=True, width=7, **edits):
        d = edited(base, **edits)
        d["model"]["body"]["children"][0]["out"] = width
        return Case.from_dict(d if compiled else {k: v for k, v in d.items() if k != "compile"}).validate()

    assert bug.applies(case()) and bug.applies(case(train__microbatches=2))
    assert not any(bug.applies(c) for c in (
        case(train__microbatches=1), case(compiled=False), case(plan__wraps=[{"path": ""}]), case(width=4),
        case(train__seq_len=2), case(plan__tp=base["plan"]["tp"][1:])))


def test_the_dtensor_view_guard_bug_s_second_form_needs_a_bias_free_linear_first():
    """Measured on unmodified torch (fsdp2_tp/029cb439): inductor, aot_eager, two steps and the whole model compiled
    fail; a bias on the first Linear, its width equal to v's, one call, v not fully_shard'ed or the attention not
    parallelized train."""
    bug = next(b for b in known.shipped() if b.id == "dynamo-dtensor-output-view-specialized-without-a-guard")
    base = corpus.load(CORPUS / "fsdp2_tp/029cb43968d40481.json").case.to_dict()

    def case(bias=False, width=8, **edits):
        d = edited(base, **edits)
        d["model"]["body"]["children"][0]["children"][0]["children"][0].update(bias=bias, out=width)
        return Case.from_dict(d).validate()

    tp_on_the_block_only = [p for p in base["plan"]["tp"] if not p["path"].startswith("body.2")]
    assert all(bug.applies(c) for c in (
        case(), case(compile__backend="aot_eager"), case(train__steps=2, train__microbatches=1),
        case(compile={"backend": "inductor", "form": "model"})))
    assert not any(bug.applies(c) for c in (
        case(bias=True), case(width=5), case(train__microbatches=1),
        case(plan__wraps=[w for w in base["plan"]["wraps"] if w["path"] != "body.2.v"]),
        case(plan__tp=tp_on_the_block_only)))


def test_the_flattened_rollback_bug_needs_a_live_optimizer_and_a_flattened_dict():
    """Measured on unmodified torch (fsdp1/ef4a6744): the rollback fails; a load into a fresh system, or the
    optimizer state dict not flattened (another defect), does not fail so."""
    bug = next(b for b in known.shipped() if b.id == "fsdp1-flattened-optimizer-rollback-where-a-rank-holds-no-piece")
    base = corpus.load(CORPUS / bug.files[0]).case.to_dict()

    def case(**checkpoint):
        return Case.from_dict({**base, "checkpoint": {**base["checkpoint"], **checkpoint}}).validate()

    assert bug.applies(case())
    assert not any(bug.applies(c) for c in (case(rollback_at=0), case(flatten_optimizer=False)))


def test_a_merged_record_applies_where_any_of_its_preconditions_holds(monkeypatch, tmp_path):
    case = simple().validate()
    hang = '[{ verdict = "hang" }]'
    either, neither = register(monkeypatch, tmp_path, record("m", hang, '["tests:never", "tests:always"]')
                               + record("n", hang, '["tests:never", "tests:never"]'))
    assert either.applies(case) and not neither.applies(case)


def test_every_precondition_reads_every_case_of_its_record_s_families():
    """A record's predicates run on every shipped case of the record's families and on the case its checkpoint load
    resumes (as explain() and the throttle call them), and raise on none: the second 30-minute run of 2026-11-28
    stopped its checkpoint target on a merged record whose composable predicate read a resumed fsdp2_tp plan."""
    cases = [corpus.load(path).case for path in sorted(CORPUS.glob("*/*.json"))
             if path.parent.name not in ("versions", "upstream")]
    cases += [c.resumed() for c in cases if c.checkpoint]
    bugs = known.shipped()
    for case in cases:
        for bug in bugs:
            bug.applies(case)
    merged = next(b for b in bugs if b.id == "grad-scaler-over-plain-and-dtensor-gradients")
    tp_case = next(c for c in cases if c.family == "fsdp2_tp")
    scaled = dataclasses.replace(tp_case, train=dataclasses.replace(tp_case.train, loss_scale=1024.0))
    merged.applies(scaled)  # the fsdp2_tp predicate alone reads it


def test_the_eager_recompute_bug_needs_a_compiled_colwise_linear_followed_by_one_dynamo_compiles_no_graph_for():
    """Measured on unmodified torch (fsdp2_tp/20a0cf69: a residual of a colwise Linear and a rowwise one
    fully_shard'ed on its own, compiled, the root checkpointed): it fails, the checkpoint on the residual too, and
    with the colwise Linear gathering its output before a plain Linear fully_shard'ed on its own; no checkpoint, no
    compile, the following Linear under the root's fully_shard only (rowwise, or plain) train."""
    bug = next(b for b in known.shipped() if b.id == "colwise-linear-recomputed-eagerly-under-a-checkpoint")
    base = corpus.load(CORPUS / bug.files[0]).case.to_dict()
    gathered = [{"path": "body.inner.0", "style": "colwise", "output_layout": "replicate"}]

    def case(checkpoint="", wraps=("body.inner.1", ""), tp=None, compiled=True):
        plan = {**base["plan"], "checkpoints": [{"path": checkpoint}] if checkpoint is not None else [],
                "wraps": [{"path": w} for w in wraps], "tp": base["plan"]["tp"] if tp is None else tp}
        return Case.from_dict({**base, "plan": plan, "compile": base["compile"] if compiled else {}}).validate()

    failed = [case(), case(checkpoint="body"), case(tp=gathered)]
    trained = [case(checkpoint=None), case(compiled=False), case(wraps=("",)), case(wraps=("",), tp=gathered)]
    assert all(bug.applies(c) for c in failed)
    assert not any(bug.applies(c) for c in trained)


def test_the_symint_hash_bug_reaches_fsdp2_through_a_plain_then_a_colwise_query_linear_each_fully_shard_ed():
    """Measured on unmodified torch (fsdp2_tp/e5314b9c: two attentions compiled one by one, the second parallel over
    tp 2): the first one's k or q with the second one's q, each fully_shard'ed, fails, and so does the whole model
    compiled; the first one's Linear not fully_shard'ed (alone or with the second attention whole), or the second
    one's k in place of its q, train."""
    bug = next(b for b in known.shipped() if b.id == "compiled-fsdp1-tp-block-recompiled-with-dynamic-shapes")
    base = corpus.load(CORPUS / "fsdp2_tp/e5314b9c42c92635.json").case.to_dict()

    def case(*wraps):
        return Case.from_dict({**base, "plan": {**base["plan"], "wraps": [{"path": w} for w in (*wraps, "")]}})

    assert all(bug.applies(case(*w).validate()) for w in (("body.0.k", "body.1.q"), ("body.0.q", "body.1.q")))
    whole = {**base, "compile": {"backend": "aot_eager", "form": "model"}}
    assert bug.applies(Case.from_dict(whole).validate())
    assert not any(bug.applies(case(*w).validate()) for w in (("body.1.q",), ("body.0.k", "body.1.k"),
                                                               ("body.1", "body.1.q")))


def test_the_dynamic_recompute_bug_needs_an_earlier_checkpointed_attention_and_a_later_one_of_another_width():
    """Measured on unmodified torch (fsdp1/a6fe85a3: attention(4), Linear(4 -> 16), attention(16), both compiled
    with inductor, a checkpoint around all three): fails with the checkpoint on the first attention alone, with
    residual blocks around the attentions, before or after wrapping; trains with aot_eager, MLPs in the attentions'
    place, equal widths, or the checkpoint on the second attention alone."""
    bug = next(b for b in known.shipped() if b.id == "compiled-block-recomputed-through-a-later-dynamic-graph")
    base = corpus.load(CORPUS / "fsdp1/a6fe85a3d1906bce.json").case.to_dict()
    attention, mlp = {"kind": "attention", "heads": 1}, {"kind": "mlp", "hidden": 2}

    def case(children=None, checkpoint="body", **compile_):
        body = {**base["model"]["body"], "children": children or base["model"]["body"]["children"]}
        return Case.from_dict({**base, "model": {**base["model"], "body": body},
                               "plan": {**base["plan"], "checkpoints": [{"path": checkpoint, "api": "wrapper"}]},
                               "compile": {**base["compile"], **compile_}}).validate()

    residual = [{"kind": "residual", "children": [attention]}, {"kind": "linear", "out": 16},
                {"kind": "residual", "children": [attention]}]
    assert all(bug.applies(c) for c in (case(), case(checkpoint="body.0"), case(residual), case(form="blocks_before")))
    assert not any(bug.applies(c) for c in (
        case(backend="aot_eager"), case(checkpoint="body.2"),
        case([mlp, {"kind": "linear", "out": 16}, mlp]), case([attention, {"kind": "linear", "out": 4}, attention])))
    assert bug.applies(corpus.load(CORPUS / "fsdp1_tp/34aae6fa036fa13a.json").case)


def test_the_ddp_recompute_bug_needs_a_replicated_output_linear_over_a_non_contiguous_view_in_a_checkpoint():
    """Measured on unmodified torch (composable/78cbb32d: replicate on an attention's ``o``, four heads of width 1,
    a sequence of 2, the composable checkpoint on the root): fails with the checkpoint on the attention or on ``o``;
    trains with a sequence of 1, two heads of width 2, width 8, or the checkpoint inside the replicate module."""
    bug = next(b for b in known.shipped()
               if b.id == "ddp-recomputed-by-a-checkpoint-after-one-of-its-gradients-was-ready")
    base = corpus.load(CORPUS / "composable/78cbb32db2d13e7c.json").case.to_dict()

    def case(replicate="body.0.o", checkpoint="", heads=4, in_dim=4, seq_len=2):
        applies = [{"path": replicate, "api": "replicate"}, base["plan"]["applies"][1],
                   {"path": checkpoint, "api": "checkpoint"}]
        model = {**base["model"], "in_dim": in_dim, "body": {**base["model"]["body"],
                                                             "children": [{"kind": "attention", "heads": heads}]}}
        return Case.from_dict({**base, "model": model, "plan": {**base["plan"], "applies": applies},
                               "train": {**base["train"], "seq_len": seq_len}}).validate()

    assert all(bug.applies(c) for c in (case(), case(checkpoint="body.0"), case(checkpoint="body.0.o")))
    assert not any(bug.applies(c) for c in (case(seq_len=1), case(heads=2), case(in_dim=8),
                                            case(replicate="body.0", checkpoint="body.0.o")))


def test_the_one_element_flat_parameter_bug_needs_accumulation_outside_no_sync_over_a_sharded_flat_parameter():
    """Measured on unmodified torch (fsdp1/9adeaf48: a (1, 1, 1) weight in the root instance beside a Linear
    instance, 2 ranks, 2 microbatches, use_orig_params=False): one microbatch, one rank or use_orig_params=True
    train; a weight of 2, 3 or 4 elements trains (torch-only)."""
    bug = next(b for b in known.shipped() if b.id == "fsdp1-accumulation-into-a-flat-parameter-of-one-element")
    base = corpus.load(CORPUS / "fsdp1/9adeaf48c69c9779.json").case.to_dict()

    def case(plan=(), train=(), world_size=2, out=1):
        body = {**base["model"]["body"], "children": [{"kind": "scale", "out": out}, {"kind": "linear", "out": 4}]}
        return Case.from_dict({**base, "world_size": world_size, "mesh": {"shape": [world_size]},
                               "model": {**base["model"], "body": body}, "plan": {**base["plan"], **dict(plan)},
                               "train": {**base["train"], **dict(train)}}).validate()

    assert bug.applies(case())
    assert not any(bug.applies(c) for c in (case(train={"microbatches": 1}), case(world_size=1), case(out=2),
                                            case(plan={"use_orig_params": True}), case(plan={"no_sync": True})))
    assert bug.applies(corpus.load(CORPUS / "fsdp1_tp/d9747b7d200fe729.json").case)
