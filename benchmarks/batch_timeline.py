"""A timeline of one CUDA batch: the host's phases, the copies and kernels under them, and
the GPU's idle time (issue 20, item 5).

    python -m benchmarks.batch_timeline [--kinds dense --queries 1] [--size N] [--repeat R]
        [--rmat-scale S --rmat-edges E]  [--trace-out trace.json] [--json F]

Setup as benchmarks.gh_table (GH with 5 labels, the 10% insertion batch, `--size` takes
its first N edges) with the first `--queries` saved queries of `--kinds` standing, or an
R-MAT graph (`--rmat-scale`) with a `--size`-edge batch of new R-MAT edges and one
4-vertex tree query.  The batch is applied and undone twice untimed, then `--repeat` times
under PyTorch's profiler (Kineto, over CUPTI: it records every kernel and copy of the
process, CuPy's too), each engine phase marked as a host range.  Per batch, in one clock:
the wall time of `Engine.apply`, the GPU's busy time (the union of kernels, copies and
sets) and idle time, and per host phase its span, the device work that ran inside it and
the launches and copies it issued.  The last batch's phases print as a timeline.

Needs CuPy and PyTorch (the device image has both; PyTorch only here, for its profiler).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.gh_table import DEFAULT_GRAPH, run_header

# The engine's phases, as host ranges (module, attribute path).  Nested ranges are kept:
# the timeline indents them.
PHASES = [
    ("gpu.engine", "Engine.apply"),
    ("gpu.engine", "normalize"),
    ("gpu.cuda.batch_prep", "DevicePrep.edge_changes"),
    ("gpu.engine", "Engine._incremental"),
    ("gpu.engine", "Engine._mutate"),
    ("gpu.cuda.executor", "DeviceMirror.touched"),
    ("gpu.cuda.executor", "DeviceMirror.sync"),
    ("gpu.cuda.device_graph", "PmaGraph._apply"),
    ("gpu.cuda.device_graph", "PmaGraph.device_entry_keys"),
    ("gpu.graph.pma.array", "PackedMemoryArray.apply"),
    ("gpu.graph.pma.device_update", "update_on_device"),
    ("gpu.cuda.device_graph", "PmaGraph._refresh_view"),
    ("gpu.cuda.signatures", "DeviceSignatures.apply"),
    ("gpu.cuda.executor", "DeviceMirror.upload_edges"),
    ("gpu.cuda.executor", "DeviceMirror.set_ranks"),
    ("gpu.cuda.executor", "DeviceMirror.clear_ranks"),
    ("gpu.cuda.executor", "launch_cuda_counts"),
    ("gpu.cuda.shared_launch", "SharedLaunch.__init__"),
    ("gpu.cuda.shared_launch", "SharedLaunch.totals"),
    ("gpu.cuda.executor", "launch_cuda_lists"),
    ("gpu.cuda.executor", "PendingMatches.resolve"),
    ("gpu.pipeline", "PendingBatch.finish"),
]
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
# The host side of a launch or a copy (CUPTI's runtime and driver API records).
API_CATEGORIES = {"cuda_runtime", "cuda_driver"}
APPLY = "Engine.apply"


def mark_phases(record_function, phases=PHASES) -> None:
    """Wrap each phase in a host range named after it (for the life of the process)."""
    for module_name, path in phases:
        owner = importlib.import_module(module_name)
        *outer, name = path.split(".")
        for part in outer:
            owner = getattr(owner, part)
        original = getattr(owner, name)
        if isinstance(original, staticmethod):
            original = original.__func__

        def wrapped(*args, _original=original, _label=path, **kwargs):
            with record_function(_label):
                return _original(*args, **kwargs)
        functools.update_wrapper(wrapped, original)
        if isinstance(owner.__dict__.get(name), staticmethod):
            wrapped = staticmethod(wrapped)
        setattr(owner, name, wrapped)


def _union(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by the intervals."""
    total, end = 0.0, -float("inf")
    for lo, hi in sorted(intervals):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


def _clip(intervals, lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi]


