"""Counted leaf tails on the CUDA executor (match.cu leaf_product, leaves.cu) against the
same search with every level enumerated and against the CPU executor.

The queries are trees and trees on a cycle whose trailing leaves share a parent, label
and edge label (a falling factorial), differ in edge label or label (disjoint sets), or
follow a head level; the graph has hubs (many update edges at one vertex, whose
total-order rank decides which of them a task may add back) and two edge labels.
Batches insert, delete, come one edge at a time, and run in slices of a few pairs (the
update edges of other slices still ranked), and static counts search with no ranks.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.records import DELETE_EDGE, LabeledGraph, UpdateStream
from gpu.io.streams import split_stream
from gpu.plan.query import QueryGraph
from tests.graphs import skewed_graph

pytestmark = pytest.mark.gpu

# (edges, vertex labels, edge labels)
TREES = {
    "star3": ([(0, 1), (0, 2), (0, 3)], [0, 1, 1, 1], [0, 0, 0]),
    "star3_mixed": ([(0, 1), (0, 2), (0, 3)], [0, 1, 1, 0], [0, 1, 0]),
    "path4": ([(0, 1), (1, 2), (2, 3)], [0, 1, 0, 1], [0, 0, 1]),
    "spider": ([(0, 1), (1, 2), (1, 3), (0, 4), (4, 5)], [1, 0, 1, 1, 0, 1],
               [0, 0, 0, 1, 0]),
    "tailed_triangle": ([(0, 1), (1, 2), (0, 2), (2, 3), (2, 4)], [0, 1, 0, 1, 1],
                        [0, 0, 0, 0, 0]),
    "square_leaves": ([(0, 1), (1, 2), (2, 3), (3, 0), (0, 4), (2, 5)],
                      [0, 1, 0, 1, 1, 1], [0, 0, 0, 0, 0, 1]),
}


def tree_queries() -> list[QueryGraph]:
    out = []
    for name, (edges, labels, elabs) in TREES.items():
        n = len(labels)
        out.append(QueryGraph.build(name, np.arange(n), labels, edges, elabs))
    return out


def labelled_graph(seed: int) -> LabeledGraph:
    """skewed_graph with two vertex labels and two edge labels."""
    g = skewed_graph(seed, n=500, hubs=5, labels=2)
    rng = np.random.default_rng(seed + 100)
    return LabeledGraph(g.vertex_ids, g.vertex_labels, g.edge_src, g.edge_dst,
                        rng.integers(0, 2, len(g.edge_src)).astype(np.int32))


def deltas(result) -> dict[int, tuple[int, int]]:
    return {qid: (d.positive, d.negative) for qid, d in result.queries.items()}


def one_edge_streams(stream: UpdateStream, count: int):
    for i in range(min(count, len(stream))):
        yield UpdateStream(stream.kind[i:i + 1], stream.a[i:i + 1], stream.b[i:i + 1],
                           stream.label[i:i + 1], stream.line[i:i + 1], "one")


# leaf_count_degree 0: every tail counted, however few neighbours its parent has.
@pytest.mark.parametrize("config", [EngineConfig(leaf_count_degree=0),
                                    EngineConfig(leaf_count_degree=0, launch_pairs=7),
                                    EngineConfig(leaf_count_degree=0, device_graph="lists"),
                                    EngineConfig(leaf_count_degree=0, small_phase_edges=0),
                                    EngineConfig()],
                         ids=["view", "slices", "lists", "no-small-phases", "default"])
def test_counted_leaves_equal_enumerated_and_cpu(config):
    full = labelled_graph(5)
    initial, stream = split_stream(full, 0.25, 5)
    engines = [Engine(initial, backend="cpu"),
               Engine(initial, backend="cuda", config=config),
               Engine(initial, backend="cuda",
                      config=dataclasses.replace(config, leaf_counts=False))]
    for q in tree_queries():
        assert len({e.add_query(q) for e in engines}) == 1
    half, ones = len(stream) // 2, 12

    def part(lo, hi, name):
        return UpdateStream(stream.kind[lo:hi], stream.a[lo:hi], stream.b[lo:hi],
                            stream.label[lo:hi], stream.line[lo:hi], name)

    first = part(0, half, "first")
    undo = UpdateStream(np.full(half, DELETE_EDGE), stream.a[:half], stream.b[:half],
                        stream.label[:half], stream.line[:half], "undo")
    batches = [first, undo, first, *one_edge_streams(part(half, half + ones, "ones"), ones),
               part(half + ones, len(stream), "rest")]
    for batch in batches:
        got = [deltas(e.apply(batch)) for e in engines]
        assert got[1] == got[0] and got[2] == got[0], batch.source
    for qid in engines[0].query_ids():
        assert engines[1].count(qid) == engines[0].count(qid) == engines[2].count(qid)
    for e in engines:
        e.check()


@pytest.mark.parametrize("cache_bytes, counted", [(0, False), (1 << 30, True)])
def test_a_launch_counts_leaves_only_while_their_cache_fits_its_bound(monkeypatch, cache_bytes,
                                                                      counted):
    """EngineConfig.leaf_cache_bytes: a launch whose leaf totals would not fit enumerates
    its tails (no PhaseLeaves made), with the same counts."""
    from gpu.cuda import match_launchers
    made = []
    real = match_launchers.PhaseLeaves

    def spy(*args, **kwargs):
        made.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(match_launchers, "PhaseLeaves", spy)
    full = labelled_graph(6)
    initial, stream = split_stream(full, 0.25, 6)
    config = EngineConfig(leaf_count_degree=0, small_phase_edges=0,
                          leaf_cache_bytes=cache_bytes)
    engines = [Engine(initial, backend="cpu"), Engine(initial, backend="cuda", config=config)]
    for q in tree_queries():
        assert len({e.add_query(q) for e in engines}) == 1
    got = [deltas(e.apply(stream)) for e in engines]
    assert got[1] == got[0]
    assert bool(made) == counted
    engines[1].check()
