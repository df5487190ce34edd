"""Engine.apply_stream: the same results as apply, batch by batch, on both executors.

On CUDA the next batch's host work is done before a batch's totals are read back, so
these tests check that deferred totals land on the right batch and query, with listing
queries (read at once) beside counted ones, deletions (a negative phase) in every batch,
and a rejected batch in the stream.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpu.batch import BatchRejected
from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.formats import DELETE_EDGE, INSERT_EDGE, UpdateStream, split_stream
from tests.graphs import skewed_graph
from tests.gpu.test_cuda_executor import QUERIES


def mixed_batches(full, seed: int, count: int, size: int) -> tuple:
    """The graph minus 30% of its edges, and batches that insert some held-out edges and
    delete some edges inserted by earlier batches."""
    initial, held = split_stream(full, 0.3, seed)
    rng = np.random.default_rng(seed)
    batches, inserted, at = [], [], 0
    for i in range(count):
        kinds, a, b = [], [], []
        for _ in range(size):
            if inserted and rng.random() < 0.3:
                x, y = inserted.pop(int(rng.integers(len(inserted))))
                kinds.append(DELETE_EDGE), a.append(x), b.append(y)
            elif at < len(held):
                x, y = int(held.a[at]), int(held.b[at])
                at += 1
                inserted.append((x, y))
                kinds.append(INSERT_EDGE), a.append(x), b.append(y)
        n = len(kinds)
        batches.append(UpdateStream(np.array(kinds), np.array(a), np.array(b),
                                    np.zeros(n, np.int32), np.arange(1, n + 1), f"b{i}"))
    return initial, batches


def summary(result) -> dict:
    # A cut listing is some `limit` matches (the device makes tasks in no fixed order).
    return {qid: (d.positive, d.negative, d.truncated,
                  None if d.added is None else len(d.added) if d.truncated else
                  sorted(map(tuple, d.added.tolist()))) for qid, d in result.queries.items()}


def run_both_ways(initial, batches, backend: str, config: EngineConfig, listed):
    one, streamed = (Engine(initial, backend=backend, config=config) for _ in range(2))
    for engine in (one, streamed):
        for q in QUERIES:
            engine.add_query(q)
    limits = dict.fromkeys(listed, 10_000)
    want = [summary(one.apply(b, list_limit=limits)) for b in batches]
    got = [summary(r) for r in streamed.apply_stream(iter(batches), list_limit=limits)]
    return want, got, streamed


BACKENDS = [pytest.param("cpu", EngineConfig(), id="cpu"),
            pytest.param("cuda", EngineConfig(), id="cuda-lists", marks=pytest.mark.gpu),
            pytest.param("cuda", EngineConfig(device_graph="pma"), id="cuda-pma",
                         marks=pytest.mark.gpu)]


@pytest.mark.parametrize(("backend", "config"), BACKENDS)
def test_stream_equals_batch_by_batch(backend, config):
    initial, batches = mixed_batches(skewed_graph(21), 21, count=8, size=30)
    want, got, engine = run_both_ways(initial, batches, backend, config, listed=[2, 5])
    assert got == want
    assert any(v[0] for r in want for v in r.values())      # matches were found
    assert any(v[1] for r in want for v in r.values())
    engine.check()


@pytest.mark.parametrize(("backend", "config"), BACKENDS)
def test_one_edge_batches(backend, config):
    initial, batches = mixed_batches(skewed_graph(22), 22, count=25, size=1)
    want, got, _ = run_both_ways(initial, batches, backend, config, listed=[])
    assert got == want


@pytest.mark.parametrize(("backend", "config"), BACKENDS)
def test_rejected_batch_after_the_results_before_it(backend, config):
    initial, batches = mixed_batches(skewed_graph(23), 23, count=3, size=20)
    bad = UpdateStream(np.array([INSERT_EDGE]), np.array([10**12]), np.array([0]),
                       np.zeros(1, np.int32), np.array([1]), "bad")
    engine = Engine(initial, backend=backend, config=config)
    reference = Engine(initial, backend="cpu")
    for e in (engine, reference):
        for q in QUERIES:
            e.add_query(q)
    want = [summary(reference.apply(b)) for b in batches[:2]]
    got = []
    with pytest.raises(BatchRejected, match="does not exist"):
        for result in engine.apply_stream([batches[0], batches[1], bad, batches[2]]):
            got.append(summary(result))
    assert got == want
    # The rejected batch changed nothing, and the stream can go on.
    assert summary(engine.apply(batches[2])) == summary(reference.apply(batches[2]))


@pytest.mark.parametrize(("backend", "config"), BACKENDS)
def test_stream_left_early_then_applied_on(backend, config):
    """Leaving the stream after one result: the next batch was already started (applied,
    its result dropped, its totals' copy still in flight); later batches, applied one by
    one, must still equal the CPU's."""
    initial, batches = mixed_batches(skewed_graph(24), 24, count=6, size=20)
    engine = Engine(initial, backend=backend, config=config)
    reference = Engine(initial, backend="cpu")
    for e in (engine, reference):
        for q in QUERIES:
            e.add_query(q)
    stream = engine.apply_stream(batches[:4])
    first = next(stream)
    stream.close()
    assert summary(first) == summary(reference.apply(batches[0]))
    reference.apply(batches[1])
    for batch in batches[2:]:
        assert summary(engine.apply(batch)) == summary(reference.apply(batch))
    engine.check()
