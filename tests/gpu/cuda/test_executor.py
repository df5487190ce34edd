"""The CUDA executor against the CPU executor on graphs too large for the oracle.

Skewed degrees (a few hubs joined to most vertices) make single tasks that dwarf
the others and candidate lists longer than a warp; the queries cover every
kernel path: n == 2, a counted last level, the non-adjacent pair tail, cached
levels and orbits of several members (coalesced search).  Counts must be equal,
listings equal as sets, and a cut listing must be a subset flagged truncated.
The small-graph oracle scenarios run on both executors in test_oracle.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpu.batch import BatchRejected
from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.records import (ADD_VERTEX, DELETE_EDGE, DELETE_VERTEX, INSERT_EDGE, NO_LABEL,
                            LabeledGraph, UpdateStream)
from gpu.io.streams import split_stream
from gpu.plan.query import QueryGraph
from tests.graphs import skewed_graph

pytestmark = pytest.mark.gpu

SHAPES = {
    "edge": [(0, 1)],
    "triangle": [(0, 1), (1, 2), (0, 2)],
    "path4": [(0, 1), (1, 2), (2, 3)],
    "square": [(0, 1), (1, 2), (2, 3), (0, 3)],
    "star4": [(0, 1), (0, 2), (0, 3)],
    "clique4": [(a, b) for a in range(4) for b in range(a + 1, 4)],
    "tailed_triangle": [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4)],
    "house": [(0, 1), (1, 2), (2, 3), (3, 0), (0, 4), (1, 4)],
}


def query(name: str, labels: list[int]) -> QueryGraph:
    edges = SHAPES[name]
    n = 1 + max(max(e) for e in edges)
    return QueryGraph.build(name, np.arange(n), labels[:n], edges)


def engines(initial: LabeledGraph, queries: list[QueryGraph],
            config: EngineConfig | None = None):
    pair = [Engine(initial, backend=b, config=config) for b in ("cpu", "cuda")]
    for q in queries:
        ids = [e.add_query(q) for e in pair]
        assert ids[0] == ids[1]
    return pair


def rows(found) -> set[tuple[int, ...]]:
    return {tuple(r) for r in np.asarray(found).tolist()}


def assert_same(results, limit: int) -> None:
    cpu, gpu = results
    for qid, want in cpu.queries.items():
        got = gpu.queries[qid]
        assert (got.positive, got.negative) == (want.positive, want.negative), qid
        if limit:
            assert got.truncated == want.truncated
            for side, total in (("added", want.positive), ("removed", want.negative)):
                if total <= limit:
                    assert rows(getattr(want, side)) == rows(getattr(got, side)), (qid, side)
                else:
                    # The device lists in (edge, type) pair order, the CPU in task
                    # order, so a cut listing is some `limit` distinct matches
                    # (test_cut_listing_is_an_exact_subset checks that they are matches).
                    assert len(rows(getattr(got, side))) == limit, (qid, side)


QUERIES = [query(name, [0, 1, 0, 1, 0]) for name in SHAPES] + \
    [query(name, [0, 0, 0, 0, 0]) for name in ("triangle", "square", "clique4", "star4")]


@pytest.mark.parametrize(("seed", "layout"), [(1, "lists"), (2, "pma")])
def test_insert_then_delete_batches_equal_cpu(seed, layout):
    full = skewed_graph(seed)
    initial, stream = split_stream(full, 0.2, seed)
    pair = engines(initial, QUERIES, EngineConfig(device_graph=layout))
    assert_same([e.apply(stream, list_limit=200_000) for e in pair], 200_000)
    # Delete the same edges again, half in one batch, then the rest one by one.
    undo = UpdateStream(np.full(len(stream), DELETE_EDGE), stream.a, stream.b, stream.label,
                        stream.line, "undo")
    half = len(undo) // 2
    first = UpdateStream(undo.kind[:half], undo.a[:half], undo.b[:half], undo.label[:half],
                         undo.line[:half], "undo")
    assert_same([e.apply(first, list_limit=200_000) for e in pair], 200_000)
    for i in range(half, min(len(undo), half + 20)):
        one = UpdateStream(undo.kind[i:i + 1], undo.a[i:i + 1], undo.b[i:i + 1],
                           undo.label[i:i + 1], undo.line[i:i + 1], "one")
        assert_same([e.apply(one, list_limit=1000) for e in pair], 1000)
    for qid in pair[0].query_ids():
        assert pair[0].count(qid) == pair[1].count(qid)


@pytest.mark.parametrize("layout", ["lists", "pma"])
def test_static_counts_and_listing_equal_cpu(layout):
    pair = engines(skewed_graph(3), QUERIES, EngineConfig(device_graph=layout))
    for qid in pair[0].query_ids():
        assert pair[0].count(qid) == pair[1].count(qid)
        a, b = pair[0].matches(qid, limit=5000), pair[1].matches(qid, limit=5000)
        assert a.truncated == b.truncated
        if not a.truncated:
            assert rows(a.rows) == rows(b.rows)


@pytest.mark.parametrize("config", [EngineConfig(), EngineConfig(launch_pairs=40)],
                         ids=["one-launch", "edge-slices"])
def test_cut_listing_is_an_exact_subset(config):
    """A listing cut at 7 rows holds 7 of the complete listing's rows, also when the
    phase's edges run in slices (40 pairs a launch) whose listings are joined."""
    full = skewed_graph(4)
    initial, stream = split_stream(full, 0.2, 4)
    pair = engines(initial, QUERIES, config)
    whole = [Engine(initial, backend="cpu")]
    for q in QUERIES:
        whole[0].add_query(q)
    complete = whole[0].apply(stream, list_limit=10**7)
    cut = pair[1].apply(stream, list_limit=7)
    for qid, res in cut.queries.items():
        assert res.positive == complete.queries[qid].positive
        added = rows(res.added)
        assert added <= rows(complete.queries[qid].added)
        assert len(added) == min(7, res.positive)
        assert res.truncated == (res.positive > 7)


