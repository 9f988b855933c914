"""The oracle on hand-made traces: every rank is looked at, replicas must agree, dtypes must be the promised
ones, values must be within the measured noise (or the floor), and the first finding is the one reported."""

import math

import numpy as np
import pytest

from parityfuzz.case.dtypes import EPS, Promise
from parityfuzz.judge.oracle import Tolerance, compare
from parityfuzz.run.trace import ELSEWHERE, RankTrace, Rec, ShardInfo, Trace

PROMISE = Promise(state="float64", outputs={"": "float64"})
TOL = Tolerance("float64", k=10, floor_ulps=32)
FLOOR = 32 * EPS["float64"]


def trace(loss=1.0, grad=(1.0, 2.0), param=(3.0, -4.0), steps=2, dtype="float64", ranks=2) -> Trace:
    """Plain tensors, held whole and alike by every rank (as DDP holds them)."""
    return Trace([RankTrace(
        passes=[(s, "") for s in range(steps)],
        losses=[Rec(dtype, np.array(loss)) for _ in range(steps)],
        grads=[{"w": Rec(dtype, np.array(grad, dtype=np.float64))} for _ in range(steps)],
        params=[{"w": Rec(dtype, np.array(param, dtype=np.float64))} for _ in range(steps)],
    ) for _ in range(ranks)])


