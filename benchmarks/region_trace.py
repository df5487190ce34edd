"""Where count_phase's time goes: its parallel region traced piece by piece, per thread count.

    python -m benchmarks.region_trace [--size 100] [--batches 100] [--warm 30]
                                      [--threads 1 8 16] [--slowest 6]

apply_profile's setup (GH, 5 random labels, 10% of the edges held out and cycled, the 10
dense 6-vertex queries counted), one engine per thread count, every batch applied to each
in turn (the counts must agree).  count_phase gets a trace (its `trace` argument: each
piece's task, worker thread and cycle counts at start and end), from which, per batch:

  wall      Engine.apply
  outside   wall minus the count_phase calls (graph update, tables, results)
  setup     the calls minus their regions (marking the updates, making tasks, dealing)
  span      the regions, from before the first piece to after the last
  work      the pieces' time summed (work at T threads over work at 1: what running
            together costs each piece: shared caches, memory, the machine's other load)
  busiest   the worker thread with the most piece time: span - busiest is waiting
  task      the longest task (its pieces summed): no schedule of those pieces beats it

and for the slowest batches the three largest sections of apply_profile's instrumented
round (own time, ms).

The quantiles are over batches; the slowest batches (by wall at the most threads) are
listed one by one.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import numba
import numpy as np

from benchmarks.apply_profile import Sections, add_setup_args, batches, gh_engine, instrument
from benchmarks.gh_table import INSERT_FRACTION
from gpu.cpu import phases
from gpu.config import EngineConfig
from gpu.cpu.cycles import cycles_per_second
from gpu.io.graphs import load_graph
from gpu.io.streams import split_stream

FIELDS = ("wall", "outside", "setup", "span", "work", "busiest", "task")
# Rows of the trace buffer: a phase with more pieces than this is timed but not traced.
TRACE_ROWS = 400_000


class Recorder:
    """Wraps phases.count_phase to pass a trace and keep each call's rows."""

    def __init__(self) -> None:
        self.buffer = np.zeros((TRACE_ROWS, 6), dtype=np.int64)
        self.calls: list[tuple[float, np.ndarray | None]] = []
        self.untraced = 0
        real = phases.count_phase

        def traced(*args):
            self.buffer[0] = 0
            t0 = time.perf_counter()
            out = real(*args[:-1], self.buffer)
            seconds = time.perf_counter() - t0
            rows = None
            if self.buffer[0, 4] != 0:
                rows = self.buffer[:self.buffer[0, 0] + 1].copy()
            elif self.buffer[0, 0] == 0:
                self.untraced += 1
            self.calls.append((seconds, rows))
            return out
        phases.count_phase = traced


