"""sorted_unique against np.unique."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gpu.graph.sets import sorted_unique


@given(arrays(st.sampled_from([np.int32, np.int64]), st.integers(0, 200),
              elements=st.integers(-50, 50)))
def test_equals_np_unique(values):
    got = sorted_unique(values)
    want = np.unique(values)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
