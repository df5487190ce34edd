"""How well count_phase's pieces balance: each piece of a batch timed alone, on one thread.

    python -m benchmarks.phase_pieces [--size 100] [--batches 8] [--threads 16] [--split-all]
    python -m benchmarks.phase_pieces --heaviest 10

The service benchmark's setup (GH, 5 random labels, 10% of the edges held out and cycled,
the 10 dense 6-vertex queries counted).  For each batch of inserted edges it makes every
query's tasks as `phases.count_phase` does (queries where a leaf group forms are
left out: the general path runs them), splits them as count_phase would for `--threads`
workers, times every piece with one call of the compiled search from Python, and then
deals the pieces as count_phase's queue does before its workers give (heaviest task's
first, each to the first free worker) to get the region's makespan, against the ideal
(total / threads).  Each timed call carries ~5-10 us of Python, which inflates many small
pieces (`--split-all`) more than the region would.  It prints, per batch, the heaviest
pieces of unsplit tasks with their deg(u) * deg(v): the weight that decides splitting.
"""
from __future__ import annotations

import argparse
import heapq
import time

import numba
import numpy as np
from numba.typed import List

from benchmarks.apply_profile import add_setup_args, batches, gh_engine
from benchmarks.gh_table import INSERT_FRACTION
from gpu.cpu import executor, phases, search
from gpu.config import EngineConfig
from gpu.io.graphs import load_graph
from gpu.io.streams import split_stream


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.phase_pieces",
                                description=__doc__.split("\n", 1)[0])
    add_setup_args(p, size=100)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--threads", type=int, default=16, help="workers to deal pieces to")
    p.add_argument("--split-all", action="store_true",
                   help="split every task into one piece per worker")
    p.add_argument("--heaviest", type=int, default=0, metavar="K",
                   help="instead: the K heaviest held-out edges, each a phase of its own, "
                        "run by count_phase whole and as 4, 16 and 64 pieces a task on "
                        "one thread (what splitting adds to the work)")
    args = p.parse_args(argv)
    numba.set_num_threads(1)
    initial, held_out = split_stream(load_graph(args.graph, num_labels=5, seed=0),
                                     INSERT_FRACTION, 0)
    engine = gh_engine(args, initial, EngineConfig(shared_region_threads=0))
    queries = List()
    for qid in engine.query_ids():
        standing = engine._queries[qid]
        queries.append(executor.small_query(engine.signatures.cand[qid], standing.leaves,
                                            standing.plan.incremental))
    graph = engine.graph
    arrays = executor._graph_arrays(graph)
    updates = engine._updates
    if args.heaviest:
        _split_cost(args, engine, queries, held_out)
        return
    todo, _ = batches(held_out, args.size, args.batches, 0)
    for batch in todo:
        engine.apply(batch)     # the inserted edges' phase runs on the graph after them
        updates.reserve(graph.label.shape[0])
        us = graph.ids.lookup(batch.a).astype(np.int32)
        vs = graph.ids.lookup(batch.b).astype(np.int32)
        labels = np.zeros(len(us), dtype=np.int32)
        pieces, unsplit = _time_pieces(args, queries, arrays, updates, graph, us, vs, labels)
        times = np.array([t for _, t in pieces])
        total = times.sum()
        makespan = _makespan(pieces, args.threads)
        heaviest = sorted(unsplit, key=lambda wt: -wt[1])[:3]
        print(f"{len(pieces)} pieces, total {total * 1e3:.1f} ms, largest "
              f"{times.max() * 1e3:.2f} ms; makespan on {args.threads} workers "
              f"{makespan * 1e3:.2f} ms, ideal {total / args.threads * 1e3:.2f} ms; "
              f"heaviest unsplit tasks (deg(u)*deg(v), ms): "
              + ", ".join(f"({w:.0f}, {t * 1e3:.2f})" for w, t in heaviest), flush=True)


