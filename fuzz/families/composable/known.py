"""Preconditions of the known torch bugs of the composable family (``corpus/known_bugs.toml`` names them
``composable:<function>``): what the shrunk cases of each bug needed. Each takes a case and says whether the bug
can show in it."""

from __future__ import annotations

from parityfuzz.case import Case
from parityfuzz.case.model import under


def replicate_with_fsdp_inside_replicate(case: Case) -> bool:
    return ("replicate_fsdp", "replicate") in case.plan.nestings()


def fully_shard_between_fsdp_replicates(case: Case) -> bool:
    """A replicate_with_fsdp module inside a fully_shard module inside a replicate_with_fsdp module."""
    managed = case.plan.data_parallel()
    inside = lambda p, q: p != q and under(p, (q,))  # noqa: E731
    return any(a == "replicate_fsdp" and b == "fully_shard" and c == "replicate_fsdp" and inside(p, q) and inside(q, r)
               for p, a in managed.items() for q, b in managed.items() for r, c in managed.items())


def fully_shard_below_a_replicate_root_unused_in_a_later_backward(case: Case) -> bool:
    """A replicate_with_fsdp root over a fully_shard module that keeps its parameters unsharded after forward (or
    any, with gradient sync off on the non-last microbatches, or with the composable checkpoint on a module above
    it) and sits out some forwards (a gate at, above or below it), with a gradient for the skipping backward to
    drop: several microbatches a step, or the zeros of zero_grad(set_to_none=False)."""
    applies = case.plan.applies
    gates = case.model.gates()
    checkpointed = [c.path for c in applies if c.api == "checkpoint"]

    def trigger(c) -> bool:
        return (c.reshard_after_forward is not True or case.plan.no_sync
                or any(p != c.path and under(c.path, (p,)) for p in checkpointed))

    return ((case.train.microbatches > 1 or case.train.zero_grad != "none")
            and any(c.path == "" and c.api == "replicate_fsdp" for c in applies)
            and any(c.api == "fully_shard" and c.path and trigger(c)
                    and any(under(c.path, (g,)) or under(g, (c.path,)) for g in gates) for c in applies))


def fully_shard_roots_of_their_own_unused_in_a_later_backward(case: Case) -> bool:
    """No FSDP2-based call on the root (each outermost fully_shard module is a root of its own) and a fully_shard
    module at, above or below a gate, with a gradient for the skipping backward to drop: several microbatches a
    step, or the zeros of zero_grad(set_to_none=False)."""
    applies = case.plan.applies
    gates = case.model.gates()
    return ((case.train.microbatches > 1 or case.train.zero_grad != "none")
            and not any(c.path == "" and c.api in ("fully_shard", "replicate_fsdp") for c in applies)
            and any(c.api == "fully_shard" and any(under(c.path, (g,)) or under(g, (c.path,)) for g in gates)
                    for c in applies))


def replicate_inside_replicate_with_fsdp(case: Case) -> bool:
    return ("replicate", "replicate_fsdp") in case.plan.nestings()


def replicate_unsynced_with_a_gate(case: Case) -> bool:
    """The DDP-based replicate on a module at, above or below a gate, with its gradient sync off on the non-last
    microbatches (plan.no_sync): a DDP none of whose parameters may be used on the synced microbatch."""
    gates = case.model.gates()
    return (case.plan.no_sync and case.train.microbatches > 1
            and any(api == "replicate" and any(under(path, (g,)) or under(g, (path,)) for g in gates)
                    for path, api in case.plan.data_parallel().items()))


def grad_scaler_over_plain_and_dtensor_gradients(case: Case) -> bool:
    """Loss scaling (the system's ShardedGradScaler) over a model holding both plain parameters (managed by the
    DDP-based replicate, or by no call) and DTensor ones (fully_shard, replicate_with_fsdp)."""
    if not case.train.loss_scale:
        return False
    managed = case.plan.data_parallel()
    apis = {managed.get(case.plan.manager(m)) for m in case.model.param_modules()}
    return bool(apis & {"fully_shard", "replicate_fsdp"}) and bool(apis & {None, "replicate"})


def replicate_recomputed_after_its_bias_gradient(case: Case) -> bool:
    """A DDP-based replicate module at or inside a composable checkpoint, managing an attention's ``o`` whose input
    is a non-contiguous view: one value a head (width / heads == 1) over several heads and a sequence longer than
    one, where ``(att @ v).transpose(1, 2).reshape(...)`` merges the size-1 head dimension into a view.  F.linear
    over a non-contiguous 3-D input runs matmul and add, so ``o.bias``'s gradient (no saved tensor needed) is ready
    before the checkpoint recomputes the region and reruns DDP's forward (composable/78cbb32d: passes with the
    sequence 1, two heads of width 2, width 8, or the checkpoint inside the replicate module)."""
    if case.train.seq_len < 2:
        return False
    frozen = tuple(f.path for f in case.train.frozen if not f.until)  # (frozen for the whole run: no gradient)
    managed = case.plan.data_parallel()
    checkpointed = [c.path for c in case.plan.applies if c.api == "checkpoint"]
    for path, node, width in case.model.body.walk_widths("body", case.model.in_dim):
        o = f"{path}.o"
        if node.kind != "attention" or node.heads < 2 or width // node.heads != 1:
            continue
        owner = case.plan.manager(o)
        if owner is None or managed[owner] != "replicate" or under(o, frozen):
            continue
        if any(under(owner, (c,)) for c in checkpointed):
            return True
    return False
