"""Timed batches on the engine (gpu/event_time.py, issue 23): event times, refreshes, the
watermark and retention against the timed oracle (tests/reference_time.py) on random timed
streams, both executors; each batch's positive, negative and expired matches exactly."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from gpu.batch import BatchRejected
from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.graph.times import ExpiryIndex
from gpu.io.records import NO_TIME, UpdateStream
from tests import reference as ref
from tests.gpu import test_directed as directed_graphs
from tests.gpu.test_oracle import (BATCH_KINDS, BIG_LIMIT, CUDA_CONFIGS,  # noqa: F401
                                   EngineSetup, engine_setup,
                                   gen_batch, random_graph, random_queries, row_set,
                                   to_labeled, to_query, to_stream)
from tests.reference import Rejected
from tests.gpu.cpu.test_windowed import random_before
from tests.reference_time import TimedQuery, TimedRefGraph


def timed_stream(records) -> UpdateStream:
    """The engine's stream of timed oracle records (kind, a, b, label, time)."""
    plain = to_stream([r[:4] for r in records])
    times = np.array([NO_TIME if r[4] is None else r[4] for r in records], dtype=np.int64)
    return UpdateStream(plain.kind, plain.a, plain.b, plain.label, plain.line, plain.source,
                        times)


def with_times(rng: random.Random, records, clock: list[int]) -> list[tuple]:
    """Give the batch's edge inserts times around a clock that moves forward (some
    untimed, some older than the watermark: late arrivals and refreshes to the past)."""
    out = []
    for record in records:
        time = None
        if record[0] == ref.INSERT_EDGE and rng.random() < 0.85:
            clock[0] += rng.randint(0, 3)
            time = clock[0] - rng.choice([0, 0, 0, 1, 5, 12])
        out.append((*record, time))
    return out


class TimedHarness:
    """A TimedRefGraph and an Engine fed the same timed batches, checked after each."""

    def __init__(self, rng: random.Random, setup: EngineSetup, retention: int | None,
                 directed: bool = False):
        g = (directed_graphs.random_graph if directed else random_graph)(rng)
        self.oracle = TimedRefGraph(g.copy(), retention=retention)
        self.engine = Engine(to_labeled(g), backend=setup.backend, config=setup.config,
                             retention=retention, directed=directed)
        queries = (directed_graphs.random_queries if directed else random_queries)(rng, g)
        self.queries = {self.engine.add_query(to_query(q, name)): q
                        for name, q in queries.items()}
        self.expired_edges = self.expired_matches = 0     # what the stream exercised

    def apply(self, records):
        """Apply one timed batch to both and check it; the engine's result (None when
        rejected)."""
        before = {qid: self.oracle.valid(TimedQuery(q)) for qid, q in self.queries.items()}
        graph, times, mark = self.oracle.graph.copy(), dict(self.oracle.times), \
            self.oracle.watermark
        try:
            applied, ignored, expired = self.oracle.apply(records)
        except Rejected:
            self.oracle.graph, self.oracle.times, self.oracle.watermark = graph, times, mark
            with pytest.raises(BatchRejected):
                self.engine.apply(timed_stream(records), list_limit=BIG_LIMIT)
            self.check_times()
            return None
        result = self.engine.apply(timed_stream(records), list_limit=self.list_limit())
        assert result.applied == applied and result.ignored == ignored, records
        self.expired_edges += len(expired)
        self.last_expired = expired
        g = self.oracle.graph
        for qid, q in self.queries.items():
            after = self.oracle.valid(TimedQuery(q))
            delta = result.queries[qid]
            pos, neg = after - before[qid], before[qid] - after
            gone = {m for m in neg
                    if any(ref.edge_key(m[a], m[b], g.directed) in expired
                           for a, b, _ in q.edge_list())}
            assert row_set(delta.added, q.n) == pos, (qid, records)
            assert row_set(delta.removed, q.n) == neg, (qid, records)
            assert (delta.positive, delta.negative) == (len(pos), len(neg)), (qid, records)
            # An engine keeps times from its first timed batch on (or with retention);
            # before that its results are the untimed ones.
            if self.engine.watermark is None and self.engine.retention is None:
                assert delta.expired is None and delta.removed_expired is None and not gone
                continue
            assert delta.expired == len(gone), (qid, records)
            marked = {tuple(int(x) for x in row) for row, flag in
                      zip(np.asarray(delta.removed), delta.removed_expired, strict=True)
                      if flag}
            assert marked == gone, (qid, records)
            self.expired_matches += len(gone)
        self.engine.check()
        self.check_times()
        return result

    def list_limit(self):
        """What the batches list: every query's matches."""
        return BIG_LIMIT

    def check_times(self) -> None:
        # Undirected keys are pairs in either order; arcs are as they run.
        order = tuple if self.oracle.graph.directed else lambda key: tuple(sorted(key))
        expected = {order(key): t for key, t in self.oracle.times.items() if t is not None}
        got = {order(pair): t for pair, t in self.engine.edge_times().items()}
        assert got == expected
        assert self.engine.watermark == self.oracle.watermark