@pytest.mark.parametrize("mode", ["queued", "edge-slices", "read-back", "pma"])
def test_listed_queries_share_launches_each_with_its_own_limit(mode, monkeypatch):
    """Listed queries of several sizes, each with its own limit (1 to all of its matches),
    share one launch pair per size beside counted ones: every count equals the CPU's, a
    complete listing equals the CPU's as a set, a cut one is `limit` of its rows.  Rows
    come in the order of their (edge, type) pairs, so a second engine lists the same rows
    in the same order.  Modes: everything queued; 40 pairs a launch (slices whose rows
    follow each other); limits over QUEUED_LIST_ROWS (each slice's counts read back, its
    rows sized by them); the PMA layout."""
    import gpu.cuda.shared_launch

    config = EngineConfig(launch_pairs=40 if mode == "edge-slices" else
                          EngineConfig.launch_pairs,
                          device_graph="pma" if mode == "pma" else "lists")
    if mode == "read-back":
        monkeypatch.setattr(gpu.cuda.shared_launch, "QUEUED_LIST_ROWS", 3)
    full = skewed_graph(5)
    initial, stream = split_stream(full, 0.2, 5)
    cpu = Engine(initial, backend="cpu")
    cudas = [Engine(initial, backend="cuda", config=config) for _ in range(2)]
    for q in QUERIES:
        assert len({e.add_query(q) for e in [cpu, *cudas]}) == 1
    qids = cpu.query_ids()
    limits = {qid: (1, 2, 7, 60, 10**6)[i % 5] for i, qid in enumerate(qids) if i % 4 != 3}
    listed_sizes = {QUERIES[qids.index(qid)].num_vertices for qid in limits}
    assert len(listed_sizes) >= 3 and len(limits) > len(listed_sizes)   # launches shared
    undo = UpdateStream(np.full(len(stream), DELETE_EDGE), stream.a, stream.b, stream.label,
                        stream.line, "undo")
    for batch in (*stream.batches(max(1, len(stream) // 3)), undo):
        complete = cpu.apply(batch, list_limit=dict.fromkeys(limits, 10**7))
        got = [e.apply(batch, list_limit=limits) for e in cudas]
        for qid, want in complete.queries.items():
            first, second = got[0].queries[qid], got[1].queries[qid]
            assert (first.positive, first.negative) == (want.positive, want.negative), qid
            if qid not in limits:
                assert first.added is None and first.removed is None
                continue
            limit = limits[qid]
            for side, total in (("added", want.positive), ("removed", want.negative)):
                mine, all_of = getattr(first, side), rows(getattr(want, side))
                assert len(mine) == min(total, limit), (qid, side)
                assert rows(mine) <= all_of and len(rows(mine)) == len(mine), (qid, side)
                np.testing.assert_array_equal(mine, getattr(second, side))
            assert first.truncated == (max(want.positive, want.negative) > limit), qid
    for qid in qids:
        assert cpu.count(qid) == cudas[0].count(qid)


@pytest.mark.parametrize("config", [EngineConfig(device_graph="lists"),
                                    EngineConfig(device_graph="pma"),
                                    EngineConfig(device_graph="pma", pma_segment_size=2),
                                    EngineConfig(device_graph="pma", pma_view=False)],
                         ids=["lists", "pma", "pma-segments-of-2", "pma-direct"])
def test_mixed_stream_with_new_vertices_equals_cpu(config):
    """Both device graph layouts (and a PMA of 2-slot segments, whose window tree is
    deep) follow inserts, deletes and vertex adds and deletes; the device graph equals
    the host's after the stream."""
    rng = np.random.default_rng(9)
    full = skewed_graph(9)
    initial, _ = split_stream(full, 0.3, 9)
    pair = engines(initial, QUERIES, config)
    ids = list(full.vertex_ids)
    next_id = int(max(ids)) + 1
    for step in range(6):
        kinds, a, b, lab = [], [], [], []
        for _ in range(40):
            if rng.random() < 0.1:
                kinds.append(ADD_VERTEX), a.append(next_id), b.append(0)
                lab.append(int(rng.integers(2)))
                ids.append(next_id)
                next_id += 1
            else:
                x, y = rng.choice(ids, 2, replace=False)
                kinds.append(INSERT_EDGE if rng.random() < 0.6 else DELETE_EDGE)
                a.append(int(x)), b.append(int(y)), lab.append(0)
        # Vertex deletions (with all their edges), of vertices no other record names.
        named = set(a) | set(b)
        for victim in rng.choice([i for i in ids if i not in named], 2, replace=False):
            kinds.append(DELETE_VERTEX), a.append(int(victim)), b.append(0), lab.append(-1)
            ids.remove(victim)
        batch = UpdateStream(np.array(kinds), np.array(a), np.array(b), np.array(lab),
                             np.arange(1, len(kinds) + 1), f"step{step}")
        assert_same([e.apply(batch, list_limit=100_000) for e in pair], 100_000)
        pair[1].check()


def test_work_sharing_on_off_and_tiny_queue_equal_cpu():
    # Four hubs joined to most vertices: a handful of tasks hold most matches, so
    # idle warps take parts of them; a 3-record queue also runs full.
    full = skewed_graph(11, n=1500, hubs=6, labels=1)
    initial, stream = split_stream(full, 0.1, 11)
    shapes = [query(name, [0] * 5) for name in ("clique4", "house", "tailed_triangle",
                                                 "square", "path4")]
    results = []
    for backend, config in (("cpu", EngineConfig()), ("cuda", EngineConfig()),
                            ("cuda", EngineConfig(work_sharing=False)),
                            ("cuda", EngineConfig(share_capacity=3)),
                            ("cuda", EngineConfig(device_graph="pma"))):
        engine = Engine(initial, backend=backend, config=config)
        for q in shapes:
            engine.add_query(q)
        res = engine.apply(stream)
        results.append({qid: (d.positive, d.negative) for qid, d in res.queries.items()})
        results[-1]["static"] = [engine.count(qid) for qid in engine.query_ids()]
    assert all(r == results[0] for r in results[1:]), results


def test_launcher_rejects_wrong_dtypes():
    import cupy as cp

    from gpu.cuda import match_launchers

    ints = cp.zeros(4, dtype=np.int32)
    plan = match_launchers.DevicePlan(*(cp.zeros(4, dtype=dtype)
                                        for dtype in match_launchers.PLAN_DTYPES.values()))
    edges = match_launchers.UpdateEdges(ints, ints, ints, ints)

    def launch(graph, plan=plan, edges=edges):
        match_launchers.match_tasks(graph, cp.zeros(1, np.uint64), plan, 3, 1, ints, edges,
                                    cp.zeros(match_launchers.CTL_WORDS, np.uint64), ints, 1, 4,
                                    cp.zeros(0, np.int64), False, cp.zeros(0, np.int64),
                                    cp.zeros((0, 3), np.int32), cp.zeros(0, np.int64), False)

    floats = cp.zeros(4, dtype=np.float32)
    lists = match_launchers.ListGraphArrays(cp.zeros(4, np.int64), *[ints] * 5)
    with pytest.raises(TypeError, match="start"):
        launch(match_launchers.ListGraphArrays(*[floats] * 6))
    with pytest.raises(TypeError, match="keys"):
        launch(match_launchers.PmaGraphArrays(cp.zeros(4, np.int64), floats, floats, floats, 5,
                                              29, floats, floats))
    with pytest.raises(TypeError, match="graph"):
        launch(tuple([floats] * 6))
    with pytest.raises(TypeError, match="multiplicity"):
        launch(lists, plan=plan._replace(multiplicity=ints))
    with pytest.raises(TypeError, match="ranks"):
        launch(lists, edges=edges._replace(ranks=floats))
    with pytest.raises(TypeError, match="row_end"):
        match_launchers.match_tasks(lists, cp.zeros(1, np.uint64), plan, 3, 1, ints, edges,
                                    cp.zeros(match_launchers.CTL_WORDS, np.uint64), ints, 1, 4,
                                    cp.zeros(0, np.int64), False, cp.zeros(0, np.int64),
                                    cp.zeros((0, 3), np.int32), ints, False)
    with pytest.raises(TypeError, match="tasks"):
        match_launchers.make_tasks(cp.zeros(1, np.uint64), plan, edges, floats,
                                   cp.zeros(match_launchers.CTL_WORDS, np.uint64))


def test_launcher_checks_per_pair_arrays():
    """A by_task launch counts per (edge, type) pair and a listing reads an offset per
    pair and a row end per query: the launcher refuses arrays too short for them, and a
    listing without per-pair counts, before anything runs."""
    import cupy as cp

    from gpu.cuda import match_launchers

    ints = cp.zeros(4, dtype=np.int32)
    plan = match_launchers.DevicePlan(*(cp.zeros(4, dtype=dtype)
                                        for dtype in match_launchers.PLAN_DTYPES.values()))
    edges = match_launchers.UpdateEdges(ints, ints, ints, ints)       # 4 edges x 4 types
    lists = match_launchers.ListGraphArrays(cp.zeros(4, np.int64), *[ints] * 5)
    ctl = cp.zeros(match_launchers.CTL_WORDS, np.uint64)
    bufs = cp.zeros(match_launchers.WARPS_PER_BLOCK * 3, np.int32)

    def launch(counts, offsets, row_end, listing, by_task=True, queries=2):
        match_launchers.match_tasks(lists, cp.zeros(queries, np.uint64), plan, 3, 1,
                                    cp.zeros(16, np.int32), edges, ctl, bufs, 1,
                                    match_launchers.WARPS_PER_BLOCK, counts, by_task, offsets,
                                    cp.zeros((0, 3), np.int32), row_end, listing)

    pairs, two = cp.zeros(16, np.int64), cp.zeros(2, np.int64)
    with pytest.raises(ValueError, match="counts has 15 entries, 16 needed"):
        launch(cp.zeros(15, np.int64), pairs, two, False)
    with pytest.raises(ValueError, match="offsets has 15 entries, 16 needed"):
        launch(pairs, cp.zeros(15, np.int64), two, True)
    with pytest.raises(ValueError, match="row_end has 1 entries, 2 needed"):
        launch(pairs, pairs, cp.zeros(1, np.int64), True)
    with pytest.raises(ValueError, match="needs by_task"):
        launch(cp.zeros(64, np.int64), pairs, two, True, by_task=False)


@pytest.mark.parametrize(("seed", "layout"), [(3, "lists"), (4, "pma")])
def test_counted_queries_share_one_launch(seed, layout):
    """Count-only queries of several sizes and orbit widths run in one launch per size
    (per-type labels and candidate tables); listed ones beside them run alone.  Every
    count equals the CPU executor's, batch after batch."""
    full = skewed_graph(seed)
    initial, stream = split_stream(full, 0.3, seed)
    pair = engines(initial, QUERIES, EngineConfig(device_graph=layout))
    listed = {qid: 500 for qid in pair[1].query_ids() if qid % 3 == 0}
    for batch in stream.batches(max(1, len(stream) // 5)):
        results = [e.apply(batch, list_limit=listed) for e in pair]
        for qid, want in results[0].queries.items():
            got = results[1].queries[qid]
            assert (got.positive, got.negative) == (want.positive, want.negative), qid
            assert (got.added is None) == (qid not in listed)
    undo = UpdateStream(np.full(len(stream), DELETE_EDGE), stream.a, stream.b, stream.label,
                        stream.line, "undo")
    results = [e.apply(undo) for e in pair]
    for qid, want in results[0].queries.items():
        got = results[1].queries[qid]
        assert (got.positive, got.negative) == (want.positive, want.negative), qid


def test_pma_rekeyed_by_a_query_with_a_ninth_label():
    """Eight vertex labels fill the PMA's reserved label bits; a triangle query with a
    ninth label (on no vertex yet) is registered, which re-keys the array then (not in a
    batch's phase, where the ranks are set); the new label matches once vertices carry
    it."""
    full = skewed_graph(12, labels=8)
    initial, stream = split_stream(full, 0.2, 12)
    queries = [query("triangle", [0, 1, 2]), query("triangle", [8, 0, 1]),
               query("path4", [3, 4, 5, 6])]
    pair = engines(initial, queries, EngineConfig(device_graph="pma"))
    assert pair[1]._device.graph.relayouts == 2         # the load, the ninth label
    assert_same([e.apply(stream) for e in pair], 0)
    assert pair[1]._device.graph.relayouts == 2
    pair[1].check()
    # New label-8 vertices joined to both ends of stored edges between labels 0 and 1.
    label = dict(zip(full.vertex_ids.tolist(), full.vertex_labels.tolist(), strict=True))
    ends = [(a, b) for a, b in zip(full.edge_src.tolist(), full.edge_dst.tolist(),
                                   strict=True) if {label[a], label[b]} == {0, 1}][:3]
    kinds, a, b, lab = [], [], [], []
    for i, (x, y) in enumerate(ends):
        new = 10**6 + i
        kinds += [ADD_VERTEX, INSERT_EDGE, INSERT_EDGE]
        a += [new, new, new]
        b += [0, x, y]
        lab += [8, 0, 0]
    adds = UpdateStream(np.array(kinds), np.array(a), np.array(b), np.array(lab),
                        np.arange(1, len(kinds) + 1), "adds")
    results = [e.apply(adds, list_limit=1000) for e in pair]
    assert_same(results, 1000)
    assert results[0].queries[2].positive >= len(ends) > 0
    pair[1].check()


def test_pma_rekeyed_inside_a_batch_that_also_changes_edges():
    """On the PMA layout the engine keeps no host neighbour lists (a DeviceEdgeGraph): the
    array is the only copy of the edges.  A batch that brings a ninth vertex label re-keys
    it from its own edges as they were before the batch, then applies the batch's edge
    inserts and deletes (of a deleted vertex's edges too): the counts, listings and every
    structure equal the CPU engine's."""
    from gpu.cuda.device_graph import DeviceEdgeGraph

    full = skewed_graph(15, labels=8)
    initial, stream = split_stream(full, 0.2, 15)
    queries = [query("triangle", [0, 1, 2]), query("path4", [3, 4, 5, 6]),
               query("edge", [7, 0])]
    pair = engines(initial, queries, EngineConfig(device_graph="pma"))
    assert isinstance(pair[1].graph, DeviceEdgeGraph) and not hasattr(pair[1].graph, "nbr")
    assert pair[1]._device.graph.relayouts == 1
    n = len(stream) // 2
    # A vertex with edges that the batch's inserts do not touch goes with its edges.
    busy = set(stream.a[:n].tolist()) | set(stream.b[:n].tolist())
    ends = set(initial.edge_src.tolist()) | set(initial.edge_dst.tolist())
    gone = next(v for v in initial.vertex_ids[6:].tolist() if v in ends and v not in busy)
    kinds = [ADD_VERTEX, ADD_VERTEX, INSERT_EDGE, INSERT_EDGE, DELETE_VERTEX]
    a = [10**6, 10**6 + 1, 10**6, int(initial.vertex_ids[5]), gone]
    b = [0, 0, int(initial.vertex_ids[1]), 10**6 + 1, 0]
    lab = [8, 8, 0, 0, NO_LABEL]
    batch = UpdateStream(np.concatenate([stream.kind[:n], kinds]),
                         np.concatenate([stream.a[:n], a]), np.concatenate([stream.b[:n], b]),
                         np.concatenate([stream.label[:n], lab]),
                         np.arange(1, n + len(kinds) + 1), "rekey")
    results = [e.apply(batch, list_limit=100_000) for e in pair]
    assert_same(results, 100_000)
    assert pair[1]._device.graph.relayouts == 2
    assert results[1].applied["vertices_deleted"] == 1
    pair[1].check()
    keep = np.flatnonzero((stream.a != gone) & (stream.b != gone))
    keep = keep[keep >= n]
    rest = UpdateStream(stream.kind[keep], stream.a[keep], stream.b[keep], stream.label[keep],
                        stream.line[keep], "rest")
    assert_same([e.apply(rest) for e in pair], 0)
    pair[1].check()
    assert pair[0].to_labeled().num_edges == pair[1].to_labeled().num_edges


@pytest.mark.parametrize("layout", ["lists", "pma"])
def test_largest_vertex_label(layout):
    """Label 2^31 - 1 is valid: the list kernel's label segment must not compute want + 1."""
    top = 2**31 - 1
    full = skewed_graph(13, labels=2)
    labels = np.where(full.vertex_labels == 1, top, 0).astype(np.int32)
    full = LabeledGraph(full.vertex_ids, labels, full.edge_src, full.edge_dst,
                        full.edge_labels)
    initial, stream = split_stream(full, 0.2, 13)
    queries = [query("triangle", [top, top, 0]), query("path4", [top, 0, top, 0])]
    pair = engines(initial, queries, EngineConfig(device_graph=layout))
    results = [e.apply(stream) for e in pair]
    assert_same(results, 0)
    assert results[0].queries[1].positive > 0
    for qid in pair[0].query_ids():
        assert pair[0].count(qid) == pair[1].count(qid) > 0


def test_pma_refuses_what_its_keys_cannot_hold_and_changes_nothing():
    """65,536 vertices with as many labels need 16 label bits, which leave 16 bits for
    vertex ids: exactly enough.  A batch adding vertices of new labels, or a query with a
    new label, would need 17 label bits, too few for the vertices: refused whole, and the
    engine goes on."""
    n = 1 << 16
    ids = np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(14)
    src, dst = rng.integers(0, n, 3 * n), rng.integers(0, n, 3 * n)
    keep = src != dst
    pairs = np.unique(np.minimum(src[keep], dst[keep]) * n + np.maximum(src[keep], dst[keep]))
    graph = LabeledGraph(ids, ids.astype(np.int32), pairs // n, pairs % n,
                         np.zeros(len(pairs), np.int32))
    engine = Engine(graph, backend="cuda", config=EngineConfig(device_graph="pma"))
    qid = engine.add_query(query("edge", [0, 1]))
    extra = np.arange(n, n + 10)
    adds = UpdateStream(np.full(len(extra), ADD_VERTEX), extra, np.zeros(len(extra)),
                        extra.astype(np.int32), np.arange(1, len(extra) + 1), "adds")
    with pytest.raises(BatchRejected, match="cannot key 65546 vertex labels"):
        engine.apply(adds)
    with pytest.raises(ValueError, match="cannot key 65537 vertex labels"):
        engine.add_query(QueryGraph.build("far", np.arange(2), [0, 10**9], [(0, 1)]))
    engine.check()
    assert engine.graph.num_vertices == n and engine.query_ids() == [qid]
    # The engine goes on: an edge between the vertices labelled 0 and 1 is one new match.
    slots = engine.graph.ids.lookup(np.array([0, 1]))
    present = engine.graph.edge_labels(slots[:1].astype(np.int32),
                                       slots[1:].astype(np.int32))[0] >= 0
    op = DELETE_EDGE if present else INSERT_EDGE
    edge = UpdateStream(np.array([op]), np.array([0]), np.array([1]), np.zeros(1, np.int32),
                        np.array([1]), "edge")
    delta = engine.apply(edge).queries[qid]
    assert (delta.positive, delta.negative) == ((0, 1) if present else (1, 0))
    engine.check()


@pytest.mark.parametrize("small", [1, 8])
def test_small_phases_equal_the_general_launches_and_the_cpu(small):
    """Counted phases of at most `small_phase_edges` update edges run through prepared
    launches (gpu/cuda/small_phase.py) with buffers kept between batches: one- and
    few-edge batches, inserted then deleted, applied one at a time and streamed (their
    read-backs overlapping the next batch), a batch adding a vertex and its edges, on a
    skewed graph whose hub tasks are shared between warps, with queries of several sizes
    counted together.  Every batch's counts equal the general launches' and the CPU
    executor's."""
    full = skewed_graph(5)
    initial, stream = split_stream(full, 0.1, 5)
    setups = [("cpu", EngineConfig()), ("cuda", EngineConfig(small_phase_edges=small)),
              ("cuda", EngineConfig(small_phase_edges=0))]
    trio = [Engine(initial, backend=b, config=c) for b, c in setups]
    for q in QUERIES:
        assert len({e.add_query(q) for e in trio}) == 1

    def same(results) -> None:
        counts = [{q: (d.positive, d.negative) for q, d in r.queries.items()}
                  for r in results]
        assert counts[0] == counts[1] == counts[2]

    ones = list(stream.batches(1))
    for batch in ones[:25]:
        same([e.apply(batch) for e in trio])
    rest = list(stream.slice(25, len(stream)).batches(small + 2))
    for results in zip(*(list(e.apply_stream(rest)) for e in trio), strict=True):
        same(results)
    new = int(full.vertex_ids.max()) + 1
    hub = int(full.vertex_ids[0])
    grow = UpdateStream(np.array([ADD_VERTEX, INSERT_EDGE]), np.array([new, new]),
                        np.array([0, hub]), np.array([1, 0]), np.arange(1, 3), "grow")
    same([e.apply(grow) for e in trio])
    undo = UpdateStream(np.full(len(stream), DELETE_EDGE), stream.a, stream.b,
                        np.full(len(stream), NO_LABEL), stream.line, "undo")
    for results in zip(*(list(e.apply_stream(list(undo.batches(1))[:40])) for e in trio),
                       strict=True):
        same(results)
    for qid in trio[0].query_ids():
        assert trio[0].count(qid) == trio[1].count(qid) == trio[2].count(qid)
    # The searches of every small phase share their work-sharing buffers (1 Mi records
    # of 36 ints: 144 MiB), whatever their query sizes.
    launches = [size.search for _, phase in trio[1]._device._small.values()
                for _, size in phase.sizes]
    assert len(launches) >= 2
    for name in ("records", "ready"):
        assert len({id(launch.array(name)) for launch in launches}) == 1, name
