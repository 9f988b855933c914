"""Open torch bugs the fuzzer has found and a person has triaged.

A failing case counts as a known bug ("known torch bug, <name>" in the run summary) instead of failing the
run only when all three hold:

- the case meets the bug's precondition (what the shrunk cases needed);
- the failure has one of the bug's signatures (:meth:`fuzz.verdict.Verdict.bug_signature`: the verdict kind,
  what failed, and for an error the exception type and innermost torch frame), so another bug that happens
  to need the same features still fails the run;
- the bug has triaged corpus files (``expect: fail`` with a ``known_issue``); they replay as strict xfails
  and turn loud (XPASS) when torch fixes the bug.  Remove the entry then.

A corpus file without a ``known_issue`` (a fresh finding, "triage me") silences nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from parityfuzz import dtypes
from parityfuzz.case import Case
from parityfuzz.case.checkpoint import DCP_FAMILIES, FSDP1_FAMILIES
from parityfuzz.case.model import under
from parityfuzz.families.fsdp1 import HYBRID, units
from parityfuzz.verdict import Verdict


@dataclass(frozen=True)
class KnownBug:
    name: str  # no colon: the run summary keys notes by the text before the first one
    corpus_files: tuple[str, ...]
    applies: Callable[[Case], bool]
    signatures: tuple[str, ...]
    #: The families whose cases it can explain (``applies`` reads their plans).
    families: tuple[str, ...] = ("fsdp2",)
    #: What torch promises that the bug breaks: the documentation or source line (file, API, quoted words).
    violates: str = ""
    #: The upstream report: ``pytorch/pytorch#N`` (or another repository's), or ``none found (searched: ...)``
    #: with the search terms used.
    upstream: str = ""
    #: ``public`` or ``private: <why>`` (an underscore module such as ``torch.distributed._composable`` promises
    #: less; the report says so).
    api: str = "public"
    #: ``wrong training`` (values, errors, hangs) or ``gradient presence`` (None against zeros where the
    #: documentation leaves it open: reported apart, judged by whether it changes training).
    kind: str = "wrong training"

    def explains(self, case: Case, verdict: Verdict) -> bool:
        """Whether this bug explains ``verdict`` on ``case``: on the case itself, or (a checkpoint event) on the
        case the load resumes, which trains the steps after it."""
        if verdict.ok or verdict.bug_signature() not in self.signatures:
            return False
        return any(c.family in self.families and self.applies(c)
                   for c in ((case, case.resumed()) if case.checkpoint else (case,)))


def _gated(case: Case) -> bool:
    return any(n.kind == "gate" for _, n in case.model.body.walk("body"))


def _hsdp_deferred_all_reduce_with_gated_params(case: Case) -> bool:
    return case.plan.no_all_reduce and _gated(case)


def _mixed_precision_accumulation_with_gated_params(case: Case) -> bool:
    return _gated(case) and case.mixed_precision() and case.train.microbatches > 1 and bool(case.plan.no_sync)


def _rank_flow_with_several_groups(case: Case) -> bool:
    return case.plan.reduce_scatter_unused and len(case.plan.wraps) > 1


def _clipping_a_partly_tensor_parallel_fsdp2_model(case: Case) -> bool:
    """Gradients on two meshes: FSDP2 over some tensor-parallel modules and some plain ones."""
    parallel = {p.path for p in case.plan.tp}
    return (case.train.clip > 0 and bool(case.plan.wraps) and bool(parallel)
            and any(m not in parallel for m in case.model.param_modules()))


def _empty_on_some_rank(n: int, tp: int) -> bool:
    """Whether a dimension of ``n`` split over ``tp`` ranks (``torch.chunk``'s rule: pieces of ceil(n / tp))
    leaves some rank nothing: 1 over 2, and also 5 over 4 (2, 2, 1, 0)."""
    return n < tp or math.ceil(n / math.ceil(n / tp)) < tp


def _split_sizes(case: Case) -> list[int]:
    """The size of the dimension each colwise/rowwise module splits over tp."""
    def split(p) -> int:
        if p.path == "inp":
            return case.model.vocab
        return case.model.output_width(p.path) if p.style == "colwise" else case.model.input_width(p.path) or 0

    return [split(p) for p in case.plan.tp if p.style in ("colwise", "rowwise")]


def _a_split_dimension_of_size_one_or_below_tp(case: Case) -> bool:
    """A parallelized module whose split dimension has size 1, or is smaller than tp (a rank holds nothing)."""
    tp = case.mesh.axis_size("tp")
    return any(n == 1 or _empty_on_some_rank(n, tp) for n in _split_sizes(case))


def _fsdp2_over_an_empty_tensor_parallel_shard(case: Case) -> bool:
    """FSDP2 over a parallelized module whose split dimension leaves some tp rank nothing."""
    tp = case.mesh.axis_size("tp")
    return bool(case.plan.wraps) and any(_empty_on_some_rank(n, tp) for n in _split_sizes(case))


def _has_bias(case: Case, path: str) -> bool:
    """Whether the Linear at ``path`` has a bias (the Linears inside MLP and attention blocks all do)."""
    if path == "head":
        return not case.model.tie_head
    node = dict(case.model.body.walk("body")).get(path)
    return node.bias if node is not None else True


def _tp_replicated_gradient_under_a_reduce_dtype(case: Case) -> bool:
    """A parameter that TP replicates (a SequenceParallel module's, a RowwiseParallel Linear's bias: its gradient
    is Partial over tp) in an FSDP2 group whose reduce_dtype is not that gradient's dtype."""
    plan = case.plan
    wraps = {w.path: w for w in plan.wraps}
    kinds = dict(case.model.module_paths())
    for p in plan.tp:
        replicated = p.style == "sequence" or (p.style == "rowwise" and kinds[p.path] == "linear"
                                               and _has_bias(case, p.path))
        w = wraps.get(plan.owner(p.path)) if replicated else None
        if w is not None and w.reduce_dtype and w.reduce_dtype != (w.param_dtype or dtypes.model_dtype(case)):
            return True
    return False


def _a_frozen_sequence_parallel_module(case: Case) -> bool:
    return any(p.style == "sequence" and case.train.frozen_at(f"{p.path}.weight", 0) for p in case.plan.tp)


def _foreach_zeroing_of_sequence_parallel_gradients(case: Case) -> bool:
    """TP alone (no FSDP2 to redistribute gradients), a sequence-parallel norm, foreach zero_grad(set_to_none=False)."""
    return (not case.plan.wraps and case.train.foreach and case.train.zero_grad in ("zeros", "alternate")
            and case.train.steps > 1
            and any(p.style == "sequence" for p in case.plan.tp))


def _loss_parallel_with_a_rank_holding_no_vocabulary(case: Case) -> bool:
    return case.plan.loss_parallel and _empty_on_some_rank(case.model.vocab, case.mesh.axis_size("tp"))


def _hybrid_fsdp1_with_shards_of_one(case: Case) -> bool:
    return (case.plan.sharding in HYBRID and case.mesh.axis_size("dp_shard") == 1
            and case.mesh.axis_size("dp_replicate") > 1)


def _fsdp1_clipping_float64_gradients(case: Case) -> bool:
    return case.train.clip > 0 and (case.train.dtype == "float64" or case.train.to_float64)


def _foreach_sgd_weight_decay_over_plain_and_tensor_parallel_params(case: Case) -> bool:
    """TP alone (plain and DTensor parameters in one optimizer), foreach SGD with momentum and weight decay, and
    a parameter whose momentum buffer starts later than the others' (frozen at first)."""
    t = case.train
    return (not case.plan.wraps and t.optimizer == "sgd" and t.foreach and t.momentum > 0
            and (t.weight_decay > 0 or any(g.weight_decay > 0 for g in t.groups)) and any(f.until for f in t.frozen))


def _fsdp1_flat_unit_unused_in_the_last_backward(case: Case) -> bool:
    return (not case.plan.use_orig_params and _gated(case)
            and (case.train.zero_grad != "none" or case.train.microbatches > 1))


def _fsdp1_no_shard_no_sync_unfrozen(case: Case) -> bool:
    """FSDP1 NO_SHARD (or a one-rank shard group), use_orig_params=True, no_sync() accumulation, and a parameter
    frozen at first and unfrozen on a later step."""
    no_shard = case.plan.sharding == "NO_SHARD" or case.mesh.axis_size("dp_shard") == 1
    return no_shard and case.plan.use_orig_params and case.plan.no_sync and any(f.until for f in case.train.frozen)


def _fsdp1_no_shard_unit_unused(case: Case) -> bool:
    # FSDP1 runs NO_SHARD where its shard group has one rank (a hybrid strategy's, or the dp sub-mesh of
    # fsdp1_tp's (dp_shard=1, tp) mesh)
    no_shard = case.plan.sharding == "NO_SHARD" or case.mesh.axis_size("dp_shard") == 1
    return no_shard and case.plan.use_orig_params and (_gated(case) or bool(case.train.frozen))


def _fsdp1_frozen_instance_unused_in_a_step(case: Case) -> bool:
    """A gate FSDP1 makes an instance of (or may: a size-based policy), frozen as a whole: the gate itself, or
    every module with parameters under it."""
    found = units(case)
    frozen = [f.path for f in case.train.frozen]

    def all_frozen(path: str) -> bool:
        held = [m for m in case.model.param_modules() if under(m, (path,))]
        return under(path, frozen) or (bool(held) and all(under(m, frozen) for m in held))

    return case.plan.use_orig_params and any(
        n.kind == "gate" and (found is None or p in found) and all_frozen(p) for p, n in case.model.body.walk("body"))


def _fsdp1_frozen_tied_weights(case: Case) -> bool:
    return case.plan.use_orig_params and case.model.tie_head and any(f.path in ("inp", "head")
                                                                     for f in case.train.frozen)


def _fsdp1_orig_params_unused_in_a_step(case: Case) -> bool:
    return case.plan.use_orig_params and _gated(case)


def _fsdp1_flat_params_unused_in_a_step(case: Case) -> bool:
    return not case.plan.use_orig_params and _gated(case)


def _fsdp1_no_sync_with_a_unit_unused_on_the_last_microbatch(case: Case) -> bool:
    return case.plan.no_sync and _gated(case)


def _mixed_precision_group_unfrozen_later(case: Case) -> bool:
    return case.mixed_precision() and any(f.until for f in case.train.frozen)


def _fsdp1_keep_low_precision_grads_sharded(case: Case) -> bool:
    mp, master = case.plan.precision, dtypes.model_dtype(case)
    return mp.keep_low_precision_grads and case.plan.sharding != "NO_SHARD" and mp.reduce(master) != mp.compute(master)


def _fsdp1_unsharded(case: Case) -> bool:
    """FSDP1 runs as NO_SHARD: asked to, or its shard group has one rank (it then switches)."""
    return case.plan.sharding == "NO_SHARD" or case.mesh.axis_size("dp_shard") == 1


def _fsdp1_tied_weight_unsharded_no_sync_mixed_precision(case: Case) -> bool:
    mp, master = case.plan.precision, dtypes.model_dtype(case)
    return (case.model.tie_head and case.plan.use_orig_params and mp.compute(master) != master
            and case.plan.no_sync and _fsdp1_unsharded(case))


def _fsdp1_no_shard_tensor_parallel_orig_params(case: Case) -> bool:
    return _fsdp1_unsharded(case) and case.plan.use_orig_params and any(p.style in ("colwise", "rowwise", "sequence")
                                                           for p in case.plan.tp)


def _fsdp1_empty_tensor_parallel_shard(case: Case) -> bool:
    from parityfuzz.families.fsdp1_tp import split_sizes

    return any(size < case.mesh.axis_size("tp") for size in split_sizes(case).values())


def _fsdp1_no_sync_tensor_parallel_orig_params(case: Case) -> bool:
    return case.plan.no_sync and case.plan.use_orig_params and any(p.style in ("colwise", "rowwise", "sequence")
                                                                   for p in case.plan.tp)


def _fsdp1_clipping_tensor_parallel_parameters(case: Case) -> bool:
    return case.train.clip > 0 and any(p.style in ("colwise", "rowwise") for p in case.plan.tp)


def _nested(case: Case, inner: str, outer: str) -> bool:
    """Whether a composable plan's data-parallel API ``inner`` sits on a module strictly inside one ``outer``
    manages."""
    return (inner, outer) in case.plan.nestings()


def _fully_shard_between_fsdp_replicates(case: Case) -> bool:
    """A replicate_with_fsdp module inside a fully_shard module inside a replicate_with_fsdp module."""
    managed = case.plan.data_parallel()
    inside = lambda p, q: p != q and under(p, (q,))  # noqa: E731
    return any(a == "replicate_fsdp" and b == "fully_shard" and c == "replicate_fsdp" and inside(p, q) and inside(q, r)
               for p, a in managed.items() for q, b in managed.items() for r, c in managed.items())


def _fully_shard_below_a_replicate_root_unused_in_a_later_backward(case: Case) -> bool:
    """A replicate_with_fsdp root over a fully_shard module that keeps its parameters unsharded after forward (or
    any, with gradient sync off on the non-last microbatches) and sits out some forwards (a gate at, above or
    below it), with a gradient for the skipping backward to drop: several microbatches a step, or the zeros of
    zero_grad(set_to_none=False)."""
    applies = case.plan.applies
    gates = [p for p, n in case.model.body.walk("body") if n.kind == "gate"]
    return ((case.train.microbatches > 1 or case.train.zero_grad != "none")
            and any(c.path == "" and c.api == "replicate_fsdp" for c in applies)
            and any(c.api == "fully_shard" and c.path and (c.reshard_after_forward is not True or case.plan.no_sync)
                    and any(under(c.path, (g,)) or under(g, (c.path,)) for g in gates) for c in applies))


def _fully_shard_roots_of_their_own_unused_in_a_later_backward(case: Case) -> bool:
    """No FSDP2-based call on the root (each outermost fully_shard module is a root of its own) and a fully_shard
    module at, above or below a gate, with several microbatches a step."""
    applies = case.plan.applies
    gates = [p for p, n in case.model.body.walk("body") if n.kind == "gate"]
    return (case.train.microbatches > 1
            and not any(c.path == "" and c.api in ("fully_shard", "replicate_fsdp") for c in applies)
            and any(c.api == "fully_shard" and any(under(c.path, (g,)) or under(g, (c.path,)) for g in gates)
                    for c in applies))


def _fsdp1_over_a_frozen_tensor_parallel_parameter(case: Case) -> bool:
    """FSDP1 sharding (use_orig_params=True) over a colwise or rowwise parameter frozen on some step."""
    plan = case.plan
    return (plan.use_orig_params and plan.sharding != "NO_SHARD" and case.mesh.axis_size("dp_shard") > 1
            and any(p.style in ("colwise", "rowwise") and case.train.frozen_at(f"{p.path}.weight", step)
                    for p in plan.tp for step in range(case.train.steps)))


def _replicate_unsynced_with_a_gate(case: Case) -> bool:
    """The DDP-based replicate on a module at, above or below a gate, with its gradient sync off on the non-last
    microbatches (plan.no_sync)."""
    gates = [p for p, n in case.model.body.walk("body") if n.kind == "gate"]
    return (case.plan.no_sync and case.train.microbatches > 1
            and any(api == "replicate" and any(under(path, (g,)) or under(g, (path,)) for g in gates)
                    for path, api in case.plan.data_parallel().items()))


def _ddp_static_graph_with_no_sync(case: Case) -> bool:
    return case.plan.static_graph and case.train.microbatches > 1


KNOWN_BUGS = (
    # set_requires_all_reduce(False) on HSDP keeps a group's reduce-scattered gradients in
    # partial_reduce_output; a parameter used on some microbatches only changes the group's buffer layout
    # (size-mismatch RuntimeError in foreach_reduce) or leaves no gradient on the all-reduce microbatch,
    # whose post-backward then returns early and drops the held partial sum (silently missing gradient, or
    # under zero_grad(set_to_none=False) a zero one).
    KnownBug("fsdp2 HSDP set_requires_all_reduce(False) with a parameter unused on some microbatches",
             ("corpus/fsdp2/fd48895422315b5c.json", "corpus/fsdp2/66d020aa003a434d.json",
              "corpus/fsdp2/90fc80c58be38e3f.json"),
             _hsdp_deferred_all_reduce_with_gated_params,
             ("error:system:RuntimeError:torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:foreach_reduce",
              "mismatch:missing_grad:grad",  # set_to_none=True: the gradient is missing
              "mismatch:value:grad"),  # set_to_none=False: the gradient stays the zeros zero_grad left
             families=("fsdp2", "fsdp2_tp"),
             violates='torch/distributed/fsdp/_fully_shard/_fully_shard.py: '
                      "FSDPModule.set_requires_all_reduce: 'This can be used to implement gradient "
                      "accumulation with only reduce-scatter but not all-reduce for HSDP.' (no restriction to"
                      ' parameters used on every microbatch; without it FSDP2 handles a None gradient)',
             upstream='none found (searched: "set_requires_all_reduce False HSDP partial_reduce_output size '
                      'mismatch"; "FSDP2 HSDP gradient accumulation unused parameter partial reduce output '
                      'dropped"; "fully_shard set_requires_all_reduce unused parameters microbatch '
                      'RuntimeError size of tensor must match foreach_reduce"); related: '
                      'pytorch/pytorch#194628 (other partial_reduce_output defect, dtype)'),
    # FSDPParamGroup._init_mp_dtypes (at the first forward) takes _orig_dtype and _reduce_dtype from trainable
    # parameters only: a group frozen at its first forward keeps None for both, so after unfreezing its reduced
    # gradients are not cast back (RuntimeError assigning .grad) or are reduced in the gradient's dtype instead
    # of the policy's reduce_dtype (silent).
    KnownBug("fsdp2 mixed precision after unfreezing a group frozen at its first forward (pytorch#186998)",
             ("corpus/fsdp2/49d6b2f2e5368ff5.json", "corpus/fsdp2/b9b6e8fdc983331b.json"),
             _mixed_precision_group_unfrozen_later,
             ("error:system:RuntimeError:torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:foreach_reduce",
              "mismatch:value:grad"),
             families=("fsdp2", "fsdp2_tp"),
             violates='torch/distributed/fsdp/_fully_shard/_fsdp_api.py: MixedPrecisionPolicy.reduce_dtype: '
                      "'This specifies the dtype for gradient reduction (i.e. reduce-scatter or all-reduce).'"
                      " (the group's reduce dtype is lost, and the cast back fails: 'attempting to assign a "
                      "gradient with dtype ... to a tensor with dtype')",
             upstream='pytorch/pytorch#186998 (same API, same symptom; closed; fix PR pytorch/pytorch#187376 '
                      'is not in the installed 2.13 source: _init_mp_dtypes still derives '
                      '_orig_dtype/_reduce_dtype from trainable params only)'),
    # With gradient sync off, FSDP2 accumulates unsharded gradients in reduce_dtype; a parameter first used on
    # the last (synced) microbatch brings a fresh gradient in param_dtype, and foreach_reduce asserts one dtype.
    KnownBug("fsdp2 accumulation with a parameter first used on the last microbatch, reduce_dtype != param_dtype "
             "(pytorch#196996)",
             ("corpus/fsdp2/6f89a6ac47c9319c.json",),
             _mixed_precision_accumulation_with_gated_params,
             ("error:system:AssertionError:torch/distributed/fsdp/_fully_shard/_fsdp_common.py:_raise_assert_with_print",),
             violates='torch/distributed/fsdp/_fully_shard/_fsdp_api.py: MixedPrecisionPolicy.reduce_dtype: '
                      "'If also gradient reduction is disabled via :meth:`set_requires_gradient_sync`, then "
                      "FSDP will accumulate gradients using ``reduce_dtype``.' (instead foreach_reduce "
                      "asserts 'FSDP reduce-scatter expects uniform gradient dtype')",
             upstream="pytorch/pytorch#196996 (open; trigger 1 there, 'A parameter is first used on the "
                      "final, synchronized microbatch', is this record; it cites the earlier report #160279)"),
    # FSDP2 assumes SPMD.  With control flow that differs per rank, set_reduce_scatter_unused_params evens out
    # each group's gradient list, but the order of the groups' collectives follows each rank's autograd graph:
    # a group whose inputs need a gradient on one rank only reduces mid-backward there and in the final
    # callback elsewhere; under activation checkpointing the recomputation (and its all-gathers) comes at a
    # rank-dependent point.  Same-sized collectives pair up wrongly (silently wrong gradients, then wrong
    # parameters, losses, diverging replicas), others abort gloo or block.
    KnownBug("fsdp2 collectives in rank-dependent order with per-rank control flow and several FSDP groups",
             ("corpus/fsdp2/85611cfad69184c0.json", "corpus/fsdp2/1e066501f4bbfd71.json",
              "corpus/fsdp2/ea401dffc87e4485.json"),
             _rank_flow_with_several_groups,
             tuple(f"mismatch:{check}:{what}" for check in ("value", "replica", "missing_grad", "extra_grad")
                   for what in ("grad", "param", "loss"))
             + ("crash:-6", "hang"),
             families=("fsdp2", "fsdp2_tp"),
             violates='torch/distributed/fsdp/_fully_shard/_fully_shard.py: '
                      "FSDPModule.set_reduce_scatter_unused_params: 'This is needed when different ranks use "
                      'different parameters due to conditional control flow (e.g. multi-modal models, mixture'
                      " of experts), causing mismatched reduce-scatter collectives. Similar to DDP's "
                      "find_unused_parameters.'",
             upstream='none found for the same bug (searched: "set_reduce_scatter_unused_params conditional '
                      'control flow different ranks FSDP2"; "FSDP2 activation checkpointing recomputation '
                      'all-gather order differs across ranks hang"); related: pytorch/pytorch#158719 (open: '
                      'FSDP fails when parameters are used differently across ranks; the per-group mismatch '
                      "the flag fixes), pytorch/pytorch#170667 (maintainer: 'fsdp2 assumes spmd'), "
                      'pytorch/pytorch#75373 (FSDP1 RFC: execution order assumed equal across ranks)'),
    # clip_grad_norm_ stacks the per-parameter norms; under FSDP2 a partly tensor-parallel model has 2-D
    # (dp, tp) and 1-D (dp) gradient DTensors, and DTensor will not stack operands from different meshes.
    KnownBug("clip_grad_norm_ on gradients from different device meshes (pytorch#180346)",
             ("corpus/fsdp2_tp/565a691de898bf38.json",),
             _clipping_a_partly_tensor_parallel_fsdp2_model,
             ("error:system:RuntimeError:torch/distributed/tensor/_dispatch.py:_propagate_op_sharding_dispatch_slow_path",),
             families=("fsdp2_tp",),
             violates="torch/nn/utils/clip_grad.py: clip_grad_norm_: 'The norm is computed over the norms of "
                      'the individual gradients of all parameters, as if the norms of the individual '
                      "gradients were concatenated into a single vector.' (parameters: 'an iterable of "
                      "Tensors'; no restriction to one DeviceMesh)",
             upstream="pytorch/pytorch#180346 (open: '[DTensor] clip_grad_norm_ fails when per-parameter "
                      "norms come from different DeviceMesh objects'; fix attempt PR pytorch/pytorch#180501, "
                      'closed, not in 2.13)'),
    # A tensor-parallel parameter with an empty local shard (see _empty_on_some_rank) under fully_shard:
    # the reduce-scatter's _chunk_cat refuses the empty gradient on the ranks holding it; the others block.
    KnownBug("fsdp2 reduce-scatter of an empty tensor-parallel shard",
             ("corpus/fsdp2_tp/23d7069e16d673a5.json",),
             _fsdp2_over_an_empty_tensor_parallel_shard,
             ("error:system:RuntimeError:torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:chunk_cat",
              "hang"),
             families=("fsdp2_tp",),
             violates="torch/distributed/tensor/placement_types.py: Shard: 'follows the ``torch.chunk(dim)`` "
                      'semantic, where the last few shards on the DeviceMesh dimension might be empty when '
                      "the tensor dimension is not evenly divisible' (FSDP2's reduce-scatter then refuses the"
                      " empty local gradient: '_chunk_cat expects non-empty tensor'); caveat in the same "
                      "docstring: uneven sharding 'is currently experimental and subject to change'",
             upstream='none found (searched: "FSDP2 _chunk_cat expects non-empty tensor empty local shard '
                      'reduce-scatter"; "fully_shard ColwiseParallel empty local shard tensor parallel '
                      'dimension smaller than tp size"; "FSDP2 DTensor parameter with empty local tensor on '
                      'some rank fully_shard error"); related: pytorch/pytorch#164554 (open: FSDP2 fails when'
                      ' a rank is left an empty shard, other symptom: meta-tensor copy at init)'),
    # loss_parallel() on logits whose vocabulary leaves a tp rank nothing: its nll_loss forward indexes the
    # empty local shard on that rank; the others block in the loss's collectives.
    KnownBug("loss_parallel with a tp rank holding no vocabulary",
             ("corpus/fsdp2_tp/cfbc009f547b972b.json",),
             _loss_parallel_with_a_rank_holding_no_vocabulary,
             ("error:system:RuntimeError:torch/distributed/tensor/parallel/loss.py:_nll_loss_forward", "hang"),
             families=("fsdp2_tp",),
             violates="torch/distributed/tensor/parallel/loss.py: loss_parallel: 'Within this context "
                      "manager, one can use cross_entropy or CrossEntropyLoss as usual' with input 'Assumed "
                      "to be sharded on the class dimension' (no divisibility requirement); "
                      "torch/distributed/tensor/placement_types.py: Shard: 'the last few shards ... might be "
                      "empty' (uneven sharding marked 'experimental')",
             upstream='none found (searched: "loss_parallel vocabulary smaller than tensor parallel size '
                      'empty shard nll_loss index out of bounds"; "loss_parallel cross_entropy uneven '
                      'sharding class dimension not divisible")'),
    # MixedPrecisionPolicy's reduce_dtype "specifies the dtype for gradient reduction (i.e. reduce-scatter or
    # all-reduce)"; under TP, FSDP2's post-backward first turns a TP-replicated parameter's Partial gradient into
    # a Replicate one (an all-reduce over tp, _get_grad_inner_tensor in _fsdp_param.py) in the gradient's own
    # dtype, param_dtype, and only the reduce-scatter over dp runs in reduce_dtype: a bf16 sum where fp32 was
    # asked (0.2% on a sequence-parallel norm's weight gradient).  The fix proposed upstream casts first.
    KnownBug("fsdp2 under TP sums a tensor-parallel-replicated gradient over tp in param_dtype, not reduce_dtype "
             "(pytorch#190626)",
             ("corpus/fsdp2_tp/f0ac61f150da3629.json",),
             _tp_replicated_gradient_under_a_reduce_dtype,
             ("mismatch:value:grad",),
             families=("fsdp2_tp",),
             violates="torch/distributed/fsdp/_fully_shard/_fsdp_api.py: MixedPrecisionPolicy: 'reduce_dtype "
                      "(Optional[torch.dtype]): This specifies the dtype for gradient reduction (i.e. reduce-scatter "
                      "or all-reduce)'",
             upstream="pytorch/pytorch#190626 (open; fix proposed in pytorch/pytorch#190627)"),
    # SequenceParallel replicates a norm's parameters as new nn.Parameters without their requires_grad
    # (ColwiseParallel and RowwiseParallel keep it): a norm frozen before parallelize_module is trained.
    KnownBug("SequenceParallel unfreezes a frozen norm",
             ("corpus/fsdp2_tp/d4246d741a3ce0c6.json",),
             _a_frozen_sequence_parallel_module,
             ("mismatch:extra_grad:grad",) + tuple(f"mismatch:value:{what}" for what in ("grad", "param", "loss")),
             families=("fsdp2_tp",),
             violates="torch/distributed/tensor/parallel/style.py: SequenceParallel: 'SequenceParallel "
                      "replicates a compatible ``nn.Module`` parameters' (no docstring on requires_grad; the "
                      'contract is in the sibling styles and distribute_module, which since pytorch#171709 '
                      "re-create parameters with 'requires_grad=param.requires_grad', while "
                      'SequenceParallel._replicate_module_fn still calls '
                      'torch.nn.Parameter(DTensor.from_local(...)) with the default requires_grad=True)',
             upstream='pytorch/pytorch#171523 (frozen parameters become trainable after parallelization; '
                      'fixed by PR pytorch/pytorch#171709 for distribute_module, ColwiseParallel and '
                      'RowwiseParallel only; SequenceParallel is the unfixed remainder: same bug, not '
                      'reported separately)'),
    # Under TP alone a sequence-parallel norm's weight gradient is left Partial(sum) (FSDP2, where present,
    # redistributes it); optimizer.zero_grad(set_to_none=False) with foreach then fails: DTensor's
    # _foreach_zero_ refuses a Partial operand in place, though zero_ on the same tensor is accepted.
    KnownBug("foreach zero_grad(set_to_none=False) refuses a Partial sequence-parallel gradient",
             ("corpus/fsdp2_tp/2240b4e899c2970f.json",),
             _foreach_zeroing_of_sequence_parallel_gradients,
             ("error:system:RuntimeError:torch/distributed/tensor/_dispatch.py:_propagate_op_sharding_dispatch_slow_path",),
             families=("fsdp2_tp",),
             violates="torch/optim/optimizer.py: Optimizer.zero_grad: 'Reset the gradients of all optimized "
                      ":class:`torch.Tensor` s.' with set_to_none=False documented as setting the grads to "
                      'zero (foreach is a performance switch; the per-tensor path p.grad.zero_() accepts the '
                      'same Partial DTensor, _foreach_zero_ refuses it)',
             upstream='none found (searched: "DTensor _foreach_zero_ Partial placement in-place operations '
                      'that require placement changes are not supported zero_grad"; "sequence parallel '
                      'layernorm weight gradient Partial placement optimizer zero_grad set_to_none False '
                      'foreach error"); related: pytorch/pytorch#113897 (added DTensor _foreach_zero_ support'
                      ' precisely so optim.zero_grad(set_to_none=False) works on DTensor grads; Partial '
                      'operands not covered)'),
    # FSDP1 turns any strategy into NO_SHARD where its process group has one rank ("FSDP is switching to use
    # NO_SHARD ... since the world size is 1"); for the hybrid strategies that group is the intra-node shard
    # group, and NO_SHARD reduces over it alone: gradients are never all-reduced across the replicas, which
    # silently train on their own (a device_mesh (n, 1); torch's own groups with one GPU per node, or on a
    # CPU machine).  pytorch#154888 (shown open in the stored copy).
    KnownBug("FSDP1 hybrid sharding with shard groups of one rank never reduces across replicas (pytorch#154888)",
             ("corpus/fsdp1/81863a873dce0ef8.json", "corpus/fsdp1/19dfe7c15b568e2f.json"),
             _hybrid_fsdp1_with_shards_of_one,
             tuple(f"mismatch:{check}:{what}" for check in ("replica", "value") for what in ("grad", "param", "loss")),
             families=("fsdp1",),
             violates="torch/distributed/fsdp/api.py: ShardingStrategy.HYBRID_SHARD: 'Apply ``FULL_SHARD`` "
                      "within a node, and replicate parameters across nodes.' (replicas stop being replicas);"
                      " the clamp's own comment in torch/distributed/fsdp/_init_utils.py: 'We clamp the "
                      'strategy to `NO_SHARD` for world size of 1 since they are currently functionally '
                      "equivalent' is not true for the hybrid strategies",
             upstream="pytorch/pytorch#154888 ('Potential Bug with HYBRID_SHARD and (n, 1) Device Mesh "
                      "Falling Back to NO_SHARD': same API, same silent divergence across replicas; shown "
                      "open in the stored issue copy, reported closed elsewhere: recheck its state)"),
    # FullyShardedDataParallel.clip_grad_norm_ computes each gradient's norm with
    # torch.linalg.vector_norm(grad, dtype=torch.float32) "to handle low precision": a float64 gradient is
    # refused ("should be convertible without narrowing"), so FSDP1 cannot clip a float64 model at all
    # (torch.nn.utils.clip_grad_norm_ and FSDP2 can).
    KnownBug("FSDP1 clip_grad_norm_ refuses float64 gradients",
             ("corpus/fsdp1/c55d28dc7b3d9474.json",),
             _fsdp1_clipping_float64_gradients,
             ("error:system:RuntimeError:torch/distributed/fsdp/fully_sharded_data_parallel.py:<listcomp>",),
             families=("fsdp1", "fsdp1_tp"),
             violates='torch/distributed/fsdp/fully_sharded_data_parallel.py: '
                      "FullyShardedDataParallel.clip_grad_norm_: 'Clip the gradient norm of all parameters.' "
                      '... \'The total norm returned will have the "largest" dtype across all '
                      "parameters/gradients as defined by PyTorch's type promotion semantics' (float64 "
                      "gradients are not excluded; _get_grad_norm's vector_norm(grad, dtype=torch.float32) "
                      'raises on them)',
             upstream='none found (searched: "FSDP clip_grad_norm_ float64 gradients vector_norm dtype '
                      'float32 should be convertible without narrowing"; "FullyShardedDataParallel '
                      'clip_grad_norm_ double precision model RuntimeError _get_grad_norm"); related: '
                      "pytorch/pytorch#65108 (closed; the decision to compute the norm in FP32 'always ... "
                      "full precision', which did not consider float64)"),
    # foreach SGD adds the weight decay with one _foreach_add over the parameters of a device and dtype: under
    # implicit_replication() (which PyTorch asks for a partly tensor-parallel model) the plain parameters' decayed
    # gradients come back as DTensors; where some momentum buffer is still missing (a parameter unfrozen after
    # the first step), SGD falls back to per-tensor buf.mul_().add_(grad), and a plain buffer plus a DTensor
    # gradient trips an AssertionError in DTensor's dispatch.
    KnownBug("foreach SGD weight decay over plain and tensor-parallel parameters with a late momentum buffer",
             ("corpus/fsdp2_tp/9a14b5e10c97b750.json",),
             _foreach_sgd_weight_decay_over_plain_and_tensor_parallel_params,
             ("error:system:AssertionError:torch/distributed/tensor/_dispatch.py:_dispatch_fast_path_python_tail",),
             families=("fsdp2_tp",),
             violates="torch/distributed/tensor/experimental/__init__.py: implicit_replication: 'This context"
                      ' manager allows :class:`DTensor` to implicitly treat all non-DTensors '
                      '(``torch.Tensor``) in the program be replicate :class:`DTensor` s during the operator '
                      "computation.' (a plain momentum buffer's add_ of a DTensor gradient ends in a bare "
                      "AssertionError in DTensor's in-place dispatch); same docstring: '.. warning:: This "
                      "might possible lead to incorrect results ... use it at your discretion.'",
             upstream='none found (searched: "foreach optimizer mixed torch.Tensor and DTensor parameters '
                      'implicit_replication SGD momentum weight decay"; "implicit_replication optimizer step '
                      'partially tensor parallel model plain tensor and DTensor parameters test"); related: '
                      'pytorch/pytorch#183207 (open: foreach SGD with momentum over plain and DTensor params '
                      'under FSDP2 ignored_params), pytorch/pytorch#134551 (implicit_replication extended to '
                      'foreach ops for partly tensor-parallel 2-D models)',
             api='public (experimental: torch.distributed.tensor.experimental.implicit_replication, which the'
                 ' harness needs for plain and DTensor parameters in one foreach optimizer)'),
    # FSDP1 with use_orig_params=False: a unit the last backward of a step does not reach (a gated module) comes
    # out of the step with its FlatParameter's gradient None (prepare_gradient_for_optim hands the saved sharded
    # gradient over only if that backward called the unit's post-backward), though zero_grad(set_to_none=False)
    # left zeros there, or an earlier microbatch (outside no_sync) reduced a gradient into it; DDP (and a local
    # model) keep them: the optimizer skips the whole unit, or loses the earlier microbatches' gradient.
    KnownBug("FSDP1 use_orig_params=False drops the gradient of a unit the last backward of a step does not reach",
             ("corpus/fsdp1/bc286d6e1ab6f59b.json", "corpus/fsdp1/5fca3ee09ca2e627.json"),
             _fsdp1_flat_unit_unused_in_the_last_backward,
             ("mismatch:missing_grad:grad",) + tuple(f"mismatch:value:{what}" for what in ("grad", "param", "loss")),
             families=("fsdp1",),
             violates='torch/distributed/fsdp/fully_sharded_data_parallel.py: FullyShardedDataParallel '
                      "(Limitations): 'FSDP currently does not support gradient accumulation outside "
                      "``no_sync()`` when using CPU offloading' (so without CPU offloading accumulation "
                      "outside no_sync is supported, yet microbatch 0's reduced gradient is discarded); "
                      "torch/optim/optimizer.py: zero_grad: set_to_none=False keeps zeros, and 'torch.optim "
                      "optimizers have a different behavior if the gradient is 0 or None'",
             upstream='none found (searched: "FSDP gradient accumulation without no_sync module unused in '
                      'second backward gradient lost _saved_grad_shard _post_backward_called"; "FSDP '
                      'use_orig_params=False zero_grad set_to_none=False FlatParameter grad becomes None when'
                      ' module not used in forward"); related: pytorch/pytorch#73535 (added accumulation '
                      'without no_sync via _saved_grad_shard), pytorch/pytorch#80245 (_post_backward_called '
                      'for units without gradient)'),
    # The same with use_orig_params=False, where the optimizer sees only FlatParameters: a parameter unused in a
    # step (a gated module) inside a unit whose other parameters got gradients has a zero slice in the flat
    # gradient, so weight decay and momentum move it where DDP does not.  Inherent to flat parameters (torch's
    # documentation does not say so): kept as a known divergence, not a fixable bug.
    KnownBug("FSDP1 use_orig_params=False gives a parameter unused in a step a zero gradient",
             ("corpus/fsdp1/29fb844b1096868e.json",),
             _fsdp1_flat_params_unused_in_a_step,
             ("mismatch:extra_grad:grad",) + tuple(f"mismatch:value:{what}" for what in ("grad", "param", "loss")),
             families=("fsdp1",),
             violates='no documented promise: torch/distributed/fsdp/fully_sharded_data_parallel.py: '
                      "FullyShardedDataParallel(use_orig_params): 'Setting this to ``False`` exposes FSDP's "
                      "internal :class:`FlatParameter` s to the user via :meth:`nn.Module.named_parameters`' "
                      '(the optimizer sees one flat gradient per unit, which cannot be None for a slice); '
                      "torch/distributed/fsdp/_flat_param.py: FlatParameter._is_grad_none_mask: 'the flat "
                      'gradient must be non-``None`` and must use zeros to approximate those original '
                      "``None`` gradients' (a per-parameter None exists only for use_orig_params=True)",
             upstream="none needed: the behaviour is the documented design (see pytorch/pytorch#87308, 'Fix "
                      "grad zero vs. None edge case': 'Some original parameters corresponding to one "
                      'FlatParameter may have None gradient while others do not. In that case, the '
                      "flat_param.grad must be non-None', with the per-parameter None only restored for "
                      'use_orig_params=True)',
             api="public (the per-original-parameter split of the flat gradient is the harness's, read from "
                 'private FlatParameter fields _fqns/_shapes/_numels_with_padding)',
             kind='gradient presence'),
    # FSDP1 NO_SHARD with use_orig_params=True: after a step in which a unit got no gradient (its forward did
    # not run, or all its parameters are frozen), the unit's original parameters are gone from
    # named_parameters() (and summon_full_params): code that looks them up by name (state dicts, clipping, a
    # re-built optimizer) no longer sees them.
    KnownBug("FSDP1 NO_SHARD loses the parameters of a unit unused in a step from named_parameters",
             ("corpus/fsdp1/23047066ba5a3d87.json", "corpus/fsdp1/79b46c6d62772350.json"),
             _fsdp1_no_shard_unit_unused,
             ("mismatch:missing:param", "mismatch:missing:grad",
              # a state dict of such a unit: "FSDP assumes body.1.inner.q.weight is in the state_dict"
              "error:system:AssertionError:torch/distributed/fsdp/_state_dict_utils.py:"
              "_common_unshard_post_state_dict_hook"),
             families=("fsdp1", "fsdp1_tp"),
             violates='torch/distributed/fsdp/fully_sharded_data_parallel.py: '
                      "FullyShardedDataParallel(use_orig_params): 'Setting this to ``True`` has FSDP use "
                      "``module`` 's original parameters. FSDP exposes those original parameters to the user "
                      "via :meth:`nn.Module.named_parameters` instead of FSDP's internal "
                      ":class:`FlatParameter` s.'",
             upstream='none found (searched: "FSDP NO_SHARD use_orig_params named_parameters missing '
                      'parameters after backward module not used frozen"); related: pytorch/pytorch#85831 '
                      '(use_orig_params known issues: original parameters are plain Tensor views, invisible '
                      'to named_parameters, between pre-forward and post-forward), pytorch/pytorch#83129 '
                      '(units whose post-backward does not fire are left unresharded)'),
    # FSDP1 NO_SHARD with use_orig_params=True and no_sync(): a parameter frozen when FSDP1 was built and
    # unfrozen later loses the gradient its no_sync() microbatches accumulated: on the synced microbatch its
    # gradient is that microbatch's alone (one rank, Embedding(2, 4) frozen until step 1, two microbatches: the
    # row only the first microbatch used ends the step with no gradient, rel. error 1).  Sharded (two ranks),
    # never frozen, or without no_sync(), it trains like DDP.  Torch-only exported script: same divergence.
    KnownBug("FSDP1 NO_SHARD loses the no_sync gradient of a parameter unfrozen after wrapping",
             ("corpus/fsdp1_tp/b618c2b2b87842d7.json",),
             _fsdp1_no_shard_no_sync_unfrozen,
             tuple(f"mismatch:{check}:{what}" for check in ("value", "replica") for what in ("grad", "param", "loss")),
             families=("fsdp1", "fsdp1_tp"),
             violates="torch/distributed/fsdp/fully_sharded_data_parallel.py: FullyShardedDataParallel.no_sync: "
                      "'Within this context, gradients will be accumulated in module variables, which will later "
                      "be synchronized in the first forward-backward pass after exiting the context.'; and its "
                      "Limitations: 'For use_orig_params=True, FSDP supports mixing frozen and non-frozen "
                      "parameters'",
             upstream='none found (searched: "FSDP NO_SHARD no_sync use_orig_params unfreeze requires_grad '
                      'gradient lost accumulation"); related: pytorch/pytorch#104148 (unfreezing parameters '
                      'after n steps, fixed by PR #104186 for the reshard-only hook), pytorch/pytorch#105371 '
                      '(requires_grad changes lost under SHARD_GRAD_OP after a no_grad step)'),
    # FSDP1 with use_orig_params=True: a parameter unused in a step whose unit's other parameters got gradients
    # shows a zero gradient where DDP (and a local model) leave None, though FlatParameter._is_grad_none_mask
    # exists to set such "logically None" gradients to None: the optimizer then steps it (weight decay,
    # momentum) where DDP does not.
    KnownBug("FSDP1 use_orig_params=True shows a zero gradient for a parameter unused in a step",
             ("corpus/fsdp1/875ed9b3950f8533.json", "corpus/fsdp1/6dbba2b8fcc2c56c.json"),
             _fsdp1_orig_params_unused_in_a_step,
             ("mismatch:extra_grad:grad",) + tuple(f"mismatch:value:{what}" for what in ("grad", "param", "loss")),
             families=("fsdp1", "fsdp1_tp"),
             violates='no documented promise; torch chose zeros on purpose: '
                      'torch/distributed/fsdp/_flat_param.py: FlatParamHandle._reset_is_grad_none (run in '
                      "every post-backward): 'if a parameter requires gradient, then it will surely receive a"
                      " gradient and we may reset its mask entry to ``False``' and '# As long as the "
                      'parameter requires gradient, it should receive a meaningful gradient (even if the '
                      "gradient happens to be zeros)'",
             upstream='no bug report found; the behaviour is the acknowledged design: pytorch/pytorch#87314 '
                      "('if a particular original parameter's gradient is None on all of the containing "
                      "ranks, but not all ranks' flat_param.grad = None, then that particular gradient is "
                      "still going to be set to zeros. This can be handled if desired in follow-up work') and"
                      ' pytorch/pytorch#87308 (the _is_grad_none mask, which only covers None gradients '
                      'written back, e.g. after zero_grad(set_to_none=True))',
             kind='gradient presence'),
    # FSDP1 with use_orig_params=True: an instance whose parameters are all frozen, on a module that uses them on
    # some steps only (the identity on the others): at the step it passes its input through, its pre-backward
    # hook runs (its output requires grad through the input) but nothing resets its training state, and the
    # next backward fails FSDP1's own check, "expected to be in states [IDLE] but current state is
    # FORWARD_BACKWARD" (standalone: an Embedding, then FSDP(Gate(Linear)) with the Linear frozen, 2 ranks).
    KnownBug("FSDP1 instance with all parameters frozen and unused in a step fails its training-state check",
             ("corpus/fsdp1/c6461880e9e42683.json", "corpus/fsdp1/26f293fa4b33b78a.json"),
             _fsdp1_frozen_instance_unused_in_a_step,
             ("error:system:ValueError:torch/distributed/fsdp/_common_utils.py:_assert_in_training_states",),
             families=("fsdp1",),
             violates='torch/distributed/fsdp/fully_sharded_data_parallel.py: FullyShardedDataParallel '
                      "(Limitations): 'For ``use_orig_params=True``, FSDP supports mixing frozen and "
                      "non-frozen parameters' and 'For ``use_orig_params=False``, each FSDP instance must "
                      "manage parameters that are all frozen or all non-frozen' (an all-frozen instance is a "
                      "supported configuration; its own internal check then raises 'expected to be in states "
                      "[IDLE] but current state is FORWARD_BACKWARD')",
             upstream='none found (searched: "FSDP expected to be in states IDLE but current state is '
                      'FORWARD_BACKWARD frozen parameters module skipped _pre_backward_hook"); related: '
                      'pytorch/pytorch#83107 and pytorch/pytorch#83129 (units without post-backward: crash / '
                      'not resharded; fixed), pytorch/pytorch#101982 (reshard-only hook for frozen instances)'),
    # FSDP1 with use_orig_params=True over a tied embedding/head weight frozen before wrapping (and a nested
    # unit): an internal assertion while it sets the original parameters' views, "as_params=True
    # type(prim_param)=<class 'torch.Tensor'>" (the shared parameter was registered as a plain tensor).
    KnownBug("FSDP1 use_orig_params=True with a frozen tied weight",
             ("corpus/fsdp1/421ac28f670a191f.json",),
             _fsdp1_frozen_tied_weights,
             ("error:system:AssertionError:torch/distributed/utils.py:_p_assert",),
             families=("fsdp1",),
             violates='torch/distributed/fsdp/fully_sharded_data_parallel.py: '
                      "FullyShardedDataParallel(use_orig_params): 'FSDP exposes those original parameters to "
                      "the user via :meth:`nn.Module.named_parameters`' and (Limitations) 'For "
                      "``use_orig_params=True``, FSDP supports mixing frozen and non-frozen parameters'; "
                      "caveat in the same list: 'As of PyTorch 1.12, FSDP offers limited support for shared "
                      "parameters' (the tied pair here is in one instance, the supported layout per "
                      'maintainers in pytorch/pytorch#101343)',
             upstream='none found (searched: "FSDP shared parameters tied weights use_orig_params '
                      'as_params=True type(prim_param) assertion"); related: pytorch/pytorch#77724 (the '
                      'limited-shared-parameter-support tracking issue the docstring links)'),
    # FSDP1 under no_sync() keeps a unit's accumulated gradient unsharded; where the last (synced) microbatch
    # does not reach the unit (a gated module), its post-backward finds a gradient that never went through the
    # reduce-scatter and trips an internal assertion ("All sharded parameters that received a gradient in the
    # post-backward should use `_saved_grad_shard`").
    # Under NO_SHARD nothing trips: the accumulated gradient is never all-reduced and each rank steps its own
    # (replicas silently drift apart; under mixed precision it also stays in param_dtype); under the sharded
    # strategies with mixed precision the unreduced bf16 gradient can reach Adam first, which refuses it.
    KnownBug("FSDP1 no_sync with a unit unused on the last microbatch",
             ("corpus/fsdp1/55db10279d6f193a.json", "corpus/fsdp1/db9da2e07e0e8a02.json",
              "corpus/fsdp1/3f8dd0d5b53c7904.json", "corpus/fsdp1_tp/6c06a631766403cf.json",
              "corpus/fsdp1/5c4e4d0d46fd2c11.json"),
             _fsdp1_no_sync_with_a_unit_unused_on_the_last_microbatch,
             ("error:system:AssertionError:torch/distributed/utils.py:_p_assert",
              # the unsharded, unreduced gradient left on the sharded FlatParameter (the harness's shape check)
              "error:system:InvariantViolation:systems/fsdp1.py:_check_gradient_shape",
              "error:system:RuntimeError:torch/optim/adam.py:_single_tensor_adam",
              "error:system:RuntimeError:torch/optim/adam.py:_multi_tensor_adam", "mismatch:dtype:grad",
              # foreach optimizers group parameters and gradients by dtype: a param_dtype gradient is refused
              "error:system:RuntimeError:torch/utils/_foreach_utils.py:_group_tensors_by_device_and_dtype")
             + tuple(f"mismatch:{check}:{what}" for check in ("replica", "value") for what in ("grad", "param", "loss")),
             families=("fsdp1", "fsdp1_tp"),
             violates='torch/distributed/fsdp/fully_sharded_data_parallel.py: '
                      "FullyShardedDataParallel.no_sync: 'Within this context, gradients will be accumulated "
                      'in module variables, which will later be synchronized in the first forward-backward '
                      "pass after exiting the context.' (a unit the synced pass does not reach is never "
                      'synchronized: internal assertion under sharded strategies, unreduced per-rank '
                      'gradients under NO_SHARD)',
             upstream='none found (searched: "FSDP no_sync All sharded parameters that received a gradient in'
                      ' the post-backward should use _saved_grad_shard"); related: pytorch/pytorch#83129 '
                      '(units whose post-backward does not fire), pytorch/pytorch#73535 (accumulation '
                      'bookkeeping via _saved_grad_shard)'),
    # FSDP1's MixedPrecision documents keep_low_precision_grads as keeping "the gradients in the dtype used for
    # gradient reduction", and NO_SHARD does; the sharded strategies cast the reduced gradient to param_dtype
    # instead (FlatParamHandle.prepare_gradient_for_optim casts to _fwd_bwd_param_dtype): with reduce_dtype
    # fp32 and param_dtype bf16 the optimizer gets bf16 gradients, and with param_dtype left out full-precision
    # ones, so the same policy gives other dtypes and values under FULL_SHARD than under NO_SHARD.
    KnownBug("FSDP1 keep_low_precision_grads leaves sharded gradients in param_dtype, not the reduction dtype",
             ("corpus/fsdp1/6a29276aa4797999.json",),
             _fsdp1_keep_low_precision_grads_sharded,
             ("mismatch:dtype:grad",) + tuple(f"mismatch:value:{what}" for what in ("grad", "param", "loss")),
             families=("fsdp1",),
             violates="torch/distributed/fsdp/api.py: MixedPrecision.keep_low_precision_grads: 'If ``True``, "
                      'then FSDP keeps the gradients in the dtype used for gradient reduction, which can save'
                      " memory if using a custom optimizer that supports running in low precision.' "
                      '(FlatParamHandle.prepare_gradient_for_optim casts the sharded gradient to '
                      'self._fwd_bwd_param_dtype instead)',
             upstream='none found for the mismatch (searched: "FSDP MixedPrecision keep_low_precision_grads '
                      'gradient dtype param_dtype instead of reduce_dtype"); related: pytorch/pytorch#90660 '
                      "(states the intended meaning: it planned 'renaming `keep_low_precision_grads` to "
                      "`keep_grads_in_reduce_dtype`' but skipped it as BC-breaking), pytorch/pytorch#85134 "
                      '(original feature, cast back to the low-precision param dtype)'),
    # FSDP1 with use_orig_params=True over a tied embedding/head weight, mixed precision and no_sync(), where
    # the strategy does not shard (NO_SHARD, or any whose shard group has one rank): the gradient accumulated
    # under no_sync() is in param_dtype; at the next forward FSDP1 points the original parameters' gradients at
    # it, using a .data assignment to get past torch's parameter/gradient dtype check for each parameter but a
    # plain one for the shared (tied) parameter, which torch 2.13's grad_dtype check refuses.
    KnownBug("FSDP1 use_orig_params=True with a tied weight, mixed precision and no_sync without sharding",
             ("corpus/fsdp1/78c14e116ef30325.json",),
             _fsdp1_tied_weight_unsharded_no_sync_mixed_precision,
             ("error:system:RuntimeError:torch/distributed/fsdp/_flat_param.py:_use_sharded_grad_views",),
             families=("fsdp1",),
             violates='torch/distributed/fsdp/fully_sharded_data_parallel.py: '
                      "FullyShardedDataParallel.no_sync: 'Within this context, gradients will be accumulated "
                      'in module variables, which will later be synchronized in the first forward-backward '
                      "pass after exiting the context.' (the next forward raises instead); the "
                      'shared-parameter path of FlatParamHandle._use_sharded_grad_views uses a plain '
                      '`param.grad = prim_param.grad` where the unshared path uses the documented-in-comment '
                      "'.data' hack 'to side step the check that parameter/gradient dtypes match'",
             upstream='none found for the shared-parameter path (searched: "attempting to assign a gradient '
                      'with dtype BFloat16 to a tensor with grad_dtype Float FSDP _use_sharded_grad_views '
                      'shared parameter"); related: pytorch/pytorch#116409 and pytorch/pytorch#111317 (same '
                      'error for unshared parameters under SHARD_GRAD_OP + accumulation, fixed by PR '
                      "#108823's .data path)"),
    # FSDP1 NO_SHARD (or a dp group of one rank, where FSDP1 switches to NO_SHARD) over tensor-parallel
    # parameters with use_orig_params=True: the original parameters become DTensor views of the unsharded flat
    # parameter, whose (global) shape the next forward's writeback check compares with the local one: "Cannot
    # writeback when the parameter shape changes" at the second forward.
    KnownBug("FSDP1 NO_SHARD over tensor-parallel parameters with use_orig_params=True",
             ("corpus/fsdp1_tp/a43cfa6b15f3c009.json",),
             _fsdp1_no_shard_tensor_parallel_orig_params,
             ("error:system:RuntimeError:torch/distributed/fsdp/_flat_param.py:_writeback_tensor",),
             families=("fsdp1_tp",),
             violates='torch/distributed/fsdp/fully_sharded_data_parallel.py: '
                      "FullyShardedDataParallel(device_mesh): 'For 2D FSDP + TP, users are required to pass "
                      "in device_mesh instead of process_group' (a (1, tp) mesh is a valid 2-D mesh, which "
                      "FSDP1 itself clamps to NO_SHARD: torch/distributed/fsdp/_init_utils.py 'We clamp the "
                      'strategy to `NO_SHARD` for world size of 1 since they are currently functionally '
                      "equivalent'); the second forward raises 'Cannot writeback when the parameter shape "
                      "changes'",
             upstream="pytorch/pytorch#119937 (closed: 'FSDP + TP Initialization Error' on a one-rank dp "
                      "group; the maintainer: 'getting NO_SHARD to work with DTensor extensions is "
                      "complicated because we always use unsharded views in NO_SHARD'; the same "
                      '_writeback_orig_params/_writeback_tensor traceback is posted on fix PR '
                      "pytorch/pytorch#120244; the proposed workaround pytorch/pytorch#120334 'Removed clamp "
                      "to NO_SHARD for world size 1' is not in 2.13, whose _init_utils still clamps)"),
    # FSDP1 over a tensor-parallel parameter whose shard is empty on some rank (a dimension smaller than tp),
    # with use_orig_params=False: that rank trips an internal assertion ("unsharded_start_idx: 0
    # unsharded_end_idx: -1") while the others wait in a collective (with use_orig_params=True FSDP1 refuses any
    # uneven shard with a clear error, an expected error in the corpus).
    KnownBug("FSDP1 over an empty tensor-parallel shard",
             ("corpus/fsdp1_tp/167cb1fc2b75a040.json",),
             _fsdp1_empty_tensor_parallel_shard,
             ("error:system:AssertionError:torch/distributed/utils.py:_p_assert",),
             families=("fsdp1_tp",),
             violates="torch/distributed/tensor/placement_types.py: Shard: 'the last few shards on the "
                      "DeviceMesh dimension might be empty when the tensor dimension is not evenly divisible'"
                      " (a valid DTensor layout; FSDP1's FlatParamHandle._init_shard_metadata then trips its "
                      "internal _p_assert 'unsharded_start_idx: 0 unsharded_end_idx: -1' on the empty rank "
                      'while the others hang); note torch elsewhere refuses uneven TP shards under FSDP1 with'
                      " a clear DTensor error ('Cannot flatten unevenly sharded tensor', "
                      'torch/distributed/tensor/_ops/_view_ops.py), and uneven sharding is marked '
                      "'experimental'",
             upstream='none found (searched: "FSDP FlatParameter zero numel empty parameter '
                      'unsharded_start_idx unsharded_end_idx -1 assertion"; also covered by the empty-shard '
                      'queries of the fsdp2 record: "fully_shard ColwiseParallel empty local shard tensor '
                      'parallel dimension smaller than tp size")'),
    # FSDP1 with use_orig_params=True over tensor-parallel parameters, accumulating under no_sync(): the next
    # forward's check that the original parameters still share the flat parameter's storage raises "Attempted
    # to access the data pointer on an invalid python storage" (FlatParamHandle._same_storage).
    KnownBug("FSDP1 no_sync over tensor-parallel parameters with use_orig_params=True",
             ("corpus/fsdp1_tp/e535778bc85baffe.json",),
             _fsdp1_no_sync_tensor_parallel_orig_params,
             ("error:system:RuntimeError:torch/distributed/fsdp/_flat_param.py:_same_storage",),
             families=("fsdp1_tp",),
             violates='torch/distributed/fsdp/fully_sharded_data_parallel.py: '
                      "FullyShardedDataParallel.no_sync: 'gradients will be accumulated in module variables, "
                      'which will later be synchronized in the first forward-backward pass after exiting the '
                      "context'; device_mesh arg: 'For 2D FSDP + TP, users are required to pass in "
                      "device_mesh'",
             upstream='none found (searched: "FSDP use_orig_params tensor parallel no_sync Attempted to '
                      'access the data pointer on an invalid python storage"; "FSDP 2D tensor parallel '
                      'DTensor use_orig_params gradient accumulation no_sync error"; "_same_storage DTensor '
                      'untyped_storage invalid python storage FSDP"); related: pytorch/pytorch#123272 '
                      '(FSDP1+TP SHARD_GRAD_OP+use_orig_params crash in _same_storage, fixed by '
                      'pytorch/pytorch#123617 for DTensor params in backward, not this no_sync path)'),
    # FullyShardedDataParallel.clip_grad_norm_ over tensor-parallel parameters: it sums the squared norms of the
    # local flat shards over FSDP1's data-parallel group only, so each tp rank takes the norm of its own TP shard
    # for the total: the clipping coefficient is wrong (and differs across a tp group), and training silently
    # drifts from DDP's torch.nn.utils.clip_grad_norm_.
    KnownBug("FSDP1 clip_grad_norm_ over tensor-parallel parameters leaves the tp shards out of the norm",
             ("corpus/fsdp1_tp/2414d2455aa4059c.json",),
             _fsdp1_clipping_tensor_parallel_parameters,
             tuple(f"mismatch:{check}:{what}" for check in ("value", "replica") for what in ("grad", "param", "loss")),
             families=("fsdp1_tp",),
             violates='torch/distributed/fsdp/fully_sharded_data_parallel.py: '
                      "FullyShardedDataParallel.clip_grad_norm_: 'The norm is computed over all parameters' "
                      "gradients as viewed as a single vector' ... 'Returns: Total norm of the parameters "
                      "(viewed as a single vector).'",
             upstream='none found (searched: "FSDP clip_grad_norm_ tensor parallel 2D wrong total norm"; '
                      '"FullyShardedDataParallel clip_grad_norm_ DTensor tensor parallel device_mesh norm '
                      'only dp group"); related: meta-pytorch/torchtune#2420 (clip_grad_norm with TP, FSDP2 '
                      'side), pytorch/pytorch#180346 (clip_grad_norm_ over DTensors of different meshes)'),
    # DistributedDataParallel(static_graph=True) whose first backward runs under no_sync() (gradient
    # accumulation): _DDPSink enqueues the static graph's one-shot delayed all-reduce, whose finalize_backward()
    # asserts expect_autograd_hooks_ ("INTERNAL ASSERT FAILED at reducer.cpp"); pytorch#143580 (open), fix in
    # review as pytorch PR #187732, which also reports that, past the assertion, gradients silently stop being
    # all-reduced from the second iteration on.
    KnownBug("DDP static_graph with accumulation under no_sync() (pytorch#143580)",
             ("corpus/zero/cdedb6ab7ba57090.json",),
             _ddp_static_graph_with_no_sync,
             ("error:system:RuntimeError:torch/autograd/graph.py:_engine_run_backward",)
             + tuple(f"mismatch:{check}:{what}" for check in ("value", "replica") for what in ("grad", "param", "loss")),
             families=("zero",),
             violates="torch/nn/parallel/distributed.py: DistributedDataParallel.no_sync: 'Context manager to"
                      ' disable gradient synchronizations across DDP processes. Within this context, '
                      'gradients will be accumulated on module variables, which will later be synchronized in'
                      " the first forward-backward pass exiting the context.'; static_graph is a documented "
                      'constructor option',
             upstream='pytorch/pytorch#143580 (open; same INTERNAL ASSERT expect_autograd_hooks_ with '
                      'static_graph=True and the first backward under no_sync); fixes proposed: '
                      'pytorch/pytorch#187732 (open, also fixes the silent loss of all-reduce from the 2nd '
                      'iteration), pytorch/pytorch#166388 (open); user report huggingface/accelerate#3679'),
    # A sharded dimension of size 1 (over tp=2, one rank empty; or over tp=1): DTensor takes a size-1
    # dimension for a replicated one.  The colwise weight's gradient comes back Replicate where the weight
    # is Shard(0), and the optimizer's in-place add_ refuses the change; with a sequence of 1 the rowwise
    # Linear's input view (b, 1, 1) -> (b, 1) is refused first ("would remove or reshape sharded dimension
    # 2"), even on a tp axis of size 1.  Under mixed precision the reference runs the same tensor-parallel
    # model (``ddp_mp_tp``) and may meet it first.  Related: pytorch#143372 (views of unevenly sharded
    # DTensors), pytorch#135054 (size-1 dims taken as replicated).
    KnownBug("DTensor over a sharded dimension of size 1 loses its sharding",
             ("corpus/fsdp2_tp/8ce6225525b6272e.json", "corpus/fsdp2_tp/68c4f088e6a834f9.json",
              "corpus/fsdp2_tp/4654fe3feacc4319.json"),
             _a_split_dimension_of_size_one_or_below_tp,
             tuple(f"error:{role}:RuntimeError:torch/distributed/tensor/_dispatch.py:"
                   "_propagate_op_sharding_dispatch_slow_path" for role in ("system", "reference")),
             families=("fsdp2_tp",),
             violates="torch/distributed/tensor/placement_types.py: Shard: 'The Shard(dim) placement follows "
                      'the torch.chunk(dim) semantic, where the last few shards on the DeviceMesh dimension '
                      "might be empty when the tensor dimension is not evenly divisible' (with the warning "
                      "that uneven sharding 'is currently experimental and subject to change'); the size-1 "
                      'dim over a tp axis of 1 is even sharding',
             upstream='related, no exact match: pytorch/pytorch#143372 (open, view of an unevenly sharded '
                      'DTensor with an empty rank fails), pytorch/pytorch#135054 (PR: view op replicating a '
                      'tensor dim of size 1; fixed the view(1) case, not gradient placement / add_) '
                      '(searched: "DTensor Shard dimension of size 1 treated as Replicate gradient placement '
                      'mismatch optimizer add_"; "would remove or reshape sharded dimension view DTensor size'
                      ' 1 sequence")'),
    # The other way round: the DDP-based replicate skips only fully_shard modules (_is_fully_sharded), takes the
    # replicated DTensors of a replicate_with_fsdp module inside it and localizes them (_localize_dtensor);
    # FSDP2's lazy initialisation then finds plain Parameters where its sharded DTensors were; where a fully_shard
    # root initialises first, training goes on and replicate's parameter list shows the module's parameters.
    KnownBug("DDP-based replicate over a replicate_with_fsdp module localizes its DTensor parameters",
             ("corpus/composable/efb78fbb419e0602.json", "corpus/composable/6146f890d93d8eff.json",
              "corpus/composable/6182e7414cf2ab9e.json"),
             lambda case: _nested(case, "replicate_fsdp", "replicate"),
             ("error:system:AttributeError:torch/distributed/fsdp/_fully_shard/_fsdp_param.py:reset_sharded_param",
              # when no FSDP2 lazy init trips first (a fully_shard root): the replicas' gradients disagree, or
              # DDP's reducer finds the localized parameters without gradients at the next forward
              "mismatch:replica:grad", "error:system:RuntimeError:torch/nn/parallel/distributed.py:_pre_forward"),
             families=("composable",),
             violates='no documented promise (private APIs); source contract: '
                      'torch/distributed/_composable/replicate.py: _ReplicateState.init/_collect_params skip '
                      "only modules where _is_fully_sharded ('Check if module is marked with fully_shard'); "
                      "replicate_with_fsdp's FSDP-based state registers as 'replicate', so neither guard "
                      'fires and FSDPParam.reset_sharded_param later fails on a localized Parameter',
             upstream='none found (searched: "replicate nested replicate composable DDP parameters collected '
                      'twice _collect_params"; "replicate_with_fsdp fully_shard nested FSDP state has already'
                      ' been lazily initialized"); related: pytorch/pytorch#133059 (PR: keep DTensor params '
                      'for replicate(fully_shard) during DDP lazy_init, the same fix not extended to '
                      'replicate_with_fsdp)',
             api='private: torch.distributed._composable.replicate (DDP-based) over '
                 'torch.distributed._composable.replicate_with_fsdp; second signature reads the private '
                 '_param_names'),
    # The first state to run forward becomes the root and marks the states below it non-root; a
    # replicate_with_fsdp root looks for its own state class only (_get_module_replicate_state), so a fully_shard
    # module below it stays a root of its own.  At that module's first forward its lazy init finds a
    # replicate_with_fsdp state below it (an FSDPState subclass) that the outer root already initialised:
    # "FSDP state has already been lazily initialized for 1".  With fully_shard innermost, or no replicate_with_fsdp
    # at the root, it trains.
    KnownBug("replicate_with_fsdp at the root leaves a fully_shard module below it a root of its own",
             ("corpus/composable/0096254cd1970f39.json",),
             _fully_shard_between_fsdp_replicates,
             ("error:system:RuntimeError:torch/distributed/fsdp/_fully_shard/_fsdp_state.py:_lazy_init",),
             families=("composable",),
             violates="torch/distributed/fsdp/_fully_shard/_fully_shard.py: fully_shard: 'Calling fully_shard"
                      ' on module constructs one group that includes the parameters in module.parameters() '
                      "except those already assigned to a group from an earlier call on a submodule'; "
                      'replicate_with_fsdp accepts fully_shard children (is_composable_with_replicate '
                      "excludes only 'fully_shard' modules), but no docstring of replicate_with_fsdp promises"
                      ' the nesting',
             upstream='none found (searched: "replicate_with_fsdp fully_shard nested FSDP state has already '
                      'been lazily initialized"; "replicate nested replicate composable DDP parameters '
                      'collected twice _collect_params")',
             api='private: torch.distributed._composable.replicate_with_fsdp (underscore module), with public'
                 ' fully_shard below it'),
    # The same root of its own, another symptom (found by a 10-minute soak run, 2026-11-23): a fully_shard
    # module with reshard_after_forward=False below a replicate_with_fsdp root, used in a step's first backward
    # and not in a later one (a gate), ends the step with no gradient at all: the later backward sets its
    # parameters' .grad to None (standalone, one rank: Sequential(Gate(Linear), Linear), fully_shard(model[0],
    # reshard_after_forward=False), replicate(model), two backwards, the second skipping model[0]).  With
    # reshard_after_forward=True, or fully_shard at the root, the gradient is kept.
    # With gradient sync off on the non-last microbatches (third issue-30 run, composable/092bd4ac): the gradient
    # the unsynced microbatch accumulated is never reduced (each rank keeps its own: replicas differ), or, with
    # reshard_after_forward=True, dropped; a fully_shard root trains like DDP.  And across steps
    # (composable/b149330a): the zeros zero_grad(set_to_none=False) left are dropped by the step whose backward
    # skips the module (None where DDP keeps zeros; with zero_grad(set_to_none=True), or a fully_shard root, it
    # passes): the optimizer then skips the parameter where momentum or Adam would move it.
    KnownBug("replicate_with_fsdp root drops the gradient of a fully_shard module unused in a later backward",
             ("corpus/composable/84f5e34030cc184f.json", "corpus/composable/092bd4ac4d73a213.json",
              "corpus/composable/b149330a2b9097cf.json"),
             _fully_shard_below_a_replicate_root_unused_in_a_later_backward,
             ("mismatch:missing_grad:grad", "mismatch:replica:grad"),
             families=("composable",),
             violates="torch/distributed/fsdp/_fully_shard/_fully_shard.py: fully_shard: 'After gradient "
                      'computation, FSDP frees the unsharded parameters and reduce-scatters the unsharded '
                      "gradients across data-parallel workers'; torch/optim/optimizer.py zero_grad: '.grad s "
                      "are guaranteed to be None for params that did not receive a gradient' (only after "
                      "zero_grad(set_to_none=True); here the parameter did receive a gradient in the step's "
                      'first backward)',
             upstream='none found (searched: "fully_shard reshard_after_forward=False gradient lost set to '
                      'None module unused in second backward replicate root"; "replicate_with_fsdp '
                      'fully_shard nested FSDP state has already been lazily initialized")',
             api='private: torch.distributed._composable.replicate_with_fsdp root (underscore module) over '
                 'public fully_shard'),
    # Each outermost fully_shard module without an FSDP2 call on the root is a root of its own; one that a later
    # backward of the step does not reach (a gate) ends the step with .grad None, dropping what an earlier
    # backward accumulated (reproduced torch-only on one rank, reshard_after_forward True or False; a fully_shard
    # root keeps it).  84f5e34030cc184f is the same loss under a replicate_with_fsdp root.
    KnownBug("fully_shard modules that are roots of their own drop the gradient of a module a later backward "
             "does not reach",
             ("corpus/composable/1f649a9bd6fe84ea.json",),
             _fully_shard_roots_of_their_own_unused_in_a_later_backward,
             ("mismatch:missing_grad:grad",),
             families=("composable",),
             violates="torch/_tensor.py: Tensor.backward: 'This function accumulates gradients in the leaves' "
                      "(fully_shard's docstring says nothing of a root being required, and warns only against "
                      "calling fully_shard on the topmost root module alone)",
             upstream='none found (searched: "fully_shard without root module gradient lost None module not used '
                      'in second backward gradient accumulation multiple roots")'),
    # FSDP1 with use_orig_params=True over tensor-parallel (DTensor) parameters: a parameter frozen before
    # parallelize_module and FSDP ends the step with a gradient (its view of the flat gradient is assigned
    # regardless of requires_grad), so the optimizer trains it.  Without TP, or with FSDP1 alone, it stays None.
    KnownBug("FSDP1 use_orig_params=True over tensor-parallel parameters gives a frozen parameter a gradient",
             ("corpus/fsdp1_tp/d7d63cc7ca9f1d89.json",),
             _fsdp1_over_a_frozen_tensor_parallel_parameter,
             ("mismatch:extra_grad:grad",),
             families=("fsdp1_tp",),
             violates="torch/distributed/fsdp/fully_sharded_data_parallel.py: FullyShardedDataParallel: 'For "
                      "use_orig_params=True, FSDP supports mixing frozen and non-frozen' parameters (a frozen "
                      "parameter, requires_grad=False, gets no gradient: torch.Tensor.requires_grad)",
             upstream='none found (searched: "FSDP use_orig_params frozen parameter requires_grad=False gets '
                      'gradient tensor parallel DTensor 2D")'),
    # replicate_with_fsdp over a module the DDP-based replicate manages: it takes those parameters too (as
    # replicated DTensors), so two reducers treat them; training differs from DDP from the second step on (one
    # rank: the gradient of body.0.weight at step 1), or DDP's reducer errors.  Found first by an invariant on the
    # private APIs' tensor types (dropped: torch promises none), then by training in the issue-30 run.
    KnownBug("replicate_with_fsdp over a DDP-based replicate module trains its parameters wrongly",
             ("corpus/composable/b0cdd306fcd5965f.json", "corpus/composable/a8cf7a67a28ad030.json"),
             lambda case: _nested(case, "replicate", "replicate_fsdp"),
             tuple(f"mismatch:{check}:{what}" for check in ("value", "replica") for what in ("grad", "param", "loss"))
             # a module the step skips keeps the last step's gradient through zero_grad(set_to_none=True), and
             # SGD applies it again (composable/a8cf7a67, second issue-30 run: the torch-only script too)
             + ("mismatch:extra_grad:grad",)
             + ("error:system:RuntimeError:torch/nn/parallel/distributed.py:_pre_forward",),
             families=("composable",),
             violates="torch/nn/parallel/distributed.py: DistributedDataParallel: 'This container provides data "
                      "parallelism by synchronizing gradients across each model replica' (no documented promise "
                      "for nesting the private replicate APIs; what breaks is training itself)",
             upstream='none found (searched: "replicate nested replicate composable DDP parameters collected '
                      'twice _collect_params"; "replicate_with_fsdp fully_shard nested FSDP state has already '
                      'been lazily initialized")',
             api="private: torch.distributed._composable.replicate and replicate_with_fsdp (underscore module)"),
    # The DDP-based replicate with set_requires_gradient_sync(False) on the non-last microbatches and a module a
    # gate runs on the first microbatch only (find_unused_parameters, which the harness passes for gated models):
    # the synced microbatch finds the parameter unused and skips it, so the gradient accumulated locally is never
    # all-reduced and the replicas drift.  DDP's own no_sync() had this bug (pytorch#69031, fixed by
    # pytorch#124193); the same case through DDP (the reference) stays in sync.
    KnownBug("DDP-based replicate with gradient sync off never reduces a parameter unused on the synced microbatch",
             ("corpus/composable/46b8d3f525fa1760.json",),
             _replicate_unsynced_with_a_gate,
             ("mismatch:replica:grad", "mismatch:replica:param", "mismatch:value:grad", "mismatch:value:param"),
             families=("composable",),
             violates="torch/nn/parallel/distributed.py: DistributedDataParallel.no_sync: 'Within this context, "
                      "gradients will be accumulated on module variables, which will later be synchronized in the "
                      "first forward-backward pass exiting the context.' (replicate's set_requires_gradient_sync is "
                      "its composable form)",
             upstream="related: pytorch/pytorch#69031 (DDP no_sync with find_unused_parameters, fixed for DDP by "
                      "pytorch/pytorch#124193); none found for the composable replicate (searched: \"DDP no_sync "
                      "find_unused_parameters parameter unused in final synchronized iteration gradient not "
                      "allreduced ranks differ\")",
             api="private: torch.distributed._composable.replicate (underscore module)"),
)


# ---- checkpoint events (fuzz.case.checkpoint): bugs of torch.distributed.checkpoint and the state-dict APIs

def _full_load_into_a_stateless_optimizer(case: Case) -> bool:
    r = case.resumed()
    return (case.checkpoint.load_way == "full" and case.train.optimizer == "sgd" and not case.train.momentum
            and r.family not in FSDP1_FAMILIES)


def _broadcast_through_set_state_dict(case: Case) -> bool:
    return case.checkpoint.broadcast_from_rank0 and not case.checkpoint.separate


def _fsdp1_full_state_dict_offloaded_on_cpu(case: Case) -> bool:
    c = case.checkpoint
    full = c.save in ("fsdp1_full", "full") or (c.save == "dcp" and c.full_state_dict)
    return case.family in FSDP1_FAMILIES and full and c.cpu_offload


def _fsdp1_stateless_optimizer_through_dcp(case: Case) -> bool:
    c = case.checkpoint
    return (case.family in FSDP1_FAMILIES and c.save in ("dcp", "fsdp1_sharded") and not c.full_state_dict
            and case.train.optimizer == "sgd" and not case.train.momentum)


def _fsdp1_hybrid_rank0_only(case: Case) -> bool:
    c = case.checkpoint
    rank0_only = (c.save == "fsdp1_full" and c.rank0_only) or (c.cpu_offload and (c.save == "full" or (
        c.save == "dcp" and c.full_state_dict)))
    return case.family in FSDP1_FAMILIES and case.mesh.axis_size("dp_replicate") > 1 and rank0_only


def _init_optim_state_of_a_partly_tensor_parallel_model(case: Case) -> bool:
    r = case.resumed()
    return r.family == "fsdp2_tp" and case.train.foreach and case.checkpoint.load_way in ("dcp", "full")


def _full_load_through_a_checkpoint_wrapper_around_an_fsdp1_instance(case: Case) -> bool:
    r = case.resumed()
    if r.family not in FSDP1_FAMILIES or case.checkpoint.load_way not in ("full", "dcp"):
        return False
    found = units(r)  # None: a size-based policy, whose instances the plan does not name
    return any(c.before and (found is None or c.path in found) for c in r.plan.checkpoints)


def _dcp_load_into_fsdp1_where_a_rank_holds_no_piece_of_a_parameter(case: Case) -> bool:
    r = case.resumed()
    if r.family != "fsdp1" or case.checkpoint.load_way != "dcp" or r.plan.sharding == "NO_SHARD":
        return False
    from parityfuzz.build import build_model  # the parameters' shapes: the builder's, not a copy of its rules

    # FSDP1's sharded state dicts split each parameter in torch.chunk pieces over dim 0: a rank past the last
    # piece holds nothing (1 over 2, but also 5 over 4: 2, 2, 1, 0), whatever the smallest dimension is
    shards = r.mesh.axis_size("dp_shard")
    return any(_empty_on_some_rank(p.shape[0], shards) for p in build_model(r).parameters() if p.dim())


def _fsdp1_checkpoint_with_shard_groups_of_one_rank(case: Case) -> bool:
    """FSDP1 sharding over groups of one rank while the world has more: HYBRID_SHARD over (n, 1), or FSDP1 on the
    dp sub-mesh of a (1, tp) tensor-parallel mesh."""
    one = case.mesh.axis_size("dp_shard") == 1 and case.world_size > 1
    return one and ((case.family == "fsdp1" and case.plan.sharding in HYBRID) or case.family == "fsdp1_tp")


def _fsdp1_hybrid_sharded_recipe(case: Case) -> bool:
    return case.family == "fsdp1" and case.plan.sharding in HYBRID \
        and case.checkpoint.load_way == "fsdp1_sharded" and case.mesh.axis_size("dp_replicate") > 1


def _fsdp1_tp_sharded_round_trip(case: Case) -> bool:
    return case.family == "fsdp1_tp" and case.checkpoint.save in ("dcp", "fsdp1_sharded") \
        and not case.checkpoint.full_state_dict


def _fsdp1_tp_full_state_dict(case: Case) -> bool:
    c = case.checkpoint
    return case.family == "fsdp1_tp" and (c.save in ("full", "fsdp1_full") or (c.save == "dcp" and c.full_state_dict))


def _fsdp1_tp_local_state_dict(case: Case) -> bool:
    return case.family == "fsdp1_tp" and case.checkpoint.save == "fsdp1_local"


CHECKPOINT_BUGS = (
    # set_state_dict(full_state_dict=True) (and set_optimizer_state_dict) takes the device to distribute the
    # full optimizer state to from the tensors of the optimizer's own state dict; plain SGD (no momentum) keeps no
    # state tensors, so there is none and it asserts ("Expected device to be set") instead of loading the
    # (tensor-free) state.  FSDP1 models take another branch (FSDP.optim_state_dict_to_load).
    KnownBug("set_state_dict with a full state dict refuses an optimizer without state tensors (plain SGD)",
             ("corpus/fsdp2/c9bce811ffd9bd20.json",),
             _full_load_into_a_stateless_optimizer,
             ("error:system:AssertionError:torch/distributed/checkpoint/state_dict.py:_load_optim_state_dict",),
             families=DCP_FAMILIES,
             violates="torch/distributed/checkpoint/state_dict.py: set_state_dict: 'The counterpart of "
                      "get_state_dict to set the state_dict to the model and optimizers'; StateDictOptions: "
                      "'full_state_dict: if this is set to True, all the tensors in the returned state_dict "
                      "will be gathered'; _init_optim_state's own comment: 'There are some stateless "
                      "optimizers like SGD'",
             upstream='none found (searched: "set_optimizer_state_dict full_state_dict SGD without momentum '
                      'Expected device to be set"; "distributed checkpoint state_dict _load_optim_state_dict '
                      'full_state_dict optimizer empty state AssertionError device"); related: '
                      'pytorch/pytorch#192225 (open, stateless SGD round trip with '
                      'flatten_optimizer_state_dict loads spurious empty state: another stateless-optimizer '
                      'DSD bug, different symptom)'),
    # set_state_dict(broadcast_from_rank0=True) decides optim_only = not model_state_dict on each rank; the
    # ranks other than 0 pass an empty model state dict (as the option asks), so they skip the model while rank
    # 0 broadcasts it: the model is left as built on those ranks and the collectives no longer pair up (a hang,
    # or rank 0 waiting in broadcast_object_list while the others train on).  set_model_state_dict and
    # set_optimizer_state_dict called one after the other load fine.
    KnownBug("set_state_dict with broadcast_from_rank0 skips the model on the ranks other than 0",
             ("corpus/fsdp2/84c04d4ab70da2b4.json",),
             _broadcast_through_set_state_dict,
             ("mismatch:checkpoint:loaded", "hang"),
             families=DCP_FAMILIES,
             violates="torch/distributed/checkpoint/state_dict.py: StateDictOptions: 'broadcast_from_rank0: "
                      'when the option is True, rank0 should receive a full state_dict and will broadcast the'
                      ' tensors in the state_dict/ optim_state_dict one by one to other ranks. Other ranks '
                      'will receive the tensors and shard according to the local shards in the model and '
                      "optimizer.'",
             upstream='none found (searched: "set_state_dict broadcast_from_rank0 hang non-zero ranks empty '
                      'model_state_dict optim_only"; "set_state_dict broadcast_from_rank0 model not loaded on'
                      ' other ranks model_state_dict empty"); related: pytorch/pytorch#125177 (closed, '
                      'rank-0-only optimizer load through set_optimizer_state_dict), pytorch/pytorch#150239 '
                      '(broadcast_from_rank0 strict handling)'),
    # An optimizer without state tensors (plain SGD) under FSDP1, saved through DCP (get_state_dict, or FSDP1's
    # SHARDED optimizer state dict): its "state" is an empty dict, which DCP's flattening drops.  Loading then
    # fails: dcp.load into the fresh system's state dict misses the "optim" entry on the ranks other than 0
    # ("Missing key in checkpoint state_dict: optim"), and FSDP1's documented recipe
    # (load_sharded_optimizer_state_dict + FSDP.optim_state_dict_to_load) gets a dict without "state".
    KnownBug("FSDP1 checkpoints of an optimizer without state tensors (plain SGD) through DCP do not load",
             ("corpus/fsdp1/8843d8f1e8ae10aa.json", "corpus/fsdp1/0dddaf7d9092e772.json"),
             _fsdp1_stateless_optimizer_through_dcp,
             ("error:system:CheckpointException:torch/distributed/checkpoint/utils.py:reduce_scatter",
              "error:system:ValueError:torch/distributed/fsdp/_optim_utils.py:_flatten_optim_state_dict"),
             families=FSDP1_FAMILIES,
             violates="torch/distributed/checkpoint/optimizer.py: load_sharded_optimizer_state_dict: 'Load a "
                      'state_dict in conjunction with FSDP sharded optimizer state. This is the current '
                      "recommended way to checkpoint FSDP.' (its own example builds 'optim = "
                      "torch.optim.SGD(optim_params, lr=0.01)', i.e. plain SGD); "
                      "torch/distributed/checkpoint/state_dict.py set_state_dict: 'The counterpart of "
                      "get_state_dict'",
             upstream='none found (searched: "load_sharded_optimizer_state_dict SGD no momentum empty state '
                      'missing key optim FSDP"; "distributed checkpoint state_dict _load_optim_state_dict '
                      'full_state_dict optimizer empty state AssertionError device"); related: '
                      'pytorch/pytorch#192225 (stateless SGD and DSD flattening, another symptom), '
                      'pytorch/pytorch#88353 (FSDP drops empty state in _flatten_optim_state_dict)'),
    # FSDP1's rank0_only under a hybrid strategy: the model's full state dict lands on rank 0 of each shard group
    # (every replica group's first rank holds a full copy), while the optimizer's is on global rank 0 alone.
    KnownBug("FSDP1 rank0_only full state dicts under HYBRID_SHARD land on every replica group's first rank",
             ("corpus/fsdp1/fa199b7e3d958f39.json",),
             _fsdp1_hybrid_rank0_only,
             ("mismatch:checkpoint:rank0_only",),
             families=FSDP1_FAMILIES,
             violates="torch/distributed/fsdp/api.py: FullStateDictConfig: 'rank0_only (bool): If True, then "
                      "only rank 0 saves the full state dict, and nonzero ranks save an empty dict.'; "
                      "torch/distributed/checkpoint/state_dict.py StateDictOptions: 'cpu_offload ... if "
                      'full_state_dict is also true, then only the rank0 will get the state_dict and all '
                      "other ranks will get empty state_dict.'",
             upstream='none found (searched: "FSDP HYBRID_SHARD rank0_only full state dict saved on every '
                      'replica group rank"); related: pytorch/pytorch#102904 (open, checkpointing under '
                      'HYBRID_SHARD), pytorch/pytorch#104081 (HSDP checkpoint ranks and shard-group ranks)'),
    # Loading into a fresh optimizer, get_state_dict / set_state_dict first materialise its state
    # (_init_optim_state: zero gradients, optimizer.step() at lr 0).  On a partly tensor-parallel model (plain
    # and DTensor parameters in one group) a foreach optimizer's step refuses the mix ("got mixed torch.Tensor and
    # DTensor"); training steps it under implicit_replication(), as PyTorch asks, which _init_optim_state does not.
    KnownBug("get_state_dict on a fresh foreach optimizer of a partly tensor-parallel model fails",
             ("corpus/fsdp2_tp/9f263ad23ca885bd.json",),
             _init_optim_state_of_a_partly_tensor_parallel_model,
             tuple(f"error:system:RuntimeError:torch/optim/{name}.py:_multi_tensor_{name}"
                   for name in ("sgd", "adam", "adamw")),
             families=("fsdp2_tp",),
             violates='no documented promise broken: implicit replication across meshes is opt-in by design: '
                      "torch/distributed/tensor/experimental/__init__.py: implicit_replication 'allows "
                      'DTensor to implicitly treat all non-DTensors (torch.Tensor) in the program be '
                      "replicate DTensor s'; pytorch/pytorch#134551: 'we don't want to turn this on by "
                      'default yet, as we want the users to be aware that the tp dimension is replicated if a'
                      " layer is not tp-ed'",
             upstream="related: pytorch/pytorch#134212 (closed, '[DSD] Test could fail in test_fsdp_dsd.py': "
                      'DSD with a partly tensor-parallel 2D model; resolved by making implicit_replication() '
                      'handle foreach cross-mesh ops in pytorch/pytorch#134551 and pytorch/pytorch#134979); '
                      'no report of _init_optim_state itself (searched: "implicit_replication optimizer step '
                      'partially tensor parallel model mixed DTensor 1D 2D foreach")'),
    # FSDP1 with device_mesh the dp sub-mesh of a (dp_shard, tp) mesh: a sharded round trip (SHARDED_STATE_DICT
    # through DCP, or get_state_dict) loads optimizer state wrongly, of tensor-parallel parameters (Adam's exp_avg
    # of a colwise bias: 4 to 6 of 8 elements differ from what was saved) and of plain ones alike (a momentum
    # buffer of an RMSNorm weight on a dp_shard=1 sub-mesh: 8 of 17), and the next step leaves the
    # uninterrupted run: a silent corruption.
    KnownBug("FSDP1 on the dp sub-mesh of a tensor-parallel mesh loads optimizer state wrongly (sharded round trip)",
             ("corpus/fsdp1_tp/d059bfc766e6d748.json", "corpus/fsdp1_tp/8aa5b111aa84e8b6.json"),
             _fsdp1_tp_sharded_round_trip,
             ("mismatch:checkpoint:loaded",),
             families=("fsdp1_tp",),
             violates="torch/distributed/fsdp/fully_sharded_data_parallel.py: device_mesh arg: 'For 2D FSDP +"
                      " TP, users are required to pass in device_mesh instead of process_group'; "
                      "torch/distributed/checkpoint/state_dict.py set_state_dict: 'The counterpart of "
                      "get_state_dict to set the state_dict to the model and optimizers'",
             upstream='none found (searched: "FSDP tensor parallel 2D SHARDED_STATE_DICT optimizer state '
                      'loaded wrong values after load"; "FSDP TP full state dict Could not resolve the '
                      'process group registered under the name")'),
    # The same with full state dicts: FULL_STATE_DICT (directly or through get_state_dict(full_state_dict=True))
    # resolves a process group by a name the ranks do not share ("Could not resolve the process group registered
    # under the name 3"); with rank0_only the ranks hang; where the save goes through, the load copies plain
    # tensors into DTensors ("aten.copy_.default got mixed torch.Tensor and DTensor").
    KnownBug("FSDP1 over tensor parallelism cannot take a full state dict",
             ("corpus/fsdp1_tp/c497e65d71635999.json", "corpus/fsdp1_tp/ebccaa3f61b716af.json"),
             _fsdp1_tp_full_state_dict,
             ("error:system:RuntimeError:torch/distributed/distributed_c10d.py:_get_group_size_by_name", "hang",
              # loading it back: "aten.copy_.default got mixed torch.Tensor and DTensor"
              "error:system:RuntimeError:torch/nn/modules/module.py:load_state_dict"),
             families=("fsdp1_tp",),
             violates="torch/distributed/fsdp/fully_sharded_data_parallel.py: device_mesh arg: 'For 2D FSDP +"
                      " TP, users are required to pass in device_mesh instead of process_group'; "
                      'torch/distributed/fsdp/api.py StateDictType: FULL_STATE_DICT is a supported state dict'
                      " type with no TP exclusion; StateDictOptions: 'full_state_dict: if this is set to "
                      "True, all the tensors in the returned state_dict will be gathered'",
             upstream='none found for FSDP1+TP FULL_STATE_DICT (searched: "FSDP TP full state dict Could not '
                      'resolve the process group registered under the name"; "FSDP tensor parallel 2D '
                      'SHARDED_STATE_DICT optimizer state loaded wrong values after load"); related: '
                      'pytorch/pytorch#180449 (open, DSD calls FSDP.optim_state_dict(_to_load) without the '
                      'FSDP process group; fix PR pytorch/pytorch#181261)'),
    # ... and LOCAL_STATE_DICT builds its ShardedTensor on the dp group with global rank 0 as a member: on the
    # ranks of the other dp groups "Global rank 0 is not part of group".
    KnownBug("FSDP1 over tensor parallelism cannot take a LOCAL state dict outside rank 0's dp group",
             ("corpus/fsdp1_tp/8b52f14a1fb16ccf.json",),
             _fsdp1_tp_local_state_dict,
             ("error:system:ValueError:torch/distributed/distributed_c10d.py:get_group_rank",),
             families=("fsdp1_tp",),
             violates='torch/distributed/fsdp/api.py: StateDictType: '
                      "'_local_state_dict/_load_local_state_dict: this pair of APIs return and load local "
                      "sharded, flattened parameters'; fully_sharded_data_parallel.py device_mesh: 'For 2D "
                      "FSDP + TP, users are required to pass in device_mesh'",
             upstream="related: pytorch/pytorch#155680 (open, '[FSDP] optimizer_state_dict fails if FSDP "
                      "model is not on global rank 0': same class, an FSDP1 state-dict path assuming global "
                      "rank 0 is in the FSDP group), pytorch/pytorch#104081 ('global rank is not part of the "
                      'shard group\' under HSDP checkpointing); none exact (searched: "FSDP TP full state dict'
                      ' Could not resolve the process group registered under the name"; "FSDP HYBRID_SHARD '
                      'rank0_only full state dict saved on every replica group rank")'),
    # FSDP1's FULL_STATE_DICT with offload_to_cpu=True (directly, or through get_state_dict(full_state_dict=True,
    # cpu_offload=True)) on CPU ranks: the "offloaded" copy of an unsharded parameter that is already on the CPU
    # is the unsharded storage itself, which FSDP1 frees when it reshards; the post-state-dict hook's clone() then
    # reads freed memory and the rank dies with SIGSEGV (with or without rank0_only; one Linear suffices).  With
    # nested instances the inner instance's unshard may find that storage freed first: "setStorage: ... out of
    # bounds for storage of size 0" in the split of its flat parameter (a RuntimeError instead of the crash).
    KnownBug("FSDP1 full state dict with offload_to_cpu on CPU ranks segfaults",
             ("corpus/fsdp1/8b453d46848f51bf.json", "corpus/fsdp1/020ed74dabd021a2.json"),
             _fsdp1_full_state_dict_offloaded_on_cpu,
             ("crash:-11", "error:system:RuntimeError:torch/_tensor.py:split"),
             families=FSDP1_FAMILIES,
             violates="torch/distributed/fsdp/api.py: StateDictConfig: 'offload_to_cpu (bool): If True, then "
                      "FSDP offloads the state dict values to CPU'; FullStateDictConfig: 'We recommend "
                      "enabling both offload_to_cpu=True and rank0_only=True when saving full state dicts'; "
                      "torch/distributed/fsdp/_flat_param.py FlatParamHandle.to_cpu 'Precondition: "
                      "self.flat_param's data is the unpadded unsharded flat parameter on the compute device'",
             upstream="pytorch/pytorch#188989 (closed; '[FSDP] summon_full_params(offload_to_cpu=True) fails "
                      "with CPU-offloaded FSDP model (or when FSDP is running on a CPU-only environment)': "
                      'same root cause, FlatParamHandle.to_cpu frees the unsharded storage when the flat '
                      "parameter is already on the CPU, same 'setStorage: ... out of bounds for storage of "
                      "size 0' message; the installed 2.13 to_cpu still calls _free_unsharded_flat_param "
                      'unconditionally, so no fix in this build)'),
    # FSDP1 with an activation-checkpoint wrapper applied before wrapping, around a module FSDP1 then makes an
    # instance of: CheckpointWrapper(FullyShardedDataParallel(...)).  set_state_dict / set_model_state_dict /
    # set_optimizer_state_dict with full_state_dict=True cannot load what get_state_dict(full_state_dict=True)
    # of the same structure gave: _load_model_state_dict renames each clean key to its name with the wrappers'
    # prefixes, which FSDP1's FULL_STATE_DICT load then prefixes again ("Missing key(s) ... body.0.weight;
    # Unexpected key(s) ... body.0.weight"); with optimizer state, _split_optim_state_dict looks it up under
    # "body.0._fsdp_wrapped_module.weight" ("Missing optimizer state for parameter").  FSDP1's own
    # FULL_STATE_DICT (state_dict / load_state_dict) loads it, as does the wrapper inside the instance
    # (FSDP(CheckpointWrapper(...)), apply_activation_checkpointing after wrapping).  The DCP way (get_state_dict
    # sharded, dcp.save/load, set_state_dict) fails the same way once the optimizer has state (the issue-30 run:
    # momentum SGD, on one rank and on two).
    KnownBug("set_state_dict cannot load a state dict into FSDP1 with a checkpoint wrapper around an instance",
             ("corpus/fsdp1/c5d7c99dbe6c2ecf.json", "corpus/fsdp1/d492adbfb1cf246f.json",
              "corpus/fsdp1/ba4184600205328b.json"),
             _full_load_through_a_checkpoint_wrapper_around_an_fsdp1_instance,
             ("error:system:RuntimeError:torch/nn/modules/module.py:load_state_dict",
              "error:system:RuntimeError:torch/distributed/checkpoint/state_dict.py:_split_optim_state_dict",
              # from an FSDP1 FULL save: FSDP.optim_state_dict_to_load looks the prefixed name up
              "error:system:KeyError:torch/distributed/fsdp/_optim_utils.py:<setcomp>"),
             families=FSDP1_FAMILIES,
             violates="torch/distributed/checkpoint/state_dict.py: set_state_dict: 'The given "
                      'model_state_dict and optim_state_dict do not have to be returned by get_state_dict but'
                      ' must meet the following requirements: 1) all FQNs are canonical FQNs as defined in '
                      "get_state_dict'; get_state_dict: 'a canonical FQN to a parameter is the FQN returned "
                      'by module.named_parameters() ... when the module is not distributed by any '
                      "parallelisms'",
             upstream='none found (searched: "set_model_state_dict full_state_dict FSDP checkpoint_wrapper '
                      '_checkpoint_wrapped_module prefix missing unexpected keys"); related: '
                      'pytorch/pytorch#124546 (closed, DSD + FSDP1 + activation checkpointing FQN errors when'
                      ' loading optimizer state), pytorch/pytorch#77224 (CheckpointWrapper state_dict prefix '
                      'hooks)',
             api='public (torch.distributed.checkpoint.state_dict, FSDP1); the wrapper comes from '
                 'torch.distributed.algorithms._checkpoint.checkpoint_wrapper (underscore module, but the one'
                 " FSDP1's docs/tutorials use for activation checkpointing)"),
    # FSDP1's SHARDED_STATE_DICT chunks each parameter by dim 0 over the shard group (torch.chunk), so where that
    # leaves a rank no piece (dim 0 smaller than the group, or 5 over 4: 2, 2, 1, 0) the rank holds a
    # ShardedTensor without local shards.  dcp.load of get_state_dict's sharded
    # state dict on that rank: the load planner's _flatten_sharded_tensors drops that entry, the planner takes
    # the key the checkpoint has and the state dict lacks for a checkpoint from before torch 2.4 and flattens the
    # state dict the old way, which keeps the optimizer's tensor-free param_groups as one entry: "Missing key in
    # checkpoint state_dict: optim.param_groups" (CheckpointException), with or without resharding (a Linear
    # of 3 outputs on 4 ranks; a dim 0 of 1 on 2).  FSDP1's own recipe (dcp.load of the model,
    # load_sharded_optimizer_state_dict) loads the same checkpoint.
    KnownBug("dcp.load into FSDP1 fails where a rank holds no piece of a parameter (torch.chunk over dim 0 leaves it none)",
             ("corpus/fsdp1/2b9e17fa63883165.json",),
             _dcp_load_into_fsdp1_where_a_rank_holds_no_piece_of_a_parameter,
             ("error:system:CheckpointException:torch/distributed/checkpoint/utils.py:reduce_scatter",),
             families=("fsdp1",),
             violates='torch/distributed/checkpoint/state_dict.py: set_state_dict/get_state_dict round trip '
                      "('The counterpart of get_state_dict'); torch/distributed/fsdp/_shard_utils.py "
                      "_create_chunk_sharded_tensor: 'Shard a tensor to chunks along the first dimension. The"
                      " local rank will get its corresponding chunk as the local shard' (local_shards = [] "
                      "when len(chunks) <= rank); DCP's load planner then takes the missing key for a pre-2.4"
                      " checkpoint (default_planner.py: 'To support checkpoints that are saved before v2.4')",
             upstream='none found (searched: "load_sharded_optimizer_state_dict SGD no momentum empty state '
                      'missing key optim FSDP"; "FSDP tensor parallel 2D SHARDED_STATE_DICT optimizer state '
                      'loaded wrong values after load"); related: pytorch/pytorch#102821 (FSDP sharded '
                      'optimizer load with empty shards, fixed by pytorch/pytorch#108915 in '
                      'chunk_sharding_spec), pytorch/pytorch#143372 (empty-rank shards in DTensor views)'),
    # FSDP1 HYBRID_SHARD with shard groups of one rank (the training bug pytorch#154888 lives there too): any
    # state dict (FSDP1's FULL or SHARDED, get_state_dict sharded or full) fails on the ranks outside global rank
    # 0's shard group, "Global rank 0 is not part of group" in get_group_rank, while rank 0 waits (a hang).  FSDP1
    # on the dp sub-mesh of a (1, tp) mesh (one rank per shard group) fails the same way (the issue-30 run).
    KnownBug("FSDP1 with shard groups of one rank (hybrid, or the dp sub-mesh of a TP mesh) cannot take a state dict",
             ("corpus/fsdp1/f69140c3784bf7e4.json", "corpus/fsdp1_tp/3811bba456ca687d.json"),
             _fsdp1_checkpoint_with_shard_groups_of_one_rank,
             ("error:system:ValueError:torch/distributed/distributed_c10d.py:get_group_rank", "hang"),
             families=("fsdp1", "fsdp1_tp"),
             violates="torch/distributed/fsdp/api.py: ShardingStrategy: 'HYBRID_SHARD: Apply FULL_SHARD "
                      "within a node, and replicate parameters across nodes'; fully_sharded_data_parallel.py "
                      "device_mesh: 'For hybrid sharding strategies such as ShardingStrategy.HYBRID_SHARD, "
                      "users can pass in a 2D DeviceMesh'; StateDictType FULL/SHARDED state dicts carry no "
                      'hybrid exclusion',
             upstream='related: pytorch/pytorch#154888 (the training bug of the same configuration, '
                      'HYBRID_SHARD with one-rank shard groups; closed, reportedly as not planned for FSDP1 '
                      'per verl-project/verl#7494), pytorch/pytorch#155680 (open, FSDP optim state dict fails'
                      " when the FSDP group lacks global rank 0), pytorch/pytorch#104081 ('global rank is not"
                      ' part of the shard group\' in HSDP checkpointing); none exact (searched: "FSDP '
                      'HYBRID_SHARD shard group size 1 state_dict Global rank 0 is not part of group"; "FSDP '
                      'HYBRID_SHARD shard group of one rank gradients not all-reduced across replicas '
                      'NO_SHARD switch")'),
    # FSDP1 HYBRID_SHARD (process groups or a 2-D mesh) through its documented SHARDED recipe
    # (load_sharded_optimizer_state_dict + FSDP.optim_state_dict_to_load): optimizer state is loaded wrongly
    # (12 of 16 elements of a momentum buffer, 2 of 3 of an Adam exp_avg), on every rank, and training goes on
    # from it (silent corruption).  get_state_dict + dcp.load of the same setup loads it right, as does the
    # recipe under FULL_SHARD.
    KnownBug("FSDP1 hybrid sharding loads optimizer state wrongly through load_sharded_optimizer_state_dict",
             ("corpus/fsdp1/86a5cf23cde5c6a7.json",),
             _fsdp1_hybrid_sharded_recipe,
             ("mismatch:checkpoint:loaded",),
             families=("fsdp1",),
             violates="torch/distributed/checkpoint/optimizer.py: load_sharded_optimizer_state_dict: 'Load a "
                      'state_dict in conjunction with FSDP sharded optimizer state. This is the current '
                      "recommended way to checkpoint FSDP.'",
             upstream='none found (searched: "load_sharded_optimizer_state_dict HYBRID_SHARD optimizer state '
                      'incorrect after loading"; "FSDP HYBRID_SHARD rank0_only full state dict saved on every'
                      ' replica group rank"); related: pytorch/pytorch#102904 (open, checkpointing model and '
                      'optimizer state under HYBRID_SHARD), pytorch/pytorch#112259 (maintainers: '
                      "load_sharded_optimizer_state_dict 'is being deprecated in favor of' "
                      'get_state_dict/set_state_dict)'),
)
KNOWN_BUGS = KNOWN_BUGS + CHECKPOINT_BUGS


def known_bug(case: Case, verdict: Verdict) -> KnownBug | None:
    """The known bug that explains ``verdict`` on ``case``, if any."""
    return next((b for b in KNOWN_BUGS if b.explains(case, verdict)), None)
