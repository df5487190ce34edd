"""gpu/cpu/windowed.py against the timed reference (tests/reference_time.py): on random
timed graphs and batches (deletions, new edges, refreshed times, untimed edges), the
deletion phase from the deleted and refreshed edges and the insertion phase from the
inserted and refreshed ones give exactly the windowed query's negative and positive
matches, each once."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from gpu.cpu.windowed import count_windowed, window_plan
from gpu.graph.lists import DynamicGraph
from gpu.graph.times import TimeTable
from gpu.io.records import NO_TIME
from tests.gpu.test_oracle import random_graph, random_queries, to_labeled, to_query
from tests.reference import DELETE_EDGE, INSERT_EDGE, NO_LABEL
from tests.reference_time import TimedQuery, TimedRefGraph


def _slots(graph: DynamicGraph, keys) -> tuple[np.ndarray, np.ndarray]:
    """Slot pairs u < v of the reference's edge keys (frozensets of external ids)."""
    pairs = [sorted(k) for k in keys]
    if not pairs:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    ends = graph.ids.lookup(np.array(pairs, dtype=np.int64).ravel()).reshape(-1, 2)
    return ends.min(axis=1).astype(np.int64), ends.max(axis=1).astype(np.int64)


def _keyed(us, vs, values=None) -> tuple[np.ndarray, np.ndarray]:
    """(sorted edge keys u << 32 | v, the values in the same order)."""
    keys = (np.asarray(us, np.int64) << 32) | np.asarray(vs, np.int64)
    order = np.argsort(keys)
    values = np.zeros(len(keys), np.int64) if values is None else np.asarray(values, np.int64)
    return keys[order], values[order]


def _times(graph: DynamicGraph, times: dict) -> TimeTable:
    """The timed edges' times as the engine keeps them."""
    keys = [k for k, t in times.items() if t is not None]
    table = TimeTable()
    table.set(*_keyed(*_slots(graph, keys), [times[k] for k in keys]))
    return table


def _other(graph: DynamicGraph, times: dict, keys) -> tuple[np.ndarray, np.ndarray]:
    """(sorted keys, times) of `keys` on the other side of the batch, NO_TIME for untimed."""
    keys = list(keys)
    return _keyed(*_slots(graph, keys), [NO_TIME if times[k] is None else times[k]
                                         for k in keys])


def _phase(ref_graph, times: dict, plan, window: int, updates, other_times: dict,
           refreshed, structural, search=count_windowed, **parallel) -> int:
    """One phase: the graph as `ref_graph` with `times`, from `updates` (the structural
    edges and the refreshed ones), the refreshed edges' times on the other side; `search`
    takes count_windowed's arguments."""
    graph = DynamicGraph.from_labeled(to_labeled(ref_graph))
    updates = list(updates)
    us, vs = _slots(graph, updates)
    graph.set_ranks(us.astype(np.int32), vs.astype(np.int32),
                    np.arange(1, len(us) + 1, dtype=np.int32))
    struct_keys = _keyed(*_slots(graph, structural))[0]
    return search(graph, plan, window, us, vs, _times(graph, times),
                  other=_other(graph, other_times, refreshed), structural=struct_keys,
                  **parallel).count


def _timed_batch(rng: random.Random, g, times: dict, horizon: int) -> list[tuple]:
    """Deletions, new edges and refreshes (inserts of existing edges), each maybe untimed."""
    edges = sorted(g.edges, key=sorted)
    rng.shuffle(edges)
    verts = sorted(g.vertices)
    absent = [frozenset((u, v)) for i, u in enumerate(verts) for v in verts[i + 1:]
              if frozenset((u, v)) not in g.edges]
    rng.shuffle(absent)

    def time():
        return None if rng.random() < 0.15 else rng.randint(0, horizon)

    records = []
    for key in edges[:rng.randint(0, 3)]:
        records.append((DELETE_EDGE, *sorted(key), NO_LABEL, None))
    for key in edges[3:3 + rng.randint(0, 4)]:
        records.append((INSERT_EDGE, *sorted(key), g.edges[key], time()))
    for key in absent[:rng.randint(0, 4)]:
        records.append((INSERT_EDGE, *sorted(key), rng.randrange(g.num_elabels), time()))
    rng.shuffle(records)
    return records


