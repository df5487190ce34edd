"""Self-tests of the timed oracle (tests/reference_time.py, issue 23): times, refreshes,
the watermark, retention in the batch that moves it, windows and `before` constraints,
and on random timed streams its matches against networkx's filtered by the same rules."""
from __future__ import annotations

import random

import pytest

from tests.gpu.test_reference import nx_embeddings
from tests.reference import DELETE_EDGE, INSERT_EDGE, NO_LABEL, RefGraph, RefQuery, Rejected
from tests.reference_time import TimedQuery, TimedRefGraph

E, DE = INSERT_EDGE, DELETE_EDGE
PATH = RefQuery.build([0, 0, 0], [(0, 1), (1, 2)])       # edges (0,1) then (1,2)


def _graph(retention=None) -> TimedRefGraph:
    return TimedRefGraph(RefGraph.build({1: 0, 2: 0, 3: 0, 4: 0}, []), retention=retention)


def test_times_refreshes_and_the_watermark():
    g = _graph()
    g.apply([(E, 1, 2, 0, 10), (E, 2, 3, 0, None)])
    assert g.times == {frozenset((1, 2)): 10, frozenset((2, 3)): None}
    assert g.watermark == 10
    # An existing edge inserted again takes the record's time, even an older one; an
    # untimed record leaves it; duplicates in a batch give the largest.
    applied, ignored, _ = g.apply([(E, 1, 2, 0, 7), (E, 2, 3, 0, 4), (E, 2, 3, 0, 9)])
    assert g.times == {frozenset((1, 2)): 7, frozenset((2, 3)): 9}
    assert applied["edges_inserted"] == 0 and ignored["edges_inserted"] == 3
    assert g.watermark == 10                # the largest time accepted so far
    g.apply([(E, 1, 2, 0, None)])
    assert g.times[frozenset((1, 2))] == 7


def test_a_cancelled_insert_refreshes_nothing():
    g = _graph()
    g.apply([(E, 1, 2, 0, 5)])
    g.apply([(E, 1, 2, 3, 50), (DE, 1, 2, 3, None)])      # cancel: the insert's label
    assert g.times == {frozenset((1, 2)): 5} and g.graph.edges[frozenset((1, 2))] == 0
    assert g.watermark == 50                # an accepted record's time still counts


def test_retention_deletes_in_the_batch_that_moves_the_watermark():
    g = _graph(retention=10)
    tq = TimedQuery(PATH)
    g.apply([(E, 1, 2, 0, 0), (E, 2, 3, 0, 5), (E, 3, 4, 0, None)])
    assert len(g.valid(tq)) == 4            # 1-2-3 and 2-3-4, both ways
    # Watermark 10: the edge of time 0 expires (0 <= 10 - 10), 5 stays, untimed stays.
    delta = g.delta(tq, [(E, 1, 4, 0, 10)])
    assert frozenset((1, 2)) not in g.graph.edges and g.watermark == 10
    assert delta.negative == delta.expired == {(1, 2, 3), (3, 2, 1)}
    assert (4, 1, 2) not in delta.positive and (1, 4, 3) in delta.positive
    # A batch whose own edge is already past the horizon: inserted and gone at once.
    applied, _, expired = g.apply([(E, 1, 3, 0, 0)])
    assert frozenset((1, 3)) in expired and frozenset((1, 3)) not in g.graph.edges
    assert applied["edges_inserted"] == 1 and applied["edges_deleted"] == 1


def test_a_window_and_before_constraints():
    g = _graph()
    g.apply([(E, 1, 2, 0, 1), (E, 2, 3, 0, 4), (E, 3, 4, 0, None)])
    assert g.valid(TimedQuery(PATH, window=3)) == {(1, 2, 3), (3, 2, 1)}
    assert g.valid(TimedQuery(PATH, window=2)) == set()
    # Query edges in edge_list order: 0 = (0,1), 1 = (1,2).  (1,2,3) maps edge 0 to 1-2
    # (time 1) and edge 1 to 2-3 (time 4).
    assert g.valid(TimedQuery(PATH, before=[(0, 1)])) == {(1, 2, 3)}
    assert g.valid(TimedQuery(PATH, before=[(1, 0)])) == {(3, 2, 1)}
    # A refresh brings a match into the window, or takes it out.
    tq = TimedQuery(PATH, window=3)
    into = g.delta(tq, [(E, 3, 4, 0, 6)])
    assert into.positive == {(2, 3, 4), (4, 3, 2)} and into.negative == set()
    out = g.delta(tq, [(E, 1, 2, 0, 0)])
    assert out.negative == {(1, 2, 3), (3, 2, 1)} and out.expired == set()


def test_a_rejected_batch_changes_no_time_nor_the_watermark():
    g = _graph(retention=5)
    g.apply([(E, 1, 2, 0, 3)])
    with pytest.raises(Rejected):
        g.apply([(E, 1, 3, 0, 100), (E, 2, 2, 0, 100)])      # a self-loop
    assert g.watermark == 3 and g.times == {frozenset((1, 2)): 3}


@pytest.mark.parametrize("seed", range(30))
def test_random_timed_streams_against_networkx_filtered_by_time(seed):
    rng = random.Random(seed)
    retention = rng.choice([None, 6, 15])
    ids = list(range(7))
    g = TimedRefGraph(RefGraph.build({v: rng.randrange(2) for v in ids}, []),
                      retention=retention)
    queries = [TimedQuery(RefQuery.build([rng.randrange(2) for _ in range(n)],
                                         [(i, i + 1) for i in range(n - 1)]),
                          window=rng.choice([None, 2, 5]),
                          before=rng.choice([[], [(0, 1)]]) if n > 2 else [])
               for n in (2, 3, 3, 4)]
    clock = 0
    for _ in range(25):
        clock += rng.randint(0, 3)
        records = []
        for _ in range(rng.randint(1, 5)):
            a, b = rng.sample(ids, 2)
            if rng.random() < 0.7:
                records.append((E, a, b, 0, rng.choice([None, clock, clock - rng.randint(0, 4)])))
            else:
                records.append((DE, a, b, NO_LABEL, None))
        watermark = g.watermark
        g.apply(records)
        assert g.watermark is None or watermark is None or g.watermark >= watermark
        if retention is not None and g.watermark is not None:
            assert all(t is None or t > g.watermark - retention for t in g.times.values())
        assert set(g.times) == set(g.graph.edges)
        for q in queries:
            assert g.valid(q) == _filtered(g, q), (seed, q)


def _filtered(g: TimedRefGraph, tq: TimedQuery) -> set:
    """networkx's monomorphisms kept by the time rules, written out again."""
    out = set()
    edges = [(a, b) for a, b, _ in tq.query.edge_list()]
    for match in nx_embeddings(g.graph, tq.query):
        times = [g.times[frozenset((match[a], match[b]))] for a, b in edges]
        if tq.window is not None and (None in times or max(times) - min(times) > tq.window):
            continue
        if any(times[i] is None or times[j] is None or times[i] >= times[j]
               for i, j in tq.before):
            continue
        out.add(match)
    return out