def hsdp_trace(full: np.ndarray, steps=1) -> Trace:
    """A (2, 2) (replicate, shard) mesh: ranks 0 and 2 hold rows 0-1, ranks 1 and 3 rows 2-3."""
    ranks = []
    for rank in range(4):
        coord = (rank // 2, rank % 2)
        info = ShardInfo(global_shape=full.shape, placements=(-1, 0), mesh_shape=(2, 2), coord=coord)
        piece = full[2 * coord[1]: 2 * coord[1] + 2].copy()
        ranks.append(RankTrace(passes=[(s, "") for s in range(steps)],
                               losses=[Rec("float64", np.array(1.0)) for _ in range(steps)],
                               grads=[{"w": Rec("float64", piece.copy(), info)} for _ in range(steps)],
                               params=[{"w": Rec("float64", piece.copy(), info)} for _ in range(steps)]))
    return Trace(ranks)


def set_value(t: Trace, what: str, step: int, rank: int | None, index, value):
    """Change one element of tensor ``w`` on one rank (every rank when ``rank`` is None)."""
    for r, rt in enumerate(t.ranks):
        if rank is None or r == rank:
            rec = rt.tensors(what)[step]["w"]
            rec.value = rec.value.copy()
            rec.value[index] = value


def test_identical_traces_pass():
    v = compare(trace(), trace(), PROMISE, TOL)
    assert v.ok and v.closeness == 0


def test_just_inside_and_just_outside_the_floor():
    ref = 2.0
    limit = FLOOR * ref
    inside = trace(grad=(1.0, ref))
    set_value(inside, "grad", 0, None, 1, ref + 0.9 * limit)
    v = compare(trace(grad=(1.0, ref)), inside, PROMISE, TOL)
    assert v.ok and 0.85 < v.closeness < 1
    outside = trace(grad=(1.0, ref))
    set_value(outside, "grad", 0, None, 1, ref + 1.1 * limit)
    v = compare(trace(grad=(1.0, ref)), outside, PROMISE, TOL)
    d = v.divergence
    assert v.kind == "mismatch" and (d.step, d.what, d.tensor, d.check) == (0, "grad", "w", "value")
    assert d.max_abs == pytest.approx(1.1 * limit, rel=0.02) and d.allowed == pytest.approx(limit)
    assert v.closeness == pytest.approx(1.1, rel=0.02)


def test_measured_noise_widens_the_tolerance_by_k_and_no_more():
    ref, noise = trace(), trace()
    set_value(noise, "grad", 1, None, 0, 1.0 + 1e-9)  # the perturbed reference moves by 1e-9 there
    near = trace()
    set_value(near, "grad", 1, None, 0, 1.0 + 9e-9)  # 9x the noise: within k = 10
    assert compare(ref, near, PROMISE, TOL, noise).ok
    assert compare(ref, near, PROMISE, TOL).kind == "mismatch"  # without the noise, only the floor
    far = trace()
    set_value(far, "grad", 1, None, 0, 1.0 + 2e-8)  # 20x the noise
    v = compare(ref, far, PROMISE, TOL, noise)
    assert v.kind == "mismatch" and v.divergence.allowed == pytest.approx(10 * 1e-9 + FLOOR * 2.0, rel=1e-6)
    assert "measured noise 1e-09" in v.divergence.detail


def test_noise_is_pooled_over_passes_relative_to_scale():
    """One perturbed run is one sample of the noise: where its effect on a tensor all but vanishes at a later
    step, the tensor keeps the worst relative noise seen for it so far (a false alarm the 20-minute run met,
    corpus/fsdp2/f32c506e24dde0c3.json: a cancelled attention gradient).  A deviation far beyond the pooled noise still fails."""
    ref, noise = trace(grad=(1.0, 2.0)), trace(grad=(1.0, 2.0))
    set_value(noise, "grad", 0, None, 1, 2.0 + 2e-9)  # step 0: noise 2e-9 at scale 2 (1e-9 relative)
    sut = trace(grad=(1.0, 2.0))
    set_value(sut, "grad", 1, None, 1, 2.0 + 1e-8)  # step 1: no measured noise there, 5x step 0's
    assert compare(ref, sut, PROMISE, TOL, noise).ok  # within k = 10 times the pooled 2e-9
    far = trace(grad=(1.0, 2.0))
    set_value(far, "grad", 1, None, 1, 2.0 + 3e-8)  # 15x
    v = compare(ref, far, PROMISE, TOL, noise)
    assert v.kind == "mismatch" and v.divergence.step == 1
    assert "measured noise 2e-09" in v.divergence.detail
    # The pooled noise is relative: a tensor grown tenfold gets ten times the noise, not the same absolute.
    grown_ref, grown_sut = trace(grad=(1.0, 2.0)), trace(grad=(1.0, 2.0))
    for t in (grown_ref, grown_sut, noise):
        set_value(t, "grad", 1, None, 1, 20.0)  # no measured noise at step 1
    set_value(grown_sut, "grad", 1, None, 1, 20.0 + 1e-7)
    assert compare(grown_ref, grown_sut, PROMISE, TOL, noise).ok  # 10 * 2e-8 allowed
    set_value(grown_sut, "grad", 1, None, 1, 20.0 + 3e-7)
    assert compare(grown_ref, grown_sut, PROMISE, TOL, noise).kind == "mismatch"


def test_several_noise_samples_take_the_largest():
    """Each perturbed run is one sample of the noise; given several, a tensor's noise is the largest of them
    (a LayerNorm over width 2 met in a 20-minute run: one sample measured a thirtieth of the others)."""
    ref, sut = trace(grad=(1.0, 2.0)), trace(grad=(1.0, 2.0))
    set_value(sut, "grad", 0, None, 1, 2.0 + 1e-8)
    small, large = trace(grad=(1.0, 2.0)), trace(grad=(1.0, 2.0))
    set_value(small, "grad", 0, None, 1, 2.0 + 1e-10)
    set_value(large, "grad", 0, None, 1, 2.0 - 2e-9)
    assert compare(ref, sut, PROMISE, TOL, small).kind == "mismatch"
    assert compare(ref, sut, PROMISE, TOL, [small, large]).ok  # 10 * 2e-9 allowed
    assert compare(ref, sut, PROMISE, TOL, [large, small]).ok  # in any order
    far = trace(grad=(1.0, 2.0))
    set_value(far, "grad", 0, None, 1, 2.0 + 3e-8)
    assert compare(ref, far, PROMISE, TOL, [small, large]).kind == "mismatch"


def test_a_gradient_cancelled_across_ranks_is_judged_at_the_scale_of_its_local_terms():
    """A reduced gradient of 1e-3 summed from local ones of 0.2 that cancel: the reduction rounds at the scale of
    the terms (FSDP2 and DDP 60 ulps apart, a LayerNorm bias in a 20-minute run), which the reference records
    per rank before reducing.  The floor then counts those terms, and a real error far beyond still fails."""
    ref, sut = trace(grad=(1e-3, 1e-3)), trace(grad=(1e-3, 1e-3))
    set_value(sut, "grad", 0, None, 1, 1e-3 + 60 * 2 ** -62 * 1.0)
    assert compare(ref, sut, PROMISE, TOL).kind == "mismatch"  # against the reduced gradient's own scale
    for rank, rt in enumerate(ref.ranks):
        rt.local_grad_scales = [{"w": 0.2 if rank else 0.1} for _ in range(2)]
    assert compare(ref, sut, PROMISE, TOL).ok
    set_value(sut, "grad", 0, None, 1, 1e-3 * 1.003)  # a 0.3% error: far beyond the terms' rounding
    assert compare(ref, sut, PROMISE, TOL).kind == "mismatch"


def test_a_late_fault_is_judged_by_that_steps_noise():
    """A model that amplifies rounding: the noise grows with the steps, and a fault at step 3 is still a
    finding when it is well beyond step 3's noise (and not when it is within)."""
    steps = 5
    ref = trace(steps=steps)
    noise = trace(steps=steps)
    for s in range(steps):
        set_value(noise, "param", s, None, 0, 3.0 + 1e-13 * 1000 ** s)  # x1000 per step
    faulty = trace(steps=steps)
    for s in range(3, steps):
        set_value(faulty, "param", s, None, 0, 3.0 * 1.003)  # 0.3% from step 3 on
    v = compare(ref, faulty, PROMISE, TOL, noise)
    assert v.kind == "mismatch" and v.divergence.step == 3
    chaos = trace(steps=steps)
    set_value(chaos, "param", 4, None, 0, 3.0 + 5e-1)  # within k times step 4's noise (0.1)
    assert compare(ref, chaos, PROMISE, TOL, noise).ok


def test_nan_and_infinity():
    def with_grad(value):
        t = trace()
        set_value(t, "grad", 0, None, 0, value)
        return t

    both = compare(with_grad(math.nan), with_grad(math.nan), PROMISE, TOL)
    assert both.ok and "non-finite at step 0" in both.note  # the reference blew up: nothing to compare
    assert compare(trace(), with_grad(math.nan), PROMISE, TOL).divergence.max_abs == math.inf
    assert compare(with_grad(math.inf), with_grad(-math.inf), PROMISE, TOL).ok  # reference non-finite: stop
    v = compare(trace(), with_grad(math.inf), PROMISE, TOL)
    assert v.kind == "mismatch" and v.divergence.check == "value"


def test_nan_loss_on_one_rank_is_caught():
    sut = trace()
    sut.ranks[1].losses[1] = Rec("float64", np.array(math.nan))
    d = compare(trace(), sut, PROMISE, TOL).divergence
    assert (d.what, d.tensor, d.step) == ("loss", "loss[rank 1]", 1)


def test_first_divergence_is_reported_in_pass_order_and_losses_first():
    sut = trace(steps=3)
    set_value(sut, "param", 2, None, 0, 9.0)
    set_value(sut, "grad", 1, None, 0, 9.0)
    assert (compare(trace(steps=3), sut, PROMISE, TOL).divergence.step,
            compare(trace(steps=3), sut, PROMISE, TOL).divergence.what) == (1, "grad")
    sut = trace(loss=1.5)
    set_value(sut, "grad", 0, None, 0, 9.0)
    assert compare(trace(), sut, PROMISE, TOL).divergence.what == "loss"


def test_shapes_missing_tensors_and_gradients():
    sut = trace()
    for rt in sut.ranks:
        rt.grads[0]["w"] = Rec("float64", np.zeros(3))
    assert compare(trace(), sut, PROMISE, TOL).divergence.check == "shape"
    sut = trace()
    del sut.ranks[1].params[0]["w"]
    d = compare(trace(), sut, PROMISE, TOL).divergence
    assert d.check == "missing" and d.ranks == (1,)
    sut = trace()
    for rt in sut.ranks:
        rt.grads[0]["w"] = None
    assert compare(trace(), sut, PROMISE, TOL).divergence.check == "missing_grad"
    assert compare(sut, trace(), PROMISE, TOL).divergence.check == "extra_grad"
    assert compare(sut, sut, PROMISE, TOL).ok


def test_a_gradient_on_some_ranks_only_is_a_finding():
    sut = trace()
    sut.ranks[1].grads[0]["w"] = None
    d = compare(trace(), sut, PROMISE, TOL).divergence
    assert d.check == "uneven_grad" and d.ranks == (1,)


def owned(sut: Trace, holders: set[int]) -> Trace:
    """``sut`` recorded by ownership: only ``holders`` hold ``w``, the other ranks say it is held elsewhere (a
    string equal to :data:`ELSEWHERE`, as it arrives from a rank process)."""
    for r, rt in enumerate(sut.ranks):
        if r not in holders:
            for what in ("grad", "param"):
                for tensors in rt.tensors(what):
                    tensors["w"] = "".join(ELSEWHERE)
    return sut


def test_a_tensor_recorded_by_ownership_is_checked_on_its_holders():
    """A pipeline stage's tensor lives on the ranks of its stage: compared there, replicas among them checked, and
    a tensor no rank holds, or a holder that drifts or lost its gradient, is a finding."""
    assert compare(trace(ranks=4), owned(trace(ranks=4), {1, 3}), PROMISE, TOL).ok
    drift = owned(trace(ranks=4), {1, 3})
    set_value(drift, "param", 1, 3, 1, -4.0 * (1 + 1e-6))
    d = compare(trace(ranks=4), drift, PROMISE, TOL).divergence
    assert d.check == "replica" and d.ranks == (1, 3)
    wrong = owned(trace(ranks=4, grad=(1.0, 2.001)), {1, 3})
    d = compare(trace(ranks=4), wrong, PROMISE, TOL).divergence
    assert d.check == "value" and d.what == "grad"
    nobody = owned(trace(ranks=2), set())
    d = compare(trace(ranks=2), nobody, PROMISE, TOL).divergence
    assert d.check == "missing" and "held by no rank" in d.detail
    lost = owned(trace(ranks=4), {1, 3})
    lost.ranks[3].grads[0]["w"] = None
    d = compare(trace(ranks=4), lost, PROMISE, TOL).divergence
    assert d.check == "uneven_grad" and d.ranks == (3,)


def test_plain_tensors_are_compared_on_every_rank():
    """A rank whose plain copy drifts is a finding, though rank 0 matches the reference."""
    sut = trace(ranks=4)
    set_value(sut, "param", 1, 3, 1, -4.0 * (1 + 1e-6))
    v = compare(trace(ranks=4), sut, PROMISE, TOL)
    d = v.divergence
    assert v.kind == "mismatch" and d.check == "replica" and d.ranks == (0, 3) and d.step == 1
    assert "on ranks [0, 3]: replicas disagree" in v.describe()


def test_hsdp_replicas_must_agree_though_the_full_tensor_matches():
    full = np.arange(8.0).reshape(4, 2)
    ref, sut = hsdp_trace(full), hsdp_trace(full)
    rank2 = sut.ranks[2].grads[0]["w"]
    rank2.value = rank2.value * 1.001  # rank 2's replica of rows 0-1 drifts; rank 0's is right
    assert np.array_equal(sut.full(0, "grad", "w").value, full)  # what the last-writer assembly hid
    d = compare(ref, sut, PROMISE, TOL).divergence
    assert d.check == "replica" and d.ranks == (0, 2) and d.what == "grad"
    assert "system under test" in d.detail


def test_a_local_tensor_must_have_the_shape_its_placements_give():
    """A DTensor whose local piece disagrees with its placements (fully_shard turned an empty (8, 0) tp piece into
    (0, 0): its full_tensor() is wrong) is a finding, even where the piece holds no value to compare; the rank
    and both shapes are named."""
    def empty_tp(local_shape) -> Trace:
        ranks = []
        for rank in range(2):  # a (1, 2) (dp_shard, tp) mesh: Shard(0) over dp, Shard(1) over tp of a (4, 1) weight
            info = ShardInfo(global_shape=(4, 1), placements=(0, 1), mesh_shape=(1, 2), coord=(0, rank))
            piece = np.ones((4, 1)) if rank == 0 else np.zeros(local_shape)
            ranks.append(RankTrace(passes=[(0, "")], losses=[Rec("float64", np.array(1.0))],
                                   grads=[{}], params=[{"w": Rec("float64", piece, info)}]))
        return Trace(ranks)

    assert compare(empty_tp((4, 0)), empty_tp((4, 0)), PROMISE, TOL).ok
    d = compare(empty_tp((4, 0)), empty_tp((0, 0)), PROMISE, TOL).divergence
    assert d.check == "local_shape" and d.ranks == (1,) and d.what == "param"
    assert "system under test" in d.detail and "[0, 0]" in d.detail and "[4, 0]" in d.detail


def test_the_references_replicas_must_agree_too():
    ref = trace(ranks=2)
    set_value(ref, "grad", 0, 1, 0, 1.5)
    d = compare(ref, trace(ranks=2), PROMISE, TOL).divergence
    assert d.check == "replica" and "reference" in d.detail


def test_dtypes_must_be_the_promised_ones_even_where_values_agree():
    sut = trace()
    sut.ranks[1].params[0]["w"].dtype = "float32"
    d = compare(trace(), sut, PROMISE, TOL).divergence
    assert (d.check, d.what, d.ranks) == ("dtype", "param", (1,)) and "promised float64" in d.detail
    sut = trace()
    sut.ranks[0].losses[0] = Rec("bfloat16", np.array(1.0))
    d = compare(trace(), sut, Promise(state="float64", outputs={"": "float32"}), TOL).divergence
    assert (d.check, d.what) == ("dtype", "loss") and "bfloat16, promised float32" in d.detail


def test_passes_must_agree():
    v = compare(trace(steps=2), trace(steps=1), PROMISE, TOL)
    assert v.divergence.check == "passes"


def test_comparison_stops_only_where_the_reference_is_non_finite():
    ref, sut = trace(steps=3), trace(steps=3)
    set_value(ref, "grad", 1, None, 0, 1e9)  # large but finite: still compared
    set_value(sut, "grad", 1, None, 0, 1e9 * (1 + 1e-6))
    assert compare(ref, sut, PROMISE, TOL).divergence.step == 1
    ref, sut = trace(steps=3), trace(steps=3)
    set_value(ref, "grad", 1, None, 0, math.inf)
    set_value(sut, "param", 2, None, 0, 7.0)
    v = compare(ref, sut, PROMISE, TOL)
    assert v.ok and "non-finite at step 1" in v.note


def skipping(t: Trace, step: int, ranks=None) -> Trace:
    """``t`` with the GradScaler of ``ranks`` (every rank: None) skipping step ``step``: no gradients recorded
    there, the parameters those of the step before."""
    for r, rt in enumerate(t.ranks):
        rt.skipped = [s == step and (ranks is None or r in ranks) for s in range(len(rt.passes))]
        if rt.skipped[step]:
            rt.grads[step] = {}
    return t


def test_a_step_one_system_skipped_alone_is_reported_as_a_skipped_step():
    v = compare(trace(steps=3), skipping(trace(steps=3), 1), PROMISE, TOL)
    d = v.divergence
    assert (d.check, d.what, d.step, d.ranks) == ("skipped_step", "optimizer", 1, (0, 1)), v.describe()
    assert v.describe().startswith("mismatch: step 1 optimizer step on ranks [0, 1]: "), v.describe()
    assert "system under test the GradScaler of ranks 0, 1 skipped" in d.detail
    v = compare(skipping(trace(steps=3), 2), trace(steps=3), PROMISE, TOL)
    assert (v.divergence.check, v.divergence.step) == ("skipped_step", 2)
    assert "in the reference the GradScaler of ranks 0, 1 skipped" in v.divergence.detail
    # one rank skipping where the others step: the ranks named are the ones that differ
    v = compare(trace(steps=3), skipping(trace(steps=3), 1, ranks={1}), PROMISE, TOL)
    assert (v.divergence.check, v.divergence.ranks) == ("skipped_step", (1,))
    # both skipping alike: a pass
    assert compare(skipping(trace(steps=3), 1), skipping(trace(steps=3), 1), PROMISE, TOL).ok


def test_a_skip_that_rounding_decides_stops_the_comparison_before_it():
    # a perturbed reference stepped where the reference skipped: whether step 1 overflows is decided by rounding,
    # so the system's stepping there (and its parameters after) is not a finding; step 0 is still compared
    ref, noise, sut = skipping(trace(steps=3), 1), trace(steps=3), trace(steps=3)
    set_value(sut, "param", 2, None, 0, 7.0)
    v = compare(ref, sut, PROMISE, TOL, noise=noise)
    assert v.ok and "skip of the step at step 1 is decided by rounding" in v.note, v.note
    set_value(sut, "param", 0, None, 0, 7.0)
    assert compare(ref, sut, PROMISE, TOL, noise=noise).divergence.step == 0


def test_system_blowing_up_alone_is_a_mismatch():
    sut = trace()
    set_value(sut, "grad", 0, None, 0, 1e9)
    assert compare(trace(), sut, PROMISE, TOL).kind == "mismatch"


def test_tolerance_is_relative_to_the_tensor_scale():
    ref = trace(grad=(8e4, 0.03))
    noisy = trace(grad=(8e4, 0.03 + 2.3e-12))  # rounding of the large terms, on a small element
    assert compare(ref, noisy, PROMISE, TOL).ok
    wrong = trace(grad=(8e4, 0.06))  # a real fault on the small element alone is still caught
    assert compare(ref, wrong, PROMISE, TOL).kind == "mismatch"


def test_non_root_pass_is_named_in_the_divergence():
    passes = [(0, ""), (0, "non-root body.1"), (1, ""), (1, "non-root body.1")]
    ref, sut = trace(steps=4), trace(steps=4)
    for t in (ref, sut):
        for rt in t.ranks:
            rt.passes = list(passes)
    set_value(sut, "grad", 3, None, 0, 1.5)
    v = compare(ref, sut, Promise(state="float64", outputs={"": "float64", "non-root body.1": "float64"}), TOL)
    d = v.divergence
    assert (d.step, d.phase, d.what) == (1, "non-root body.1", "grad")
    assert "step 1 (non-root body.1 pass) grad w" in v.describe()
    assert v.signature() == "mismatch:1:non-root body.1:grad:w"
    assert v.bug_signature() == "mismatch:value:grad"


def test_noise_from_a_run_of_other_passes_is_not_used():
    noise = trace(steps=1)
    set_value(noise, "grad", 0, None, 0, 5.0)
    sut = trace()
    set_value(sut, "grad", 0, None, 0, 2.0)
    assert compare(trace(), sut, PROMISE, TOL, noise).kind == "mismatch"


def test_an_analytically_zero_gradient_is_judged_at_its_modules_scale():
    """Attention's key bias gets a zero gradient analytically; FSDP2 and DDP compute different rounding residues
    of key gradients of the key weight's size.  The floor is at the module's scale, so residues agree, while an
    error on the weight itself is still caught."""
    def attn(bias, weight=(1.0, -2.0)):
        return Trace([RankTrace(passes=[(0, "")], losses=[Rec("float64", np.array(1.0))],
                                grads=[{"k.weight": Rec("float64", np.array(weight)),
                                        "k.bias": Rec("float64", np.array([bias]))}],
                                params=[{}]) for _ in range(2)])
    assert compare(attn(4.2e-18), attn(0.6e-18), PROMISE, TOL).ok
    assert compare(attn(4.2e-18), attn(4.2e-18, weight=(1.0, -2.0 * 1.005)), PROMISE, TOL).kind == "mismatch"
    assert compare(attn(0.5), attn(0.5 * 1.005), PROMISE, TOL).kind == "mismatch"


def test_a_module_whose_reference_is_all_zero_takes_the_pass_scale():
    """Upstream of a LayerNorm over width 1 every gradient is analytically zero: the reference may compute exact
    zeros where the system under test keeps rounding residues of the gradients flowing in (a 20-minute run
    met one, 6e-17 against 0).  Such a module's floor is set by the largest tensor of the pass."""
    def two_modules(residue: float) -> Trace:
        grads = {"a.weight": Rec("float64", np.array([0.3, -0.2])), "z.bias": Rec("float64", np.array([residue]))}
        return Trace([RankTrace(passes=[(0, "")], losses=[Rec("float64", np.array(1.0))], grads=[grads],
                                params=[{"a.weight": Rec("float64", np.array([1.0]))}]) for _ in range(2)])

    assert compare(two_modules(0.0), two_modules(6e-17), PROMISE, TOL).ok  # 32 ulps of 0.3 allowed
    v = compare(two_modules(0.0), two_modules(1e-13), PROMISE, TOL)
    assert v.kind == "mismatch" and v.divergence.tensor == "z.bias"


def test_linears_inside_a_block_share_the_blocks_scale():
    """The analytically-zero gradient of attention's key bias is a rounding residue of the block's terms: with
    the block as its scale group, a residue of a few ulps of the block's largest gradient passes, and it is
    judged against the key weight alone otherwise (tensor parallelism showed 100 ulps of that)."""
    def block(kb: float) -> Trace:
        tensors = {"blk.k.weight": Rec("float64", np.array([1e-3])), "blk.k.bias": Rec("float64", np.array([kb])),
                   "blk.o.weight": Rec("float64", np.array([1.0]))}
        return Trace([RankTrace(passes=[(0, "")], losses=[Rec("float64", np.array(1.0))], grads=[dict(tensors)],
                                params=[dict(tensors)]) for _ in range(2)])

    residue = 10 * EPS["float64"]  # 10 ulps of the block's scale, 1e4 ulps of the key weight's
    grouped = Tolerance("float64", k=10, floor_ulps=32, scale_groups=(("blk.k", "blk"), ("blk.o", "blk")))
    assert compare(block(0.0), block(residue), PROMISE, grouped).ok
    v = compare(block(0.0), block(residue), PROMISE, TOL)
    assert v.kind == "mismatch" and v.divergence.tensor == "blk.k.bias"
    assert compare(block(0.0), block(100 * residue), PROMISE, grouped).kind == "mismatch"  # 1000 ulps: no
