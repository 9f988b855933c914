""":mod:`parityfuzz.run.arrays` over torch: the exported script embeds these functions with the oracle's own
source, which calls them by the same names (a test holds both to the same answers on the same values)."""

from __future__ import annotations

import torch

#: What a trace holds a tensor's value as (float64).
Array = torch.Tensor


def zeros(shape) -> torch.Tensor:
    """A float64 tensor of zeros."""
    return torch.zeros(tuple(shape), dtype=torch.float64)


def size(values: torch.Tensor) -> int:
    return values.numel()


def magnitude(values: torch.Tensor) -> float:
    """The largest finite magnitude (0 for none)."""
    finite = values[torch.isfinite(values)].abs()
    return float(finite.max()) if finite.numel() else 0.0


def difference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``|a - b|`` elementwise, 0 where both are NaN or the same infinity, inf where only one is NaN."""
    diff = (a - b).abs()
    same = (a.isnan() & b.isnan()) | (a.isinf() & (a == b))
    diff = torch.where(same, torch.zeros_like(diff), diff)
    return torch.where(diff.isnan(), torch.full_like(diff, float("inf")), diff)


def largest(values: torch.Tensor) -> float:
    """The largest element (0 for none)."""
    return max(float(values.max()), 0.0) if values.numel() else 0.0


def count_above(values: torch.Tensor, limit: float) -> int:
    return int((values > limit).sum())


def largest_relative(diff: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest ``diff / |ref|`` where ``diff`` is not 0 (0 for none; NaNs ignored)."""
    rel = torch.where(diff == 0, torch.zeros_like(diff), diff / ref.abs())
    rel = rel[~rel.isnan()]
    return float(rel.max()) if rel.numel() else 0.0


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes and equal elements, NaN equal to NaN."""
    if a.shape != b.shape:
        return False
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(a.masked_fill(nan, 0.0), b.masked_fill(nan, 0.0))


def all_finite(values: torch.Tensor) -> bool:
    return bool(torch.isfinite(values).all())
