"""Preconditions of the known torch bugs of the fsdp2 family (``corpus/known_bugs.toml`` names them
``fsdp2:<function>``): what the shrunk cases of each bug needed. Each takes a case and says whether the bug can
show in it."""

from __future__ import annotations

from parityfuzz.case import Case
from parityfuzz.case.model import under


def hsdp_deferred_all_reduce_with_gated_params(case: Case) -> bool:
    return case.plan.no_all_reduce and bool(case.model.gates())


def mixed_precision_group_unfrozen_later(case: Case) -> bool:
    return case.mixed_precision() and any(f.until for f in case.train.frozen)


def mixed_precision_accumulation_with_gated_params(case: Case) -> bool:
    return (bool(case.model.gates()) and case.mixed_precision() and case.train.microbatches > 1
            and bool(case.plan.no_sync))


def rank_flow_with_several_groups(case: Case) -> bool:
    return case.plan.reduce_scatter_unused and len(case.plan.wraps) > 1


def reentrant_checkpoint_called_twice_over_fully_shard(case: Case) -> bool:
    """A reentrant checkpoint on a module that a ``twice`` node calls twice per forward, with a ``fully_shard``
    module at or inside it."""
    twice = [f"{path}.inner" for path, node in case.model.body.walk("body") if node.kind == "twice"]
    return any(c.reentrant and under(c.path, twice) and any(under(w.path, (c.path,)) for w in case.plan.wraps)
               for c in case.plan.checkpoints)


def forward_prefetch_left_pending_then_resharded(case: Case) -> bool:
    """An explicit forward prefetch of a wrapped module whose forward has finished before the prefetching module's
    starts (nothing in that forward consumes the all-gather), an evaluation forward (no backward consumes it
    either), and before the next forward either a rollback (a load into the live sharded parameters: the next
    forward computes with the old ones) or an unfreeze (the harness's ``reshard()``) of a module resharded to a
    smaller group after forward (``reshard_after_forward=<int>``: the copy-out raises)."""
    order = [path for path, _ in case.model.module_paths()]  # (an attention's projections too: fsdp2_tp/8bc4f4dc)
    resharded_to = {w.path: w.reshard_after_forward for w in case.plan.wraps}

    def left_pending(target: str, prefetcher: str) -> bool:
        return (target in order and prefetcher in order and order.index(target) < order.index(prefetcher)
                and not under(prefetcher, (target,)))

    # (a module kept unsharded after forward, reshard_after_forward=False, makes the prefetch a no-op)
    pending = [t for p in case.plan.prefetch for t in p.forward
               if left_pending(t, p.path) and resharded_to.get(t) is not False]
    unfreeze = any(f.until for f in case.train.frozen)
    return case.train.eval and any(
        case.checkpoint.rollback_at or (unfreeze and type(resharded_to.get(t)) is int) for t in pending)


def backward_prefetch_left_pending_on_a_frozen_first_unit(case: Case) -> bool:
    """The other way to the pending all-gather that survives a reshard: a unit resharded to a smaller group after
    forward (``reshard_after_forward=<int>``) whose parameters, and all before it, are frozen over token inputs (its
    output needs no gradient, so its pre-backward never consumes the all-gather the next unit's backward
    prefetched), several microbatches and ``set_is_last_backward(False)`` on all but the last (the final callback
    reshards the unit to the whole group without clearing the result; only the last backward's
    ``finalize_backward`` does): the next microbatch's forward copies out over the wrong group.  Measured on
    fsdp2/09a8b8d5 (an embedding frozen, ``reshard_after_forward=2`` over 4 ranks, the root unsharded after forward,
    2 microbatches): nothing frozen, ``reshard_after_forward=True`` or ``is_last_backward`` off train; another module
    frozen alone (one after the embedding) trains."""
    t = case.train
    if (not case.plan.is_last_backward or t.microbatches < 2 or case.model.input != "embedding"
            or len(case.plan.wraps) < 2):
        return False
    order = [path for path, _ in case.model.module_paths()]
    held = case.model.param_modules()
    frozen = tuple(f.path for f in t.frozen)
    for w in case.plan.wraps:
        mine = [m for m in held if under(m, (w.path,))]
        if not w.path or type(w.reshard_after_forward) is not int or not mine:
            continue
        first = min(order.index(m) for m in mine)
        if all(under(m, frozen) for m in held if order.index(m) <= first) and all(under(m, frozen) for m in mine):
            return True
    return False


def checkpointed_dropout_compiled_as_an_inference_graph(case: Case) -> bool:
    """The fsdp2 family's way to the inference graph whose activation-checkpoint pass refuses RNG ops: the whole
    model compiled, a wrapper-API checkpoint on a parameterless region holding a dropout with nothing holding
    parameters before it (dense input: its graph needs no gradient), and the module right after the region
    checkpointed with the composable API, whose hooks end the graph there.  Measured on fsdp2/9228b337 (a dropout
    checkpoint-wrapped, a ReLU under the composable checkpoint, a Linear): it fails; either checkpoint alone, or
    both by the same API, trains."""
    if not case.compile or case.compile.form != "model" or case.model.input != "dense":
        return False
    nodes = dict(case.model.body.walk("body"))
    order = list(nodes)  # pre-order: forward order
    composable = {c.path for c in case.plan.checkpoints if c.api == "composable"}
    for c in case.plan.checkpoints:
        if c.api == "composable" or c.path not in nodes:
            continue
        if not any(nodes[p].kind == "dropout" for p in order if under(p, (c.path,))) or \
                not case.model.needs_no_gradient(c.path):
            continue
        at = order.index(c.path)
        if next((p for p in order[at:] if not under(p, (c.path,))), None) in composable:
            return True
    return False
