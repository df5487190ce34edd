"""The shared call: one compiled call counts every counted query of a phase
(Engine._count_shared), handing single queries back to the general path: count_small
(serial, small batches) or count_phase (one parallel region, heavy tasks in pieces).

A spy runs the call again on each query alone and checks its count equals the shared
call's; a second engine with `serial_below_tasks=1` (never the small path) and the
brute-force matcher check the deltas.  Many queries of different sizes and shapes stand
at once, several with automorphisms (one label: triangle, square, K4, star), and some are
listed, so the shared list is a changing subset of the standing queries.
"""
from __future__ import annotations

import random
from types import SimpleNamespace

import numba
import numpy as np
import pytest
from numba.typed import List

import gpu.cpu.phases
import gpu.cpu.executor
from gpu.config import EngineConfig
from gpu.engine import Engine
from tests.gpu.cpu.test_leaf_groups import PATTERNS, hub_batch, hub_data
from tests.gpu.cpu.test_small_batches import _check_batch
from gpu.io.records import DELETE_EDGE, INSERT_EDGE, NO_LABEL, UpdateStream
from tests.graphs import Pattern, embeddings, random_batch, random_data

SYMMETRIC = {
    "triangle": Pattern([0, 0, 0], [(0, 1), (1, 2), (0, 2)]),
    "square": Pattern([0, 0, 0, 0], [(0, 1), (1, 2), (2, 3), (0, 3)]),
    "k4": Pattern([0, 0, 0, 0], [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]),
    "star4": Pattern([1, 0, 0, 0, 0], [(0, 1), (0, 2), (0, 3), (0, 4)]),
    "two_triangles": Pattern([0, 0, 0, 0, 0], [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4),
                                               (2, 4)]),
}

# The regions' workers share tasks, pieces and given records: several threads at once.
REGION = pytest.mark.parallel


@pytest.fixture(params=["serial", *(pytest.param(mode, marks=REGION) for mode in (
    "region", "region_split", "region_give", "region_give_full"))])
def shared_spy(request, monkeypatch):
    """One of the shared call's compiled functions, spied on: count_small (serial, fewer
    than serial_below_tasks edges) or count_phase (a parallel region, any phase; with
    region_split every task runs as pieces; with region_give the searches give half of
    their open candidates to the work queue at every advance, whether or not a worker
    waits, and with region_give_full also split, into a queue with room for two records
    more than the pieces, so that most gives find it full).  Checks every shared call
    against one call per query, and records (queries in the call, their totals) and the
    edges of each call; `config(**overrides)` gives an EngineConfig that selects the
    function.  In the give modes some region must have given records."""
    seen: list[tuple[int, list[int]]] = []
    edges: list[int] = []
    given: list[int] = []
    mode = request.param
    name = "count_small" if mode == "serial" else "count_phase"
    if mode in ("region_split", "region_give_full"):
        # Every task heavy, and the share of the phase that makes a piece tiny: nearly
        # every task is split, most into many pieces.
        monkeypatch.setattr(gpu.cpu.executor, "HEAVY_TASK_WEIGHT", 0)
        monkeypatch.setattr(gpu.cpu.executor, "PIECES_PER_THREAD", 50)
    if mode.startswith("region_give"):
        monkeypatch.setattr(gpu.cpu.executor, "SHARE_ALWAYS", True)
        monkeypatch.setattr(gpu.cpu.executor, "SHARE_EVERY", 1)
        monkeypatch.setattr(gpu.cpu.executor, "SHARE_ROOM", 2 if mode.endswith("full") else 1000)
    real = getattr(gpu.cpu.phases, name)

    def spy(queries, *rest):
        if name == "count_phase":
            # A trace with room for the whole queue (up to a bound): records beyond the
            # pieces were given.
            tasks = sum(len(query[0]) for query in queries) * len(rest[0])
            rows = tasks * gpu.cpu.executor.PIECES_PER_THREAD * numba.get_num_threads() + 1002
            trace = np.zeros((min(rows, 200_000), 6), dtype=np.int64)
            rest = rest[:-1] + (trace,)
        result = real(queries, *rest)
        # Per query and batch (one batch per call here: Engine.apply): column 0.
        totals = result[:, 0].tolist()
        if name == "count_phase":
            given.append(int(trace[0, 0] - trace[0, 2]))
        for q in range(len(queries)):
            alone = List.empty_list(numba.typeof(queries).item_type)
            alone.append(queries[q])
            assert real(alone, *rest)[:, 0].tolist() == [totals[q]], q
        seen.append((len(queries), totals))
        edges.append(len(rest[0]))
        return result

    monkeypatch.setattr(gpu.cpu.phases, name, spy)
    serial = mode == "serial"

    def config(**overrides) -> EngineConfig:
        # Region modes: every phase of serial_below_tasks edges or more is a region (1:
        # every phase), and with region_split every phase (every edge is heavy).
        mode = ({"shared_region_threads": 0} if serial else
                {"shared_region_threads": 1, "serial_below_tasks": 1})
        return EngineConfig(**{**mode, **overrides})

    yield SimpleNamespace(seen=seen, edges=edges, serial=serial, config=config)
    if mode.startswith("region_give") and seen:
        assert max(given) > 0, "no region gave a record"
        if mode.endswith("full"):
            assert max(given) <= 2


