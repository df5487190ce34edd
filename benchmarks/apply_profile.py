"""Where a small batch's `Engine.apply` time goes: the service benchmark's stream, in-process.

    python -m benchmarks.apply_profile [--size 1] [--batches 3000] [--rounds 3] [--cprofile]
    python -m benchmarks.apply_profile --size 100 --shared-region-threads 4 0
    python -m benchmarks.apply_profile --queued 1 8 --group-region-edges 4 64
    python -m benchmarks.apply_profile --backend cuda [--device-graph lists] --cprofile
    python -m benchmarks.apply_profile --backend cuda --queued 1 16 --cprofile

Same setup as benchmarks.service_bench (GH, 5 random labels, 10% of the edges held out,
the 10 dense 6-vertex queries standing, counts only) without HTTP or the store: batches
of `--size` edges cycle through the held-out edges (all inserted, then all deleted), as
the service benchmark posts them.  Prints, per round, the mean / median / p99 of
`Engine.apply`, then one instrumented round: each wrapped function's own time (its
callees' wrapped time left out) per batch.  The wrappers cost ~0.5 us a call, so the
instrumented round's total is a little above the plain ones.  `--cprofile` adds a cProfile
listing (which inflates every Python call several times over: use it for call counts).
"""
from __future__ import annotations

import argparse
import dataclasses
import cProfile
import functools
import inspect
import io
import os
import pstats
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path

import numba
import numpy as np

from benchmarks.gh_table import DEFAULT_GRAPH, INSERT_FRACTION
from benchmarks.service_bench import REPO
from gpu import engine as engine_module
from gpu import pipeline
from gpu.cpu import executor
from gpu.graph import lists
from gpu.plan import leaf_counts, signatures, upkeep
from gpu.config import DEVICE_GRAPHS, EngineConfig
from gpu.engine import Engine
from gpu.io.graphs import load_graph, read_query
from gpu.io.records import DELETE_EDGE, INSERT_EDGE, NO_LABEL, UpdateStream
from gpu.io.streams import split_stream
from gpu.plan.query import QueryGraph


