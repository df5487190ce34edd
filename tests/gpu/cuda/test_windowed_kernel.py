"""window.cu's match_window (gpu/cuda/windowed.py) against the timed reference and the CPU
executor's windowed search (gpu/cpu/windowed.py), phase by phase: random timed graphs and
batches (deletions, new edges, refreshes, untimed edges), windows and `before` pairs, each
phase's matches counted and listed on the device equal to the reference's delta and, row
for row, to the CPU's."""
from __future__ import annotations

import numpy as np
import pytest

from gpu.cpu.windowed import WindowEdges, count_windowed, window_plan
from gpu.io.records import NO_TIME
from tests.gpu.cpu.test_windowed import SEEDS, check_seed, random_before
from tests.gpu.test_oracle import random_graph, random_queries, to_labeled, to_query

pytestmark = pytest.mark.gpu

BIG = 1 << 16


def _window_edges(graph, table) -> WindowEdges:
    """Every timed edge of `graph` (a DynamicGraph), as a phase's window would hold it."""
    us, vs, labels = graph.edges()
    lo, hi = np.minimum(us, vs).astype(np.int64), np.maximum(us, vs).astype(np.int64)
    keys = (lo << 32) | hi
    keys, first = np.unique(keys, return_index=True)
    times = table.get(keys)
    timed = times != NO_TIME
    return WindowEdges(keys[timed], times[timed], labels[first][timed].astype(np.int32))


def _on_device(graph, plan, window, us, vs, table, other=None, structural=None,
               limit: int = 0, cand=None, **_):
    """count_windowed's arguments, searched by the kernel: the window holding every timed
    edge, the update edges timed and ascending (ranks follow; the count does not depend
    on the order)."""
    from gpu.cuda.windowed import WindowedSearch, count_windowed_device, pack
    keys = np.unique((np.minimum(us, vs).astype(np.int64) << 32)
                     | np.maximum(us, vs).astype(np.int64))
    times = table.get(keys)
    timed = times != NO_TIME
    search = WindowedSearch(pack(plan), window, limit)
    return count_windowed_device(_window_edges(graph, table), graph.label, keys[timed],
                                 times[timed], [search], other, structural)[0]


def _rows(found) -> set:
    rows = {tuple(r) for r in found.rows.tolist()}
    assert len(rows) == found.rows.shape[0] == found.count and not found.truncated
    return rows


def _both(graph, plan, window, us, vs, table, other=None, structural=None, **_):
    """The kernel's matches, listed, checked row for row against the CPU's."""
    on_device = _on_device(graph, plan, window, us, vs, table, other, structural, BIG)
    on_host = count_windowed(graph, plan, window, us, vs, table, other, structural,
                             limit=BIG)
    assert _rows(on_device) == _rows(on_host)
    counted = _on_device(graph, plan, window, us, vs, table, other, structural)
    assert counted.count == on_device.count and counted.rows.shape[0] == 0
    return on_device


@pytest.mark.parametrize("seed", SEEDS)
def test_device_phases_give_the_windowed_delta_of_the_reference(seed):
    check_seed(seed, search=_both)


def test_the_device_phases_find_matches():
    """Not every case above is empty (else they could not fail)."""
    assert sum(check_seed(seed, search=_on_device) for seed in SEEDS[:10]) > 0


def test_a_listing_cut_short_counts_every_match():
    import random

    from gpu.graph.lists import DynamicGraph
    from gpu.graph.times import TimeTable
    rng = random.Random(5)
    for _ in range(20):
        g = random_graph(rng)
        queries = [q for q in random_queries(rng, g).values() if q.edges]
        query = rng.choice(queries)
        plan = window_plan(to_query(query, "q"), random_before(rng, len(query.edge_list())))
        graph = DynamicGraph.from_labeled(to_labeled(g))
        us, vs, _ = graph.edges()
        keys = (np.minimum(us, vs).astype(np.int64) << 32) | np.maximum(us, vs)
        keys = np.unique(keys)
        table = TimeTable()
        table.set(keys, np.array([rng.randint(0, 6) for _ in keys], dtype=np.int64))
        ku, kv = keys >> 32, keys & 0xFFFFFFFF
        graph.set_ranks(ku.astype(np.int32), kv.astype(np.int32),
                        np.arange(1, len(keys) + 1, dtype=np.int32))
        whole = count_windowed(graph, plan, 3, ku, kv, table, limit=BIG)
        cut = _on_device(graph, plan, 3, ku, kv, table, limit=2)
        assert cut.count == whole.count
        assert cut.rows.shape[0] == min(2, whole.count)
        assert cut.truncated == (whole.count > 2)
        assert {tuple(r) for r in cut.rows.tolist()} <= _rows(whole)


def test_the_queries_of_a_phase_share_one_launch():
    """Several windowed queries in one call (one launch over all their pairs), each with
    its own window, `before` pairs and listing limit (none, cut short, all): each equals
    the CPU's search of it alone."""
    import random

    from gpu.cuda.windowed import WindowedSearch, count_windowed_device, pack
    from gpu.graph.lists import DynamicGraph
    from gpu.graph.times import TimeTable
    rng = random.Random(9)
    compared = 0
    for _ in range(15):
        g = random_graph(rng)
        queries = [q for q in random_queries(rng, g).values() if q.edges]
        graph = DynamicGraph.from_labeled(to_labeled(g))
        us, vs, _ = graph.edges()
        keys = np.unique((np.minimum(us, vs).astype(np.int64) << 32) | np.maximum(us, vs))
        table = TimeTable()
        table.set(keys, np.array([rng.randint(0, 9) for _ in keys], dtype=np.int64))
        updates = np.sort(rng.sample(list(keys), max(1, len(keys) // 2)))
        ku, kv = updates >> 32, updates & 0xFFFFFFFF
        graph.set_ranks(ku.astype(np.int32), kv.astype(np.int32),
                        np.arange(1, len(updates) + 1, dtype=np.int32))
        searches, expected = [], []
        for i in range(4):
            query = rng.choice(queries)
            plan = window_plan(to_query(query, "q"),
                               random_before(rng, len(query.edge_list())))
            window, limit = rng.randint(0, 9), (0, 1, BIG)[i % 3]
            searches.append(WindowedSearch(pack(plan), window, limit))
            expected.append(count_windowed(graph, plan, window, ku, kv, table, limit=BIG))
        found = count_windowed_device(_window_edges(graph, table), graph.label, updates,
                                      table.get(updates), searches)
        for search, got, want in zip(searches, found, expected, strict=True):
            assert got.count == want.count
            assert got.rows.shape[0] == min(search.limit, want.count)
            assert {tuple(r) for r in got.rows.tolist()} <= _rows(want)
            compared += want.count
    assert compared > 0
