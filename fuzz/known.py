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


def _unfrozen_after_no_grad_forward(case: Case) -> bool:
    return case.train.eval and any(f.until for f in case.train.frozen)


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
    """A replicate_with_fsdp root over a fully_shard module that keeps its parameters unsharded after forward and
    sits out some forwards (a gate at, above or below it), with several microbatches a step."""
    applies = case.plan.applies
    gates = [p for p, n in case.model.body.walk("body") if n.kind == "gate"]
    return (case.train.microbatches > 1 and any(c.path == "" and c.api == "replicate_fsdp" for c in applies)
            and any(c.api == "fully_shard" and c.path and c.reshard_after_forward is not True
                    and any(under(c.path, (g,)) or under(g, (c.path,)) for g in gates) for c in applies))


def _foreach_zeroing_of_plain_and_dtensor_gradients(case: Case) -> bool:
    """A composable plan giving parameters both to the DDP-based replicate (plain) and to an FSDP-based API
    (DTensor), zeroed in place with foreach."""
    apis = {case.plan.data_parallel().get(case.plan.manager(m)) for m in case.model.param_modules()}
    return (case.train.foreach and case.train.zero_grad != "none" and "replicate" in apis
            and bool(apis & {"fully_shard", "replicate_fsdp"}))


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
             families=("fsdp2", "fsdp2_tp")),
    # FSDPParamGroup._init_mp_dtypes (at the first forward) takes _orig_dtype and _reduce_dtype from trainable
    # parameters only: a group frozen at its first forward keeps None for both, so after unfreezing its reduced
    # gradients are not cast back (RuntimeError assigning .grad) or are reduced in the gradient's dtype instead
    # of the policy's reduce_dtype (silent).
    KnownBug("fsdp2 mixed precision after unfreezing a group frozen at its first forward (pytorch#186998)",
             ("corpus/fsdp2/49d6b2f2e5368ff5.json", "corpus/fsdp2/b9b6e8fdc983331b.json"),
             _mixed_precision_group_unfrozen_later,
             ("error:system:RuntimeError:torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:foreach_reduce",
              "mismatch:value:grad"),
             families=("fsdp2", "fsdp2_tp")),
    # With gradient sync off, FSDP2 accumulates unsharded gradients in reduce_dtype; a parameter first used on
    # the last (synced) microbatch brings a fresh gradient in param_dtype, and foreach_reduce asserts one dtype.
    KnownBug("fsdp2 accumulation with a parameter first used on the last microbatch, reduce_dtype != param_dtype "
             "(pytorch#196996)",
             ("corpus/fsdp2/6f89a6ac47c9319c.json",),
             _mixed_precision_accumulation_with_gated_params,
             ("error:system:AssertionError:torch/distributed/fsdp/_fully_shard/_fsdp_common.py:_raise_assert_with_print",)),
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
             families=("fsdp2", "fsdp2_tp")),
    # A no_grad forward leaves a group unsharded or partly resharded (no backward to reshard it: the root,
    # reshard_after_forward=False or <int>); a parameter unfrozen then keeps an unsharded parameter that does not
    # require a gradient until the group reshards: no gradient, or only the later microbatches' (the FSDP2
    # analogue of FSDP1's pytorch#105371).
    KnownBug("fsdp2 requires_grad set while a no_grad forward left the group unsharded is not seen",
             ("corpus/fsdp2/0f0f8ba17c12f22c.json", "corpus/fsdp2/f5b6959abd91135c.json",
              "corpus/composable/d15f1d01af7c3c17.json"),
             _unfrozen_after_no_grad_forward,
             ("mismatch:missing_grad:grad",) + tuple(f"mismatch:value:{what}" for what in ("grad", "param", "loss")),
             families=("fsdp2", "fsdp2_tp", "composable")),
    # clip_grad_norm_ stacks the per-parameter norms; under FSDP2 a partly tensor-parallel model has 2-D
    # (dp, tp) and 1-D (dp) gradient DTensors, and DTensor will not stack operands from different meshes.
    KnownBug("clip_grad_norm_ on gradients from different device meshes (pytorch#180346)",
             ("corpus/fsdp2_tp/565a691de898bf38.json",),
             _clipping_a_partly_tensor_parallel_fsdp2_model,
             ("error:system:RuntimeError:torch/distributed/tensor/_dispatch.py:_propagate_op_sharding_dispatch_slow_path",),
             families=("fsdp2_tp",)),
    # A tensor-parallel parameter with an empty local shard (see _empty_on_some_rank) under fully_shard:
    # the reduce-scatter's _chunk_cat refuses the empty gradient on the ranks holding it; the others block.
    KnownBug("fsdp2 reduce-scatter of an empty tensor-parallel shard",
             ("corpus/fsdp2_tp/23d7069e16d673a5.json",),
             _fsdp2_over_an_empty_tensor_parallel_shard,
             ("error:system:RuntimeError:torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:chunk_cat",
              "hang"),
             families=("fsdp2_tp",)),
    # loss_parallel() on logits whose vocabulary leaves a tp rank nothing: its nll_loss forward indexes the
    # empty local shard on that rank; the others block in the loss's collectives.
    KnownBug("loss_parallel with a tp rank holding no vocabulary",
             ("corpus/fsdp2_tp/cfbc009f547b972b.json",),
             _loss_parallel_with_a_rank_holding_no_vocabulary,
             ("error:system:RuntimeError:torch/distributed/tensor/parallel/loss.py:_nll_loss_forward", "hang"),
             families=("fsdp2_tp",)),
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
             families=("fsdp2_tp",)),
    # Under TP alone a sequence-parallel norm's weight gradient is left Partial(sum) (FSDP2, where present,
    # redistributes it); optimizer.zero_grad(set_to_none=False) with foreach then fails: DTensor's
    # _foreach_zero_ refuses a Partial operand in place, though zero_ on the same tensor is accepted.
    KnownBug("foreach zero_grad(set_to_none=False) refuses a Partial sequence-parallel gradient",
             ("corpus/fsdp2_tp/2240b4e899c2970f.json",),
             _foreach_zeroing_of_sequence_parallel_gradients,
             ("error:system:RuntimeError:torch/distributed/tensor/_dispatch.py:_propagate_op_sharding_dispatch_slow_path",),
             families=("fsdp2_tp",)),
    # FSDP1 turns any strategy into NO_SHARD where its process group has one rank ("FSDP is switching to use
    # NO_SHARD ... since the world size is 1"); for the hybrid strategies that group is the intra-node shard
    # group, and NO_SHARD reduces over it alone: gradients are never all-reduced across the replicas, which
    # silently train on their own (a device_mesh (n, 1); torch's own groups with one GPU per node, or on a
    # CPU machine).  pytorch#154888, closed without a fix for FSDP1.
    KnownBug("FSDP1 hybrid sharding with shard groups of one rank never reduces across replicas (pytorch#154888)",
             ("corpus/fsdp1/81863a873dce0ef8.json", "corpus/fsdp1/19dfe7c15b568e2f.json"),
             _hybrid_fsdp1_with_shards_of_one,
             tuple(f"mismatch:{check}:{what}" for check in ("replica", "value") for what in ("grad", "param", "loss")),
             families=("fsdp1",)),
    # FullyShardedDataParallel.clip_grad_norm_ computes each gradient's norm with
    # torch.linalg.vector_norm(grad, dtype=torch.float32) "to handle low precision": a float64 gradient is
    # refused ("should be convertible without narrowing"), so FSDP1 cannot clip a float64 model at all
    # (torch.nn.utils.clip_grad_norm_ and FSDP2 can).
    KnownBug("FSDP1 clip_grad_norm_ refuses float64 gradients",
             ("corpus/fsdp1/c55d28dc7b3d9474.json",),
             _fsdp1_clipping_float64_gradients,
             ("error:system:RuntimeError:torch/distributed/fsdp/fully_sharded_data_parallel.py:<listcomp>",),
             families=("fsdp1", "fsdp1_tp")),
    # foreach SGD adds the weight decay with one _foreach_add over the parameters of a device and dtype: under
    # implicit_replication() (which PyTorch asks for a partly tensor-parallel model) the plain parameters' decayed
    # gradients come back as DTensors; where some momentum buffer is still missing (a parameter unfrozen after
    # the first step), SGD falls back to per-tensor buf.mul_().add_(grad), and a plain buffer plus a DTensor
    # gradient trips an AssertionError in DTensor's dispatch.
    KnownBug("foreach SGD weight decay over plain and tensor-parallel parameters with a late momentum buffer",
             ("corpus/fsdp2_tp/9a14b5e10c97b750.json",),
             _foreach_sgd_weight_decay_over_plain_and_tensor_parallel_params,
             ("error:system:AssertionError:torch/distributed/tensor/_dispatch.py:_dispatch_fast_path_python_tail",),
             families=("fsdp2_tp",)),
    # FSDP1 with use_orig_params=False: a unit the last backward of a step does not reach (a gated module) comes
    # out of the step with its FlatParameter's gradient None (prepare_gradient_for_optim hands the saved sharded
    # gradient over only if that backward called the unit's post-backward), though zero_grad(set_to_none=False)
    # left zeros there, or an earlier microbatch (outside no_sync) reduced a gradient into it; DDP (and a local
    # model) keep them: the optimizer skips the whole unit, or loses the earlier microbatches' gradient.
    KnownBug("FSDP1 use_orig_params=False drops the gradient of a unit the last backward of a step does not reach",
             ("corpus/fsdp1/bc286d6e1ab6f59b.json", "corpus/fsdp1/5fca3ee09ca2e627.json"),
             _fsdp1_flat_unit_unused_in_the_last_backward,
             ("mismatch:missing_grad:grad",) + tuple(f"mismatch:value:{what}" for what in ("grad", "param", "loss")),
             families=("fsdp1",)),
    # The same with use_orig_params=False, where the optimizer sees only FlatParameters: a parameter unused in a
    # step (a gated module) inside a unit whose other parameters got gradients has a zero slice in the flat
    # gradient, so weight decay and momentum move it where DDP does not.  Inherent to flat parameters (torch's
    # documentation does not say so): kept as a known divergence, not a fixable bug.
    KnownBug("FSDP1 use_orig_params=False gives a parameter unused in a step a zero gradient",
             ("corpus/fsdp1/29fb844b1096868e.json",),
             _fsdp1_flat_params_unused_in_a_step,
             ("mismatch:extra_grad:grad",) + tuple(f"mismatch:value:{what}" for what in ("grad", "param", "loss")),
             families=("fsdp1",)),
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
             families=("fsdp1", "fsdp1_tp")),
    # FSDP1 with use_orig_params=True: a parameter unused in a step whose unit's other parameters got gradients
    # shows a zero gradient where DDP (and a local model) leave None, though FlatParameter._is_grad_none_mask
    # exists to set such "logically None" gradients to None: the optimizer then steps it (weight decay,
    # momentum) where DDP does not.
    KnownBug("FSDP1 use_orig_params=True shows a zero gradient for a parameter unused in a step",
             ("corpus/fsdp1/875ed9b3950f8533.json", "corpus/fsdp1/6dbba2b8fcc2c56c.json"),
             _fsdp1_orig_params_unused_in_a_step,
             ("mismatch:extra_grad:grad",) + tuple(f"mismatch:value:{what}" for what in ("grad", "param", "loss")),
             families=("fsdp1", "fsdp1_tp")),
    # FSDP1 with use_orig_params=True: an instance whose parameters are all frozen, on a module that uses them on
    # some steps only (the identity on the others): at the step it passes its input through, its pre-backward
    # hook runs (its output requires grad through the input) but nothing resets its training state, and the
    # next backward fails FSDP1's own check, "expected to be in states [IDLE] but current state is
    # FORWARD_BACKWARD" (standalone: an Embedding, then FSDP(Gate(Linear)) with the Linear frozen, 2 ranks).
    KnownBug("FSDP1 instance with all parameters frozen and unused in a step fails its training-state check",
             ("corpus/fsdp1/c6461880e9e42683.json", "corpus/fsdp1/26f293fa4b33b78a.json"),
             _fsdp1_frozen_instance_unused_in_a_step,
             ("error:system:ValueError:torch/distributed/fsdp/_common_utils.py:_assert_in_training_states",),
             families=("fsdp1",)),
    # FSDP1 with use_orig_params=True over a tied embedding/head weight frozen before wrapping (and a nested
    # unit): an internal assertion while it sets the original parameters' views, "as_params=True
    # type(prim_param)=<class 'torch.Tensor'>" (the shared parameter was registered as a plain tensor).
    KnownBug("FSDP1 use_orig_params=True with a frozen tied weight",
             ("corpus/fsdp1/421ac28f670a191f.json",),
             _fsdp1_frozen_tied_weights,
             ("error:system:AssertionError:torch/distributed/utils.py:_p_assert",),
             families=("fsdp1",)),
    # FSDP1 under no_sync() keeps a unit's accumulated gradient unsharded; where the last (synced) microbatch
    # does not reach the unit (a gated module), its post-backward finds a gradient that never went through the
    # reduce-scatter and trips an internal assertion ("All sharded parameters that received a gradient in the
    # post-backward should use `_saved_grad_shard`").
    # Under NO_SHARD nothing trips: the accumulated gradient is never all-reduced and each rank steps its own
    # (replicas silently drift apart; under mixed precision it also stays in param_dtype); under the sharded
    # strategies with mixed precision the unreduced bf16 gradient can reach Adam first, which refuses it.
    KnownBug("FSDP1 no_sync with a unit unused on the last microbatch",
             ("corpus/fsdp1/55db10279d6f193a.json", "corpus/fsdp1/db9da2e07e0e8a02.json"),
             _fsdp1_no_sync_with_a_unit_unused_on_the_last_microbatch,
             ("error:system:AssertionError:torch/distributed/utils.py:_p_assert",
              "error:system:RuntimeError:torch/optim/adam.py:_single_tensor_adam",
              "error:system:RuntimeError:torch/optim/adam.py:_multi_tensor_adam", "mismatch:dtype:grad")
             + tuple(f"mismatch:{check}:{what}" for check in ("replica", "value") for what in ("grad", "param", "loss")),
             families=("fsdp1",)),
    # FSDP1's MixedPrecision documents keep_low_precision_grads as keeping "the gradients in the dtype used for
    # gradient reduction", and NO_SHARD does; the sharded strategies cast the reduced gradient to param_dtype
    # instead (FlatParamHandle.prepare_gradient_for_optim casts to _fwd_bwd_param_dtype): with reduce_dtype
    # fp32 and param_dtype bf16 the optimizer gets bf16 gradients, and with param_dtype left out full-precision
    # ones, so the same policy gives other dtypes and values under FULL_SHARD than under NO_SHARD.
    KnownBug("FSDP1 keep_low_precision_grads leaves sharded gradients in param_dtype, not the reduction dtype",
             ("corpus/fsdp1/6a29276aa4797999.json",),
             _fsdp1_keep_low_precision_grads_sharded,
             ("mismatch:dtype:grad",) + tuple(f"mismatch:value:{what}" for what in ("grad", "param", "loss")),
             families=("fsdp1",)),
    # FSDP1 with use_orig_params=True over a tied embedding/head weight, mixed precision and no_sync(), where
    # the strategy does not shard (NO_SHARD, or any whose shard group has one rank): the gradient accumulated
    # under no_sync() is in param_dtype; at the next forward FSDP1 points the original parameters' gradients at
    # it, using a .data assignment to get past torch's parameter/gradient dtype check for each parameter but a
    # plain one for the shared (tied) parameter, which torch 2.13's grad_dtype check refuses.
    KnownBug("FSDP1 use_orig_params=True with a tied weight, mixed precision and no_sync without sharding",
             ("corpus/fsdp1/78c14e116ef30325.json",),
             _fsdp1_tied_weight_unsharded_no_sync_mixed_precision,
             ("error:system:RuntimeError:torch/distributed/fsdp/_flat_param.py:_use_sharded_grad_views",),
             families=("fsdp1",)),
    # FSDP1 NO_SHARD (or a dp group of one rank, where FSDP1 switches to NO_SHARD) over tensor-parallel
    # parameters with use_orig_params=True: the original parameters become DTensor views of the unsharded flat
    # parameter, whose (global) shape the next forward's writeback check compares with the local one: "Cannot
    # writeback when the parameter shape changes" at the second forward.
    KnownBug("FSDP1 NO_SHARD over tensor-parallel parameters with use_orig_params=True",
             ("corpus/fsdp1_tp/a43cfa6b15f3c009.json",),
             _fsdp1_no_shard_tensor_parallel_orig_params,
             ("error:system:RuntimeError:torch/distributed/fsdp/_flat_param.py:_writeback_tensor",),
             families=("fsdp1_tp",)),
    # FSDP1 over a tensor-parallel parameter whose shard is empty on some rank (a dimension smaller than tp),
    # with use_orig_params=False: that rank trips an internal assertion ("unsharded_start_idx: 0
    # unsharded_end_idx: -1") while the others wait in a collective (with use_orig_params=True FSDP1 refuses any
    # uneven shard with a clear error, an expected error in the corpus).
    KnownBug("FSDP1 over an empty tensor-parallel shard",
             ("corpus/fsdp1_tp/167cb1fc2b75a040.json",),
             _fsdp1_empty_tensor_parallel_shard,
             ("error:system:AssertionError:torch/distributed/utils.py:_p_assert",),
             families=("fsdp1_tp",)),
    # FSDP1 with use_orig_params=True over tensor-parallel parameters, accumulating under no_sync(): the next
    # forward's check that the original parameters still share the flat parameter's storage raises "Attempted
    # to access the data pointer on an invalid python storage" (FlatParamHandle._same_storage).
    KnownBug("FSDP1 no_sync over tensor-parallel parameters with use_orig_params=True",
             ("corpus/fsdp1_tp/e535778bc85baffe.json",),
             _fsdp1_no_sync_tensor_parallel_orig_params,
             ("error:system:RuntimeError:torch/distributed/fsdp/_flat_param.py:_same_storage",),
             families=("fsdp1_tp",)),
    # FullyShardedDataParallel.clip_grad_norm_ over tensor-parallel parameters: it sums the squared norms of the
    # local flat shards over FSDP1's data-parallel group only, so each tp rank takes the norm of its own TP shard
    # for the total: the clipping coefficient is wrong (and differs across a tp group), and training silently
    # drifts from DDP's torch.nn.utils.clip_grad_norm_.
    KnownBug("FSDP1 clip_grad_norm_ over tensor-parallel parameters leaves the tp shards out of the norm",
             ("corpus/fsdp1_tp/2414d2455aa4059c.json",),
             _fsdp1_clipping_tensor_parallel_parameters,
             tuple(f"mismatch:{check}:{what}" for check in ("value", "replica") for what in ("grad", "param", "loss")),
             families=("fsdp1_tp",)),
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
             families=("zero",)),
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
             families=("fsdp2_tp",)),
    # torch.distributed._composable.replicate (DDP-based) collects its parameters at the first forward, skipping
    # only submodules fully_shard manages (_ReplicateState._collect_params checks _is_fully_sharded): a replicate
    # inside it is not skipped, and the outer DistributedDataParallel takes the inner one's parameters too (each
    # of their gradients all-reduced by both).
    KnownBug("replicate inside replicate, the outer one takes the inner one's parameters too",
             ("corpus/composable/eb78628abf06784d.json",),
             lambda case: _nested(case, "replicate", "replicate"),
             ("error:system:InvariantViolation:systems/composable.py:check_replicated_names",),
             families=("composable",)),
    # replicate_with_fsdp.replicate stops at modules whose registry holds "fully_shard"
    # (is_composable_with_replicate) or that hold its own state class: the DDP-based replicate registers as
    # "replicate" with another state class, so a replicate_with_fsdp above it takes its parameters as replicated
    # DTensors, under the DDP-based replicate's hooks.
    KnownBug("replicate_with_fsdp takes the parameters of a DDP-based replicate inside it",
             ("corpus/composable/72291bcf972a7caf.json",),
             lambda case: _nested(case, "replicate", "replicate_fsdp"),
             ("error:system:InvariantViolation:systems/composable.py:check_managed",),
             families=("composable",)),
    # The other way round: the DDP-based replicate skips only fully_shard modules (_is_fully_sharded), takes the
    # replicated DTensors of a replicate_with_fsdp module inside it and localizes them (_localize_dtensor);
    # FSDP2's lazy initialisation then finds plain Parameters where its sharded DTensors were; where a fully_shard
    # root initialises first, training goes on and replicate's parameter list shows the module's parameters.
    KnownBug("DDP-based replicate over a replicate_with_fsdp module localizes its DTensor parameters",
             ("corpus/composable/efb78fbb419e0602.json", "corpus/composable/6146f890d93d8eff.json"),
             lambda case: _nested(case, "replicate_fsdp", "replicate"),
             ("error:system:AttributeError:torch/distributed/fsdp/_fully_shard/_fsdp_param.py:reset_sharded_param",
              # when no FSDP2 lazy init trips first (a fully_shard root): replicate holds the module's parameters
              "error:system:InvariantViolation:systems/composable.py:check_replicated_names"),
             families=("composable",)),
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
             families=("composable",)),
    # The same root of its own, another symptom (found by a 10-minute soak run, 2026-11-23): a fully_shard
    # module with reshard_after_forward=False below a replicate_with_fsdp root, used in a step's first backward
    # and not in a later one (a gate), ends the step with no gradient at all: the later backward sets its
    # parameters' .grad to None (standalone, one rank: Sequential(Gate(Linear), Linear), fully_shard(model[0],
    # reshard_after_forward=False), replicate(model), two backwards, the second skipping model[0]).  With
    # reshard_after_forward=True, or fully_shard at the root, the gradient is kept.
    KnownBug("replicate_with_fsdp root drops the gradient of a fully_shard module unused in a later backward",
             ("corpus/composable/84f5e34030cc184f.json",),
             _fully_shard_below_a_replicate_root_unused_in_a_later_backward,
             ("mismatch:missing_grad:grad",),
             families=("composable",)),
    # Optimizer.zero_grad(set_to_none=False) with foreach groups the gradients of all parameter groups by device
    # and dtype only (_group_tensors_by_device_and_dtype), so plain and DTensor gradients meet in one
    # _foreach_zero_ call, which DTensor refuses ("got mixed torch.Tensor and DTensor").  Optimizer.step is fine
    # once the groups hold one kind each (it groups per parameter group); zero_grad has no such way out.
    KnownBug("foreach zero_grad(set_to_none=False) over plain and DTensor gradients",
             ("corpus/composable/6fdff3ad974fa37f.json",),
             _foreach_zeroing_of_plain_and_dtensor_gradients,
             ("error:system:RuntimeError:torch/optim/optimizer.py:zero_grad",),
             families=("composable",)),
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
    if r.family not in FSDP1_FAMILIES or case.checkpoint.load_way != "full":
        return False
    found = units(r)  # None: a size-based policy, whose instances the plan does not name
    return any(c.before and (found is None or c.path in found) for c in r.plan.checkpoints)


