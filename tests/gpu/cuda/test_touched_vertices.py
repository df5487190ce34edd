"""A batch's touched vertices found on the device (view.cu touched_vertices): every distinct
edge end and vertex record once, with its degree, through stamps kept between batches; and
an engine whose batches are settled on the device follows the host's degrees with them."""
from __future__ import annotations

import numpy as np
import pytest

from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.records import DELETE_EDGE, INSERT_EDGE, LabeledGraph, UpdateStream

pytestmark = pytest.mark.gpu


def test_each_distinct_end_once_with_its_degree_and_stamps_reused():
    import cupy as cp
    from gpu.cuda import pma_launchers
    rng = np.random.default_rng(3)
    n = 700
    deg = rng.integers(0, 50, n).astype(np.int32)
    stamp = cp.zeros(n, dtype=np.int32)
    for epoch, (n_del, n_ins, n_slots) in enumerate([(40, 300, 5), (0, 1, 0), (9, 0, 0),
                                                     (0, 0, 3), (0, 0, 0), (500, 500, 20)],
                                                    start=1):
        parts = [rng.integers(0, n, m).astype(np.int32)
                 for m in (n_del, n_del, n_ins, n_ins, n_slots)]
        found, degrees, on_device = pma_launchers.touched_vertices(
            *(cp.asarray(p) for p in parts), cp.asarray(deg), stamp, epoch)
        want = np.unique(np.concatenate(parts))
        assert len(found) == len(want) and np.array_equal(np.sort(found), want), epoch
        assert np.array_equal(degrees, deg[found])
        assert np.array_equal(on_device.get(), found) and on_device.dtype == np.int32
    with pytest.raises(ValueError, match="epoch"):
        pma_launchers.touched_vertices(*(cp.zeros(0, dtype=np.int32) for _ in range(5)),
                                       cp.asarray(deg), stamp, 0)


def test_device_settled_batches_leave_the_hosts_degrees():
    """Batches past device_prep_records (settled on the device, the touched vertices found
    there) insert and delete edges among hubs and leaves; the host graph's degrees and
    edge count, and the whole device graph, equal a CPU engine's after each."""
    rng = np.random.default_rng(5)
    n = 300
    ids = np.arange(n, dtype=np.int64)
    src = np.arange(n - 1, dtype=np.int64)
    graph = LabeledGraph(ids, rng.integers(0, 3, n).astype(np.int32), src, src + 1,
                         np.zeros(n - 1, dtype=np.int32))
    config = EngineConfig(device_prep_records=8)
    cuda = Engine(graph, backend="cuda", config=config)
    cpu = Engine(graph, backend="cpu")
    for step in range(12):
        m = int(rng.integers(10, 200))
        a = np.where(rng.random(m) < 0.3, rng.integers(0, 4, m), rng.integers(0, n, m))
        b = rng.integers(0, n, m)
        kind = np.where(rng.random(m) < 0.4, DELETE_EDGE, INSERT_EDGE)
        keep = a != b
        stream = UpdateStream(kind[keep], a[keep], b[keep], np.zeros(keep.sum(), np.int64),
                              np.arange(keep.sum()) + 1, "test")
        got, want = cuda.apply(stream), cpu.apply(stream)
        assert (got.applied, got.ignored) == (want.applied, want.ignored), step
        assert np.array_equal(cuda.graph.deg[:cuda.graph.num_slots],
                              cpu.graph.deg[:cpu.graph.num_slots]), step
        assert cuda.graph.num_edges == cpu.graph.num_edges and \
            cuda.graph.max_degree >= cpu.graph.deg[:cpu.graph.num_slots].max()
        cuda.check()
