"""The hand-written grids of PyTorch's own tests (the seeds parityfuzz grew from), as grids of feature tags, and
how much of each a run covered.

A grid is the product of its axes; an axis value is a feature tag a case must have (``reshard=True``), a
prefix ending in ``*`` (``ckpt=composable/*``), tags joined by ``&`` that must all be there, or ``""``: none of the
axis's other values.  A drawn case of the grid's family lands on every point whose values it has (a case with
two wraps, one resharding and one not, lands on both).  Torch-free and pure: the run's statistics call
:func:`coverage` with their feature combinations.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Iterable

RESHARD = ("reshard_after_forward", (("True", "reshard=True"), ("False", "reshard=False"), ("2", "reshard=int")))
RESHARD_AFTER_BACKWARD = ("reshard_after_backward", (("True", ""), ("False", "reshard_after_backward=False")))


def _flag(name: str, tag: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, (("True", tag), ("False", ""))


@dataclass(frozen=True)
class Grid:
    """One ``run_subtests``/``@parametrize`` grid of a seed test: its source, the family whose cases it is
    about, and its axes ``(name, ((label, tag pattern), ...))``."""

    source: str
    family: str
    axes: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]

    def points(self) -> list[tuple[str, ...]]:
        return list(product(*[[label for label, _ in values] for _, values in self.axes]))

    def label(self, point: tuple[str, ...]) -> str:
        return ", ".join(f"{name}={value}" for (name, _), value in zip(self.axes, point))


GRIDS = (
    Grid("test_fully_shard_training.py::test_train_parity_multi_group", "fsdp2", (
        RESHARD, _flag("delay_after_forward", "delay=after_forward"), _flag("delay_before_all_gather", "delay=all_gather"),
        _flag("delay_before_reduce_scatter", "delay=reduce_scatter"), _flag("delay_before_optim", "delay=before_step"))),
    Grid("test_fully_shard_training.py::test_train_parity_multi_group_cpu_offload_eager", "fsdp2", (
        ("offload_policy", (("CPUOffloadPolicy", "offload"),)), _flag("delay_after_forward", "delay=after_forward"),
        _flag("delay_before_all_gather", "delay=all_gather"), _flag("delay_before_reduce_scatter", "delay=reduce_scatter"))),
    Grid("test_fully_shard_training.py::test_train_parity_with_activation_checkpointing", "fsdp2", (
        RESHARD, ("checkpoint_impl", (("composable", "ckpt=composable/*"), ("utils", "ckpt=apply/*"),
                                      ("wrapper", "ckpt=wrapper/*"))))),
    Grid("test_fully_shard_training.py::test_gradient_accumulation", "fsdp2", (
        ("microbatches", (("2+", "micro=*"),)), RESHARD, RESHARD_AFTER_BACKWARD,
        ("offload_policy", (("OffloadPolicy", ""), ("CPUOffloadPolicy", "offload"))))),
    Grid("test_fully_shard_training.py::test_1f1b_microbatching", "fsdp2", (
        _flag("use_explicit_unshard", "unshard_first"), RESHARD_AFTER_BACKWARD)),
    Grid("test_fsdp_state_dict.py (state_dict_type x rank0_only_and_offload)", "fsdp1", (
        ("state_dict_type", (("full", "ckpt_save=fsdp1_full"), ("sharded", "ckpt_save=fsdp1_sharded"),
                             ("local", "ckpt_save=fsdp1_local"))),
        _flag("rank0_only_and_offload", "ckpt_rank0_only&ckpt_cpu_offload"))),
    Grid("test_fsdp_tp_integration.py::test_fsdp_tp_integration", "fsdp1_tp", (
        ("cpu_offload", (("False", ""), ("True", "offload"))),
        ("sharding_strategy", (("FULL_SHARD", "sharding=FULL_SHARD"), ("SHARD_GRAD_OP", "sharding=SHARD_GRAD_OP"))),
        ("use_orig_params", (("False", "use_orig_params=False"), ("True", "use_orig_params=True"))))),
    Grid("test_zero_redundancy_optimizer.py::test_local_optimizer_parity", "zero", (
        ("optimizer_class", (("Adam", "opt=adam"), ("AdamW", "opt=adamw"), ("SGD", "opt=sgd"))),
        _flag("maximize", "maximize"))),
    Grid("test_zero_redundancy_optimizer.py::test_ddp_zero_overlap", "zero", (
        ("hook", (("hook_with_zero_step", "zero:overlap=hook"), ("interleaved", "zero:overlap=interleaved"))),
        _flag("gradient_as_bucket_view", "zero:gradient_as_bucket_view"), _flag("static_graph", "zero:static_graph"))),
)


def _has(tags: frozenset[str], pattern: str) -> bool:
    return all(any(t.startswith(p[:-1]) for t in tags) if p.endswith("*") else p in tags for p in pattern.split("&"))


def _values(tags: frozenset[str], values: tuple[tuple[str, str], ...]) -> list[str]:
    """The labels of an axis a case with ``tags`` has."""
    found = [label for label, pattern in values if pattern and _has(tags, pattern)]
    return found or [label for label, pattern in values if not pattern]


def coverage(grid: Grid, combinations: Iterable[tuple[frozenset[str], int]]) -> dict:
    """How many drawn cases landed on each point of ``grid``: ``{"points", "covered", "counts": {label: n},
    "missing": [label, ...]}``; ``combinations`` are (feature set, number of cases) pairs."""
    counts = {point: 0 for point in grid.points()}
    for tags, n in combinations:
        if f"family={grid.family}" not in tags:
            continue
        for point in product(*[_values(tags, values) for _, values in grid.axes]):
            counts[point] += n
    return {"family": grid.family, "points": len(counts), "covered": sum(1 for n in counts.values() if n),
            "counts": {grid.label(p): n for p, n in counts.items()},
            "missing": [grid.label(p) for p, n in counts.items() if not n]}