def measure(wall: float, calls, hz: float) -> tuple[dict, dict]:
    """The FIELDS of one batch (seconds), and its tasks' times keyed (call, task)."""
    out = dict.fromkeys(FIELDS, 0.0)
    out["wall"] = wall
    tasks: dict[tuple[int, int], float] = defaultdict(float)
    for c, (seconds, rows) in enumerate(calls):
        out["outside"] -= seconds
        if rows is None:
            continue
        head, pieces = rows[0], rows[1:]
        span = (head[5] - head[4]) / hz
        took = (pieces[:, 5] - pieces[:, 4]) / hz
        out["setup"] += seconds - span
        out["span"] += span
        out["work"] += took.sum()
        if len(pieces):
            out["busiest"] += np.bincount(pieces[:, 3], weights=took).max()
        for task, t in zip(pieces[:, 0].tolist(), took.tolist(), strict=True):
            tasks[(c, task)] += t
    out["outside"] += wall
    out["task"] = max(tasks.values(), default=0.0)
    return out, tasks


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.region_trace",
                                description=__doc__.split("\n", 1)[0])
    add_setup_args(p, size=100)
    p.add_argument("--batches", type=int, default=100)
    p.add_argument("--warm", type=int, default=30, help="batches applied first, not traced")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 8, 16])
    p.add_argument("--slowest", type=int, default=6, help="batches listed one by one")
    args = p.parse_args(argv)

    initial, held_out = split_stream(load_graph(args.graph, num_labels=5, seed=0),
                                     INSERT_FRACTION, 0)
    # shared_region_threads=1: every thread count, one included, runs the region.
    engines = [gh_engine(args, initial, EngineConfig(shared_region_threads=1))
               for _ in args.threads]
    recorder = Recorder()
    sections = Sections()
    hz = cycles_per_second()
    print(f"numba {numba.__version__}, counter {hz / 1e9:.3f} GHz", flush=True)

    def apply(e: int, batch):
        numba.set_num_threads(args.threads[e])
        recorder.calls = []
        sections.own.clear()
        t0 = time.perf_counter()
        result = engines[e].apply(batch)
        return result, time.perf_counter() - t0

    warm, position = batches(held_out, args.size, args.warm, 0)
    for batch in warm:
        for e in range(len(engines)):
            apply(e, batch)
    recorder.untraced = 0
    # After the warm-up: the wrappers replace compiled functions that others call, which
    # must have been compiled (with what they call) before.
    instrument(sections)
    todo, _ = batches(held_out, args.size, args.batches, position)
    rows: list[list[dict]] = [[] for _ in engines]      # [engine][batch]
    inflation: list[list[float]] = [[] for _ in engines]
    for j, batch in enumerate(todo):
        counts, tasks = set(), {}
        for k in range(len(engines)):
            e = (j + k) % len(engines)
            result, wall = apply(e, batch)
            fields, tasks[e] = measure(wall, recorder.calls, hz)
            fields["sections"] = sorted(sections.own.items(), key=lambda kv: -kv[1])[:3]
            rows[e].append(fields)
            counts.add(tuple(sorted((q, d.positive, d.negative)
                                    for q, d in result.queries.items())))
        assert len(counts) == 1, f"batch {j}: the engines' counts differ"
        for e in range(len(engines)):
            if tasks[e] and tasks[0]:
                inflation[e].append(rows[e][-1]["work"] / max(rows[0][-1]["work"], 1e-9))
    if recorder.untraced:
        print(f"({recorder.untraced} region calls had more pieces than the trace holds)")

    print(f"\n{args.batches} batches of {args.size} edges; ms at the median / p90 / p99 / "
          f"max over batches")
    for e, t in enumerate(args.threads):
        print(f"{t:3d} threads:")
        for name in FIELDS:
            v = np.array([r[name] for r in rows[e]]) * 1e3
            print(f"    {name:8s} " + " / ".join(f"{x:7.2f}" for x in
                                                 np.percentile(v, [50, 90, 99, 100])))
        if e and inflation[e]:
            print(f"    work over {args.threads[0]} thread(s)' work: median "
                  f"{statistics.median(inflation[e]):.2f}, p90 "
                  f"{np.percentile(inflation[e], 90):.2f}")
        span = np.array([r["span"] for r in rows[e]])
        work = np.array([r["work"] for r in rows[e]])
        if span.sum() > 0:
            print(f"    workers busy {work.sum() / (span.sum() * t):.0%} of the regions' span")

    last = len(engines) - 1
    slowest = np.argsort([-r["wall"] for r in rows[last]])[:args.slowest]
    print(f"\nslowest batches at {args.threads[last]} threads, ms "
          f"({', '.join(FIELDS)}), each thread count:")
    for j in slowest:
        print(f"  batch {j}:")
        for e, t in enumerate(args.threads):
            r = rows[e][j]
            print(f"    {t:3d}: " + "  ".join(f"{r[name] * 1e3:7.2f}" for name in FIELDS)
                  + "   " + ", ".join(f"{label} {own * 1e3:.1f}"
                                      for label, own in r["sections"]))


if __name__ == "__main__":
    main()
