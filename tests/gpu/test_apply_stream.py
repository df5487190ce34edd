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
from gpu.io.records import ADD_VERTEX, DELETE_EDGE, DELETE_VERTEX, INSERT_EDGE, UpdateStream
from gpu.io.streams import split_stream
from tests.graphs import skewed_graph
from tests.gpu.cuda.test_executor import QUERIES


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


def vertex_churn_batches(full, seed: int, count: int):
    """The graph minus 30% of its edges, then batches that alternately add two vertices
    (each joined to a hub and to random vertices) and delete the two added last with
    their edges (a negative phase whose matches hold them), each also inserting a few
    held-out edges.  Deleted vertices' slots go to the vertices added next."""
    initial, held = split_stream(full, 0.3, seed)
    rng = np.random.default_rng(seed)
    ids = [int(i) for i in initial.vertex_ids]     # never deleted
    hubs = ids[:4]                                      # skewed_graph's hubs
    next_id, added, at = max(ids) + 1, [], 0
    batches = []
    for i in range(count):
        kinds, a, b, lab = [], [], [], []
        if i % 2 == 0:
            for _ in range(2):
                new = next_id
                next_id += 1
                kinds.append(ADD_VERTEX), a.append(new), b.append(0)
                lab.append(int(rng.integers(2)))
                for other in [hubs[int(rng.integers(4))],
                              *rng.choice(ids, 4, replace=False).tolist()]:
                    kinds.append(INSERT_EDGE), a.append(new), b.append(int(other))
                    lab.append(0)
                added.append(new)
        else:
            for _ in range(2):
                victim = added.pop()
                kinds.append(DELETE_VERTEX), a.append(victim), b.append(0), lab.append(-1)
        for _ in range(3):
            kinds.append(INSERT_EDGE), a.append(int(held.a[at])), b.append(int(held.b[at]))
            lab.append(0)
            at += 1
        batches.append(UpdateStream(np.array(kinds), np.array(a), np.array(b), np.array(lab),
                                    np.arange(1, len(kinds) + 1), f"churn{i}"))
    return initial, batches


LISTINGS = [pytest.param(EngineConfig(), None, id="lists"),
            pytest.param(EngineConfig(device_graph="pma"), None, id="pma"),
            pytest.param(EngineConfig(launch_pairs=40), None, id="edge-slices"),
            pytest.param(EngineConfig(), 3, id="counts-read-back")]


@pytest.mark.gpu
@pytest.mark.parametrize(("config", "queued_rows"), LISTINGS)
@pytest.mark.parametrize("limit", [200_000, 5])
def test_listed_rows_keep_their_vertices_when_slots_are_reused(config, queued_rows, limit,
                                                                monkeypatch):
    """Listings are read back when a batch is finished, after the next batch has been
    started: a vertex the batch deleted (its removed matches hold it) has its slot given
    to a vertex the next batch adds, so rows must be mapped to external ids in stream
    order, not when they are read.  Also with the rows cut at the limit, with the edges
    in slices, and with each slice's count read back first (a limit above
    QUEUED_LIST_ROWS)."""
    from gpu.cuda import shared_launch
    if queued_rows is not None:
        monkeypatch.setattr(shared_launch, "QUEUED_LIST_ROWS", queued_rows)
    initial, batches = vertex_churn_batches(skewed_graph(25), 25, count=8)
    one = Engine(initial, backend="cpu")
    streamed = Engine(initial, backend="cuda", config=config)
    for engine in (one, streamed):
        for q in QUERIES:
            engine.add_query(q)
    want = [summary(one.apply(b, list_limit=limit)) for b in batches]
    got = [summary(r) for r in streamed.apply_stream(iter(batches), list_limit=limit)]
    assert got == want
    # Removed rows held deleted vertices, and their slots were reused.
    assert any(v[1] for r in want[1::2] for v in r.values())
    assert streamed.graph.num_slots < initial.num_vertices + 2 * len(batches[::2])
    streamed.check()