@pytest.mark.parametrize("retention", [None, 0, 4, 15])
def test_random_timed_streams_equal_the_oracle(retention, engine_setup):
    expired_edges = expired_matches = 0
    for seed in range(3):
        rng = random.Random(1000 * seed + (retention or 0))
        harness = TimedHarness(rng, engine_setup, retention)
        clock = [0]
        for _ in range(14):
            kind = rng.choice(BATCH_KINDS)
            records = gen_batch(rng, harness.oracle.graph, kind)
            harness.apply(with_times(rng, records, clock))
        expired_edges += harness.expired_edges
        expired_matches += harness.expired_matches
    if retention is not None:       # the streams reached what the test is about
        assert expired_edges > 0 and expired_matches > 0


class WindowedHarness(TimedHarness):
    """TimedHarness with each query standing a second time with a random window: its
    positive, negative and expired matches, counted and listed, and the engine's count and
    list of the valid matches after each batch."""

    def __init__(self, rng: random.Random, setup: EngineSetup, retention: int | None,
                 directed: bool = False):
        super().__init__(rng, setup, retention, directed)
        self.windowed = {}
        for q in self.queries.values():
            window = rng.randint(0, 12)
            qid = self.engine.add_query(to_query(q, "windowed"), window=window)
            self.windowed[qid] = TimedQuery(q, window=window)
            before = random_before(rng, len(q.edge_list()))
            if before:
                qid = self.engine.add_query(to_query(q, "ordered"), window=window + 4,
                                            before=before)
                self.windowed[qid] = TimedQuery(q, window=window + 4, before=before)
        self.found = 0      # windowed matches the stream's deltas held
        # Every other windowed query is counted only (its deltas' counts checked): the
        # search that only counts, on every core, where the listed ones search serially.
        self.counted = set(list(self.windowed)[::2])

    def list_limit(self):
        return {qid: BIG_LIMIT for qid in [*self.queries, *self.windowed]
                if qid not in self.counted}

    def apply(self, records):
        before = {qid: self.oracle.valid(tq) for qid, tq in self.windowed.items()}
        result = super().apply(records)
        for qid, tq in self.windowed.items():
            after = self.oracle.valid(tq)
            assert self.engine.count(qid) == len(after), (qid, records)
            listed = self.engine.matches(qid)
            assert listed.count == len(after) and not listed.truncated
            assert row_set(listed.rows, tq.query.n) == after, (qid, records)
            if result is None:          # rejected: nothing changed
                assert after == before[qid]
                continue
            pos, neg = after - before[qid], before[qid] - after
            delta = result.queries[qid]
            assert (delta.positive, delta.negative) == (len(pos), len(neg)), (qid, records)
            self.found += len(pos) + len(neg)
            timed = self.engine.watermark is not None or self.engine.retention is not None
            directed = self.oracle.graph.directed
            gone = {m for m in neg if any(ref.edge_key(m[a], m[b], directed) in self.last_expired
                                          for a, b, _ in tq.query.edge_list())}
            if timed:
                assert delta.expired == len(gone), (qid, records)
            if qid in self.counted:
                assert delta.added is None and delta.removed is None     # counted only
                continue
            assert row_set(delta.added, tq.query.n) == pos, (qid, records)
            assert row_set(delta.removed, tq.query.n) == neg, (qid, records)
            if timed:
                marked = {tuple(int(x) for x in row) for row, flag in
                          zip(np.asarray(delta.removed), delta.removed_expired, strict=True)
                          if flag}
                assert marked == gone, (qid, records)
        return result