def batches(held_out: UpdateStream, size: int, count: int, position: int = 0):
    """`count` UpdateStreams of `size` records continuing the insert-all/delete-all cycle."""
    n = len(held_out.a)
    out = []
    for _ in range(count):
        steps = np.arange(position, position + size)
        position += size
        index, inserting = steps % n, (steps // n) % 2 == 0
        out.append(UpdateStream(np.where(inserting, INSERT_EDGE, DELETE_EDGE),
                                held_out.a[index], held_out.b[index],
                                np.where(inserting, 0, NO_LABEL), steps + 1, "profile"))
    return out, position


class Sections:
    """Own time per wrapped function (a stack per thread subtracts the wrapped callees).
    Without `wrap_compiled`, Numba's compiled functions are left as they are: a compiled
    caller typed after the wrap (a cold cache) would find a Python function there."""

    def __init__(self, wrap_compiled: bool = True) -> None:
        self.wrap_compiled = wrap_compiled
        self.own: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._local = threading.local()     # .stack: callees' time of each open call

    def reset(self) -> None:
        """Start the counts afresh (calls open now still add their own time when done)."""
        self.own.clear()
        self.calls.clear()

    def wrap(self, owner, name: str, label: str | None = None) -> None:
        fn = getattr(owner, name, None)
        if fn is None:      # not in this version of the code
            return
        if not self.wrap_compiled and hasattr(fn, "py_func"):     # a Numba dispatcher
            return
        label = label or f"{getattr(owner, '__name__', owner)}.{name}"
        static = isinstance(inspect.getattr_static(owner, name, None), staticmethod)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            stack = getattr(self._local, "stack", None)
            if stack is None:
                stack = self._local.stack = []
            stack.append(0.0)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - t0
                inner = stack.pop()
                self.own[label] += elapsed - inner
                self.calls[label] += 1
                if stack:
                    stack[-1] += elapsed
        setattr(owner, name, staticmethod(timed) if static else timed)


def instrument(sections: Sections) -> None:
    wrap = sections.wrap
    try:    # the CUDA executor's steps, where CuPy is installed
        from gpu.cuda import device_graph, executor as cuda_executor, signatures as cuda_sig
        from gpu.graph.pma import array as pma_array, view as pma_view
    except ImportError:
        pass
    else:
        for name in ("sync", "set_ranks", "clear_ranks", "touched"):
            wrap(cuda_executor.DeviceMirror, name, f"DeviceMirror.{name}")
        for name in ("_apply", "_refresh_view", "_label_slots", "stored_labels",
                     "device_entry_keys"):
            wrap(device_graph.PmaGraph, name, f"PmaGraph.{name}")
        wrap(cuda_sig.DeviceSignatures, "apply", "DeviceSignatures.apply")
        wrap(device_graph.DeviceEdgeGraph, "follow_degrees", "DeviceEdgeGraph.follow_degrees")
        from gpu.graph.pma import device_update
        for name in ("update_on_device", "locate", "locate_small", "update_small"):
            wrap(device_update, name, f"device_update.{name}")
        wrap(pma_array.PackedMemoryArray, "apply", "PackedMemoryArray.apply")
        wrap(pma_view.ListView, "refresh", "ListView.refresh")
        wrap(cuda_executor, "launch_cuda_counts", "launch_cuda_counts")
        wrap(cuda_executor.PendingMatches, "resolve", "PendingMatches.resolve (waits)")
        wrap(device_graph.DeviceEdgeGraph, "find_edge", "DeviceEdgeGraph.find_edge")
        from gpu.cuda import batch_prep, small_phase
        wrap(batch_prep.DevicePrep, "edge_changes", "DevicePrep.edge_changes (device)")
        wrap(small_phase.SmallPhase, "launch", "SmallPhase.launch")
        wrap(small_phase.PendingSmall, "per_edge", "PendingSmall.per_edge (waits)")
        wrap(small_phase.SmallLookup, "values", "SmallLookup.values (waits)")
    wrap(engine_module, "normalize", "batch.normalize")
    for name in ("_start", "_leaf_edges", "_query_arrays", "_incremental", "_count_shared",
                 "_mutate"):
        wrap(Engine, name, f"Engine.{name}")
    wrap(pipeline.PendingBatch, "finish", "PendingBatch.finish")
    wrap(engine_module, "count_small_cpu", "count_small_cpu (search, compiled)")
    wrap(engine_module, "count_phase_cpu", "count_phase_cpu (search, parallel)")
    wrap(pipeline, "count_small_cpu", "count_small_cpu (a batch group's search)")
    wrap(pipeline, "count_phase_cpu", "count_phase_cpu (a batch group's region)")
    wrap(engine_module, "execute_cpu", "execute_cpu (a query handed back or listed)")
    wrap(engine_module, "small_query", "executor.small_query")
    wrap(executor.phases, "count_small", "phases.count_small (compiled)")
    wrap(upkeep.QueryArrays, "get", "QueryArrays.get")
    wrap(upkeep, "leaf_edges", "upkeep.leaf_edges (compiled)")
    wrap(upkeep, "refresh_candidates", "upkeep.refresh_candidates (compiled)")
    wrap(lists.DynamicGraph, "set_ranks", "DynamicGraph.set_ranks")
    wrap(lists.DynamicGraph, "insert_edges", "DynamicGraph.insert_edges")
    wrap(lists.DynamicGraph, "delete_edges", "DynamicGraph.delete_edges")
    wrap(lists.DynamicGraph, "delete_vertices", "DynamicGraph.delete_vertices")
    wrap(lists.DynamicGraph, "edge_positions", "DynamicGraph.edge_positions")
    wrap(leaf_counts.UpdateIndex, "fill", "UpdateIndex.fill")
    wrap(leaf_counts.UpdateIndex, "clear", "UpdateIndex.clear")
    wrap(signatures.SignatureTable, "encode", "SignatureTable.encode")
    wrap(signatures.SignatureTable, "edges_changed", "SignatureTable.edges_changed")


def add_setup_args(p: argparse.ArgumentParser, size: int) -> None:
    """The setup's options: the graph, the dense queries, the edges per batch."""
    p.add_argument("--graph", type=Path, default=DEFAULT_GRAPH)
    p.add_argument("--queries-dir", type=Path,
                   default=REPO / "bench-out" / "queries" / "gh_k6_seed0_labels5x0")
    p.add_argument("--queries", type=int, default=10)
    p.add_argument("--size", type=int, default=size, help="edges per batch")
    p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--device-graph", choices=DEVICE_GRAPHS, default=EngineConfig.device_graph,
                   help="the CUDA executor's graph layout")
    p.add_argument("--share-every", type=int, default=EngineConfig.share_every,
                   help="cuda tuning: advance steps between a busy warp's looks at idle "
                        "warps (EngineConfig.share_every)")
    p.add_argument("--small-share-every", type=int, default=EngineConfig.small_share_every,
                   help="cuda tuning: the same in small phases (EngineConfig.small_share_every)")


