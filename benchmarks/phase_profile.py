"""Where one GH batch's time goes: cProfile of Engine.apply for one query.

    python -m benchmarks.phase_profile bench-out/queries/gh_k6_seed0_labels5x0/dense_7.graph \
        [--backend cuda] [--top 30]

Same setup as benchmarks.gh_table (5 random labels, 10% insertion batch).  The
batch is applied and undone once untimed (compilation, device warm-up), then
applied again under the profiler; prints the engine's own phase timings and the
functions with the most time of their own, then by cumulative time.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
from pathlib import Path

from benchmarks.gh_table import DEFAULT_GRAPH, INSERT_FRACTION
from gpu.engine import Engine
from gpu.io.graphs import load_graph, read_query
from gpu.io.records import DELETE_EDGE, UpdateStream
from gpu.io.streams import split_stream
from gpu.plan.query import QueryGraph


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.phase_profile",
                                description=__doc__.split("\n", 1)[0])
    p.add_argument("query", type=Path)
    p.add_argument("--graph", type=Path, default=DEFAULT_GRAPH)
    p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    initial, batch = split_stream(load_graph(args.graph, num_labels=5, seed=0),
                                  INSERT_FRACTION, 0)
    undo = UpdateStream(batch.kind * 0 + DELETE_EDGE, batch.a, batch.b, batch.label,
                        batch.line, "undo")
    engine = Engine(initial, backend=args.backend)
    engine.add_query(QueryGraph.from_labeled(read_query(args.query), args.query.stem))
    engine.apply(batch)
    engine.apply(undo)
    profiler = cProfile.Profile()
    profiler.enable()
    result = engine.apply(batch)
    profiler.disable()
    print(f"{args.query} ({args.backend}): {result.seconds:.4f} s; phases "
          + ", ".join(f"{k} {v:.4f}" for k, v in result.timings.items()))
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(key).print_stats(args.top)
        print(out.getvalue())


if __name__ == "__main__":
    main()