def _dcp_load_into_fsdp1_where_a_rank_holds_no_piece_of_a_parameter(case: Case) -> bool:
    r = case.resumed()
    if r.family != "fsdp1" or case.checkpoint.load_way != "dcp" or r.plan.sharding == "NO_SHARD":
        return False
    from parityfuzz.build import build_model  # the parameters' shapes: the builder's, not a copy of its rules

    smallest = min((p.shape[0] for p in build_model(r).parameters() if p.dim()), default=r.world_size)
    return smallest < r.mesh.axis_size("dp_shard")


def _fsdp1_checkpoint_with_shard_groups_of_one_rank(case: Case) -> bool:
    return case.family == "fsdp1" and case.plan.sharding in HYBRID \
        and case.mesh.axis_size("dp_shard") == 1


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
             families=DCP_FAMILIES),
    # set_state_dict(broadcast_from_rank0=True) decides optim_only = not model_state_dict on each rank; the
    # ranks other than 0 pass an empty model state dict (as the option asks), so they skip the model while rank
    # 0 broadcasts it: the model is left as built on those ranks and the collectives no longer pair up (a hang,
    # or rank 0 waiting in broadcast_object_list while the others train on).  set_model_state_dict and
    # set_optimizer_state_dict called one after the other load fine.
    KnownBug("set_state_dict with broadcast_from_rank0 skips the model on the ranks other than 0",
             ("corpus/fsdp2/84c04d4ab70da2b4.json",),
             _broadcast_through_set_state_dict,
             ("mismatch:checkpoint:loaded", "hang"),
             families=DCP_FAMILIES),
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
             families=FSDP1_FAMILIES),
    # FSDP1's rank0_only under a hybrid strategy: the model's full state dict lands on rank 0 of each shard group
    # (every replica group's first rank holds a full copy), while the optimizer's is on global rank 0 alone.
    KnownBug("FSDP1 rank0_only full state dicts under HYBRID_SHARD land on every replica group's first rank",
             ("corpus/fsdp1/fa199b7e3d958f39.json",),
             _fsdp1_hybrid_rank0_only,
             ("mismatch:checkpoint:rank0_only",),
             families=FSDP1_FAMILIES),
    # Loading into a fresh optimizer, get_state_dict / set_state_dict first materialise its state
    # (_init_optim_state: zero gradients, optimizer.step() at lr 0).  On a partly tensor-parallel model (plain
    # and DTensor parameters in one group) a foreach optimizer's step refuses the mix ("got mixed torch.Tensor and
    # DTensor"); training steps it under implicit_replication(), as PyTorch asks, which _init_optim_state does not.
    KnownBug("get_state_dict on a fresh foreach optimizer of a partly tensor-parallel model fails",
             ("corpus/fsdp2_tp/9f263ad23ca885bd.json",),
             _init_optim_state_of_a_partly_tensor_parallel_model,
             tuple(f"error:system:RuntimeError:torch/optim/{name}.py:_multi_tensor_{name}"
                   for name in ("sgd", "adam", "adamw")),
             families=("fsdp2_tp",)),
    # FSDP1 with device_mesh the dp sub-mesh of a (dp_shard, tp) mesh: a sharded round trip (SHARDED_STATE_DICT
    # through DCP, or get_state_dict) loads optimizer state wrongly, of tensor-parallel parameters (Adam's exp_avg
    # of a colwise bias: 4 to 6 of 8 elements differ from what was saved) and of plain ones alike (a momentum
    # buffer of an RMSNorm weight on a dp_shard=1 sub-mesh: 8 of 17), and the next step leaves the
    # uninterrupted run: a silent corruption.
    KnownBug("FSDP1 on the dp sub-mesh of a tensor-parallel mesh loads optimizer state wrongly (sharded round trip)",
             ("corpus/fsdp1_tp/d059bfc766e6d748.json", "corpus/fsdp1_tp/8aa5b111aa84e8b6.json"),
             _fsdp1_tp_sharded_round_trip,
             ("mismatch:checkpoint:loaded",),
             families=("fsdp1_tp",)),
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
             families=("fsdp1_tp",)),
    # ... and LOCAL_STATE_DICT builds its ShardedTensor on the dp group with global rank 0 as a member: on the
    # ranks of the other dp groups "Global rank 0 is not part of group".
    KnownBug("FSDP1 over tensor parallelism cannot take a LOCAL state dict outside rank 0's dp group",
             ("corpus/fsdp1_tp/8b52f14a1fb16ccf.json",),
             _fsdp1_tp_local_state_dict,
             ("error:system:ValueError:torch/distributed/distributed_c10d.py:get_group_rank",),
             families=("fsdp1_tp",)),
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
             families=FSDP1_FAMILIES),
    # FSDP1 with an activation-checkpoint wrapper applied before wrapping, around a module FSDP1 then makes an
    # instance of: CheckpointWrapper(FullyShardedDataParallel(...)).  set_state_dict / set_model_state_dict /
    # set_optimizer_state_dict with full_state_dict=True cannot load what get_state_dict(full_state_dict=True)
    # of the same structure gave: _load_model_state_dict renames each clean key to its name with the wrappers'
    # prefixes, which FSDP1's FULL_STATE_DICT load then prefixes again ("Missing key(s) ... body.0.weight;
    # Unexpected key(s) ... body.0.weight"); with optimizer state, _split_optim_state_dict looks it up under
    # "body.0._fsdp_wrapped_module.weight" ("Missing optimizer state for parameter").  FSDP1's own
    # FULL_STATE_DICT (state_dict / load_state_dict) loads it; so do sharded state dicts, and the wrapper inside
    # the instance (FSDP(CheckpointWrapper(...)), apply_activation_checkpointing after wrapping).
    KnownBug("set_state_dict cannot load a full state dict into FSDP1 with a checkpoint wrapper around an instance",
             ("corpus/fsdp1/c5d7c99dbe6c2ecf.json", "corpus/fsdp1/d492adbfb1cf246f.json"),
             _full_load_through_a_checkpoint_wrapper_around_an_fsdp1_instance,
             ("error:system:RuntimeError:torch/nn/modules/module.py:load_state_dict",
              "error:system:RuntimeError:torch/distributed/checkpoint/state_dict.py:_split_optim_state_dict",
              # from an FSDP1 FULL save: FSDP.optim_state_dict_to_load looks the prefixed name up
              "error:system:KeyError:torch/distributed/fsdp/_optim_utils.py:<setcomp>"),
             families=FSDP1_FAMILIES),
    # FSDP1's SHARDED_STATE_DICT chunks each parameter by dim 0 over the shard group, so where dim 0 is smaller
    # than the group a rank holds a ShardedTensor without local shards.  dcp.load of get_state_dict's sharded
    # state dict on that rank: the load planner's _flatten_sharded_tensors drops that entry, the planner takes
    # the key the checkpoint has and the state dict lacks for a checkpoint from before torch 2.4 and flattens the
    # state dict the old way, which keeps the optimizer's tensor-free param_groups as one entry: "Missing key in
    # checkpoint state_dict: optim.param_groups" (CheckpointException), with or without resharding (a Linear
    # of 3 outputs on 4 ranks; a dim 0 of 1 on 2).  FSDP1's own recipe (dcp.load of the model,
    # load_sharded_optimizer_state_dict) loads the same checkpoint.
    KnownBug("dcp.load into FSDP1 fails where a rank holds no piece of a parameter (dim 0 below the shard count)",
             ("corpus/fsdp1/2b9e17fa63883165.json",),
             _dcp_load_into_fsdp1_where_a_rank_holds_no_piece_of_a_parameter,
             ("error:system:CheckpointException:torch/distributed/checkpoint/utils.py:reduce_scatter",),
             families=("fsdp1",)),
    # FSDP1 HYBRID_SHARD with shard groups of one rank (the training bug pytorch#154888 lives there too): any
    # state dict (FSDP1's FULL or SHARDED, get_state_dict sharded or full) fails on the ranks outside global rank
    # 0's shard group, "Global rank 0 is not part of group" in get_group_rank, while rank 0 waits (a hang).
    KnownBug("FSDP1 hybrid sharding with shard groups of one rank cannot take a state dict",
             ("corpus/fsdp1/f69140c3784bf7e4.json",),
             _fsdp1_checkpoint_with_shard_groups_of_one_rank,
             ("error:system:ValueError:torch/distributed/distributed_c10d.py:get_group_rank", "hang"),
             families=("fsdp1",)),
    # FSDP1 HYBRID_SHARD (process groups or a 2-D mesh) through its documented SHARDED recipe
    # (load_sharded_optimizer_state_dict + FSDP.optim_state_dict_to_load): optimizer state is loaded wrongly
    # (12 of 16 elements of a momentum buffer, 2 of 3 of an Adam exp_avg), on every rank, and training goes on
    # from it (silent corruption).  get_state_dict + dcp.load of the same setup loads it right, as does the
    # recipe under FULL_SHARD.
    KnownBug("FSDP1 hybrid sharding loads optimizer state wrongly through load_sharded_optimizer_state_dict",
             ("corpus/fsdp1/86a5cf23cde5c6a7.json",),
             _fsdp1_hybrid_sharded_recipe,
             ("mismatch:checkpoint:loaded",),
             families=("fsdp1",)),
)
KNOWN_BUGS = KNOWN_BUGS + CHECKPOINT_BUGS


def known_bug(case: Case, verdict: Verdict) -> KnownBug | None:
    """The known bug that explains ``verdict`` on ``case``, if any."""
    return next((b for b in KNOWN_BUGS if b.explains(case, verdict)), None)