def random_before(rng: random.Random, num_edges: int) -> list[tuple[int, int]]:
    """0 to 2 random `before` pairs of distinct query edges (none for one edge)."""
    if num_edges < 2:
        return []
    return [tuple(rng.sample(range(num_edges), 2)) for _ in range(rng.randint(0, 2))]


def check_seed(seed: int, search=count_windowed, **parallel) -> int:
    """Four timed batches on a random graph, a random windowed query each (with random
    `before` pairs half the time): both phases, searched by `search` (count_windowed's
    arguments), against the reference; returns how many matches the phases found."""
    rng = random.Random(seed)
    g = random_graph(rng)
    horizon = 12
    times = {key: (None if rng.random() < 0.1 else rng.randint(0, horizon)) for key in g.edges}
    queries = [q for q in random_queries(rng, g).values() if q.edges]
    found = 0
    for step in range(4):
        window = rng.randint(0, horizon)
        query = rng.choice(queries)
        before = random_before(rng, len(query.edge_list())) if step % 2 else []
        plan = window_plan(to_query(query, "q"), before)
        before_graph, before_times = g.copy(), dict(times)
        tg = TimedRefGraph(g, times)
        records = _timed_batch(rng, g, times, horizon)
        delta = tg.delta(TimedQuery(query, window=window, before=before), records)
        times = tg.times
        deleted = [k for k in before_graph.edges if k not in g.edges]
        inserted = [k for k in g.edges if k not in before_graph.edges]
        refreshed = [k for k in g.edges if k in before_graph.edges
                     and before_times[k] != times[k]]
        negative = _phase(before_graph, before_times, plan, window, deleted + refreshed,
                          times, refreshed, deleted, search, **parallel)
        positive = _phase(g, times, plan, window, inserted + refreshed, before_times,
                          refreshed, inserted, search, **parallel)
        assert (positive, negative) == (len(delta.positive), len(delta.negative)), \
            (seed, step, records, window, before)
        found += positive + negative
    return found


SEEDS = range(40)


@pytest.mark.parametrize("seed", SEEDS)
def test_phases_give_the_windowed_delta_of_the_reference(seed):
    check_seed(seed)


@pytest.mark.parametrize("seed", SEEDS[:12])
def test_the_phases_counted_on_every_core_are_the_same(seed):
    """Counting only, the update edges in chunks of one on every core (count_windowed's
    parallel path; the seeds above take the serial one)."""
    check_seed(seed, parallel_from=0, chunk=1)


def test_the_random_phases_find_matches():
    """Not every case above is empty (else they could not fail)."""
    assert sum(check_seed(seed) for seed in SEEDS[:10]) > 0


def test_a_window_prunes_and_untimed_edges_are_outside_it():
    """A triangle 0-1-2 whose edges are timed 0, 5, 9: within window 9, not 8; with one
    edge untimed, within none."""
    from tests.reference import RefGraph, RefQuery
    g = RefGraph.build({0: 0, 1: 0, 2: 0}, [(0, 1, 0), (1, 2, 0), (0, 2, 0)])
    query = to_query(RefQuery.build([0, 0, 0], [(0, 1), (1, 2), (0, 2)]), "triangle")
    plan = window_plan(query)
    graph = DynamicGraph.from_labeled(to_labeled(g))
    keys = [frozenset((0, 1)), frozenset((1, 2)), frozenset((0, 2))]
    us, vs = _slots(graph, keys)
    graph.set_ranks(us.astype(np.int32), vs.astype(np.int32),
                    np.arange(1, 4, dtype=np.int32))
    timed = dict(zip(keys, [0, 5, 9], strict=True))
    assert count_windowed(graph, plan, 9, us, vs, _times(graph, timed)).count == 6
    assert count_windowed(graph, plan, 8, us, vs, _times(graph, timed)).count == 0
    # Listed: the six automorphic images, as slots in query-vertex order; a limit cuts it.
    found = count_windowed(graph, plan, 9, us, vs, _times(graph, timed), limit=10)
    assert found.count == 6 and not found.truncated
    assert sorted(map(tuple, found.rows.tolist())) == sorted(
        tuple(p) for p in itertools.permutations(graph.ids.lookup(
            np.array([0, 1, 2])).tolist()))
    cut = count_windowed(graph, plan, 9, us, vs, _times(graph, timed), limit=4)
    assert cut.count == 6 and cut.truncated and cut.rows.shape == (4, 3)
    timed[keys[1]] = None
    assert count_windowed(graph, plan, 100, us, vs, _times(graph, timed)).count == 0


