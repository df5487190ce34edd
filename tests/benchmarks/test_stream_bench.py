"""End-to-end tests of the streaming benchmark on a tiny graph: records complete, counts exact."""

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from benchmarks.stream_bench import main, mixed_batches
from gpu.engine import Engine
from gpu.io.graphs import load_graph, read_query
from gpu.io.records import INSERT_EDGE, LabeledGraph
from gpu.io.streams import split_stream
from gpu.plan.query import QueryGraph

SEED = 3
NUM_LABELS = 2
RATES = [0.04, 0.1]
MIXED = {"batch": 10, "batches": 4, "insert_share": 0.5}
# 10 x 3 edges exceed the ~25 held-out ones: the size-10 batches restart once.
LATENCY = {1: 4, 10: 3}
HEADER_KEYS = {"date", "command", "machine", "backend", "experiment", "graph", "num_labels",
               "label_seed", "seed", "query_size", "queries_dir"}


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory) -> Path:
    # Rewired cliques: dense pockets for dense queries, sparse bridges for the rest.
    g = nx.relaxed_caveman_graph(12, 7, 0.25, seed=3)
    path = tmp_path_factory.mktemp("graph") / "edges.csv"
    path.write_text("source,target\n" + "".join(f"{u},{v}\n" for u, v in g.edges))
    return path


def _args(graph_file: Path, queries_dir: Path, *extra: str) -> list[str]:
    return ["--graph", str(graph_file), "--num-labels", str(NUM_LABELS), "--seed", str(SEED),
            "--size", "4", "--per-set", "2", "--queries-dir", str(queries_dir),
            "--backend", "cpu", *extra]


