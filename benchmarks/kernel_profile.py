"""The matching kernels on chosen GH queries: a batch's match time per repeat, and the range
Nsight Compute profiles.

    python -m benchmarks.kernel_profile dense_0 sparse_1 tree_0 [--repeat 3]
    ncu --clock-control none --profile-from-start off --kernel-name regex:match_tasks \\
        --section WarpStateStats ... python3 -m benchmarks.kernel_profile tree_0 --ncu-range

(`bash benchmarks/device_run.sh ncu-tree_0,dense_0` runs the second with the sections that
located the search's stalls, 2026-11-29.)  GH with 5 random labels, its 10% insertion batch
(the gh_table setup) on the CUDA executor; each named query of the saved 6-vertex sets
stands alone while the batch is applied `--repeat` times, undone after each, warm (the
engine's warm-up first).  With `--ncu-range` each query's batch is applied once inside
cudaProfilerStart/Stop, so a profiler started with --profile-from-start off sees only
those launches.  Prints one line per batch: query, `Engine.apply` wall, its matching phase
(`match` timing), positive matches.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.gh_table import (DEFAULT_GRAPH, INSERT_FRACTION, REPO, deletions_of,
                                 measure_alone)
from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.graphs import load_graph, read_query
from gpu.io.streams import split_stream
from gpu.plan.query import QueryGraph
from gpu.warm_up import warm_up

QUERIES = REPO / "bench-out" / "queries" / "gh_k6_seed0_labels5x0"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("queries", nargs="+", help="saved query names, e.g. dense_0 tree_3")
    p.add_argument("--graph", type=Path, default=DEFAULT_GRAPH)
    p.add_argument("--queries-dir", type=Path, default=QUERIES)
    p.add_argument("--repeat", type=int, default=3, help="batches per query (untraced)")
    p.add_argument("--ncu-range", action="store_true",
                   help="one batch per query inside cudaProfilerStart/Stop")
    p.add_argument("--intersecting-blocks-per-sm", type=int,
                   default=EngineConfig.intersecting_blocks_per_sm)
    p.add_argument("--leaf-count-degree", type=int, default=EngineConfig.leaf_count_degree)
    p.add_argument("--share-every", type=int, default=EngineConfig.share_every)
    args = p.parse_args(argv)
    import cupy as cp

    graph = load_graph(args.graph, num_labels=5, seed=0)
    initial, batch = split_stream(graph, INSERT_FRACTION, 0)
    undo = deletions_of(batch)
    warm_up("cuda")
    engine = Engine(initial, backend="cuda", config=EngineConfig(
        intersecting_blocks_per_sm=args.intersecting_blocks_per_sm,
        leaf_count_degree=args.leaf_count_degree, share_every=args.share_every))
    for name in args.queries:
        query = QueryGraph.from_labeled(read_query(args.queries_dir / f"{name}.graph"), name)
        for _ in range(1 if args.ncu_range else args.repeat):
            if args.ncu_range:
                cp.cuda.Device().synchronize()
                cp.cuda.profiler.start()
            # Registers the query, applies the batch (timed), removes it, undoes the batch:
            # only the batch's launches run match_tasks, the kernels the profiler keeps.
            result, delta, wall, _ = measure_alone(engine, query, batch, undo, False, name)
            if args.ncu_range:
                cp.cuda.profiler.stop()
            print(f"{name} apply {wall:.4f} s, match {result.timings['match']:.4f} s, "
                  f"{delta.positive} positive", flush=True)


if __name__ == "__main__":
    main()