def test_before_pairs_tell_automorphic_images_apart():
    """A path a - b - c, edge 0 = (a, b) before edge 1 = (b, c), on the data path 1 - 2 - 3
    timed 5 then 7: of its two images only a, b, c = 1, 2, 3 keeps the order."""
    from tests.reference import RefGraph, RefQuery
    g = RefGraph.build({1: 0, 2: 0, 3: 0}, [(1, 2, 0), (2, 3, 0)])
    query = to_query(RefQuery.build([0, 0, 0], [(0, 1), (1, 2)]), "path")
    graph = DynamicGraph.from_labeled(to_labeled(g))
    keys = [frozenset((1, 2)), frozenset((2, 3))]
    us, vs = _slots(graph, keys)
    graph.set_ranks(us.astype(np.int32), vs.astype(np.int32),
                    np.arange(1, 3, dtype=np.int32))
    times = _times(graph, dict(zip(keys, [5, 7], strict=True)))
    assert count_windowed(graph, window_plan(query), 10, us, vs, times).count == 2
    found = count_windowed(graph, window_plan(query, [(0, 1)]), 10, us, vs, times, limit=5)
    assert found.count == 1
    assert graph.ext[found.rows].tolist() == [[1, 2, 3]]
    assert count_windowed(graph, window_plan(query, [(1, 0)]), 10, us, vs,
                          times).count == 1
    assert count_windowed(graph, window_plan(query, [(0, 1), (1, 0)]), 10, us, vs,
                          times).count == 0


@pytest.mark.parametrize("before, message", [
    ([(0, 0)], "orders an edge before itself"), ([(0, 2)], "names an edge the query lacks"),
    ([(0,)], "a pair of query edge indices"), ([(0, True)], "a pair of query edge indices")])
def test_bad_before_pairs_are_refused(before, message):
    from tests.reference import RefQuery
    query = to_query(RefQuery.build([0, 0, 0], [(0, 1), (1, 2)]), "path")
    with pytest.raises(ValueError, match=message):
        window_plan(query, before)


def test_a_directed_plan_has_a_type_per_arc_and_checks_a_reciprocal_root():
    """An update arc u -> v can only be a query arc a -> b as a -> u, b -> v: one task type
    per arc (an undirected edge has two orientations); the root's reverse arc, when the
    query has one, is level 1's entry."""
    from tests.reference import RefQuery
    pair = window_plan(to_query(RefQuery.build([0, 0, 0], [(0, 1), (1, 0), (1, 2)],
                                               directed=True), "pair"))
    assert pair.directed and pair.orders.shape[0] == 3 and pair.bw_key.shape[2] == 6
    assert pair.bw_count[:, 1].tolist() == [1, 1, 0]    # (1, 2) has no reverse arc
    undirected = window_plan(to_query(RefQuery.build([0, 0, 0], [(0, 1), (1, 2)]), "path"))
    assert not undirected.directed and undirected.orders.shape[0] == 4
    assert undirected.bw_count[:, 1].tolist() == [0] * 4