# On cuda the windowed search runs in the kernel (gpu/cuda/windowed.py) over the window's
# edges, whatever the device graph's layout (the array through its view, and directly,
# and the mirrored host lists), or on the host's cores (device_windows off).
WINDOWED_CONFIGS = {"tiny": EngineConfig.tiny, **CUDA_CONFIGS,
                    "tiny-lists": lambda: dataclasses.replace(EngineConfig.tiny(),
                                                              device_graph="lists"),
                    "tiny-host-windows": lambda: dataclasses.replace(EngineConfig.tiny(),
                                                                     device_windows=False)}
WINDOWED_SETUPS = [pytest.param(("tiny", "cpu"), id="cpu")] + [
    pytest.param((name, "cuda"), id=f"{name}-cuda", marks=pytest.mark.gpu)
    for name in ("tiny-pma", "tiny-pma-direct", "tiny-lists", "tiny-host-windows")]


@pytest.mark.parametrize("setup", WINDOWED_SETUPS)
@pytest.mark.parametrize("retention", [None, 0, 4, 15])
def test_windowed_queries_equal_the_oracle_on_random_timed_streams(retention, setup):
    """Each batch's windowed deltas (new edges, deletions, vertex deletions, refreshes that
    move a match into or out of its window, expiry) are the set differences of the valid
    matches before and after it, counted and listed."""
    name, backend = setup
    found = 0
    for seed in range(3):
        rng = random.Random(7000 + 100 * seed + (retention or 0))
        harness = WindowedHarness(rng, EngineSetup(WINDOWED_CONFIGS[name](), backend),
                                  retention)
        clock = [0]
        for _ in range(14):
            records = gen_batch(rng, harness.oracle.graph, rng.choice(BATCH_KINDS))
            harness.apply(with_times(rng, records, clock))
        found += harness.found
    # With retention 0 a timed edge expires in the batch that brings it: no match is ever
    # valid (the deltas above are still checked: all empty).
    assert found > 0 if retention != 0 else found == 0


@pytest.mark.parametrize("setup", WINDOWED_SETUPS)
@pytest.mark.parametrize("retention", [None, 0, 6])
def test_directed_windowed_queries_equal_the_oracle_on_random_timed_streams(retention, setup):
    """As above on directed graphs (arcs timed apart: an arc and its reverse are two edges,
    each with its own time; a query's reciprocal pair is checked at its root), plain
    queries and windowed ones; on CUDA the host searches directed windowed queries."""
    name, backend = setup
    found = 0
    for seed in range(3):
        rng = random.Random(9100 + 100 * seed + (retention or 0))
        harness = WindowedHarness(rng, EngineSetup(WINDOWED_CONFIGS[name](), backend),
                                  retention, directed=True)
        clock = [0]
        for _ in range(14):
            records = directed_graphs.gen_batch(rng, harness.oracle.graph,
                                                rng.choice(directed_graphs.BATCH_KINDS))
            harness.apply(with_times(rng, records, clock))
        found += harness.found
    assert found > 0 if retention != 0 else found == 0


def test_a_reciprocal_pair_counts_while_both_arcs_lie_within_the_window():
    """Arcs 1 -> 2 and 2 -> 1 are two edges, each with its own time: the pair (both
    images) is valid while their times lie within the window, and a refresh of one arc
    that moves it out destroys both."""
    g = ref.RefGraph.build({1: 0, 2: 0, 3: 0}, [], directed=True)
    engine = Engine(to_labeled(g), backend="cpu", directed=True)
    pair = engine.add_query(to_query(ref.RefQuery.build([0, 0], [(0, 1), (1, 0)],
                                                        directed=True), "pair"), window=3)
    E = ref.INSERT_EDGE
    r = engine.apply(timed_stream([(E, 1, 2, 0, 10), (E, 2, 3, 0, 11)]), list_limit=10)
    assert r.queries[pair].positive == 0
    r = engine.apply(timed_stream([(E, 2, 1, 0, 12)]), list_limit=10)
    assert r.queries[pair].positive == 2
    assert sorted(map(tuple, r.queries[pair].added.tolist())) == [(1, 2), (2, 1)]
    r = engine.apply(timed_stream([(E, 2, 1, 0, 20)]), list_limit=10)     # a refresh
    assert (r.queries[pair].positive, r.queries[pair].negative) == (0, 2)
    assert engine.count(pair) == 0