def summarize(events: list[dict]) -> list[dict]:
    """Per `Engine.apply` range of a Chrome trace's events (ts and dur in µs): its wall,
    the GPU's busy and idle time inside it, the device work by kind and name, and each
    host phase (nested ranges with their depth) with the busy time inside its span and
    the launches and copies it issued."""
    ranges = [e for e in events if e.get("cat") == "user_annotation" and "dur" in e]
    device = [(float(e["ts"]), float(e["ts"]) + float(e["dur"]), e)
              for e in events if e.get("cat") in DEVICE_CATEGORIES and "dur" in e]
    api = [(float(e["ts"]), e) for e in events if e.get("cat") in API_CATEGORIES]
    batches = []
    for top in sorted((e for e in ranges if e["name"] == APPLY), key=lambda e: e["ts"]):
        lo, hi = float(top["ts"]), float(top["ts"]) + float(top["dur"])
        inside = [(a, b) for a, b, _ in device if b > lo and a < hi]
        busy = _union(_clip(inside, lo, hi))
        by_name: dict[str, list[float]] = {}
        for a, b, e in device:
            if b > lo and a < hi:
                by_name.setdefault(f"{e['cat']}: {e['name']}", []).append(b - a)
        phases = []
        nested = sorted((e for e in ranges if lo <= float(e["ts"]) and
                         float(e["ts"]) + float(e["dur"]) <= hi and e is not top),
                        key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack: list[float] = []
        for e in nested:
            a, b = float(e["ts"]), float(e["ts"]) + float(e["dur"])
            while stack and stack[-1] <= a:
                stack.pop()
            calls = [x for t, x in api if a <= t <= b]
            phases.append({
                "phase": e["name"], "depth": len(stack) + 1, "start_ms": (a - lo) / 1e3,
                "ms": (b - a) / 1e3, "gpu_busy_ms": _union(_clip(inside, a, b)) / 1e3,
                "launches": sum("Launch" in x["name"] for x in calls),
                "copies": sum("emcpy" in x["name"] for x in calls),
                "syncs": sum("ynchronize" in x["name"] for x in calls)})
            stack.append(b)
        work = sorted(((name, len(d), sum(d) / 1e3) for name, d in by_name.items()),
                      key=lambda w: -w[2])
        batches.append({"wall_ms": (hi - lo) / 1e3, "gpu_busy_ms": busy / 1e3,
                        "gpu_idle_ms": (hi - lo - busy) / 1e3,
                        "kernels": sum(n for name, n, _ in work if name.startswith("kernel")),
                        "copies": sum(n for name, n, _ in work if "memcpy" in name),
                        "phases": phases,
                        "device_work": [{"name": n, "count": c, "ms": ms}
                                        for n, c, ms in work]})
    return batches


def _gh_setup(args):
    from benchmarks.phase_profile import gh_batch
    from gpu.io.graphs import read_query
    from gpu.plan.query import QueryGraph
    initial, batch, undo = gh_batch(args.graph, args.size)
    queries = []
    for kind in args.kinds:
        for i in range(args.queries):
            path = args.queries_dir / f"{kind}_{i}.graph"
            queries.append(QueryGraph.from_labeled(read_query(path), path.stem))
    return initial, batch, undo, queries


def _rmat_setup(args):
    from benchmarks.querygen import generate_queries
    from benchmarks.scale_bench import edge_stream, rmat_graph
    from gpu.io.records import DELETE_EDGE, INSERT_EDGE, LabeledGraph
    from gpu.plan.query import QueryGraph
    size = args.size or 1_000_000
    src, dst = rmat_graph(args.rmat_scale, args.rmat_edges + size, 0)
    n = 1 << args.rmat_scale
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, n).astype(np.int32)
    initial = LabeledGraph(np.arange(n, dtype=np.int64), labels, src[size:], dst[size:],
                           np.zeros(len(src) - size, dtype=np.int32))
    batch = edge_stream(INSERT_EDGE, src[:size], dst[:size])
    undo = edge_stream(DELETE_EDGE, src[:size], dst[:size])
    query = generate_queries(initial, "tree", 4, 1, 0)[0]
    return initial, batch, undo, [QueryGraph.from_labeled(query.graph, "tree_0")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.batch_timeline",
                                description=__doc__.split("\n", 1)[0])
    p.add_argument("--graph", type=Path, default=DEFAULT_GRAPH)
    p.add_argument("--queries-dir", type=Path, default=Path(__file__).resolve().parents[1]
                   / "bench-out" / "queries" / "gh_k6_seed0_labels5x0")
    p.add_argument("--kinds", nargs="+", default=["dense"])
    p.add_argument("--queries", type=int, default=1, help="queries of each kind standing")
    p.add_argument("--size", type=int, default=0,
                   help="edges per batch (GH default: the whole 10%% batch; R-MAT 1M)")
    p.add_argument("--rmat-scale", type=int, default=0,
                   help="an R-MAT graph of 2^S vertices instead of GH")
    p.add_argument("--rmat-edges", type=int, default=25_000_000)
    p.add_argument("--repeat", type=int, default=5, help="batches traced (default 5)")
    p.add_argument("--device-graph", default="pma")
    p.add_argument("--no-leaf-counts", action="store_true",
                   help="ablation: enumerate counted leaf tails instead of counting them")
    p.add_argument("--no-leaf-groups", action="store_true",
                   help="ablation: search leaf-rooted tasks one by one, not grouped")
    p.add_argument("--leaf-count-degree", type=int,
                   help="count leaf tails whose parent has at least this many neighbours "
                   "(default: EngineConfig's)")
    p.add_argument("--trace-out", type=Path, help="write the Chrome trace here")
    p.add_argument("--json", type=Path, help="append the summary as one JSON line")
    args = p.parse_args(argv)
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function
    except ImportError:
        sys.exit("error: batch_timeline needs PyTorch for its profiler (the device image has it)")
    from gpu.config import EngineConfig
    from gpu.engine import Engine

    header = run_header("cuda", "benchmarks.batch_timeline")
    print(json.dumps(header), flush=True)
    initial, batch, undo, queries = (_rmat_setup if args.rmat_scale else _gh_setup)(args)
    engine = Engine(initial, backend="cuda",
                    config=EngineConfig(device_graph=args.device_graph,
                                        leaf_counts=not args.no_leaf_counts,
                                        leaf_groups=not args.no_leaf_groups,
                                        leaf_count_degree=(
                                            EngineConfig.leaf_count_degree
                                            if args.leaf_count_degree is None
                                            else args.leaf_count_degree)))
    for q in queries:
        engine.add_query(q)
    counts = set()
    for _ in range(2):      # compiles, learns the sizes: not charged to a traced batch
        res = engine.apply(batch)
        counts.add(tuple(sorted((qid, d.positive) for qid, d in res.queries.items())))
        engine.apply(undo)
    torch.cuda.init()
    mark_phases(record_function)
    walls, batches = [], []
    with contextlib.ExitStack() as stack:
        prof = stack.enter_context(profile(activities=[ProfilerActivity.CPU,
                                                       ProfilerActivity.CUDA]))
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            res = engine.apply(batch)
            walls.append(time.perf_counter() - t0)
            counts.add(tuple(sorted((qid, d.positive) for qid, d in res.queries.items())))
            engine.apply(undo)
    assert len(counts) == 1, f"the batch's counts differ between runs: {counts}"
    trace = args.trace_out or Path("/tmp/batch_timeline_trace.json")
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    # Every other Engine.apply is the undo: keep the batch's.
    batches = summarize(events)[0::2]
    if not batches:
        sys.exit("error: the trace has no Engine.apply range")
    if not any(b["kernels"] for b in batches):
        print("warning: the profiler recorded no kernel (CUPTI saw none of CuPy's work)",
              file=sys.stderr)
    last = batches[-1]
    med = {k: statistics.median(b[k] for b in batches)
           for k in ("wall_ms", "gpu_busy_ms", "gpu_idle_ms", "kernels", "copies")}
    what = (f"R-MAT 2^{args.rmat_scale}, {len(batch):,}-edge insertion batch"
            if args.rmat_scale else f"GH, {len(batch):,}-edge insertion batch")
    print(f"{what}, {len(queries)} quer{'y' if len(queries) == 1 else 'ies'} standing; "
          f"medians of {len(batches)} traced batches: apply wall {med['wall_ms']:.2f} ms "
          f"(untraced {statistics.median(walls) * 1e3:.2f} ms incl. the undo's absence of "
          f"tracing), GPU busy {med['gpu_busy_ms']:.2f} ms, idle {med['gpu_idle_ms']:.2f} ms "
          f"({med['gpu_idle_ms'] / med['wall_ms']:.0%}), {med['kernels']:.0f} kernels, "
          f"{med['copies']:.0f} copies", flush=True)
    print("\nlast batch, host phases (start and span in ms; GPU busy inside; launches, "
          "copies and syncs issued):")
    print(f"{'phase':48s} {'start':>8s} {'span':>8s} {'gpu':>8s} {'launch':>6s} "
          f"{'copy':>5s} {'sync':>5s}")
    for ph in last["phases"]:
        name = "  " * (ph["depth"] - 1) + ph["phase"]
        print(f"{name:48s} {ph['start_ms']:8.3f} {ph['ms']:8.3f} {ph['gpu_busy_ms']:8.3f} "
              f"{ph['launches']:6d} {ph['copies']:5d} {ph['syncs']:5d}")
    print("\nlast batch, device work by name (count, ms):")
    for w in last["device_work"][:25]:
        print(f"  {w['count']:5d} {w['ms']:9.3f}  {w['name'][:100]}")
    if args.json:
        with args.json.open("a") as f:
            f.write(json.dumps({**header, "what": what, "queries": len(queries),
                                "medians": med, "batches": batches}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
