"""Retention on a timed stream (issue 23): per-batch latency and the cost of expiry as the
retained window grows.

    python -m benchmarks.retention_bench [--graph G] [--batch 1000] [--windows 20000 80000]
        [--kinds dense --queries 3] [--backend cpu|cuda] [--json FILE]

A transaction-like stream: the GH graph's edges (5 random labels, as gh_table) arrive in a
random order, edge i with event time i, in batches of `--batch`, onto the graph's vertices
with no edge; the first `--queries` saved queries of each kind stand.  Each window W runs
the whole stream on a fresh engine with `retention=W` (and once with none): once the
watermark passes W every batch expires about as many edges as it inserts, so the graph
holds a sliding window of the stream.  Per run: the median and p99 `Engine.apply` wall of
the batches after the first W edges (the steady state), the edges expired per batch, the
edges held at the end, and the matches (positive, negative, expired) summed.  The batches
run in the same order on every engine.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.gh_table import DEFAULT_GRAPH, run_header
from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.graphs import load_graph, read_query
from gpu.io.records import INSERT_EDGE, LabeledGraph, UpdateStream
from gpu.plan.query import QueryGraph

REPO = Path(__file__).resolve().parents[1]


def timed_batches(graph: LabeledGraph, size: int, seed: int = 0) -> list[UpdateStream]:
    """The graph's edges in a random order, edge i timed i, in batches of `size`."""
    order = np.random.default_rng(seed).permutation(graph.num_edges)
    out = []
    for lo in range(0, len(order), size):
        take = order[lo:lo + size]
        n = len(take)
        out.append(UpdateStream(np.full(n, INSERT_EDGE), graph.edge_src[take],
                                graph.edge_dst[take], graph.edge_labels[take],
                                np.arange(1, n + 1), f"batch {lo // size}",
                                np.arange(lo, lo + n, dtype=np.int64)))
    return out


def run(graph: LabeledGraph, queries: list[QueryGraph], batches: list[UpdateStream],
        retention: int | None, backend: str, window: int | None = None,
        after_batch: Callable[[bool], None] | None = None,
        config: EngineConfig | None = None, directed: bool = False) -> dict:
    """The stream on a fresh engine with this retention (the queries standing with this
    window: benchmarks/window_bench.py); steady-state latency and counts.  `after_batch`
    is called after each batch with whether it is a steady-state one (window_bench's
    split of the matching phase); `config` the engine's (None: the default); `directed`: the
    graph's kind (the queries must be of it)."""
    empty = LabeledGraph(graph.vertex_ids, graph.vertex_labels, [], [], [])
    engine = Engine(empty, backend=backend, retention=retention, config=config,
                    directed=directed)
    for q in queries:
        engine.add_query(q, window=window)
    seconds, matching, expired_edges = [], [], []
    totals = {"positive": 0, "negative": 0, "expired": 0}
    held_before = 0
    for i, batch in enumerate(batches):
        t0 = time.perf_counter()
        result = engine.apply(batch)
        wall = time.perf_counter() - t0
        held = engine.graph.num_edges
        inserted = result.applied["edges_inserted"]
        expired_edges.append(held_before + inserted - held)
        held_before = held
        for delta in result.queries.values():
            totals["positive"] += delta.positive
            totals["negative"] += delta.negative
            totals["expired"] += delta.expired or 0
        # The steady state: the window filled (every batch without retention).
        steady_batch = retention is None or (i + 1) * len(batches[0]) > retention
        if steady_batch:
            seconds.append(wall)
            matching.append(result.timings.get("match", 0.0))
        if after_batch is not None:
            after_batch(steady_batch)
    steady = sorted(seconds)
    expiring = expired_edges[-len(steady):] if steady else []
    return {"retention": retention, "batches": len(batches), "steady_batches": len(steady),
            "p50_ms": round(statistics.median(steady) * 1e3, 3) if steady else None,
            "p99_ms": round(steady[min(len(steady) - 1, round(0.99 * (len(steady) - 1)))]
                            * 1e3, 3) if steady else None,
            # One phase of the batch: the queries' matching (Engine.apply's "match" timing).
            "match_p50_ms": round(statistics.median(matching) * 1e3, 3) if matching else None,
            "expired_per_batch": round(float(np.mean(expiring)), 1) if expiring else 0.0,
            "edges_held": engine.graph.num_edges,
            "final_matches": sum(engine.count(qid) for qid in
                                 engine.query_ids() + engine.windowed_ids()), **totals}


def add_stream_args(p: argparse.ArgumentParser) -> None:
    """The stream's and the standing queries' options (window_bench takes them too)."""
    p.add_argument("--graph", type=Path, default=DEFAULT_GRAPH)
    p.add_argument("--queries-dir", type=Path,
                   default=REPO / "bench-out" / "queries" / "gh_k6_seed0_labels5x0")
    p.add_argument("--kinds", nargs="+", default=["dense"])
    p.add_argument("--queries", type=int, default=3, help="queries of each kind standing")
    p.add_argument("--batch", type=int, default=1000, help="edges per batch")
    p.add_argument("--directed", action="store_true",
                   help="GH's edges as arcs (each oriented by seed 0, as directed_table's "
                        "default), the queries from --queries-dir's _directed0 sibling")


def load_stream(args) -> tuple[LabeledGraph, list[QueryGraph], list[UpdateStream]]:
    """(the graph, the standing queries, the timed batches) of add_stream_args' options."""
    graph = load_graph(args.graph, num_labels=5, seed=0)
    folder = args.queries_dir
    if getattr(args, "directed", False):
        from benchmarks.directed_table import orient
        graph = orient(graph, 0)
        folder = folder.with_name(f"{folder.name}_directed0")
    queries = [QueryGraph.from_labeled(read_query(path), path.stem,
                                       directed=getattr(args, "directed", False))
               for kind in args.kinds for path in
               (folder / f"{kind}_{i}.graph" for i in range(args.queries))]
    return graph, queries, timed_batches(graph, args.batch)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.retention_bench",
                                description=__doc__.split("\n", 1)[0])
    add_stream_args(p)
    p.add_argument("--windows", type=int, nargs="+", default=[20_000, 80_000],
                   help="retention windows (event times are edge positions)")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    header = run_header(args.backend, "benchmarks.retention_bench")
    print(json.dumps(header), flush=True)
    graph, queries, batches = load_stream(args)
    run(graph, queries, batches[:3], None, args.backend,       # compiles: not timed
        directed=args.directed)
    # positive - negative summed over the stream is the matches at its end: checked per run.
    print("| retention | steady batches | p50 ms | p99 ms | expired edges/batch | edges held "
          "| positive | negative | expired |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for retention in [None, *args.windows]:
        record = run(graph, queries, batches, retention, args.backend,
                     directed=args.directed)
        assert record["positive"] - record["negative"] == record["final_matches"], record
        print(f"| {retention if retention is not None else 'none'} | "
              f"{record['steady_batches']} | {record['p50_ms']} | {record['p99_ms']} | "
              f"{record['expired_per_batch']} | {record['edges_held']:,} | "
              f"{record['positive']:,} | {record['negative']:,} | {record['expired']:,} |",
              flush=True)
        if args.json:
            with args.json.open("a") as f:
                f.write(json.dumps({**header, **record, "batch": args.batch,
                                    "queries": len(queries)}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
