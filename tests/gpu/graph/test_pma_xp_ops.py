"""The packed memory array's array operations (gpu/graph/pma/xp_ops.py) against NumPy's own,
on NumPy and on CuPy."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gpu.graph.pma import xp_ops


def _backends():
    yield pytest.param("numpy", id="numpy")
    yield pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)


def _module(name):
    if name == "numpy":
        return np
    import cupy
    return cupy


@pytest.fixture(params=list(_backends()))
def xp(request):
    return _module(request.param)


_SORTED = arrays(np.int64, st.integers(0, 40), elements=st.integers(0, 30)).map(np.sort)


@pytest.mark.parametrize("a, b", [([], []), ([], [1, 1, 4]), ([0, 2, 2, 9], []),
                                  ([1, 3], [2, 3, 3, 8])])
def test_sorted_union_of_fixed_cases(xp, a, b):
    got = xp_ops.sorted_union(xp, xp.asarray(a, dtype=np.int64), xp.asarray(b, dtype=np.int64))
    assert np.array_equal(xp.asnumpy(got) if xp is not np else got, np.union1d(a, b))


@pytest.mark.parametrize("backend", list(_backends()))
@settings(max_examples=60, deadline=None)
@given(a=_SORTED, b=_SORTED, empty=st.sampled_from(["none", "a", "b"]))
def test_sorted_union_equals_np_union1d(backend, a, b, empty):
    xp = _module(backend)
    # Either side empty is its own path (a batch that only inserts or only deletes).
    a = a[:0] if empty == "a" else a
    b = b[:0] if empty == "b" else b
    got = xp_ops.sorted_union(xp, xp.asarray(a), xp.asarray(b))
    got = xp.asnumpy(got) if xp is not np else got
    np.testing.assert_array_equal(got, np.union1d(a, b))
