"""Streaming experiments on the GH graph: insertion rate, mixed insert/delete streams, latency.

The setup is `benchmarks.gh_table`'s (the GitHub graph with uniform random vertex labels, the
saved 6-vertex dense / sparse / tree query sets, generated on the graph minus 10% when
missing); the experiments are the three of the GPU issue:

* ``rate`` (GAMMA Fig. 9): for each insertion rate (default 2, 4, 6, 8, 10% of the edges,
  held out by `split_stream` with one seed, so a smaller rate's batch is a prefix of a larger
  one's), every query is registered alone, the batch applied and timed, then undone, as in
  gh_table.
* ``mixed``: from the graph minus 10%, a stream of batches that each insert absent edges
  (at first the held-out ones) and delete present ones, half and half by default, drawn with
  the seed; all queries of a set stand together on one engine.  ``--check`` compares the first
  query's positive minus negative matches over the stream with its static count at the end
  minus at the start.
* ``latency``: insertion batches of 1, 100 and 10,000 held-out edges, all queries of a set
  standing, a fixed number of batches per size.  Each size starts from the graph minus 10%;
  when the held-out edges run out the inserted ones are deleted (untimed, no query standing)
  and the batches start again from the first held-out edge.
* ``pipeline``: the latency sizes and counts (as many batches as the held-out edges allow),
  applied one by one with `Engine.apply` and as one stream with `Engine.apply_stream` (the
  CUDA executor overlaps a batch's host work with the kernels of the one before), from the
  same graph, alternating, three timed rounds each after an untimed one: the median
  batches per second each way, and whether every batch's counts agree in every round.
  ``--list-limit N`` lists up to N matches per query and sign (the rows are read back
  when a batch is finished, as the counts are); the check then also compares the number
  of rows.

Per-batch seconds are the wall time of `Engine.apply`; p99 is interpolated, so with a few
batches it is close to the maximum.  ``--json`` appends one line per measurement (a query of
``rate``, a set of ``mixed``, a set and batch size of ``latency``) with the run's provenance.

    python -m benchmarks.stream_bench --experiments rate mixed latency --kinds dense \\
        [--backend cpu|cuda] [--max-queries N] [--check] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from benchmarks.gh_table import (
    INSERT_FRACTION,
    add_setup_args,
    deletions_of,
    match_seconds,
    measure_alone,
    query_sets,
    resolve_queries_dir,
    run_header,
    warm_up,
)
from benchmarks.plots import PLOT_HELP
from gpu.config import DEVICE_GRAPHS, EngineConfig
from gpu.cuda.device import resolve_backend
from gpu.engine import Engine
from gpu.io.graphs import load_graph
from gpu.io.records import DELETE_EDGE, INSERT_EDGE, LabeledGraph, UpdateStream
from gpu.io.streams import split_stream
from gpu.plan.query import QueryGraph

EXPERIMENTS = ("rate", "mixed", "latency", "pipeline")
TIMING_KEYS = ("validate", "match", "update")


def _parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.stream_bench",
                                description=__doc__.split("\n", 1)[0])
    add_setup_args(p, seed_help="seed of the splits, the mixed stream and the query walks")
    p.add_argument("--backend", choices=("cpu", "cuda", "auto"), default="cpu")
    p.add_argument("--device-graph", choices=DEVICE_GRAPHS, default=EngineConfig.device_graph,
                   help="cuda: the data graph's layout on the device (default pma: the "
                        "packed memory array; lists: the mirrored host lists)")
    p.add_argument("--experiments", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS))
    p.add_argument("--json", type=Path, help="append one JSON line per measurement to this file")
    p.add_argument("--plot", action="store_true", help=PLOT_HELP)
    p.add_argument("--check", action="store_true",
                   help="compare counts with static counts (rate: every query; mixed and "
                   "latency: each set's first query); slow on big counts")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed JIT warm-up")
    p.add_argument("--verbose", action="store_true", help="progress lines on stderr")
    g = p.add_argument_group("rate")
    g.add_argument("--rates", type=float, nargs="+", default=[0.02, 0.04, 0.06, 0.08, 0.10],
                   help="fractions of the edges inserted as one batch")
    g = p.add_argument_group("mixed")
    g.add_argument("--mixed-batch", type=int, default=10_000, help="updates per batch")
    g.add_argument("--mixed-batches", type=int, default=20, help="batches in the stream")
    g.add_argument("--mixed-insert-share", type=float, default=0.5,
                   help="fraction of each batch that inserts (the rest deletes)")
    g = p.add_argument_group("latency")
    g.add_argument("--latency-sizes", type=int, nargs="+", default=[1, 100, 10_000],
                   help="edges per insertion batch")
    g.add_argument("--latency-batches", type=int, nargs="+", default=[200, 50, 5],
                   help="batches per size, one number per --latency-sizes")
    g = p.add_argument_group("pipeline")
    g.add_argument("--batch-group-edges", type=int, default=EngineConfig.batch_group_edges,
                   help="EngineConfig.batch_group_edges (0: no batch groups on the CPU)")
    g.add_argument("--device-batch-group-edges", type=int,
                   default=EngineConfig.device_batch_group_edges,
                   help="EngineConfig.device_batch_group_edges (0: no batch groups on CUDA)")
    g.add_argument("--intersecting-blocks-per-sm", type=int,
                   default=EngineConfig.intersecting_blocks_per_sm,
                   help="EngineConfig.intersecting_blocks_per_sm (0: as many as fit)")
    g.add_argument("--list-limit", type=int, default=0,
                   help="list up to this many matches per query and sign (0: count only)")
    args = p.parse_args(argv)
    resolve_queries_dir(args)
    if args.plot and not args.json:
        p.error("--plot draws the --json file: give --json")
    if len(args.latency_batches) != len(args.latency_sizes):
        p.error("--latency-batches needs one count per --latency-sizes")
    if any(n < 1 for n in [*args.latency_sizes, *args.latency_batches]):
        p.error("--latency-sizes and --latency-batches must be positive")
    if not all(0 < r < 1 for r in args.rates):
        p.error("--rates must lie in (0, 1)")
    if args.mixed_batch < 1 or args.mixed_batches < 1 or not 0 <= args.mixed_insert_share <= 1:
        p.error("--mixed-batch and --mixed-batches must be positive, "
                "--mixed-insert-share in [0, 1]")
    return args


# ---------------------------------------------------------------- streams


def mixed_batches(initial: LabeledGraph, held_out: UpdateStream, size: int, count: int,
                  insert_share: float, seed: int) -> Iterator[UpdateStream]:
    """`count` batches of `size` updates over the edges of `initial` plus `held_out`.

    Each batch inserts ``round(size * insert_share)`` edges drawn from those absent before it
    (at first exactly the held-out ones) and deletes the rest of its updates from those
    present, in a shuffled order.  No edge is both inserted and deleted in one batch, so every
    update changes the graph; fewer are drawn when a side runs out of edges.
    """
    src = np.concatenate([initial.edge_src, held_out.a])
    dst = np.concatenate([initial.edge_dst, held_out.b])
    labels = np.concatenate([initial.edge_labels, held_out.label])
    present = np.zeros(len(src), dtype=bool)
    present[: initial.num_edges] = True
    rng = np.random.default_rng(seed)
    for i in range(count):
        absent_edges, present_edges = np.flatnonzero(~present), np.flatnonzero(present)
        n_insert = min(round(size * insert_share), len(absent_edges))
        n_delete = min(size - n_insert, len(present_edges))
        inserted = rng.choice(absent_edges, n_insert, replace=False)
        deleted = rng.choice(present_edges, n_delete, replace=False)
        present[inserted], present[deleted] = True, False
        edges = np.concatenate([inserted, deleted])
        kinds = np.concatenate([np.full(n_insert, INSERT_EDGE), np.full(n_delete, DELETE_EDGE)])
        order = rng.permutation(len(edges))
        edges, kinds = edges[order], kinds[order]
        yield UpdateStream(kinds, src[edges], dst[edges], labels[edges],
                           np.arange(1, len(edges) + 1), f"<mixed batch {i}>")


def _seconds_stats(seconds: list[float]) -> dict[str, float]:
    return {"seconds_p50": float(np.percentile(seconds, 50)),
            "seconds_p99": float(np.percentile(seconds, 99)),
            "seconds_mean": statistics.fmean(seconds),
            "seconds_total": float(sum(seconds))}


class _StandingSet:
    """One engine with every query of a set standing, and per-query running totals."""

    def __init__(self, engine: Engine, queries: list[tuple[Path, QueryGraph]]) -> None:
        self.engine = engine
        self.queries = queries
        self.qids: list[int] = []
        self.register()
        self.positive = [0] * len(queries)
        self.negative = [0] * len(queries)
        self.batch_seconds: list[float] = []
        self.timings = {key: 0.0 for key in TIMING_KEYS}

    def apply(self, batch: UpdateStream) -> None:
        """Apply one batch (timed) and add it to the totals; every update must take effect."""
        t0 = time.perf_counter()
        res = self.engine.apply(batch)
        self.batch_seconds.append(time.perf_counter() - t0)
        changed = res.applied["edges_inserted"] + res.applied["edges_deleted"]
        if changed != len(batch):
            # The streams only insert absent edges and delete present ones.
            raise RuntimeError(f"{batch.source}: applied {res.applied} of {len(batch)} "
                               f"updates (ignored {res.ignored})")
        for i, qid in enumerate(self.qids):
            self.positive[i] += res.queries[qid].positive
            self.negative[i] += res.queries[qid].negative
        for key in TIMING_KEYS:
            self.timings[key] += res.timings.get(key, 0.0)

    def register(self) -> None:
        self.qids = [self.engine.add_query(q) for _, q in self.queries]

    def first_count(self) -> int:
        return self.engine.count(self.qids[0])

    def undo(self, inserted: UpdateStream) -> None:
        """Remove the queries, then delete `inserted`: no matching work, the graph restored."""
        for qid in self.qids:
            self.engine.remove_query(qid)
        self.qids = []
        self.engine.apply(deletions_of(inserted))

    def summary(self) -> dict:
        n = len(self.batch_seconds)
        return {
            "queries": len(self.queries),
            "batches": n,
            "positive": int(sum(self.positive)),
            "negative": int(sum(self.negative)),
            **_seconds_stats(self.batch_seconds),
            "timings_mean": {key: total / n for key, total in self.timings.items()},
            "batch_seconds": self.batch_seconds,
            "per_query": [{"query": str(path), "positive": int(pos), "negative": int(neg)}
                          for (path, _), pos, neg in zip(self.queries, self.positive,
                                                         self.negative)],
        }


# ---------------------------------------------------------------- experiments


def _engine(args, initial, backend: str) -> Engine:
    return Engine(initial, backend=backend, config=EngineConfig(
        device_graph=args.device_graph, batch_group_edges=args.batch_group_edges,
        device_batch_group_edges=args.device_batch_group_edges,
        intersecting_blocks_per_sm=args.intersecting_blocks_per_sm))


def run_rate(args, backend, graph, sets, emit, log) -> list[dict]:
    """Per query, alone: one insertion batch of each rate, applied and undone."""
    records = []
    for rate in args.rates:
        initial, batch = split_stream(graph, rate, args.seed)
        undo = deletions_of(batch)
        engine = _engine(args, initial, backend)
        for kind, queries in sets.items():
            for i, (path, query) in enumerate(queries):
                res, delta, wall, exact = measure_alone(engine, query, batch, undo, args.check,
                                                        str(path))
                record = {"experiment": "rate", "rate": rate, "kind": kind, "index": i,
                          "query": str(path), "vertices": query.num_vertices,
                          "edges": query.num_edges, "batch": len(batch),
                          "positive": int(delta.positive), "negative": int(delta.negative),
                          "seconds": float(res.seconds), "match_seconds": match_seconds(res),
                          "wall_seconds": wall, "query_seconds": float(delta.seconds),
                          "timings": dict(res.timings)}
                if args.check:
                    record["check"] = exact
                records.append(emit(record))
                log(f"rate {rate:g} {kind} {i + 1}/{len(queries)}: {record['positive']} "
                    f"matches in {record['match_seconds']:.4g} s")
    return records


def run_mixed(args, backend, initial, held_out, sets, emit, log) -> list[dict]:
    """Per set, all queries standing: one mixed insert/delete stream from the graph minus 10%."""
    records = []
    for kind, queries in sets.items():
        standing = _StandingSet(_engine(args, initial, backend), queries)
        start = standing.first_count() if args.check else None
        inserted = deleted = 0
        for batch in mixed_batches(initial, held_out, args.mixed_batch, args.mixed_batches,
                                   args.mixed_insert_share, args.seed):
            standing.apply(batch)
            n_insert = int((batch.kind == INSERT_EDGE).sum())
            inserted, deleted = inserted + n_insert, deleted + len(batch) - n_insert
            log(f"mixed {kind} batch {len(standing.batch_seconds)}/{args.mixed_batches}: "
                f"{standing.batch_seconds[-1]:.4g} s")
        record = {"experiment": "mixed", "kind": kind, "batch_size": args.mixed_batch,
                  "insert_share": args.mixed_insert_share, "inserted": inserted,
                  "deleted": deleted, **standing.summary()}
        if args.check:
            end = standing.first_count()
            net = standing.positive[0] - standing.negative[0]
            record.update(count_start=start, count_end=end, check=end - start == net)
        records.append(emit(record))
    return records


def run_latency(args, backend, initial, held_out, sets, emit, log) -> list[dict]:
    """Per set and batch size, all queries standing: consecutive insertion batches."""
    for size in args.latency_sizes:
        if size > len(held_out):
            raise SystemExit(f"error: --latency-sizes {size} is more than the "
                             f"{len(held_out)} held-out edges")
    records = []
    # Every set and size starts from, and leaves, the graph minus 10%: one engine serves all.
    engine = _engine(args, initial, backend)
    for kind, queries in sets.items():
        start = None
        for size, count in zip(args.latency_sizes, args.latency_batches):
            standing = _StandingSet(engine, queries)
            if args.check and start is None:
                start = standing.first_count()
            # A segment inserts a prefix of the held-out edges, then deletes it again.
            per_segment = len(held_out) // size
            checks = []
            for first in range(0, count, per_segment):
                if first:
                    standing.register()
                batches = min(per_segment, count - first)
                before = standing.positive[0]
                for j in range(batches):
                    standing.apply(held_out.slice(j * size, (j + 1) * size))
                if args.check:
                    checks.append(standing.first_count() - start
                                  == standing.positive[0] - before)
                standing.undo(held_out.slice(0, batches * size))
            summary = standing.summary()
            record = {"experiment": "latency", "kind": kind, "batch_size": size,
                      "resets": (count - 1) // per_segment, **summary,
                      "batches_per_s": summary["batches"] / summary["seconds_total"],
                      "edges_per_s": summary["batches"] * size / summary["seconds_total"]}
            if args.check:
                record["check"] = all(checks)
            records.append(emit(record))
            log(f"latency {kind} size {size}: p50 {record['seconds_p50'] * 1e3:.3g} ms, "
                f"{record['batches_per_s']:.4g} batches/s")
    return records


PIPELINE_ROUNDS = 3


def run_pipeline(args, backend, initial, held_out, sets, emit, log) -> list[dict]:
    """Per set and batch size: the same insertion batches by `apply` and by `apply_stream`,
    alternating, PIPELINE_ROUNDS times each after an untimed round of each (compilation),
    from the same graph every time; the median batches/s of each way."""
    records = []
    engine = _engine(args, initial, backend)
    for kind, queries in sets.items():
        for size, count in zip(args.latency_sizes, args.latency_batches):
            count = min(count, len(held_out) // size)
            batches = [held_out.slice(j * size, (j + 1) * size) for j in range(count)]
            rates: dict[str, list[float]] = {"apply": [], "apply_stream": []}
            counts = []
            for round_ in range(PIPELINE_ROUNDS + 1):
                for way in rates:
                    standing = _StandingSet(engine, queries)
                    t0 = time.perf_counter()
                    if way == "apply":
                        results = [engine.apply(b, list_limit=args.list_limit)
                                   for b in batches]
                    else:
                        results = list(engine.apply_stream(batches,
                                                           list_limit=args.list_limit))
                    seconds = time.perf_counter() - t0
                    counts.append([[(d.positive, d.negative,
                                     None if d.added is None else (len(d.added), len(d.removed)))
                                    for d in (r.queries[q] for q in standing.qids)]
                                   for r in results])
                    if round_:
                        rates[way].append(count / seconds)
                    standing.undo(held_out.slice(0, count * size))
            record = {"experiment": "pipeline", "kind": kind, "batch_size": size,
                      "batches": count, "queries": len(queries), "rounds": PIPELINE_ROUNDS,
                      "list_limit": args.list_limit,
                      "apply_batches_per_s": statistics.median(rates["apply"]),
                      "apply_stream_batches_per_s": statistics.median(rates["apply_stream"]),
                      "apply_rounds": rates["apply"],
                      "apply_stream_rounds": rates["apply_stream"],
                      "check": all(c == counts[0] for c in counts)}
            record["speedup"] = (record["apply_stream_batches_per_s"]
                                 / record["apply_batches_per_s"])
            records.append(emit(record))
            log(f"pipeline {kind} size {size}: {record['speedup']:.3g}x")
    return records


# ---------------------------------------------------------------- tables


def _check_cell(rs: list[dict]) -> str:
    if not any("check" in r for r in rs):
        return "-"
    return "ok" if all(r.get("check") for r in rs) else "FAILED"


def _markdown(columns: list[str], rows: list[list[str]]) -> str:
    """A markdown table: words left-aligned, numbers right-aligned."""
    align = "|" + "|".join("---" if c in ("query set", "check") else "---:" for c in columns)
    lines = ["| " + " | ".join(cells) + " |" for cells in [columns, *rows]]
    return "\n".join([lines[0], align + "|", *lines[1:]])


def rate_table(records: list[dict]) -> str:
    rows = []
    for rate in dict.fromkeys(r["rate"] for r in records):
        for kind in dict.fromkeys(r["kind"] for r in records):
            rs = [r for r in records if r["rate"] == rate and r["kind"] == kind]
            if not rs:
                continue
            secs = [r["match_seconds"] for r in rs]
            total = sum(r["positive"] for r in rs)
            speed = total / sum(secs) if sum(secs) > 0 else float("nan")
            rows.append([f"{rate:.0%}", kind, f"{len(rs)}", f"{rs[0]['batch']}",
                         f"{statistics.fmean(secs):.4g}", f"{statistics.median(secs):.4g}",
                         f"{total / len(rs):.4g}", f"{speed:.4g}", _check_cell(rs)])
    return _markdown(["rate", "query set", "queries", "batch", "avg s/query", "median s/query",
                      "avg matches/query", "matches/s", "check"], rows)


def mixed_table(records: list[dict]) -> str:
    rows = [[r["kind"], f"{r['queries']}", f"{r['batches']}", f"{r['batch_size']}",
             f"{r['inserted']}", f"{r['deleted']}", f"{r['seconds_p50']:.4g}",
             f"{r['seconds_p99']:.4g}", f"{r['seconds_mean']:.4g}", f"{r['positive']}",
             f"{r['negative']}", _check_cell([r])] for r in records]
    return _markdown(["query set", "queries", "batches", "batch size", "inserted", "deleted",
                      "p50 s", "p99 s", "mean s", "positive", "negative", "check"], rows)


def latency_table(records: list[dict]) -> str:
    ms = "{:.4g}".format
    rows = [[r["kind"], f"{r['queries']}", f"{r['batch_size']}", f"{r['batches']}",
             ms(r["seconds_p50"] * 1e3), ms(r["seconds_p99"] * 1e3),
             ms(r["seconds_mean"] * 1e3), ms(r["timings_mean"]["match"] * 1e3),
             ms(r["timings_mean"]["update"] * 1e3), f"{r['batches_per_s']:.4g}",
             f"{r['edges_per_s']:.4g}", _check_cell([r])] for r in records]
    return _markdown(["query set", "queries", "batch size", "batches", "p50 ms", "p99 ms",
                      "mean ms", "match ms", "update ms", "batches/s", "edges/s", "check"],
                     rows)


def pipeline_table(records: list[dict]) -> str:
    rows = [[r["kind"], f"{r['queries']}", f"{r.get('list_limit', 0)}", f"{r['batch_size']}",
             f"{r['batches']}", f"{r['apply_batches_per_s']:.4g}",
             f"{r['apply_stream_batches_per_s']:.4g}", f"{r['speedup']:.3g}",
             _check_cell([r])] for r in records]
    return _markdown(["query set", "queries", "list limit", "batch size", "batches",
                      "apply batches/s", "apply_stream batches/s", "ratio", "check"], rows)


TABLES = {"rate": rate_table, "mixed": mixed_table, "latency": latency_table,
          "pipeline": pipeline_table}


# ---------------------------------------------------------------- driver


def _parameters(args, experiment: str) -> dict:
    """What fixes one experiment's measurements, recorded with each of its JSON lines."""
    common = {"graph": str(args.graph.resolve()), "num_labels": args.num_labels,
              "label_seed": args.label_seed, "seed": args.seed, "query_size": args.size,
              "queries_dir": str(args.queries_dir), "max_queries": args.max_queries,
              "device_graph": args.device_graph, "batch_group_edges": args.batch_group_edges,
              "device_batch_group_edges": args.device_batch_group_edges}
    own = {"rate": {"rates": args.rates},
           "mixed": {"held_out_fraction": INSERT_FRACTION,
                     "mixed_batch": args.mixed_batch, "mixed_batches": args.mixed_batches,
                     "mixed_insert_share": args.mixed_insert_share},
           "latency": {"held_out_fraction": INSERT_FRACTION,
                       "latency_sizes": args.latency_sizes,
                       "latency_batches": args.latency_batches},
           "pipeline": {"held_out_fraction": INSERT_FRACTION,
                        "latency_sizes": args.latency_sizes,
                        "latency_batches": args.latency_batches,
                        "list_limit": args.list_limit}}[experiment]
    return {**common, **own}


