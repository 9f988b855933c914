"""Feature tags every case has, whatever its family (coverage counts, Hypothesis ``event()``, the run
summary's shares); each family adds its own (:mod:`parityfuzz.families`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from parityfuzz.case import dimensions
from parityfuzz.case.checkpoint import checkpoint_features
from parityfuzz.case.compiled import compile_features

if TYPE_CHECKING:
    from parityfuzz.case.core import Case


#: The prefix of the feature tag of each training-loop dimension a case draws (:mod:`parityfuzz.case.dimensions`).
DIMENSION = "dim:"


def generic_features(case: Case) -> set[str]:
    t = case.train
    tags = {f"family={case.family}", f"ws={case.world_size}", "mesh=" + "x".join(map(str, case.mesh.shape)),
            f"opt={t.optimizer}", f"dtype={t.dtype}", f"loss={t.loss}", f"zero_grad={t.zero_grad}",
            f"input={case.model.input}"}
    if len(case.mesh.names) > 1 or case.mesh.names != ("dp_shard",):
        tags.add("axes=" + ",".join(case.mesh.names))
    if not case.mesh.shards():
        tags.add("unsharded")  # world size 1, or every sharding axis of size 1: every rank holds whole parameters
    if t.foreach:
        tags.add("foreach")
    if case.model.tie_head:
        tags.add("tied")
    kinds = {node.kind for _, node in case.model.body.walk("body")}
    tags.update(f"has:{k}" for k in kinds if k not in ("seq", "act", "linear"))
    if any(node.kind == "linear" and node.out % case.world_size for _, node in case.model.body.walk("body")):
        tags.add("uneven_shard")
    if t.microbatches > 1:
        tags.add(f"micro={t.microbatches}")
    if t.to_float64:
        tags.add("to_float64")
    if t.nonroot:
        tags.add("nonroot")
    if t.momentum:
        tags.add("momentum")
    tags.update(flag for flag in ("nesterov", "maximize") if getattr(t, flag))
    if t.weight_decay or any(g.weight_decay for g in t.groups):
        tags.add("weight_decay")
    if t.groups:
        tags.add(f"param_groups={len(t.groups) + 1}")
    if t.clip:
        tags.add("clip")
    if t.scheduler:
        tags.add(f"scheduler={t.scheduler}")
    if t.frozen:
        tags.add("frozen")
    if any(f.until for f in t.frozen):
        tags.add("unfrozen_later")
    if t.eval:
        tags.add("eval")
    if t.autocast:
        tags.add(f"autocast={t.autocast}")
    tags.update(tag for tag, on in ((f"pad={t.pad}", t.pad), ("pad_all_dp0", t.pad_all_dp0),
                                    (f"label_smoothing={t.label_smoothing}", t.label_smoothing),
                                    ("loss_scale", t.loss_scale), ("overflow", t.overflow_at),
                                    ("overflow_in_one_row", t.overflow_in), ("scaler=amp", t.scaler)) if on)
    tags.update(f"delay={d.where}" for d in case.delays)
    tags.update(f"{DIMENSION}{d}" for d in dimensions.drawn(case))
    return tags | checkpoint_features(case) | compile_features(case)
