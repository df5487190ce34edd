"""Label indices and the label-carrying edge keys of the device graph (gpu/graph/label_index.py)."""
from __future__ import annotations

import numpy as np

from gpu.graph.label_index import LabelIndex, label_keys


def test_indices_are_dense_stable_and_in_order_of_first_sight():
    index = LabelIndex()
    assert index.of([]).shape == (0,) and index.count == 0 and index.bits() == 0
    assert index.of([70, -3, 70, 5]).tolist() == [2, 0, 2, 1]
    assert index.of([5, 1_000_000, -3]).tolist() == [1, 3, 0]
    assert index.count == 4 and index.bits() == 2
    assert index.of(np.array([[70, 1_000_000]])).tolist() == [2, 3]
    index.of(np.arange(100, 105))
    assert index.count == 9 and index.bits() == 4


def test_first_sight_order_within_one_call_follows_label_value():
    # Several unseen labels in one call get indices in ascending label order.
    assert LabelIndex().of([9, 2, 9, 4]).tolist() == [2, 0, 2, 1]


def test_sorted_keys_group_each_source_by_label_index_then_id():
    rng = np.random.default_rng(5)
    for vertex_bits in (29, 24, 32):
        n = 200
        us = rng.integers(0, n, 500)
        vs = rng.integers(0, n, 500)
        vertex_label = rng.integers(-2, 6, n) * 1000
        index = LabelIndex()
        li = index.of(vertex_label[vs])
        if vertex_bits == 32:       # no room for labels: only one label index fits
            li = np.zeros_like(li)
        keys = label_keys(us, vs, li, vertex_bits)
        want = np.lexsort((vs, li, us))
        got = np.argsort(keys, kind="stable")
        assert np.array_equal(keys[got], keys[want])
        assert np.array_equal(keys >> np.uint64(32), us.astype(np.uint64))
        assert np.array_equal(keys & np.uint64((1 << vertex_bits) - 1), vs.astype(np.uint64))


def test_count_with_changes_nothing():
    index = LabelIndex()
    index.of([4, 9])
    assert index.count_with([]) == 2
    assert index.count_with([9, 4, 4]) == 2
    assert index.count_with([1, 9, 1, 30]) == 4
    assert index.count == 2 and index.of([1]).tolist() == [2]