def _emitter(out, parameters: dict):
    """What the experiments call with each record: a JSON line with `parameters` to `out`."""
    def emit(record: dict) -> dict:
        if out:
            out.write(json.dumps({**parameters, **record}) + "\n")
            out.flush()
        return record
    return emit


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    # Resolved up front so that "auto" is reported as what actually ran.
    backend = resolve_backend(args.backend)
    header = run_header(backend, "benchmarks.stream_bench", argv)
    verbose = args.verbose or sys.stderr.isatty()

    def log(msg: str) -> None:
        if verbose:
            print(msg, file=sys.stderr, flush=True)

    graph = load_graph(args.graph, num_labels=args.num_labels, seed=args.label_seed)
    initial, held_out = split_stream(graph, INSERT_FRACTION, args.seed)
    sets = query_sets(args, initial, log)
    sets = {kind: queries[: args.max_queries] for kind, queries in sets.items()}
    if not args.no_warmup:
        warm_up(sets, backend, deletions=True)
    print("\n".join(f"{key}: {value}" for key, value in header.items()))
    print(f"graph: {args.graph} ({graph.num_vertices} vertices, {graph.num_edges} edges, "
          f"{args.num_labels} random labels, seed {args.label_seed}); seed {args.seed}; "
          f"{args.size}-vertex queries from {args.queries_dir}", flush=True)

    out = args.json.open("a") if args.json else None
    failed = 0
    try:
        for experiment in args.experiments:
            emit = _emitter(out, {**header, **_parameters(args, experiment)})
            if experiment == "rate":
                records = run_rate(args, backend, graph, sets, emit, log)
            elif experiment == "mixed":
                records = run_mixed(args, backend, initial, held_out, sets, emit, log)
            elif experiment == "pipeline":
                records = run_pipeline(args, backend, initial, held_out, sets, emit, log)
            else:
                records = run_latency(args, backend, initial, held_out, sets, emit, log)
            failed += sum(r.get("check") is False for r in records)
            print(f"\n## {experiment}\n\n{TABLES[experiment](records)}", flush=True)
    finally:
        if out:
            out.close()
    if args.plot:
        from benchmarks.plots import plot_beside
        plot_beside(args.json)
    if failed:
        print(f"\n{failed} measurements FAILED the static-count check", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
