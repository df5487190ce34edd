"""benchmarks/retention_bench.py on a small random graph: the window holds, every match
created is destroyed once (the deltas sum to the final count), and expiry shows up."""
from __future__ import annotations

import numpy as np

from benchmarks.retention_bench import run, timed_batches
from gpu.io.records import LabeledGraph
from gpu.plan.query import QueryGraph


def _graph(n: int = 40, m: int = 300, seed: int = 3) -> LabeledGraph:
    rng = np.random.default_rng(seed)
    pairs = {tuple(sorted(rng.choice(n, 2, replace=False).tolist())) for _ in range(m)}
    src, dst = (np.array(side) for side in zip(*sorted(pairs), strict=True))
    return LabeledGraph(np.arange(n), np.zeros(n, dtype=np.int32), src, dst,
                        np.zeros(len(src), dtype=np.int32))


def test_a_sliding_window_of_the_stream_is_held_and_matched_exactly():
    graph = _graph()
    triangle = QueryGraph.build("triangle", [0, 1, 2], [0, 0, 0], [(0, 1), (1, 2), (2, 0)])
    batches = timed_batches(graph, 20)
    assert np.array_equal(np.concatenate([b.time for b in batches]),
                          np.arange(graph.num_edges))
    kept = run(graph, [triangle], batches, None, "cpu")
    assert kept["edges_held"] == graph.num_edges and kept["expired"] == 0
    window = run(graph, [triangle], batches, 60, "cpu")
    # Times 0..m-1: after the last batch the edges timed > m - 1 - 60 remain.
    assert window["edges_held"] == 60
    assert window["expired"] > 0 and window["expired_per_batch"] > 0
    for record in (kept, window):
        assert record["positive"] - record["negative"] == record["final_matches"]
    assert window["steady_batches"] < kept["steady_batches"] == len(batches)