def test_bad_windows_are_refused():
    from tests.reference import RefQuery
    g = to_labeled(random_graph(random.Random(1)))
    q = to_query(RefQuery.build([0, 0], [(0, 1)]), "edge")
    engine = Engine(g, backend="cpu")
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="window must be an integer >= 0"):
            engine.add_query(q, window=bad)
    with pytest.raises(ValueError, match="before takes a window"):
        engine.add_query(q, before=[(0, 1)])
    with pytest.raises(ValueError, match="names an edge the query lacks"):
        engine.add_query(q, window=3, before=[(0, 1)])
    qid = engine.add_query(q, window=3)
    assert engine.windowed_ids() == [qid] and engine.query_ids() == []
    engine.remove_query(qid)
    assert engine.windowed_ids() == []


def test_windowed_queries_of_an_untimed_engine_have_empty_deltas_until_times_come():
    """Untimed edges are outside every window: batches (batch groups too) give a windowed
    query zeros until timed edges close a match."""
    from tests.reference import RefGraph, RefQuery
    g = RefGraph.build({v: 0 for v in range(4)}, [])
    engine = Engine(to_labeled(g), backend="cpu")
    qid = engine.add_query(to_query(RefQuery.build([0, 0], [(0, 1)]), "edge"), window=5)
    plain = engine.add_query(to_query(RefQuery.build([0, 0], [(0, 1)]), "edge"))
    batches = [to_stream([(ref.INSERT_EDGE, u, u + 1, 0)]) for u in range(3)]
    results = list(engine.apply_stream(batches))
    assert [(r.queries[qid].positive, r.queries[qid].negative) for r in results] == [(0, 0)] * 3
    assert [r.queries[plain].positive for r in results] == [2, 2, 2]
    timed = engine.apply(timed_stream([(ref.INSERT_EDGE, 0, 3, 0, 10),
                                       (ref.INSERT_EDGE, 0, 1, 0, 12)]))   # a refresh
    assert (timed.queries[qid].positive, timed.queries[qid].negative) == (4, 0)
    assert engine.count(qid) == 4


def test_retention_expires_in_the_batch_that_moves_the_watermark():
    g = ref.RefGraph.build({1: 0, 2: 0, 3: 0, 4: 0}, [])
    engine = Engine(to_labeled(g), backend="cpu", retention=10)
    path = engine.add_query(to_query(ref.RefQuery.build([0, 0, 0], [(0, 1), (1, 2)]), "path"))
    E = ref.INSERT_EDGE
    r = engine.apply(timed_stream([(E, 1, 2, 0, 100), (E, 2, 3, 0, 105), (E, 3, 4, 0, None)]),
                     list_limit=10)
    assert r.queries[path].positive == 4 and r.queries[path].expired == 0
    # Watermark 111: the edge at 100 goes with this batch, and the two paths through it.
    r = engine.apply(timed_stream([(E, 1, 4, 0, 111)]), list_limit=10)
    delta = r.queries[path]
    assert r.applied["edges_deleted"] == 1 and r.applied["edges_inserted"] == 1
    assert delta.expired == 2 and delta.removed_expired.tolist().count(True) == 2
    assert (1, 2) not in engine.edge_times() and (2, 1) not in engine.edge_times()
    assert engine.watermark == 111
    # A late edge already past the horizon is counted inserted and expired, and matches
    # nothing; an untimed edge never expires.
    r = engine.apply(timed_stream([(E, 1, 3, 0, 50)]), list_limit=10)
    assert r.applied["edges_inserted"] == 1 and r.applied["edges_deleted"] == 1
    assert r.queries[path].positive == 0 and r.queries[path].negative == 0
    assert engine.graph.num_edges == 3