@pytest.fixture(scope="module")
def run(graph_file, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    out = tmp / "stream.jsonl"
    argv = _args(graph_file, tmp / "queries", "--check", "--json", str(out),
                 "--rates", *map(str, RATES),
                 "--mixed-batch", str(MIXED["batch"]), "--mixed-batches", str(MIXED["batches"]),
                 "--mixed-insert-share", str(MIXED["insert_share"]),
                 "--latency-sizes", *map(str, LATENCY), "--latency-batches",
                 *map(str, LATENCY.values()))
    assert main(argv) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return records, load_graph(graph_file, num_labels=NUM_LABELS, seed=0)


def _count(graph: LabeledGraph, query_path: str) -> int:
    engine = Engine(graph, backend="cpu")
    p = Path(query_path)
    return engine.count(engine.add_query(QueryGraph.from_labeled(read_query(p), p.stem)))


def _with_edges(graph: LabeledGraph, src, dst, labels) -> LabeledGraph:
    return LabeledGraph(graph.vertex_ids, graph.vertex_labels,
                        np.concatenate([graph.edge_src, src]),
                        np.concatenate([graph.edge_dst, dst]),
                        np.concatenate([graph.edge_labels, labels]))


def _of(records, experiment):
    return [r for r in records if r["experiment"] == experiment]


def test_every_measurement_is_recorded_with_its_provenance(run):
    records, _ = run
    assert {(r["rate"], r["kind"], r["index"]) for r in _of(records, "rate")} == {
        (rate, kind, i) for rate in RATES for kind in ("dense", "sparse", "tree")
        for i in range(2)}
    assert sorted(r["kind"] for r in _of(records, "mixed")) == ["dense", "sparse", "tree"]
    assert {(r["kind"], r["batch_size"], r["batches"]) for r in _of(records, "latency")} == {
        (kind, size, n) for kind in ("dense", "sparse", "tree") for size, n in LATENCY.items()}
    for r in records:
        assert HEADER_KEYS <= r.keys()
        assert r["backend"] == "cpu" and r["check"] is True
        assert "benchmarks.stream_bench" in r["command"]
    for r in _of(records, "rate"):
        assert r["rates"] == RATES
        assert {"seconds", "match_seconds", "wall_seconds", "query_seconds"} <= r.keys()
    for r in _of(records, "mixed") + _of(records, "latency"):
        assert len(r["batch_seconds"]) == r["batches"] and r["queries"] == 2
        assert r["seconds_p50"] <= r["seconds_p99"]
        assert set(r["timings_mean"]) == {"validate", "match", "update"}
    assert [r["resets"] for r in _of(records, "latency")] == [0, 1] * 3


def test_rate_counts_are_static_count_differences(run):
    records, graph = run
    for r in _of(records, "rate"):
        initial, batch = split_stream(graph, r["rate"], SEED)
        assert r["batch"] == len(batch)
        after = _with_edges(initial, batch.a, batch.b, batch.label)
        assert r["positive"] == _count(after, r["query"]) - _count(initial, r["query"])
        assert r["negative"] == 0


def test_mixed_counts_are_static_count_differences(run):
    records, graph = run
    initial, held_out = split_stream(graph, 0.1, SEED)
    # Replay the stream on a plain edge set, independently of the engine's graph.
    edges = {(min(u, v), max(u, v)): lab for u, v, lab in
             zip(initial.edge_src.tolist(), initial.edge_dst.tolist(),
                 initial.edge_labels.tolist())}
    inserted = deleted = 0
    for batch in mixed_batches(initial, held_out, MIXED["batch"], MIXED["batches"],
                               MIXED["insert_share"], SEED):
        assert len(batch) == MIXED["batch"]
        for kind, u, v, lab in zip(batch.kind, batch.a.tolist(), batch.b.tolist(),
                                   batch.label.tolist()):
            key = (min(u, v), max(u, v))
            if kind == INSERT_EDGE:
                assert key not in edges
                edges[key], inserted = lab, inserted + 1
            else:
                del edges[key]
                deleted += 1
    assert inserted == deleted == MIXED["batch"] * MIXED["batches"] // 2
    ends = np.array(list(edges), dtype=np.int64).reshape(-1, 2)
    final = LabeledGraph(graph.vertex_ids, graph.vertex_labels, ends[:, 0], ends[:, 1],
                         np.array(list(edges.values()), dtype=np.int32))
    for r in _of(records, "mixed"):
        assert (r["inserted"], r["deleted"]) == (inserted, deleted)
        for q in r["per_query"]:
            assert q["positive"] - q["negative"] == (_count(final, q["query"])
                                                     - _count(initial, q["query"]))
        assert r["count_start"] == _count(initial, r["per_query"][0]["query"])
        assert r["positive"] == sum(q["positive"] for q in r["per_query"])


def test_latency_counts_are_static_count_differences(run):
    records, graph = run
    initial, held_out = split_stream(graph, 0.1, SEED)
    for r in _of(records, "latency"):
        size = r["batch_size"]
        per_segment = len(held_out) // size
        segments = [min(per_segment, r["batches"] - first)
                    for first in range(0, r["batches"], per_segment)]
        for q in r["per_query"]:
            before = _count(initial, q["query"])
            # Each segment inserts a prefix of the held-out edges into the graph minus 10%.
            expected = sum(
                _count(_with_edges(initial, held_out.a[: n * size], held_out.b[: n * size],
                                   held_out.label[: n * size]), q["query"]) - before
                for n in segments)
            assert (q["positive"], q["negative"]) == (expected, 0)


def test_prints_one_table_per_experiment(graph_file, tmp_path, capsys):
    queries = tmp_path / "queries"
    assert main(_args(graph_file, queries, "--kinds", "dense", "--max-queries", "1",
                      "--experiments", "latency", "rate", "--rates", "0.05",
                      "--latency-sizes", "2", "--latency-batches", "2")) == 0
    out = capsys.readouterr().out
    assert "command: " in out and "backend: cpu" in out
    assert out.index("## latency") < out.index("## rate") and "## mixed" not in out
    assert "| rate | query set | queries | batch |" in out
    assert "| 5% | dense | 1 |" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["--latency-sizes", "1", "10", "--latency-batches", "3"], "one count per"),
    (["--rates", "1.5"], "--rates"),
    (["--mixed-insert-share", "2"], "--mixed-insert-share"),
])
def test_rejects_inconsistent_options(graph_file, tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit) as exc:
        main(_args(graph_file, tmp_path / "queries", *extra))
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_rejects_a_latency_batch_larger_than_the_held_out_edges(graph_file, tmp_path):
    with pytest.raises(SystemExit, match="held-out edges"):
        main(_args(graph_file, tmp_path / "queries", "--kinds", "tree", "--max-queries", "1",
                   "--experiments", "latency", "--latency-sizes", "1000",
                   "--latency-batches", "1"))


def test_pipeline_runs_the_same_batches_both_ways_with_equal_counts(run):
    records, graph = run
    held = len(split_stream(graph, 0.1, SEED)[1])
    got = {(r["kind"], r["batch_size"]): r for r in _of(records, "pipeline")}
    assert set(got) == {(kind, size) for kind in ("dense", "sparse", "tree")
                        for size in LATENCY}
    for (_, size), r in got.items():
        assert r["batches"] == min(LATENCY[size], held // size)
        assert r["check"] is True
        assert r["apply_batches_per_s"] > 0 and r["apply_stream_batches_per_s"] > 0
        assert r["speedup"] == pytest.approx(r["apply_stream_batches_per_s"]
                                             / r["apply_batches_per_s"])
