"""Cases are plain data: JSON round trip, strict parsing, validation errors that name the field."""

import dataclasses
import json
import subprocess
import sys

import pytest
from hypothesis import given

from parityfuzz.case import Case, CaseError, Freeze, MeshSpec, ModelSpec, Node, ParamGroup, TrainSpec
from parityfuzz.case.dtypes import activation_dtype
from parityfuzz.families.fsdp2 import FSDP2Plan
from parityfuzz.parts.fully_shard import Wrap
from parityfuzz.strategies import cases


def simple(**kw) -> Case:
    base = dict(seed=0, world_size=2, model=ModelSpec(body=Node("seq", children=(Node("linear", out=4),))),
                mesh=MeshSpec((2,)), plan=FSDP2Plan())
    base.update(kw)
    return Case(**base)


@given(cases())
def test_json_round_trip(case):
    assert Case.from_json(case.to_json()) == case
    assert Case.from_json(case.to_json(indent=2)) == case
    assert Case.from_json(case.to_json()).case_id() == case.case_id()


@given(cases())
def test_generated_cases_validate(case):
    assert case.validate() is case


def test_case_and_family_modules_import_neither_torch_nor_hypothesis():
    code = ("import sys, parityfuzz.case, parityfuzz.families, parityfuzz.families.fsdp2; "
            "print(sorted(m for m in ('torch', 'hypothesis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_defaults_are_omitted_from_json():
    data = json.loads(simple().to_json())
    assert "train" not in data and data["plan"] == {"family": "fsdp2"} and data["schema"] == 2
    assert "system" not in data and "reference" not in data  # the family's


def test_case_id_is_content_hash():
    assert simple().case_id() == simple().case_id()
    assert simple().case_id() != simple(seed=1).case_id()


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(bogus=1), "bogus"),
    (lambda d: d["model"].update(widht=3), "model.widht"),
    (lambda d: d.pop("world_size"), "world_size"),
    (lambda d: d.update(seed="zero"), "seed"),
    (lambda d: d.update(seed=True), "seed"),
    (lambda d: d["model"]["body"]["children"][0].update(out="4"), "model.body.children[0].out"),
    (lambda d: d["mesh"].update(shape=3), "mesh.shape"),
    (lambda d: d.update(plan={"family": "fsdp2", "wraps": [{"path": "", "reshard_after_forward": "yes"}]}),
     "plan.wraps[0].reshard_after_forward"),
    (lambda d: d.update(plan={"family": "fsdp9"}), "plan.family"),
    (lambda d: d.update(plan={"wraps": []}), "plan.family"),
    (lambda d: d["plan"].update(no_sync="root"), "plan.no_sync"),
])
def test_from_json_names_the_bad_field(mutate, field):
    data = simple().to_dict()
    mutate(data)
    with pytest.raises(CaseError) as info:
        Case.from_dict(data)
    assert info.value.field == field
    assert str(info.value).startswith(field)


def test_wrong_schema_is_rejected():
    data = simple().to_dict()
    data["schema"] = 99
    with pytest.raises(CaseError, match="schema"):
        Case.from_dict(data)


def test_garbage_json():
    with pytest.raises(CaseError, match="not valid JSON"):
        Case.from_json('{"seed": 0,')


