"""verify_case's measuring of the noise, on a scripted executor: a case is first compared against the rounding
floor, a value mismatch against one perturbed run, and one that stands against it against
:data:`~parityfuzz.judge.tolerance.NOISE_SAMPLES` of them; it is reported only then (``parityfuzz.judge.verify``)."""

import json

import pytest

from parityfuzz.case import Case
from parityfuzz.executor.pool import RankOutcome
from parityfuzz.judge.tolerance import NOISE_SAMPLES
from parityfuzz.judge.verify import verify_case
from tests.test_oracle import set_value, trace

CASE = Case.from_json(json.dumps({"seed": 0, "world_size": 2, "plan": {"family": "zero"}, "mesh": {"shape": [2]},
                                  "model": {"body": {"kind": "seq", "children": [{"kind": "mlp", "hidden": 2}]}},
                                  "schema": 2}))
#: The rounding-level noise of a well-conditioned step, and the O(1) change a perturbation makes at a chaotic one.
ROUNDING, FLIP = 1e-13, 0.5


class ScriptedExecutor:
    """Answers each run with hand-made traces: the reference's, the system's, and per noise sample the
    perturbed reference's (sample ``i`` is role ``perturbed_reference/i``, sample 0 plain
    ``perturbed_reference``), and keeps the roles each run asked for."""

    def __init__(self, system_error: float, flips: set[int]):
        self.runs: list[tuple[str, ...]] = []
        self.reference, self.system = trace(steps=3), trace(steps=3)
        set_value(self.system, "grad", 2, None, 0, 1.0 + system_error)
        self.noise = []
        for sample in range(NOISE_SAMPLES):
            t = trace(steps=3)
            set_value(t, "grad", 2, None, 0, 1.0 + (FLIP if sample in flips else ROUNDING))
            self.noise.append(t)

    def device_type(self, world_size):
        return "cpu"

    def role(self, role: str):
        if role in ("reference", "system"):
            return getattr(self, role)
        name, _, sample = role.partition("/")
        assert name == "perturbed_reference", role
        return self.noise[int(sample or 0)]

    def run_segments(self, case, timeout_s=None, roles=("reference", "system"), probe=False):
        self.runs.append(roles)
        return [[RankOutcome(rank=r, status="ok", result={role: self.role(role).ranks[r] for role in roles})
                 for r in range(case.world_size)]]


def samples_measured(executor: ScriptedExecutor) -> int:
    return sum(role.startswith("perturbed_reference") for roles in executor.runs for role in roles)


def test_a_difference_within_the_floor_measures_no_noise():
    executor = ScriptedExecutor(system_error=1e-15, flips=set())
    assert verify_case(CASE, executor).ok
    assert samples_measured(executor) == 0


def test_a_difference_one_sample_explains_measures_no_more():
    executor = ScriptedExecutor(system_error=0.3, flips={0})
    assert verify_case(CASE, executor).ok
    assert samples_measured(executor) == 1


