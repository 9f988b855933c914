"""The oracle's array arithmetic over numpy (the harness, :mod:`parityfuzz.run.arrays`) and over torch (the
exported script, :mod:`parityfuzz.export.arrays`) give the same answers on the same values: NaNs, infinities,
signed zeros, empty tensors and float64 extremes included."""

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from parityfuzz.export import arrays as torch_arrays
from parityfuzz.run import arrays as numpy_arrays

FUNCTIONS = ("zeros", "size", "magnitude", "difference", "largest", "count_above", "largest_relative", "same",
             "all_finite")
ELEMENTS = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                     st.sampled_from([0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 1e308, -1e-300]))


@st.composite
def pairs(draw):
    """Two float64 arrays of one shape, the second often a copy of the first (equal, NaN where it is)."""
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4))
    a = draw(hnp.arrays(np.float64, shape, elements=ELEMENTS))
    return a, a.copy() if draw(st.booleans()) else draw(hnp.arrays(np.float64, shape, elements=ELEMENTS))


def both(name, *arrays, **kw):
    ours = getattr(numpy_arrays, name)(*arrays, **kw)
    theirs = getattr(torch_arrays, name)(*(torch.from_numpy(a) for a in arrays), **kw)
    return ours, theirs


def alike(x, y) -> bool:
    if isinstance(x, np.ndarray):
        y = y.numpy()
        return x.shape == y.shape and np.array_equal(x, y, equal_nan=True)
    return x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y))


def test_the_two_modules_offer_the_same_functions():
    for module in (numpy_arrays, torch_arrays):
        public = {n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n))
                  and getattr(module, n).__module__ == module.__name__}
        assert public == set(FUNCTIONS), (module.__name__, public)


@settings(max_examples=300, deadline=None)
@given(pairs(), st.sampled_from([0.0, 1e-12, 0.5, 1e300, math.inf]))
def test_numpy_and_torch_agree(pair, limit):
    a, b = pair
    for name in ("size", "magnitude", "largest", "all_finite"):
        assert alike(*both(name, a)), name
    for name in ("difference", "same"):
        assert alike(*both(name, a, b)), name
    diff = numpy_arrays.difference(a, b)
    assert alike(*both("count_above", diff, limit=limit))
    assert alike(*both("largest_relative", diff, a))
    assert alike(numpy_arrays.zeros(a.shape), torch_arrays.zeros(a.shape))