@pytest.mark.parametrize("case, field", [
    (simple(world_size=0, mesh=MeshSpec((0,))), "world_size"),
    (simple(mesh=MeshSpec((4,))), "mesh.shape"),
    (simple(model=ModelSpec(body=Node("seq", children=(Node("linear", out=0),)))), "model.body.children[0].out"),
    (simple(model=ModelSpec(body=Node("seq", children=(Node("frob"),)))), "model.body.children[0].kind"),
    (simple(model=ModelSpec(body=Node("seq", children=(Node("act", fn="relu"),)))), "model.body"),
    (simple(model=ModelSpec(in_dim=6, body=Node("seq", children=(Node("attention", heads=4),)))),
     "model.body.children[0].heads"),
    (simple(model=ModelSpec(body=Node("residual", children=(Node("linear", out=3),)))), "model.body.children[0]"),
    (simple(model=ModelSpec(body=Node("seq", children=(Node("linear", out=3),)), input="embedding", vocab=5,
                            tie_head=True)), "model.tie_head"),
    (simple(plan=FSDP2Plan(wraps=(Wrap("body.0"),))), "plan.wraps"),
    (simple(plan=FSDP2Plan(wraps=(Wrap("body.9"), Wrap("")))), "plan.wraps[0].path"),
    (simple(plan=FSDP2Plan(wraps=(Wrap("", 2),))), "plan.wraps[0].reshard_after_forward"),
    (simple(train=TrainSpec(steps=0)), "train.steps"),
    (simple(train=TrainSpec(optimizer="lion")), "train.optimizer"),
    (simple(train=TrainSpec(dtype="int8")), "train.dtype"),
    (simple(train=TrainSpec(nonroot="body.0")), "train.nonroot"),  # not wrapped
    (simple(mesh=MeshSpec((2,), ("shard",))), "mesh.names"),  # schema 1's name
    (simple(world_size=4, mesh=MeshSpec((2, 2), ("dp_shard", "dp_replicate"))), "mesh.names"),  # order
    (simple(world_size=4, mesh=MeshSpec((2, 2), ("dp_shard", "tp"))), "mesh.names"),  # not an FSDP2 mesh
    (simple(plan=FSDP2Plan(no_sync=("body.0",))), "plan.no_sync[0]"),
    (simple(plan=FSDP2Plan(no_all_reduce=True)), "plan.no_all_reduce"),
])
def test_validate_names_the_bad_field(case, field):
    with pytest.raises(CaseError) as info:
        case.validate()
    assert info.value.field == field


def test_tied_head_must_stay_with_root():
    model = ModelSpec(body=Node("seq", children=(Node("linear", out=4),)), input="embedding", vocab=5, tie_head=True)
    with pytest.raises(CaseError) as info:
        simple(model=model, plan=FSDP2Plan(wraps=(Wrap("head"), Wrap("")))).validate()
    assert info.value.field == "plan.wraps[0].path"


def test_int_reshard_must_divide_shard_group():
    ok = simple(world_size=4, mesh=MeshSpec((4,)), plan=FSDP2Plan(wraps=(Wrap("", 2),)))
    assert ok.validate() is ok
    bad = dataclasses.replace(ok, plan=FSDP2Plan(wraps=(Wrap("", 3),)))
    with pytest.raises(CaseError):
        bad.validate()


def test_non_root_pass_needs_a_wrapped_module_with_parameters():
    body = Node("seq", children=(Node("act", fn="relu"), Node("gate", period=2, children=(Node("linear", out=4),)),
                                 Node("mlp", hidden=3)))
    wraps = (Wrap("body.0"), Wrap("body.1"), Wrap("body.2.fc2"), Wrap(""))
    ok = simple(model=ModelSpec(body=body), plan=FSDP2Plan(wraps=wraps), train=TrainSpec(nonroot="body.2.fc2"))
    assert ok.validate() is ok and "nonroot" in ok.features()
    for path in ("body.0", "body.1"):  # an activation; a gate, whose child some forwards skip
        with pytest.raises(CaseError, match="no trainable parameters every forward uses") as info:
            dataclasses.replace(ok, train=TrainSpec(nonroot=path)).validate()
        assert info.value.field == "train.nonroot"


