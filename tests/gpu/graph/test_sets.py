"""sorted_unique and sorted_union against np.unique and np.union1d."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gpu.graph.sets import sorted_union, sorted_unique


@given(arrays(st.sampled_from([np.int32, np.int64]), st.integers(0, 200),
              elements=st.integers(-50, 50)))
def test_equals_np_unique(values):
    got = sorted_unique(values)
    want = np.unique(values)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@given(arrays(st.sampled_from([np.int64, np.uint64]), st.integers(0, 120),
              elements=st.integers(0, 60)),
       arrays(st.sampled_from([np.int64, np.uint64]), st.integers(0, 120),
              elements=st.integers(0, 60)))
def test_sorted_union_equals_np_union1d(a, b):
    got = sorted_union(a, b)
    want = np.union1d(a, b)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
