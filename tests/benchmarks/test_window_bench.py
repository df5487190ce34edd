"""benchmarks/window_bench.py's runs (retention_bench.run with a window) on a small random
graph: a window wider than the stream takes every match, so the windowed engine's counts
are the unwindowed one's; a narrow one takes fewer; the deltas sum to the final count."""
from __future__ import annotations

import pytest

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


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_directed_runs_count_the_cycles_a_wide_window_keeps_all_of(backend):
    """--directed: the same stream as arcs (orient), a directed 3-cycle standing; a window
    wider than the stream takes every match, a narrow one fewer."""
    from benchmarks.directed_table import orient
    graph = orient(_graph(), 0)
    cycle = QueryGraph.build("cycle", [0, 1, 2], [0, 0, 0], [(0, 1), (1, 2), (2, 0)],
                             directed=True)
    batches = timed_batches(graph, 20)
    keys = ("positive", "negative", "final_matches")
    plain = run(graph, [cycle], batches, None, backend, directed=True)
    wide = run(graph, [cycle], batches, None, backend, window=graph.num_edges, directed=True)
    narrow = run(graph, [cycle], batches, None, backend, window=15, directed=True)
    assert [wide[k] for k in keys] == [plain[k] for k in keys] and plain["positive"] > 0
    assert plain["positive"] > narrow["positive"]


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_split_times_the_windowed_phases_subgraphs_and_searches_only_while_on(backend):
    """window_bench --split: per steady batch, the windowed phases' subgraph fills and
    host searches take time on the CPU executor, the device's searches on CUDA, an
    unwindowed run calls none, and the functions are the originals again afterwards."""
    from benchmarks.window_bench import SPLIT, PhaseSplit
    from gpu import event_time

    graph = _graph()
    triangle = QueryGraph.build("triangle", [0, 1, 2], [0, 0, 0], [(0, 1), (1, 2), (2, 0)])
    batches = timed_batches(graph, 20)
    originals = {name: getattr(event_time, name) for name in SPLIT.values()}
    for window, timed in ((15, True), (None, False)):
        split = PhaseSplit()
        with split.timing():
            record = run(graph, [triangle], batches, 120, backend, window=window,
                         after_batch=split.after_batch)
        assert len(split.steady) == record["steady_batches"] > 0
        for part in SPLIT:
            spent = [b[part] for b in split.steady]
            assert all(s >= 0 for s in spent)
            used = part == "device searches" if backend == "cuda" else \
                part != "device searches"
            assert (sum(spent) > 0) == (timed and used), (window, part)
        assert {name: getattr(event_time, name) for name in SPLIT.values()} == originals