def _patterns(nlabels: int, nelabels: int) -> list[Pattern]:
    out = []
    for name in sorted(PATTERNS):
        p = PATTERNS[name]
        if max(p.edges.values()) < nelabels:
            out.append(Pattern([lab % nlabels for lab in p.labels],
                               [(a, b, lab) for (a, b), lab in p.edges.items()]))
    return out + [SYMMETRIC[name] for name in sorted(SYMMETRIC)
                  if max(SYMMETRIC[name].labels) < nlabels]


def _run(d, batches, nlabels: int, nelabels: int, config: EngineConfig, listed_every: int):
    """Applies `batches` (a function of the data, changing it) to both engines and checks
    every query's counts; every `listed_every`-th query is listed."""
    shared = Engine(d.labeled(), backend="cpu", config=config)
    general = Engine(d.labeled(), backend="cpu", config=EngineConfig(serial_below_tasks=1,
                                                                        shared_call=False))
    patterns = {}
    for p in _patterns(nlabels, nelabels):
        qid = shared.add_query(p.query())
        assert general.add_query(p.query()) == qid
        patterns[qid] = p
    limits = {qid: 1000 if i % listed_every == listed_every - 1 else 0
              for i, qid in enumerate(patterns)}
    before = {qid: embeddings(d, p) for qid, p in patterns.items()}
    for batch in batches(d):
        before, res = _check_batch(shared, general, patterns, d, batch, before, limits)
        assert all(res.queries[qid].seconds >= 0 for qid in patterns)
    shared.check()
    return len(patterns), limits


# Seeds 0-3 cover every label and edge-label count and both leaf_group_min values; 4 and 5
# repeat them on other random graphs.
@pytest.mark.parametrize("seed", [*range(4), *(pytest.param(s, marks=pytest.mark.slow)
                                               for s in (4, 5))])
def test_random_batches_match_per_query_and_brute_force(shared_spy, seed):
    rng = random.Random(seed)
    nlabels, nelabels = 1 + seed % 2, 1 + seed // 2 % 2
    d = random_data(rng, 12, nlabels, nelabels, 0.3)
    next_id = [1000]
    config = shared_spy.config(leaf_group_min=2 + seed % 2)
    count, limits = _run(d, lambda d: (random_batch(rng, d, nlabels, nelabels, next_id)
                                       for _ in range(12)), nlabels, nelabels, config, 4)
    counted = sum(1 for limit in limits.values() if limit <= 0)
    assert count > counted > 1
    # Every counted query went into one call together, and some were counted there.
    assert shared_spy.seen and all(n == counted for n, _ in shared_spy.seen)
    assert any(total > 0 for _, totals in shared_spy.seen for total in totals)


def test_hub_batches_hand_single_queries_back(shared_spy):
    """Around two hubs a leaf group forms for some queries of a call but not for others:
    those are handed back alone, the rest counted together."""
    rng = random.Random(5)
    d = hub_data(rng, 13, 1, 1)
    _run(d, lambda d: (hub_batch(rng, d, 1) for _ in range(25)), 1, 1,
         shared_spy.config(), 1000)
    mixed = [totals for _, totals in shared_spy.seen
             if -1 in totals and any(total > 0 for total in totals)]
    assert mixed, "no call both handed a query back and counted another's matches"


def test_large_batches(shared_spy):
    """Batches of ~40 edges with serial_below_tasks=8: count_small hands them to the
    general path, count_phase counts them itself; the counts are the same."""
    rng = random.Random(17)
    d = random_data(rng, 30, 2, 1, 0.15)

    def batches(d):
        for _ in range(4):
            absent = [(a, b) for a in d.vertices for b in d.vertices
                      if a < b and frozenset((a, b)) not in d.edges]
            added = dict.fromkeys(frozenset(e) for e in rng.sample(absent, 40))
            gone = set(rng.sample(sorted(d.edges, key=sorted), 10))
            d.change(set(), {}, gone, {k: 0 for k in added})
            yield UpdateStream.from_records(
                [(INSERT_EDGE, *sorted(k), 0) for k in added] +
                [(DELETE_EDGE, *sorted(k), NO_LABEL) for k in gone])

    _run(d, batches, 2, 1, shared_spy.config(serial_below_tasks=8), 1000)
    if not shared_spy.serial:
        assert max(shared_spy.edges) >= 40, "count_phase never took a large phase"
    else:
        assert max(shared_spy.edges, default=0) < 8, "count_small took a large phase"
