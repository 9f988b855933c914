"""Validity rules (``fuzz/rules``): each rule refuses its counter-example by name, the strategies never draw
outside the rules, the reduction never steps outside them, and ``repro`` refuses a hand-written invalid case
(exit 2, naming the rule) — the false alarm a 1-minimal reduction once made of a valid TP plan."""

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from parityfuzz import families
from parityfuzz.case import Case, CaseError
from parityfuzz.case.reduce import simplifications
from parityfuzz.rules import RuleViolation
from parityfuzz.parts.tensor_parallel import rules as tp_rules
from parityfuzz.strategies import cases

#: The case a 1-minimal reduction made of a valid sequence-parallel plan by dropping the norm's
#: ``SequenceParallel`` entry: the RMSNorm runs on each tp rank's tokens and its weight's gradient is never
#: reduced over tp (issue: case b722ca2695c5ca5c, reported as a torch bug on unmodified torch).
B722 = {"seed": 0, "world_size": 2,
        "model": {"body": {"kind": "seq", "children": [{"kind": "mlp", "hidden": 2}, {"kind": "rmsnorm"}]}},
        "mesh": {"shape": [1, 2], "names": ["dp_shard", "tp"]},
        "plan": {"family": "fsdp2_tp", "tp": [
            {"path": "body.0.fc1", "style": "colwise"},
            {"path": "body.0.fc2", "style": "rowwise", "output_layout": "shard_seq"},
            {"path": "body.1", "style": "prepare_output", "output_layout": "shard_seq", "desired_layout": "replicate"}]},
        "train": {"seq_len": 2}, "schema": 2}


def _with_tp(tp, body, *, family="fsdp2_tp", seq_len=2, **plan):
    return {"seed": 0, "world_size": 2, "model": {"body": {"kind": "seq", "children": body}},
            "mesh": {"shape": [1, 2], "names": ["dp_shard", "tp"]},
            "plan": {"family": family, "tp": tp, **plan}, "train": {"seq_len": seq_len}, "schema": 2}


LIN = {"kind": "linear", "out": 4}
GELU = {"kind": "act", "fn": "gelu"}
SP_MLP = [{"path": "body.0.fc1", "style": "colwise"},
          {"path": "body.0.fc2", "style": "rowwise", "output_layout": "shard_seq"},
          {"path": "body.1", "style": "sequence"}]

def _smoothed(data):
    """``data`` as a token model (cross-entropy) with label smoothing."""
    data["model"].update(input="embedding", vocab=4)
    data["train"]["label_smoothing"] = 0.1
    return data


#: rule name -> a case that breaks that rule alone (and the field the refusal names).
COUNTER_EXAMPLES = {
    "tp.declared-input": (_with_tp([{"path": "body.0", "style": "rowwise"}], [LIN]), "plan.tp[0].input_layout"),
    "tp.style-prepares-its-input": (_with_tp(
        [{"path": "body.0", "style": "colwise", "output_layout": "replicate"},
         {"path": "body.0", "style": "prepare_input", "input_layout": "replicate", "desired_layout": "replicate"}],
        [LIN]), "plan.tp[1]"),
    "tp.declared-output": (_with_tp(SP_MLP + [
        {"path": "body.1", "style": "prepare_output", "output_layout": "replicate", "desired_layout": "replicate"}],
        [{"kind": "mlp", "hidden": 2}, {"kind": "rmsnorm"}]), "plan.tp[3].output_layout"),
    "tp.parameters-see-full-tensors": (B722, "plan.tp[2]"),
    "tp.elementwise-on-shards": (_with_tp(
        [{"path": "body.0", "style": "colwise"}, {"path": "body.2", "style": "rowwise"}],
        [LIN, {"kind": "dropout", "p": 0.5}, LIN]), "plan.tp"),
    "tp.plain-without-style": (_with_tp(
        [{"path": "body.0", "style": "colwise", "output_layout": "replicate", "use_local_output": False}],
        [LIN, LIN]), "plan.tp"),
    "tp.even-local-shards": (_with_tp(
        [{"path": "body.0", "style": "colwise"}, {"path": "body.2", "style": "rowwise"}],
        [{"kind": "linear", "out": 3}, GELU, LIN]), "plan.tp[1].input_layout"),
    "tp.attention-heads": (_with_tp([{"path": "body.0.q", "style": "colwise"}], [{"kind": "attention", "heads": 2}]),
                           "plan.tp[0]"),
    "tp.loss-input": (_with_tp([{"path": "body.0", "style": "colwise"}], [LIN]), "plan.tp"),
    "tp.loss-parallel-smoothing": (_smoothed(_with_tp(
        [{"path": "head", "style": "colwise", "output_layout": "shard_last", "use_local_output": False}], [LIN],
        loss_parallel=True)), "train.label_smoothing"),
}