def gh_engine(args, initial, config: EngineConfig) -> Engine:
    """An engine (`--backend`) on `initial` with the first `args.queries` dense queries
    standing."""
    if args.backend == "cuda":
        config = dataclasses.replace(config, device_graph=args.device_graph,
                                     share_every=args.share_every,
                                     small_share_every=args.small_share_every)
    engine = Engine(initial, backend=args.backend, config=config)
    for i in range(args.queries):
        path = args.queries_dir / f"dense_{i}.graph"
        engine.add_query(QueryGraph.from_labeled(read_query(path), path.stem))
    return engine


def compare(args, initial, held_out) -> None:
    """One engine per --shared-region-threads value, every batch applied to each in turn
    (the order rotating), so that they see the same graph and the same spells of the
    machine's speed; the counts must agree."""
    if args.heavy_task_weights:
        variants = [(f"shared_region_threads={args.shared_region_threads[0]}, "
                     f"HEAVY_TASK_WEIGHT={w:g}", args.shared_region_threads[0], w, None)
                    for w in args.heavy_task_weights]
    elif args.threads:
        variants = [(f"shared_region_threads={args.shared_region_threads[0]}, {t} threads",
                     args.shared_region_threads[0], executor.HEAVY_TASK_WEIGHT, t)
                    for t in args.threads]
    else:
        variants = [(f"shared_region_threads={n}", n, executor.HEAVY_TASK_WEIGHT, None)
                    for n in args.shared_region_threads]
    engines = [gh_engine(args, initial, EngineConfig(shared_region_threads=n))
               for _, n, _, _ in variants]
    threads = numba.get_num_threads()

    def apply(e: int, batch):
        executor.HEAVY_TASK_WEIGHT = variants[e][2]
        numba.set_num_threads(variants[e][3] or threads)
        return engines[e].apply(batch)
    warm, position = batches(held_out, args.size, args.warm, 0)
    for batch in warm:
        for e in range(len(engines)):
            apply(e, batch)
    for r in range(args.rounds):
        todo, position = batches(held_out, args.size, args.batches, position)
        seconds = [[] for _ in engines]
        for j, batch in enumerate(todo):
            counts = set()
            for k in range(len(engines)):
                e = (j + k) % len(engines)
                t0 = time.perf_counter()
                result = apply(e, batch)
                seconds[e].append(time.perf_counter() - t0)
                counts.add(tuple(sorted((q, d.positive, d.negative)
                                        for q, d in result.queries.items())))
            assert len(counts) == 1, f"batch {j}: the engines' counts differ"
        for (label, _, _, _), s in zip(variants, seconds, strict=True):
            q = statistics.quantiles(s, n=100)
            print(f"round {r + 1}, {label}: {len(s)} batches of "
                  f"{args.size}: mean {np.mean(s) * 1e3:.3f} ms, median "
                  f"{statistics.median(s) * 1e3:.3f} ms, p99 {q[98] * 1e3:.3f} ms",
                  flush=True)


