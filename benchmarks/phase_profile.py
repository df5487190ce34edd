"""Where a GH batch's time goes: cProfile of Engine.apply with some queries standing.

    python -m benchmarks.phase_profile bench-out/queries/gh_k6_seed0_labels5x0/dense_7.graph \
        [more queries] [--backend cuda] [--batch-size N] [--repeat R] [--top 30]

Same setup as benchmarks.gh_table (5 random labels, 10% insertion batch; `--batch-size`
takes only the first N held-out edges).  The batch is applied and undone once untimed
(compilation, device warm-up), then applied `--repeat` times under the profiler (each
undone outside it); prints the engine's own phase timings of the last and the functions
with the most time of their own, then by cumulative time, over all of them.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path

from benchmarks.gh_table import DEFAULT_GRAPH, INSERT_FRACTION, deletions_of
from gpu.engine import Engine
from gpu.io.graphs import load_graph, read_query
from gpu.io.records import LabeledGraph, UpdateStream
from gpu.io.streams import split_stream
from gpu.plan.query import QueryGraph


def gh_batch(graph: Path, size: int = 0) -> tuple[LabeledGraph, UpdateStream, UpdateStream]:
    """gh_table's set-up: the graph (5 random labels) less its held-out 10%, the held-out
    insertion batch (its first `size` edges when given), and the batch that undoes it."""
    initial, batch = split_stream(load_graph(graph, num_labels=5, seed=0), INSERT_FRACTION, 0)
    if size:
        batch = next(iter(batch.batches(size)))
    return initial, batch, deletions_of(batch)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.phase_profile",
                                description=__doc__.split("\n", 1)[0])
    p.add_argument("query", type=Path, nargs="+")
    p.add_argument("--graph", type=Path, default=DEFAULT_GRAPH)
    p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--batch-size", type=int, default=0,
                   help="the first N held-out edges (default all: the 10%% batch)")
    p.add_argument("--repeat", type=int, default=1, help="batches profiled (default 1)")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    initial, batch, undo = gh_batch(args.graph, args.batch_size)
    engine = Engine(initial, backend=args.backend)
    for query in args.query:
        engine.add_query(QueryGraph.from_labeled(read_query(query), query.stem))
    engine.apply(batch)
    engine.apply(undo)
    profiler = cProfile.Profile()
    walls = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        profiler.enable()
        result = engine.apply(batch)
        profiler.disable()
        walls.append(time.perf_counter() - t0)
        engine.apply(undo)
    walls.sort()
    print(f"{len(args.query)} queries, {len(batch)}-edge batch ({args.backend}): "
          f"apply wall median {walls[len(walls) // 2]:.5f} s under the profiler; the last's "
          f"seconds {result.seconds:.5f}, phases "
          + ", ".join(f"{k} {v:.5f}" for k, v in result.timings.items()))
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(key).print_stats(args.top)
        print(out.getvalue())


if __name__ == "__main__":
    main()
