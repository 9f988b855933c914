"""Preconditions of the known torch bugs of checkpoint events in any family (``corpus/known_bugs.toml`` names them
``checkpoint:<function>``): what the shrunk cases of each bug needed. Each takes a case and says whether the bug
can show in it."""

from __future__ import annotations

from parityfuzz.case import Case
from parityfuzz.case.checkpoint import fsdp1_families


def full_load_into_a_stateless_optimizer(case: Case) -> bool:
    r = case.resumed()
    return (case.checkpoint.load_way == "full" and case.train.optimizer == "sgd" and not case.train.momentum
            and r.family not in fsdp1_families())


def full_load_into_uneven_strided_shards(case: Case) -> bool:
    """A full optimizer state dict loaded (``set_state_dict(full_state_dict=True)``) into an FSDP2+TP model on a
    (dp_shard, tp) mesh where a parameter tensor parallelism splits on dim 0 (a ColwiseParallel Linear's weight
    and bias: its output features, the head's and an attention's or MLP's inner Linears included; a
    RowwiseParallel embedding's weight: its vocabulary) has rows that do not split evenly over both axes (FSDP2
    shards the tp shard again: a ``_StridedShard``): the model's state or the optimizer's."""
    r = case.resumed()
    if r.family != "fsdp2_tp" or case.checkpoint.load_way != "full":
        return False
    dp, tp = r.mesh.axis_size("dp_shard"), r.mesh.axis_size("tp")
    if dp < 2 or tp < 2:
        return False
    model = r.model

    def rows(p) -> int:
        """Dim 0 of the parameter the style splits there (0: it splits none there)."""
        if p.path == "inp":
            return model.vocab if p.style == "rowwise" and model.input == "embedding" else 0
        return model.output_width(p.path) if p.style == "colwise" else 0

    return any(rows(p) % (dp * tp) for p in r.plan.tp)


def load_initializes_state_the_checkpoint_lacks(case: Case) -> bool:
    """A full load (``set_state_dict(full_state_dict=True)``, the ``full`` way) with ``strict=False`` into a stateful
    optimizer of a model that is not FSDP1 (FSDP1's load takes ``FSDP.optim_state_dict_to_load`` and replaces the
    state), where a parameter can have no optimizer state at the save: frozen until a step no later than the save,
    and gated (so unused on the steps after it): what the shrunk cases kept, both.  ``strict=True`` refuses such a
    checkpoint ('Missing optimizer state for parameter'), and the ``dcp`` way's ``dcp.load`` does ('Missing key in
    checkpoint state_dict')."""
    t, c = case.train, case.checkpoint
    return (c.load_way == "full" and not c.strict and case.resumed().family not in fsdp1_families()
            and t.keeps_optimizer_state() and bool(case.model.gates()) and any(0 < f.until <= c.step for f in t.frozen))


def broadcast_through_set_state_dict(case: Case) -> bool:
    return case.checkpoint.broadcast_from_rank0 and not case.checkpoint.separate


def full_load_flattened(case: Case) -> bool:
    """A full optimizer state dict (the ``full`` load) saved and loaded with ``flatten_optimizer``, into a model
    that is not FSDP1 (FSDP1's load takes ``FSDP.optim_state_dict_to_load`` and loads it)."""
    return (case.checkpoint.load_way == "full" and case.checkpoint.flatten_optimizer
            and case.resumed().family not in fsdp1_families())
