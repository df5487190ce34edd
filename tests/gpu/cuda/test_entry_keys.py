"""Keys made on the device (view.cu entry_keys, through PmaGraph.device_entry_keys) are the
host's (PmaGraph._entry_keys): both entries of each edge, the ones at the first ends first,
each keyed through its neighbour's label index, with the direction bit of an arc's entries
on a directed graph; their values are the edges' labels."""
from __future__ import annotations

import numpy as np
import pytest

from gpu.engine import Engine
from gpu.io.records import LabeledGraph

pytestmark = pytest.mark.gpu


def _graph(rng: np.random.Generator, n: int) -> LabeledGraph:
    """n vertices of 7 labels (more than the array's reserved label bits hold: the keys'
    label field grows) and a few edges."""
    src = np.arange(n - 1, dtype=np.int64)
    return LabeledGraph(np.arange(n, dtype=np.int64),
                        rng.integers(0, 7, n).astype(np.int32), src, src + 1,
                        np.zeros(n - 1, dtype=np.int32))


@pytest.mark.parametrize("directed", [False, True])
def test_device_entry_keys_are_the_hosts(directed):
    import cupy as cp
    rng = np.random.default_rng(11)
    engine = Engine(_graph(rng, 500), backend="cuda", directed=directed)
    device = engine._device.graph
    us = rng.integers(0, 500, 3000).astype(np.int32)
    vs = rng.integers(0, 500, 3000).astype(np.int32)
    labels = rng.integers(0, 4, 3000).astype(np.int32)
    want = device._entry_keys(us, vs, engine.graph.label)
    keys, vals = device.device_entry_keys(cp.asarray(us), cp.asarray(vs), cp.asarray(labels))
    assert keys.dtype == np.uint64 and np.array_equal(keys.get(), want)
    assert np.array_equal(vals.get(), np.concatenate([labels, labels]))
    # Slots of another integer type are taken as they are; without labels, no values.
    keys, vals = device.device_entry_keys(cp.asarray(us, dtype=np.int64), cp.asarray(vs))
    assert vals is None and np.array_equal(keys.get(), want)
    keys, vals = device.device_entry_keys(cp.zeros(0, dtype=np.int32),
                                          cp.zeros(0, dtype=np.int32),
                                          cp.zeros(0, dtype=np.int32))
    assert keys.shape == (0,) and vals.shape == (0,)