def test_input_width_and_dtype_of_a_module():
    body = Node("seq", children=(Node("linear", out=3), Node("mlp", hidden=5),
                                 Node("residual", children=(Node("linear", out=3),))))
    model = ModelSpec(body=body, input="embedding", in_dim=4, vocab=8)
    assert [model.input_width(p) for p in ("", "inp", "body", "body.1", "body.1.fc2", "body.2.inner", "head")] \
        == [None, None, 4, 3, 5, 3, 3]
    wraps = (Wrap("body.1", param_dtype="float16"), Wrap("body.1.fc2"), Wrap("", param_dtype="bfloat16"))
    case = simple(model=model, plan=FSDP2Plan(wraps=wraps), train=TrainSpec(dtype="float32"))
    # body.1.fc2 computes in body.1's float16; body.1 itself receives the root's bfloat16 activations.
    assert [activation_dtype(case, p) for p in ("body.1.fc2", "body.1", "body.0")] == ["float16", "bfloat16",
                                                                                         "bfloat16"]


TWO_LINEARS = ModelSpec(body=Node("seq", children=(Node("linear", out=4), Node("linear", out=4))))


@pytest.mark.parametrize("train, field", [
    (TrainSpec(momentum=0.9, optimizer="adam"), "train.momentum"),
    (TrainSpec(weight_decay=1.5), "train.weight_decay"),
    (TrainSpec(clip=-1.0), "train.clip"),
    (TrainSpec(scheduler="cosine"), "train.scheduler"),
    (TrainSpec(groups=(ParamGroup(("body.7",)),)), "train.groups[0].paths[0]"),
    (TrainSpec(groups=(ParamGroup(("body",)), ParamGroup(("body.0",)))), "train.groups[1].paths"),  # nothing left
    (TrainSpec(groups=(ParamGroup(("body.0",), lr_scale=0),)), "train.groups[0].lr_scale"),
    (TrainSpec(frozen=(Freeze("body.0", until=1),)), "train.frozen[0].until"),  # steps=1: never unfrozen
    (TrainSpec(frozen=(Freeze("body.0"), Freeze("body.1"))), "train.frozen"),  # nothing left to train
])
def test_training_loop_settings_are_validated(train, field):
    with pytest.raises(CaseError) as info:
        simple(model=TWO_LINEARS, train=train).validate()
    assert info.value.field == field


def test_parameter_groups_and_freezing_name_parameters_by_module():
    t = TrainSpec(steps=3, groups=(ParamGroup(("body.1",), lr_scale=2.0),), frozen=(Freeze("body.0", until=2),))
    case = simple(model=TWO_LINEARS, train=t).validate()
    assert [t.group_of(n) for n in ("body.0.weight", "body.1.weight", "body.1.bias")] == [None, 0, 0]
    assert [t.frozen_at("body.0.bias", step) for step in range(3)] == [True, True, False]
    assert not t.frozen_at("body.1.bias", 0) and t.unfreezes_at(2) and not t.unfreezes_at(1)
    assert {"frozen", "unfrozen_later", "param_groups=2"} <= case.features()


def test_per_rank_gates_need_reduce_scatter_unused_params_and_nothing_wrapped_inside():
    body = Node("seq", children=(Node("gate", period=2, by_rank=True, children=(Node("linear", out=4),)),
                                 Node("linear", out=4)))
    ok = simple(model=ModelSpec(body=body), plan=FSDP2Plan(reduce_scatter_unused=True)).validate()
    assert "rank_flow" in ok.features()
    for plan, field in [(FSDP2Plan(), "plan.reduce_scatter_unused"),
                        (FSDP2Plan(wraps=(Wrap("body.0.inner"), Wrap("")), reduce_scatter_unused=True),
                         "plan.wraps[0].path")]:
        with pytest.raises(CaseError) as info:
            dataclasses.replace(ok, plan=plan).validate()
        assert info.value.field == field
    wide = Node("seq", children=(Node("gate", period=3, by_rank=True, children=(Node("linear", out=4),)),
                                 Node("linear", out=4)))
    with pytest.raises(CaseError, match="period <= the data-parallel size 2"):
        dataclasses.replace(ok, model=ModelSpec(body=wide)).validate()