def test_every_rule_has_a_counter_example():
    assert sorted(COUNTER_EXAMPLES) == sorted(r.name for r in tp_rules.RULES)


@pytest.mark.parametrize("name", sorted(COUNTER_EXAMPLES))
def test_a_counter_example_is_refused_naming_its_rule(name):
    data, field = COUNTER_EXAMPLES[name]
    for family in ("fsdp2_tp", "fsdp1_tp"):  # both families that apply tensor-parallel styles
        data = json.loads(json.dumps(data))
        data["plan"]["family"] = family
        with pytest.raises(RuleViolation) as caught:
            Case.from_dict(data).validate()
        assert caught.value.rule.name == name, str(caught.value)
        assert caught.value.field == field
        assert name in str(caught.value) and "torch documents" in str(caught.value)


def test_the_valid_form_of_each_counter_example_validates():
    """The counter-examples break their rule and nothing else: the plans torch documents pass."""
    fixed = {
        "sequence-parallel norm": _with_tp(SP_MLP + [{"path": "body.1", "style": "prepare_output",
                                                      "output_layout": "shard_seq", "desired_layout": "replicate"}],
                                           [{"kind": "mlp", "hidden": 2}, {"kind": "rmsnorm"}]),
        "rowwise on a replicated input": _with_tp([{"path": "body.0", "style": "rowwise",
                                                    "input_layout": "replicate"}], [LIN]),
        "uneven hidden kept a DTensor": _with_tp([{"path": "body.0", "style": "colwise", "use_local_output": False},
                                                 {"path": "body.2", "style": "rowwise"}],
                                                [{"kind": "linear", "out": 3}, GELU, LIN]),
        "loss parallel without smoothing": dict(_smoothed(_with_tp(
            [{"path": "head", "style": "colwise", "output_layout": "shard_last", "use_local_output": False}], [LIN],
            loss_parallel=True)), train={"seq_len": 2, "pad": 0.5}),
        "whole attention": _with_tp([{"path": f"body.0.{x}", "style": "colwise"} for x in "qkv"]
                                    + [{"path": "body.0.o", "style": "rowwise"}], [{"kind": "attention", "heads": 2}]),
    }
    for what, data in fixed.items():
        Case.from_dict(data).validate()  # raises, naming the rule, if it is refused


def test_the_reduction_never_steps_from_a_valid_plan_to_an_invalid_one():
    """The valid plan B722 came from: dropping the norm's SequenceParallel entry is no candidate."""
    valid = json.loads(json.dumps(B722))
    valid["plan"]["tp"].insert(2, {"path": "body.1", "style": "sequence"})
    case = Case.from_dict(valid).validate()
    smaller = [c for _, c in simplifications(case)]
    assert smaller, "the valid plan has simplifications"
    bad = Case.from_dict(B722)
    assert all(c.plan != bad.plan or c.model != bad.model for c in smaller)
    for c in smaller:
        tp_rules.check_rules(c)


