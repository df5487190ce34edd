"""Compiling (or loading from Numba's cache) every kernel an engine's batches can reach.

A service reports itself ready only after this ran, so no client's batch waits for a
compilation.  Each path of `Engine.apply` compiles its own functions on first use: the
one-edge batch (`DynamicGraph.find_edge` and the one-edge insert), the small-batch call
(fewer than `serial_below_tasks` edges, serial), the general search with its parallel
region (more tasks than that), the leaf counts and leaf groups of queries with degree-1
vertices, listing, vertex records, and the static count and listing behind a backfill.
On CUDA the packed memory array takes a small batch in one launch and a larger one
(over 1,024 directed updates) on its general path, whose CuPy kernels compile on first
use too: one batch of each kind runs, the larger with its queries' leaf tails counted
(match.cu's leaf_product and their preparation, which the engine takes only where a
parent has leaf_count_degree neighbours), and the leaf-rooted tasks grouped
(gpu/cuda/group_launchers.py, which the engine takes only over device_leaf_group_edges
update edges).  So do the kernels that settle a large batch's
edge records on the device (gpu/cuda/batch_prep.py: prep.cu's for edge records alone,
CuPy's beside vertex records): the throw-away engine sends every batch there, with an
insert and a delete of one edge cancelling both with and without vertex records.  Timed
batches (event times, refreshes, retention's expiry) and windowed queries have paths and
kernels of their own (gpu/event_time.py, gpu/graph/times.py, gpu/cpu/windowed.py, on
CUDA gpu/cuda/windowed.py): `_timed` runs them.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.records import (DELETE_EDGE, DELETE_VERTEX, INSERT_EDGE, ADD_VERTEX, NO_LABEL,
                            LabeledGraph, UpdateStream)
from gpu.plan.query import QueryGraph

_VERTICES = 80


def _ring(steps) -> tuple[np.ndarray, np.ndarray]:
    """Edges i -- i+s (mod _VERTICES) for each step s: a graph dense in triangles."""
    src = np.concatenate([np.arange(_VERTICES)] * len(steps))
    dst = np.concatenate([(np.arange(_VERTICES) + s) % _VERTICES for s in steps])
    return src, dst


def _queries(directed: bool = False) -> list[QueryGraph]:
    queries = [
        # No leaf.
        QueryGraph.build("warm-triangle", [0, 1, 2], [0, 0, 0], [(0, 1), (1, 2), (0, 2)],
                         directed=directed),
        # One leaf (leaf counts).
        QueryGraph.build("warm-tail", [0, 1, 2, 3], [0, 0, 0, 0],
                         [(0, 1), (1, 2), (0, 2), (2, 3)], directed=directed),
        # Two leaves on one parent (leaf groups).
        QueryGraph.build("warm-star", [0, 1, 2, 3, 4], [0, 0, 0, 0, 0],
                         [(0, 1), (1, 2), (0, 2), (0, 3), (0, 4)], directed=directed),
    ]
    if directed:    # a reciprocal pair: the root arc's reverse checked at level 1
        queries.append(QueryGraph.build("warm-pair", [0, 1, 2], [0, 0, 0],
                                        [(0, 1), (1, 0), (1, 2)], directed=True))
    return queries


def _edges(kind, src, dst) -> UpdateStream:
    label = 0 if kind == INSERT_EDGE else NO_LABEL
    return UpdateStream.from_records([(kind, int(a), int(b), label) for a, b in zip(src, dst)])


def _large_pair(backend: str) -> list[tuple[UpdateStream, UpdateStream]]:
    """Over 1,024 directed updates, in and out again: the packed memory array's general
    path, whose CuPy kernels compile on first use.  CUDA only: the CPU executor's lists
    take a batch of any size through the functions the 100-edge pair already compiled
    (tests/gpu/test_warm_up.py), and its four 640-edge batches took a restart's warm-up
    from 0.24 to 0.40 s on the 2-vCPU VM."""
    if backend != "cuda":
        return []
    large_src, large_dst = _ring([3, 4, 6, 8, 9, 10, 12, 14])
    return [(_edges(INSERT_EDGE, large_src, large_dst),
             _edges(DELETE_EDGE, large_src, large_dst))]


def warm_up(backend: str, config: EngineConfig | None = None, directed: bool = False) -> None:
    """Run every kind of batch once on a throw-away engine of `backend`, on a graph of the
    kind (`directed`) the engine to warm holds: on CUDA a directed one keys arcs, ranks
    list entries by direction and searches with the arcs' list keys, paths an undirected
    warm-up does not reach.  On CUDA a directed warm-up runs the undirected one
    first: the packed memory array's general path builds CuPy kernels at windows whose
    reach depends on the array's size, which the undirected graph's large pair is known to
    reach (a directed one's 2,400-entry batch met a window it had not, 2026-11-29)."""
    if directed and backend == "cuda":
        warm_up(backend, config)
    # Every batch's edge records settled on the device (CUDA): its kernels compile here.
    # Every leaf tail counted (CUDA): the tiny graph has no parent of leaf_count_degree
    # neighbours, and the counts' preparation (leaves.cu, CuPy's scans) compiled inside
    # the first large batch with a tail at a hub (0.4-0.5 s, GH, a fresh device,
    # 2026-11-29).  Every counting launch groups its leaf-rooted tasks (CUDA): groups.cu
    # and the sorts between its steps, which only launches over device_leaf_group_edges
    # update edges reach.
    config = dataclasses.replace(config or EngineConfig(), device_prep_records=1,
                                 leaf_count_degree=0, device_leaf_group_edges=1)
    src, dst = _ring([1, 2, 5])
    if directed:    # arcs i -> i + s, and the step-1 ones both ways (reciprocal pairs)
        back_src, back_dst = _ring([1])
        src, dst = np.concatenate([src, back_dst]), np.concatenate([dst, back_src])
    graph = LabeledGraph(np.arange(_VERTICES), np.zeros(_VERTICES), src, dst,
                         np.zeros(len(src)))
    engine = Engine(graph, backend=backend, config=config, directed=directed)
    qids = [engine.add_query(q) for q in _queries(directed)]
    listed = {qids[0]: 4}
    # Enough edges that every query gets more tasks than the serial threshold.
    size = max(100, config.serial_below_tasks + 1)
    more_src, more_dst = _ring([7, 11, 13])
    more_src, more_dst = more_src[:size], more_dst[:size]
    pairs = [  # (insert, delete): the same edges back out again
        (_edges(INSERT_EDGE, [0], [40]), _edges(DELETE_EDGE, [0], [40])),
        *_large_pair(backend),
        (_edges(INSERT_EDGE, more_src[:3], more_dst[:3]),
         _edges(DELETE_EDGE, more_src[:3], more_dst[:3])),
        (_edges(INSERT_EDGE, more_src, more_dst), _edges(DELETE_EDGE, more_src, more_dst)),
        # Two vertices: CuPy builds a scatter into one slot and into several apart (a
        # directed service's first batch of vertex records met the second, 2026-11-29).
        (UpdateStream.from_records([(ADD_VERTEX, 1000, 0, 0), (ADD_VERTEX, 1002, 0, 0),
                                    (INSERT_EDGE, 1000, 0, 0), (INSERT_EDGE, 1000, 1, 0)]),
         UpdateStream.from_records([(DELETE_VERTEX, 1000, 0, NO_LABEL),
                                    (DELETE_VERTEX, 1002, 0, NO_LABEL)])),
        # An insert and a delete of edge 0-40 cancel; edge 0-1 goes, then comes back.
        (UpdateStream.from_records([(INSERT_EDGE, 0, 40, 0), (DELETE_EDGE, 0, 40, NO_LABEL),
                                    (DELETE_EDGE, 0, 1, NO_LABEL)]),
         _edges(INSERT_EDGE, [0], [1])),
        # The same beside vertex records (on CUDA the generic path, not prep.cu's), then
        # a vertex deleted in the batch that inserts an edge.
        (UpdateStream.from_records([(ADD_VERTEX, 1001, 0, 0), (INSERT_EDGE, 1001, 0, 0),
                                    (INSERT_EDGE, 0, 40, 0), (DELETE_EDGE, 0, 40, NO_LABEL),
                                    (DELETE_EDGE, 0, 1, NO_LABEL)]),
         UpdateStream.from_records([(DELETE_VERTEX, 1001, 0, NO_LABEL),
                                    (INSERT_EDGE, 0, 1, 0)])),
    ]
    for list_limit in (0, listed):      # every query counted, then one of them listed
        for inserted, deleted in pairs:
            engine.apply(inserted, list_limit=list_limit)
            engine.apply(deleted, list_limit=list_limit)
    for qid in qids:
        engine.count(qid)
        engine.matches(qid, limit=4)
    _timed(backend, config, directed)


def _timed(backend: str, config: EngineConfig, directed: bool) -> None:
    """Timed batches (gpu/event_time.py) on an engine with retention: the ring's edges
    timed (refreshes, over serial_below_tasks update edges: the CPU's parallel windowed
    search), a new edge and a deletion, then a batch whose time expires the lot; with
    windowed queries standing on either kind of graph (one with a `before` pair; on CUDA
    window.cu), one counted and one listed in every batch, each then counted and listed
    whole."""
    src, dst = _ring([1, 2])
    graph = LabeledGraph(np.arange(_VERTICES), np.zeros(_VERTICES), src, dst,
                         np.zeros(len(src)))
    engine = Engine(graph, backend=backend, config=config, directed=directed,
                    retention=1_000)
    queries = _queries(directed)
    qids = [engine.add_query(queries[0]),
            engine.add_query(queries[0], window=50),
            engine.add_query(queries[1], window=50, before=[(0, 1)])]
    timed = [(INSERT_EDGE, int(a), int(b), 0, i % 40) for i, (a, b) in
             enumerate(zip(src, dst))]
    for records in (timed, [(INSERT_EDGE, 0, 40, 0, 45), (DELETE_EDGE, 0, 1, NO_LABEL)],
                    [(INSERT_EDGE, 0, 1, 0, 46)], [(INSERT_EDGE, 3, 41, 0, 2_000)]):
        engine.apply(UpdateStream.from_records(records), list_limit={qids[-1]: 4})
    for qid in qids[1:]:
        engine.count(qid)
        engine.matches(qid, limit=4)