@pytest.mark.parametrize("flipping_sample", [1, NOISE_SAMPLES // 2, NOISE_SAMPLES - 1])
def test_a_chaotic_step_is_explained_by_whichever_sample_flips(flipping_sample):
    """A far miss (0.3 where rounding is 1e-13: 1e12 times what one sample allowed) at a step where a few
    perturbations change the gradient by O(1) is no finding: the issue-30 ZeRO false alarm, whose step-6
    gradient 9 of 40 perturbed runs changed by 7% to 100% and the first one by 1e-13."""
    executor = ScriptedExecutor(system_error=0.3, flips={flipping_sample})
    verdict = verify_case(CASE, executor)
    assert verdict.ok, verdict.describe()
    assert samples_measured(executor) == NOISE_SAMPLES


@pytest.mark.parametrize("error", [3e-3, 0.3, 10.0])
def test_a_mismatch_no_sample_explains_is_reported_after_every_sample(error):
    executor = ScriptedExecutor(system_error=error, flips=set())
    verdict = verify_case(CASE, executor)
    assert verdict.kind == "mismatch" and verdict.divergence.check == "value", verdict.describe()
    assert (verdict.divergence.step, verdict.divergence.what, verdict.divergence.tensor) == (2, "grad", "w")
    assert samples_measured(executor) == NOISE_SAMPLES
    # Each sample is its own perturbation: the same sample run twice would measure the same noise.
    asked = [role for roles in executor.runs for role in roles if role.startswith("perturbed_reference")]
    assert len(set(asked)) == NOISE_SAMPLES


#: The ninth 30-minute run's harness false alarm, reduced to one rank: FSDP2 with bfloat16 parameters around an
#: attention block whose v-projection FSDP2 keeps in float64 (cast back to bfloat16), the block compiled with
#: aot_eager before fully_shard. The compiled graph (AOTAutograd's decompositions) rounds in bfloat16 otherwise
#: than the eager kernels the reference runs: inp.weight's gradient came out 0.28 bfloat16 ulps of its scale away,
#: where the perturbed runs measure no noise at all (a perturbation of float64 weights vanishes in the cast).
COMPILED_MIXED_PRECISION = (
    '{"seed": 1045, "world_size": 1, "model": {"body": {"kind": "seq", "children": [{"kind": "attention", '
    '"heads": 2}]}, "input": "embedding", "vocab": 8}, "mesh": {"shape": [1], "names": ["dp_shard"]}, "plan": '
    '{"family": "fsdp2", "wraps": [{"path": "body", "param_dtype": "bfloat16", "output_dtype": "float64"}, '
    '{"path": "body.0.v", "param_dtype": "float64", "output_dtype": "bfloat16"}, {"path": ""}]}, "train": '
    '{"steps": 1, "seq_len": 3, "momentum": 0.5, "dtype": "float64"}, "compile": {"backend": "aot_eager", '
    '"form": "blocks_before", "paths": ["body.0"]}, "schema": 2}')


def test_a_compiled_system_computing_in_low_precision_is_allowed_that_precision_s_rounding(executor):
    import dataclasses

    from parityfuzz.case.compiled import Compile
    from parityfuzz.judge.verify import tolerance

    case = Case.from_json(COMPILED_MIXED_PRECISION).validate()
    assert tolerance(case).unpinned_dtype == "bfloat16"
    assert tolerance(dataclasses.replace(case, compile=Compile())).unpinned_dtype == ""  # eager: bit for bit
    verdict = verify_case(case, executor)
    assert verdict.ok, verdict.describe()


def test_a_tied_weight_whose_uses_a_reentrant_checkpoint_splits_is_allowed_its_accumulation_order():
    """corpus/fsdp2/c508bb17d65aee99.json (a harness false alarm): a reentrant checkpoint on a tied head under a
    float16 policy, accumulated over 2 microbatches, sums the tied weight's gradient in another order than the
    reference, one float16 rounding apart.  The float16 allowance comes with exactly that: a split of the uses
    (the head or the embedding alone, not the root holding both; a module called twice, checkpointed per call),
    a reentrant checkpoint, 2+ microbatches, a param_dtype below the model's."""
    import dataclasses

    from parityfuzz.case.dtypes import split_uses, unpinned_dtype
    from parityfuzz.triage import corpus

    case = corpus.load("corpus/fsdp2/c508bb17d65aee99.json").case
    assert split_uses(case) == ["head"] and unpinned_dtype(case) == "float16"

    def changed(case, **train):
        return dataclasses.replace(case, train=dataclasses.replace(case.train, **train))

    def checkpointed(case, path, reentrant=True):
        c = dataclasses.replace(case.plan.checkpoints[0], path=path, reentrant=reentrant)
        return dataclasses.replace(case, plan=dataclasses.replace(case.plan, checkpoints=(c,)))

    assert unpinned_dtype(changed(case, microbatches=1)) == ""
    assert unpinned_dtype(checkpointed(case, "head", reentrant=False)) == ""
    assert unpinned_dtype(checkpointed(case, "")) == ""  # one nested backward holds both uses
    assert unpinned_dtype(dataclasses.replace(case, model=dataclasses.replace(case.model, tie_head=False))) == ""
    wide = dataclasses.replace(case.plan.wraps[0], param_dtype="", reduce_dtype="")
    assert unpinned_dtype(dataclasses.replace(case, plan=dataclasses.replace(case.plan, wraps=(wide,)))) == ""

    twice = Case.from_json(json.dumps({
        "seed": 1, "world_size": 1, "model": {"body": {"kind": "twice", "children": [{"kind": "linear", "out": 4}]}},
        "mesh": {"shape": [1]}, "plan": {"family": "fsdp2", "wraps": [{"path": "", "param_dtype": "bfloat16"}],
                                         "checkpoints": [{"path": "body.0", "reentrant": True}]},
        "train": {"microbatches": 2}, "schema": 2}))
    assert split_uses(twice) == ["body.0"] and unpinned_dtype(twice) == "bfloat16"
    assert split_uses(checkpointed(twice, "body")) == []  # both calls in one checkpoint


def test_a_wrapped_module_whose_input_a_residual_also_uses_is_allowed_the_autocast_sum_order():
    """corpus/fsdp2/4b515ce06f6769d0.json (a harness false alarm): under float16 autocast, fully_shard on the
    attention inside a residual sums its input's q, k and v gradients before the skip's joins them (its
    post-backward autograd function), DDP in another order.  The autocast dtype's allowance comes with exactly
    that: a wrap at a residual's inner module, eager, under autocast."""
    import dataclasses

    from parityfuzz.case.dtypes import forked_wraps, unpinned_dtype
    from parityfuzz.triage import corpus

    case = corpus.load("corpus/fsdp2/4b515ce06f6769d0.json").case
    assert forked_wraps(case) == ["body.1.inner"] and unpinned_dtype(case) == "float16"

    def wrapped(*paths):
        return dataclasses.replace(case, plan=dataclasses.replace(
            case.plan, wraps=tuple(dataclasses.replace(case.plan.wraps[-1], path=p) for p in paths)))

    assert unpinned_dtype(wrapped("")) == ""  # the root alone
    assert unpinned_dtype(wrapped("body.1", "")) == ""  # the residual whole: the skip inside it
    assert unpinned_dtype(dataclasses.replace(case, train=dataclasses.replace(case.train, autocast=""))) == ""


def test_the_composable_family_s_fsdp2_based_calls_on_a_residual_s_inner_module_get_the_same_allowance():
    """corpus/composable/4318bdf0e323ffd3.json (a harness false alarm of the fault benchmark of 2026-11-29, 11.5%
    relative on cancelled embedding elements): replicate_with_fsdp is an FSDPState, and its pre-forward runs the
    inner module's inputs through the same post-backward autograd function as fully_shard.  The DDP-based replicate
    adds no node there (measured: it passes) and gets no allowance."""
    import dataclasses

    from parityfuzz.case.dtypes import forked_wraps, unpinned_dtype
    from parityfuzz.triage import corpus

    case = corpus.load("corpus/composable/4318bdf0e323ffd3.json").case
    assert forked_wraps(case) == ["body.1.inner"] and unpinned_dtype(case) == "float16"

    def inner_api(api):
        applies = tuple(dataclasses.replace(a, api=api) if a.path == "body.1.inner" else a for a in case.plan.applies)
        return dataclasses.replace(case, plan=dataclasses.replace(case.plan, applies=applies))

    assert unpinned_dtype(inner_api("fully_shard")) == "float16"
    assert forked_wraps(inner_api("replicate")) == [] and unpinned_dtype(inner_api("replicate")) == ""


#: A 10-minute run's harness false alarm (2026-11-27): FSDP1 with bfloat16 parameters, the model compiled with
#: aot_eager, Adam.  Every gradient agreed with the reference within the compiled-precision floor; after step 0 one
#: of 25 elements of the attention's v weight was 0.02 off, twice the learning rate: Adam's first update is about
#: lr * sign(gradient), and the compiled bfloat16 rounding flipped the sign of a near-zero gradient element.  The
#: perturbed runs moved gradients by float64 ulps only, so they measured nothing of the kind.
COMPILED_BF16_ADAM = (
    '{"seed": 569, "world_size": 2, "model": {"body": {"kind": "seq", "children": [{"kind": "attention", "heads": 1}, '
    '{"kind": "residual", "children": [{"kind": "dropout", "p": 0.1}]}, {"kind": "act", "fn": "gelu"}, {"kind": '
    '"linear", "out": 4}]}, "in_dim": 5}, "mesh": {"shape": [2]}, "plan": {"family": "fsdp1", "precision": '
    '{"param_dtype": "bfloat16"}}, "train": {"optimizer": "adam", "batch": 3, "loss": "mean", "same_input": true}, '
    '"compile": {"backend": "aot_eager", "form": "model"}, "schema": 2}')


def test_the_perturbed_runs_move_gradients_as_far_as_a_compiled_low_precision_system_may(executor):
    """The gradient perturbation reaches the compiled precision's allowance (UNPINNED_ULPS of it at the module's
    scale) where a compiled system computes below the model's dtype, and only there; so the noise measured after
    Adam's step covers a near-zero gradient whose sign the compiled rounding flips (the case above passes, noted as
    loosely checked), and an eager case keeps the float64 perturbation."""
    import torch

    from parityfuzz.case.dtypes import EPS
    from parityfuzz.judge.tolerance import UNPINNED_ULPS
    from parityfuzz.run.train import perturb_gradients

    def moved(unpinned_eps):
        p = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
        q = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
        p.grad = torch.tensor([0.5, -2.0, 1e-9, 0.0], dtype=torch.float64)
        q.grad = torch.tensor([3.0, 0.0], dtype=torch.float64)  # another module: its own scale
        before = p.grad.clone(), q.grad.clone()
        perturb_gradients([("a.weight", p), ("b.weight", q)], seed=1, unpinned_eps=unpinned_eps)
        return (p.grad - before[0]).abs(), (q.grad - before[1]).abs()

    eps64 = torch.finfo(torch.float64).eps
    a, b = moved(0.0)
    assert torch.allclose(a, torch.full_like(a, 2 * eps64 * 2.0)) and torch.allclose(b, torch.full_like(b, 2 * eps64 * 3.0))
    a, b = moved(EPS["bfloat16"])
    size = 2 * eps64 + UNPINNED_ULPS * EPS["bfloat16"]
    assert torch.allclose(a, torch.full_like(a, size * 2.0)) and torch.allclose(b, torch.full_like(b, size * 3.0))

    case = Case.from_json(COMPILED_BF16_ADAM).validate()
    verdict = verify_case(case, executor)
    assert verdict.ok and "loosely checked" in verdict.note, verdict.describe()