def test_repro_refuses_the_invalid_case_naming_the_rule(tmp_path):
    path = tmp_path / "b722ca2695c5ca5c.json"
    path.write_text(json.dumps(B722))
    run = subprocess.run([sys.executable, "-m", "parityfuzz.frontends.repro", str(path)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "tp.parameters-see-full-tensors" in run.stderr and "plan.tp[2]" in run.stderr
    assert "'body.1'" in run.stderr


def _draws(family: str, n: int):
    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(cases(family=family, world_sizes=(1, 2, 3, 4)))
    def drawn(case):
        # finish() validates every draw (a CaseError there fails this test); the rules are asked again here so
        # the test does not rest on that call alone
        case.validate()
        if hasattr(case.plan, "tp"):
            tp_rules.check_rules(case)
    drawn()


@pytest.mark.parametrize("family", sorted(families.MODULES))
def test_strategies_draw_only_valid_plans(family):
    _draws(family, 150)


@pytest.mark.long  # ~2 min
@pytest.mark.parametrize("family", sorted(families.MODULES))
def test_strategies_draw_only_valid_plans_5000(family):
    _draws(family, 5000)


def _composed(applies, body=None, **train):
    body = body or [{"kind": "mlp", "hidden": 2}, LIN]
    return {"seed": 0, "world_size": 2, "mesh": {"shape": [2]},
            "model": {"body": {"kind": "seq", "children": body}},
            "plan": {"family": "composable", "applies": [dict(zip(("api", "path"), a)) for a in applies]},
            "train": train, "schema": 2}


#: composable rule name -> a plan that breaks it alone, and the field the refusal names.
COMPOSABLE_COUNTER_EXAMPLES = {
    "composable.second-call": (_composed([("replicate_fsdp", "body.1"), ("fully_shard", "body.1"),
                                          ("fully_shard", "")]), "plan.applies[1].api"),
    "composable.bottom-up": (_composed([("fully_shard", ""), ("replicate", "body.1")]), "plan.applies[1].path"),
    "composable.every-parameter-managed": (_composed([("fully_shard", "body.1")]), "plan.applies"),
    "composable.replicate-has-parameters": (_composed([("replicate", "body.0"), ("fully_shard", "body.0.fc1"),
                                                       ("fully_shard", "body.0.fc2"), ("fully_shard", "")]),
                                            "plan.applies"),
    "composable.replicate-parameters-fixed": (_composed([("replicate", "body.1"), ("fully_shard", "")],
                                                        frozen=[{"path": "body.1", "until": 1}], steps=2),
                                              "train.frozen"),
    "composable.tied-weights-one-manager": (
        {**_composed([("fully_shard", "inp"), ("fully_shard", "")], body=[{"kind": "linear", "out": 4}]),
         "model": {"body": {"kind": "seq", "children": [{"kind": "linear", "out": 4}]}, "input": "embedding",
                   "in_dim": 4, "vocab": 6, "tie_head": True}}, "plan.applies"),
}


def test_every_composable_rule_has_a_counter_example():
    from parityfuzz.families.composable import rules as composable

    assert sorted(COMPOSABLE_COUNTER_EXAMPLES) == sorted(r.name for r in composable.RULES)


@pytest.mark.parametrize("name", sorted(COMPOSABLE_COUNTER_EXAMPLES))
def test_a_composable_counter_example_is_refused_naming_its_rule(name):
    data, field = COMPOSABLE_COUNTER_EXAMPLES[name]
    with pytest.raises(RuleViolation) as caught:
        Case.from_dict(data).validate()
    assert caught.value.rule.name == name and caught.value.field == field, str(caught.value)
    assert "torch documents" in str(caught.value)


def test_documented_refusals_are_valid_plans_with_their_expected_error():
    """The same API twice on a module, a replicate on a module fully_shard manages: torch documents the error,
    so the plan is valid and the case expects it."""
    for applies, error in (([("fully_shard", "body.1"), ("fully_shard", "body.1"), ("fully_shard", "")],
                            "AssertionError"),
                           ([("fully_shard", "body.1"), ("replicate", "body.1"), ("fully_shard", "")],
                            "RuntimeError")):
        case = Case.from_dict(_composed(applies)).validate()
        assert case.plan.refusal().type == error


#: Two cases of the 2026-11-24 fuzz run on unmodified torch (a crash, a hang) that the rule on per-rank control
#: flow let through: an FSDP1 instance whose only parameters are frozen on the first steps (its pre-backward
#: all-gather runs only on the ranks whose input needs a gradient), and a root whose only managed parameters sit in
#: a per-rank gate (the other module is ignored: the root reduce-scatters on some ranks only).  FSDP1 documents no
#: per-rank control flow; the harness's rule now counts frozen and ignored parameters out.
FSDP1_RANK_FLOW = {
    "frozen instance":
    {'mesh': {'shape': [4]},
     'model': {'body': {'children': [{'by_rank': True,
                                      'children': [{'kind': 'linear', 'out': 3}],
                                      'kind': 'gate',
                                      'period': 2},
                                     {'heads': 1, 'kind': 'attention'},
                                     {'bias': False, 'kind': 'linear', 'out': 3}],
                        'kind': 'seq'},
               'in_dim': 3},
     'plan': {'backward_prefetch': 'BACKWARD_POST',
              'checkpoints': [{'api': 'wrapper', 'path': 'body.1.o'}, {'api': 'apply', 'path': 'body.1.v'}],
              'family': 'fsdp1',
              'limit_all_gathers': False,
              'no_sync': True,
              'wraps': ['body.1.v']},
     'schema': 2,
     'seed': 5165,
     'train': {'batch': 4,
               'dtype': 'float32',
               'foreach': True,
               'frozen': [{'path': 'body.1', 'until': 2}],
               'lr': 0.0004166666666666667,
               'microbatches': 3,
               'optimizer': 'adam',
               'same_input': True,
               'scheduler': 'linear',
               'seq_len': 2,
               'steps': 5,
               'to_float64': True,
               'zero_grad': 'alternate'},
     'world_size': 4},
    "ignored root parameters":
    {'mesh': {'names': ['dp_replicate', 'dp_shard'], 'shape': [1, 2]},
     'model': {'body': {'children': [{'kind': 'layernorm'}, {'kind': 'scale', 'out': 2},
                                     {'by_rank': True,
                                      'children': [{'kind': 'layernorm'}],
                                      'kind': 'gate',
                                      'period': 2}],
                        'kind': 'seq'}},
     'plan': {'backward_prefetch': 'BACKWARD_POST',
              'checkpoints': [{'api': 'wrapper', 'path': 'body.2.inner'}],
              'family': 'fsdp1',
              'hybrid_via': 'mesh',
              'ignored': ['body.0'],
              'ignored_via': 'states',
              'limit_all_gathers': False,
              'sharding': 'HYBRID_SHARD',
              'use_orig_params': False,
              'wraps': ['body.1']},
     'schema': 2,
     'seed': 12685,
     'train': {'loss': 'mean',
               'microbatches': 3,
               'optimizer': 'adam',
               'same_input': True,
               'steps': 7,
               'weight_decay': 0.1,
               'zero_grad': 'alternate'},
     'world_size': 2},
}


@pytest.mark.parametrize("name", sorted(FSDP1_RANK_FLOW))
def test_fsdp1_per_rank_flow_over_frozen_or_ignored_parameters_is_refused(name):
    from parityfuzz.case.errors import CaseError

    with pytest.raises(CaseError, match="per-rank control flow"):
        Case.from_dict(FSDP1_RANK_FLOW[name]).validate()


def test_fsdp1_forward_prefetch_needs_a_static_graph():
    """FSDP1's forward_prefetch "should only be used for static-graph models": with a gate (a module some forwards
    skip) it is refused, naming the rule (the issue-30 run reported such a case's optim_state_dict KeyError as a
    torch bug); the same case without the gate's prefetch is valid."""
    case = {"seed": 0, "world_size": 1, "mesh": {"shape": [1]}, "in_dim": 4,
            "model": {"body": {"kind": "seq", "children": [
                {"kind": "gate", "children": [{"kind": "linear", "out": 4}], "period": 2}, {"kind": "linear", "out": 1}]}},
            "plan": {"family": "fsdp1", "wraps": ["body.0.inner"], "forward_prefetch": True},
            "train": {"steps": 3}, "checkpoint": {"step": 2}, "schema": 2}
    case.pop("in_dim")
    with pytest.raises(RuleViolation) as caught:
        Case.from_dict(case).validate()
    assert caught.value.rule.name == "fsdp1.forward-prefetch-static-graph"
    case["plan"]["forward_prefetch"] = False
    Case.from_dict(case).validate()


def test_fsdp1_checkpointed_region_with_a_per_rank_gate_and_an_instance_is_refused():
    """A checkpointed region holding a per-rank gate and an FSDP1 instance: its recomputation comes before or after
    the instance's pre-backward unshard depending on what the gate ran, so the ranks' all-gathers differ (the
    second issue-30 run reported the hang; the 1-minimal case needs the checkpoint).  Refused naming the
    checkpoints; the same case without the checkpoint is valid."""
    from parityfuzz.case.errors import CaseError

    case = {"seed": 0, "world_size": 2, "mesh": {"shape": [2]},
            "model": {"body": {"kind": "seq", "children": [
                {"kind": "layernorm"},
                {"kind": "gate", "children": [{"kind": "linear", "out": 4}], "period": 2, "by_rank": True}]},
                "input": "embedding", "vocab": 1},
            "plan": {"family": "fsdp1", "wraps": ["body.0"], "checkpoints": [{"path": "body", "api": "apply"}]},
            "schema": 2}
    assert Case.from_dict(case).case_id() == "4511e36c0e5e71d7"
    with pytest.raises(CaseError, match="per-rank control flow") as caught:
        Case.from_dict(case).validate()
    assert caught.value.field == "plan.checkpoints"
    case["plan"]["checkpoints"] = []
    Case.from_dict(case).validate()


def _rollback(optimizer="adam", until=2, load="full", rollback_at=5, step=1):
    """The triaged false alarm's form: body.0 frozen until ``until``, a checkpoint after step 0, a rollback."""
    return Case.from_dict({
        "seed": 0, "world_size": 2,
        "model": {"body": {"kind": "seq", "children": [{"kind": "linear", "out": 4}, {"kind": "linear", "out": 4}]}},
        "mesh": {"shape": [2]}, "plan": {"family": "fsdp2", "wraps": [{"path": ""}]},
        "train": {"steps": 6, "optimizer": optimizer, "frozen": [{"path": "body.0", "until": until}]},
        "checkpoint": {"step": step, "save": load, "flatten_optimizer": True, "strict": False,
                       "rollback_at": rollback_at},
        "schema": 2})


@pytest.mark.parametrize("load", ["full", "dcp"])
def test_a_rollback_over_optimizer_state_the_checkpoint_lacks_is_refused(load):
    """Frozen at the save, trained before the rollback, Adam: set_optimizer_state_dict's treatment of the live state
    the checkpoint lacks is undocumented (kept by the full load, replaced by the sharded one in 2.13)."""
    with pytest.raises(CaseError, match="documents neither replacing nor keeping") as e:
        _rollback(load=load).validate()
    assert e.value.field == "checkpoint.rollback_at"


@pytest.mark.parametrize("change", [dict(optimizer="sgd"), dict(until=0), dict(step=2, until=1), dict(until=5),
                                    dict(rollback_at=2, until=2)])
def test_rollbacks_whose_state_the_checkpoint_holds_stay_valid(change):
    """Stateless SGD, frozen throughout, trained before the save, or not trained before the rollback: valid."""
    _rollback(**change).validate()