SCHEMA1 = {
    "schema": 1, "seed": 3, "world_size": 4, "system": "fsdp2", "reference": "ddp_mp",
    "mesh": {"shape": [2, 2], "names": ["replicate", "shard"]},
    "model": {"body": {"kind": "seq", "children": [{"kind": "linear", "out": 4}]}},
    "plan": {"wraps": [{"path": "body.0", "param_dtype": "bfloat16"}, {"path": "", "param_dtype": "bfloat16"}]},
    "train": {"steps": 2, "dtype": "float32", "microbatches": 2, "no_sync": [""], "no_all_reduce": True,
              "unshard_first": True, "forward_method": True, "eval": True},
}


def test_schema_1_files_are_upgraded_on_read():
    case = Case.from_dict(SCHEMA1).validate()
    assert case.schema == 2 and case.family == "fsdp2"
    assert case.mesh == MeshSpec((2, 2), ("dp_replicate", "dp_shard"))
    assert case.plan.no_sync == ("",) and case.plan.no_all_reduce and case.plan.unshard_first
    assert case.plan.forward_method and case.train.eval and case.train.microbatches == 2
    assert (case.system, case.reference) == ("", "")  # what the family picks: fsdp2 against ddp_mp
    assert (case.system_name(), case.reference_name()) == ("fsdp2", "ddp_mp")
    assert Case.from_json(case.to_json()) == case  # written back as schema 2
    # A reference that is not the family's choice stays, by name.
    kept = Case.from_dict({**SCHEMA1, "reference": "my.module:Reference"})
    assert kept.reference == "my.module:Reference"


def test_mesh_coordinates_and_data_parallel_index():
    mesh = MeshSpec((2, 2, 2), ("dp_replicate", "dp_shard", "tp"))
    assert [mesh.coords(r) for r in (0, 1, 2, 5)] == [
        {"dp_replicate": 0, "dp_shard": 0, "tp": 0}, {"dp_replicate": 0, "dp_shard": 0, "tp": 1},
        {"dp_replicate": 0, "dp_shard": 1, "tp": 0}, {"dp_replicate": 1, "dp_shard": 0, "tp": 1}]
    # The ranks of one tensor-parallel group share a batch; data-parallel ranks do not.
    assert [mesh.dp_index(r) for r in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert (mesh.dp_size(), mesh.axis_size("tp"), mesh.axis_size("pp")) == (4, 2, 1)
    assert MeshSpec((4,)).dp_index(3) == 3 and MeshSpec((4, 1), ("dp_shard", "tp")).shards()
    assert not MeshSpec((2, 1), ("dp_replicate", "dp_shard")).shards()


def test_unknown_family_is_named():
    from parityfuzz import families

    with pytest.raises(KeyError, match="unknown family 'fsdp9'"):
        families.get("fsdp9")


def test_a_module_needs_no_gradient_where_nothing_in_it_or_before_it_holds_a_parameter():
    body = Node("seq", children=(Node("dropout", p=0.5), Node("seq", children=(Node("act"), Node("linear", out=4))),
                                 Node("act")))
    model = ModelSpec(body=body)
    assert model.needs_no_gradient("body.0") and model.needs_no_gradient("body.1.0")
    assert not model.needs_no_gradient("body.1")  # (its Linear)
    assert not model.needs_no_gradient("body.2")  # (the Linear before it)
    assert not model.needs_no_gradient("body")
    assert not dataclasses.replace(model, input="embedding", vocab=4).needs_no_gradient("body.0")
    # frozen parameters need no gradient: the Linear before the last module, or the one inside body.1
    assert model.needs_no_gradient("body.2", frozen=("body.1",)) and model.needs_no_gradient("body.1", ("body.1.1",))
    assert not model.needs_no_gradient("body.2", frozen=("body.1.0",))  # (its ReLU: the Linear still trains)
