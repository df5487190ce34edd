"""benchmarks/window_bench.py's runs (retention_bench.run with a window) on a small random
graph: a window wider than the stream takes every match, so the windowed engine's counts
are the unwindowed one's; a narrow one takes fewer; the deltas sum to the final count."""
from __future__ import annotations

from benchmarks.retention_bench import run, timed_batches
from gpu.plan.query import QueryGraph
from tests.benchmarks.test_retention_bench import _graph


def test_a_window_wider_than_the_stream_counts_every_match_and_a_narrow_one_fewer():
    graph = _graph()
    triangle = QueryGraph.build("triangle", [0, 1, 2], [0, 0, 0], [(0, 1), (1, 2), (2, 0)])
    batches = timed_batches(graph, 20)
    keys = ("positive", "negative", "expired", "final_matches")
    for retention in (None, 120):
        plain = run(graph, [triangle], batches, retention, "cpu")
        wide = run(graph, [triangle], batches, retention, "cpu", window=graph.num_edges)
        narrow = run(graph, [triangle], batches, retention, "cpu", window=15)
        assert [wide[k] for k in keys] == [plain[k] for k in keys]
        assert plain["positive"] > narrow["positive"] > 0
        for record in (plain, wide, narrow):
            assert record["positive"] - record["negative"] == record["final_matches"]
            assert record["match_p50_ms"] is not None
