"""The array arithmetic of traces, over numpy: the only place :mod:`parityfuzz.run.trace` (putting a tensor
together from its pieces) and :mod:`parityfuzz.judge.oracle` (comparing) touch an array.  The exported script
embeds the oracle's own source and gives it the same functions over torch (:mod:`parityfuzz.export.arrays`; a
test holds the two to the same answers on the same values), so a script and the harness compare by one set of
rules.
"""

from __future__ import annotations

import numpy as np

#: What a trace holds a tensor's value as (float64).
Array = np.ndarray


def zeros(shape) -> np.ndarray:
    """A float64 array of zeros."""
    return np.zeros(tuple(shape), dtype=np.float64)


def size(values: np.ndarray) -> int:
    return int(values.size)


def magnitude(values: np.ndarray) -> float:
    """The largest finite magnitude (0 for none)."""
    finite = np.abs(values[np.isfinite(values)])
    return float(finite.max()) if finite.size else 0.0


def difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``|a - b|`` elementwise, 0 where both are NaN or the same infinity, inf where only one is NaN."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - b)
    same = (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & (a == b))
    diff = np.where(same, 0.0, diff)
    return np.where(np.isnan(diff), np.inf, diff)


def largest(values: np.ndarray) -> float:
    """The largest element (0 for none)."""
    return float(values.max(initial=0.0)) if values.size else 0.0


def count_above(values: np.ndarray, limit: float) -> int:
    return int((values > limit).sum())


def largest_relative(diff: np.ndarray, ref: np.ndarray) -> float:
    """The largest ``diff / |ref|`` where ``diff`` is not 0 (0 for none; NaNs ignored)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rel = np.where(diff == 0, 0.0, diff / np.abs(ref))
    return float(np.nanmax(rel)) if rel.size and not np.isnan(rel).all() else 0.0


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes and equal elements, NaN equal to NaN."""
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


def all_finite(values: np.ndarray) -> bool:
    return bool(np.isfinite(values).all())