def _time_pieces(args, queries, arrays, updates, graph, us, vs, labels):
    """[(task weight, seconds)] for every piece, and [(weight, seconds)] of unsplit tasks."""
    marks = phases._mark_updates(us, vs, labels, arrays, updates.start, updates.count,
                                 graph.directed)
    ranks, upd = marks[0], marks[3:]
    pieces, unsplit = [], []
    no_out = np.empty((0, 0), dtype=np.int32)
    try:
        tasks = []
        for q in range(len(queries)):
            roots, root_labels, cand, plan, column, nc = queries[q]
            tu, tv, tr, tt, made = phases._query_tasks(us, vs, labels, ranks, roots,
                                                       root_labels, cand, plan[10], 2)
            tasks += [(q, tu[t], tv[t], tr[t], tt[t]) for t in range(max(made, 0))]
        weights = [float(graph.deg[u]) * graph.deg[v] for _, u, v, _, _ in tasks]
        most = executor.PIECES_PER_THREAD * args.threads
        share = max(sum(weights) / most, 1.0)
        scratch = search.new_scratch(6, graph.max_degree + 1)
        for (q, u, v, r, t), weight in zip(tasks, weights, strict=True):
            roots, root_labels, cand, plan, column, nc = queries[q]
            leaves = (column, nc, updates.start, updates.count) + upd
            if args.split_all:
                parts = args.threads
            elif weight >= executor.HEAVY_TASK_WEIGHT:     # as count_phase
                parts = min(most, max(args.threads, int(np.ceil(weight / share))))
            else:
                parts = 1
            for part in range(parts):
                t0 = time.perf_counter()
                search._search(u, v, r, t, arrays, cand, plan, leaves, scratch, None,
                                     no_out, np.int64(0), np.int64(0), False, np.int64(part),
                                     np.int64(parts))
                seconds = time.perf_counter() - t0
                pieces.append((weight, seconds))
                if parts == 1:
                    unsplit.append((weight, seconds))
    finally:
        phases._unmark_updates(us, vs, marks[1], marks[2], arrays, updates.count)
    return pieces, unsplit


def _split_cost(args, engine, queries, held_out) -> None:
    """One-thread time of count_phase on each of the heaviest held-out edges (inserted
    first), whole and split; the counts must not change."""
    graph = engine.graph
    everything, _ = batches(held_out, len(held_out.a), 1, 0)
    engine.apply(everything[0])
    engine._updates.reserve(graph.label.shape[0])
    us = graph.ids.lookup(held_out.a).astype(np.int32)
    vs = graph.ids.lookup(held_out.b).astype(np.int32)
    weight = graph.deg[us].astype(np.float64) * graph.deg[vs]
    labels = np.zeros(1, dtype=np.int32)

    def run(i: int, pieces: int) -> tuple[float, list[int]]:
        t0 = time.perf_counter()
        totals = phases.count_phase(
            queries, us[i:i + 1], vs[i:i + 1], labels, np.zeros(1, dtype=np.int32),
            np.int64(1), 0, executor._graph_arrays(graph),
            engine._updates.start, engine._updates.count, graph.directed, graph.max_degree, 0.0,
            np.int64(pieces), np.int64(pieces), np.int64(1), np.int64(0), np.int64(1 << 40),
            False, executor._NO_TRACE)
        return time.perf_counter() - t0, totals[:, 0].tolist()

    order = np.argsort(-weight)
    run(order[0], 1)        # compile
    for i in order[:args.heaviest]:
        found = {pieces: run(i, pieces) for pieces in (1, 4, 16, 64)}
        whole, counts = found[1]
        assert all(c == counts for _, c in found.values()), "splitting changed a count"
        print(f"deg(u)*deg(v) {weight[i]:.3g}: whole {whole * 1e3:.2f} ms, "
              f"{sum(counts):,} matches; 4 / 16 / 64 pieces: "
              + " / ".join(f"{found[p][0] / whole:.2f}x" for p in (4, 16, 64)), flush=True)


def _makespan(pieces, threads: int) -> float:
    """count_phase's schedule without the workers' giving: pieces by weight, each to the
    worker that is free first."""
    order = sorted(range(len(pieces)), key=lambda k: -pieces[k][0])
    free = [0.0] * threads
    for k in order:
        heapq.heappush(free, heapq.heappop(free) + pieces[k][1])
    return max(free)


if __name__ == "__main__":
    main()