@pytest.mark.parametrize("setup", WINDOWED_SETUPS)
def test_a_windowed_match_that_expires_as_the_batch_deletes_another_of_its_edges_goes_once(
        setup):
    """Between the expiry's deletion and the batch's own the expired edge is out of the
    graph but still timed: the batch's negative phase must not find the triangle through
    it again (counted once, as expired), nor any match in a window through it."""
    name, backend = setup
    # Untimed edges to vertex 5 keep 0 and 1 triangle candidates once 0-1 has gone (the
    # candidate bits follow the graph, and would prune the search there otherwise).
    g = ref.RefGraph.build({v: 0 for v in range(6)}, [(0, 5, 0), (1, 5, 0)])
    engine = Engine(to_labeled(g), backend=backend, config=WINDOWED_CONFIGS[name](),
                    retention=10)
    triangle = engine.add_query(to_query(ref.RefQuery.build([0, 0, 0], [(0, 1), (1, 2),
                                                                        (0, 2)]), "tri"),
                                window=10)
    E, D = ref.INSERT_EDGE, ref.DELETE_EDGE
    engine.apply(timed_stream([(E, 0, 1, 0, 0)]))
    r = engine.apply(timed_stream([(E, 1, 2, 0, 5), (E, 0, 2, 0, 5)]), list_limit=BIG_LIMIT)
    found = r.queries[triangle].positive
    assert found == engine.count(triangle) > 0
    # Watermark 10: edge 0-1 (time 0) expires; the batch deletes 1-2 itself.
    r = engine.apply(timed_stream([(D, 1, 2, ref.NO_LABEL, None), (E, 3, 4, 0, 10)]),
                     list_limit=BIG_LIMIT)
    delta = r.queries[triangle]
    assert (delta.positive, delta.negative, delta.expired) == (0, found, found)
    assert delta.removed_expired.tolist() == [True] * found
    assert engine.count(triangle) == 0
    engine.check()


def test_untimed_input_stays_as_it_was():
    g = ref.RefGraph.build({1: 0, 2: 0, 3: 0}, [])
    engine = Engine(to_labeled(g), backend="cpu")
    result = engine.apply(to_stream([(ref.INSERT_EDGE, 1, 2, 0)]))
    assert engine.watermark is None and engine.edge_times() == {}
    assert result.queries == {} and "expired" not in str(result)


def test_retention_must_be_a_non_negative_integer():
    for bad in (-1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="retention"):
            Engine(retention=bad)


def test_the_expiry_index_takes_each_entry_once_in_time_order():
    index = ExpiryIndex()
    index.add(np.array([7, 8, 9]), np.array([30, 10, 20]))
    index.add(np.array([1, 2]), np.array([15, 40]))
    keys, times = index.take_until(20)
    assert sorted(zip(times.tolist(), keys.tolist())) == [(10, 8), (15, 1), (20, 9)]
    assert len(index) == 2
    keys, _ = index.take_until(20)
    assert keys.size == 0
    keys, times = index.take_until(100)
    assert sorted(keys.tolist()) == [2, 7] and len(index) == 0
    assert not index._runs and not index._heap      # spent runs leave nothing behind


@pytest.mark.parametrize("retention", [None, 6])
def test_an_engine_rebuilt_from_to_labeled_goes_on_as_the_original(retention, engine_setup):
    """A timed engine's graph with its edge times and watermark (what a snapshot keeps):
    an engine built from it gives the same results on the rest of the stream."""
    rng = random.Random(77 + (retention or 0))
    harness = TimedHarness(rng, engine_setup, retention)
    clock = [0]
    for step in range(16):
        if step == 8:
            graph = harness.engine.to_labeled()
            assert graph.edge_times is not None and graph.watermark == harness.engine.watermark
            copy = Engine(graph, backend=engine_setup.backend, config=engine_setup.config,
                          retention=retention)
            ids = {qid: copy.add_query(to_query(q, f"q{qid}"))
                   for qid, q in harness.queries.items()}
            assert copy.edge_times() == harness.engine.edge_times()
        records = with_times(rng, gen_batch(rng, harness.oracle.graph, rng.choice(BATCH_KINDS)),
                             clock)
        result = harness.apply(records)         # checked against the oracle
        if step < 8:
            continue
        if result is None:
            with pytest.raises(BatchRejected):
                copy.apply(timed_stream(records))
            continue
        mine = copy.apply(timed_stream(records), list_limit=BIG_LIMIT)
        for qid, other in ids.items():
            want, got = result.queries[qid], mine.queries[other]
            assert (got.positive, got.negative, got.expired) == \
                (want.positive, want.negative, want.expired), (step, records)
        assert copy.edge_times() == harness.engine.edge_times()
        assert copy.watermark == harness.engine.watermark
    copy.check()