def compare_queued(args, initial, held_out) -> None:
    """Batches `--queued K` at a time: K started (Engine.start) before the first is
    finished, as the service's engine thread takes the batches queued behind each other,
    so that they form batch groups; one engine per (K, --group-region-edges R), the same
    batches through each in turn.  Prints the time per batch (the K batches' time / K)."""
    variants = [(k, r) for k in args.queued for r in args.group_region_edges]
    engines = [gh_engine(args, initial, EngineConfig(group_region_edges=r))
               for _, r in variants]
    span = int(np.lcm.reduce(args.queued))

    def run(e: int, todo) -> tuple[list, list[float]]:
        k = variants[e][0]
        results, seconds = [], []
        for i in range(0, len(todo), k):
            t0 = time.perf_counter()
            started = [engines[e].start(batch) for batch in todo[i:i + k]]
            results += [s.finish() for s in started]
            seconds.append((time.perf_counter() - t0) / len(started))
        return results, seconds

    position = 0
    for r in range(args.rounds + 1):     # round 0 warms up
        count = args.warm if r == 0 else args.batches
        seconds: list[list[float]] = [[] for _ in engines]
        for j in range(0, count, span):
            todo, position = batches(held_out, args.size, span, position)
            counts = set()
            for n in range(len(engines)):
                e = (j // span + n) % len(engines)
                results, s = run(e, todo)
                seconds[e] += s
                counts.add(tuple(tuple(sorted((q, d.positive, d.negative)
                                              for q, d in res.queries.items()))
                                 for res in results))
            assert len(counts) == 1, f"batches {j}..: the engines' counts differ"
        if r == 0:
            continue
        for (k, g), s in zip(variants, seconds, strict=True):
            print(f"round {r}, {k} queued, group_region_edges={g}: {count} batches of "
                  f"{args.size}: {1 / np.mean(s):,.0f} batches/s (mean {np.mean(s) * 1e3:.3f}"
                  f" ms a batch, median of the groups' {statistics.median(s) * 1e3:.3f} ms)",
                  flush=True)
    if args.cprofile:   # the first variant's batches once more, under cProfile
        todo, position = batches(held_out, args.size, args.batches, position)
        profiler = cProfile.Profile()
        profiler.enable()
        run(0, todo)
        profiler.disable()
        print(f"\ncProfile of {len(todo)} batches, {variants[0][0]} queued")
        print_profile(profiler, args.top)


def print_profile(profiler: cProfile.Profile, top: int) -> None:
    """The `top` functions by own time, then by time with their callees."""
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(top)
        print(out.getvalue())


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.apply_profile",
                                description=__doc__.split("\n", 1)[0])
    add_setup_args(p, size=1)
    p.add_argument("--batches", type=int, default=3000, help="per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cprofile", action="store_true")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--shared-region-threads", type=int, nargs="+", metavar="N",
                   help="compare engines with these EngineConfig.shared_region_threads "
                        "(0: never the parallel shared call) on the same batches, each "
                        "batch applied to every engine in turn, then stop")
    p.add_argument("--heavy-task-weights", type=float, nargs="+", metavar="W",
                   help="with --shared-region-threads N: compare engines (all with N) "
                        "whose batches run with these executor.HEAVY_TASK_WEIGHT values "
                        "(0: every task of a region phase split)")
    p.add_argument("--threads", type=int, nargs="+", metavar="T",
                   help="with --shared-region-threads N: compare engines (all with N) "
                        "whose batches run on T Numba threads (numba.set_num_threads)")
    p.add_argument("--warm", type=int, default=200,
                   help="batches applied first (by each engine), not timed")
    p.add_argument("--queued", type=int, nargs="+", metavar="K",
                   help="compare engines that take the batches K at a time (batch groups, "
                        "Engine.start), for each K and --group-region-edges value, then stop")
    p.add_argument("--group-region-edges", type=int, nargs="+", metavar="R",
                   default=[EngineConfig().group_region_edges],
                   help="with --queued: EngineConfig.group_region_edges values")
    args = p.parse_args(argv)

    initial, held_out = split_stream(load_graph(args.graph, num_labels=5, seed=0),
                                     INSERT_FRACTION, 0)
    print(f"numba {numba.__version__}, {numba.get_num_threads()} threads, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}", flush=True)
    if args.shared_region_threads:
        compare(args, initial, held_out)
        return
    if args.queued:
        compare_queued(args, initial, held_out)
        return
    engine = gh_engine(args, initial, EngineConfig())
    position = 0
    warm, position = batches(held_out, args.size, args.warm, position)
    for batch in warm:
        engine.apply(batch)

    def run(label: str) -> list[float]:
        nonlocal position
        todo, position = batches(held_out, args.size, args.batches, position)
        seconds, matches = [], 0
        for batch in todo:
            t0 = time.perf_counter()
            result = engine.apply(batch)
            seconds.append(time.perf_counter() - t0)
            matches += sum(d.positive + d.negative for d in result.queries.values())
        q = statistics.quantiles(seconds, n=100)
        print(f"{label}: {len(seconds)} batches of {args.size}: mean {np.mean(seconds) * 1e3:.3f}"
              f" ms, median {statistics.median(seconds) * 1e3:.3f} ms, p99 {q[98] * 1e3:.3f}"
              f" ms; {matches / len(seconds):,.0f} matches a batch", flush=True)
        return seconds

    for r in range(args.rounds):
        run(f"round {r + 1}")

    sections = Sections()
    instrument(sections)
    seconds = run("instrumented")
    n = len(seconds)
    print(f"\nown time per batch (us), {n} batches; total {np.mean(seconds) * 1e6:.0f} us")
    for label, own in sorted(sections.own.items(), key=lambda kv: -kv[1]):
        print(f"  {own / n * 1e6:8.1f}  {sections.calls[label] / n:5.1f} calls  {label}")

    if args.cprofile:
        todo, position = batches(held_out, args.size, args.batches, position)
        profiler = cProfile.Profile()
        profiler.enable()
        for batch in todo:
            engine.apply(batch)
        profiler.disable()
        print_profile(profiler, args.top)


if __name__ == "__main__":
    main()
