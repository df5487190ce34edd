"""Per-task-type matching time of one GH query: which root edges of a plan cost the most.

    python -m benchmarks.task_types bench-out/queries/gh_k6_seed0_labels5x0/sparse_1.graph \
        [--fraction 0.1] [--backend cpu]

Same setup as benchmarks.gh_table (5 random labels, 10% insertion batch); `--fraction`
applies only the first part of the batch to keep a slow query short.  Prints each task
type's root edge, matching order, counted-tail start and its time and count.
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from benchmarks.gh_table import DEFAULT_GRAPH, INSERT_FRACTION
from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.graphs import load_graph, read_query
from gpu.io.records import DELETE_EDGE, UpdateStream
from gpu.io.streams import split_stream
from gpu.plan.query import QueryGraph


def _one_type(types, t: int):
    keep = slice(t, t + 1)
    return dataclasses.replace(types, **{f.name: getattr(types, f.name)[keep]
                                         for f in dataclasses.fields(types)
                                         if f.name != "query_labels"})


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.task_types",
                                description=__doc__.split("\n", 1)[0])
    p.add_argument("query", type=Path)
    p.add_argument("--graph", type=Path, default=DEFAULT_GRAPH)
    p.add_argument("--fraction", type=float, default=1.0, help="share of the batch to apply")
    p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--no-leaf-groups", action="store_true",
                   help="search leaf-rooted tasks one by one (cpu)")
    args = p.parse_args(argv)
    initial, batch = split_stream(load_graph(args.graph, num_labels=5, seed=0),
                                  INSERT_FRACTION, 0)
    k = int(len(batch) * args.fraction)
    part = UpdateStream(batch.kind[:k], batch.a[:k], batch.b[:k], batch.label[:k],
                        batch.line[:k], "part")
    engine = Engine(initial, backend=args.backend,
                    config=EngineConfig(leaf_groups=not args.no_leaf_groups))
    qid = engine.add_query(QueryGraph.from_labeled(read_query(args.query), args.query.stem))
    types = engine.plan(qid).incremental
    run = engine._run

    def per_type(qid_, searched, us, vs, labels, ranks, limit):
        if searched is not types:
            return run(qid_, searched, us, vs, labels, ranks, limit)
        total = None
        for t in range(searched.count):
            t0 = time.perf_counter()
            found = run(qid_, _one_type(searched, t), us, vs, labels, ranks, limit)
            print(f"type {t:2d} root {searched.roots[t].tolist()} order "
                  f"{searched.orders[t].tolist()} tail from {int(searched.leaf_from[t])}: "
                  f"{found.count} matches in {time.perf_counter() - t0:.3f} s", flush=True)
            total = found if total is None else dataclasses.replace(
                total, count=total.count + found.count)
        return total

    # Untimed first pass compiles the kernels; then undo it and time each type.
    engine.apply(part)
    engine.apply(UpdateStream(part.kind * 0 + DELETE_EDGE, part.a, part.b, part.label,
                              part.line, "undo"))
    print(f"{args.query} on {k} inserted edges ({args.backend})")
    engine._run = per_type   # a diagnostic: wraps the engine's executor call
    engine.apply(part)


if __name__ == "__main__":
    main()
