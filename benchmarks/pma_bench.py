"""Benchmark of the device graph's packed memory array on an R-MAT graph.

Loads an undirected R-MAT graph (both directions stored, as the matcher reads them),
then times batches of fresh random edge inserts, deletes of stored edges and mixed
batches of each size, and reports load time, bytes per stored directed edge, and update
throughput (undirected edge updates per second, median over the batches of a size).

    python -m benchmarks.pma_bench --scale 24 --edges 100000000 --batch-sizes 1000000
    python -m benchmarks.pma_bench ... --dist uniform        (inserts spread over all ids)
    python -m benchmarks.pma_bench --xp numpy --scale 14 --edges 100000      (smoke run)
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from gpu.graph.pma.array import PackedMemoryArray
from gpu.graph.pma.layout import PMAConfig, edge_keys, key_dst, key_src


def _xp(name: str):
    if name == "numpy":
        return np
    import cupy
    return cupy


class _Rng:
    """The few random draws the benchmark needs, on NumPy or CuPy (whose RandomState
    has them all)."""

    def __init__(self, xp, seed: int):
        self._rng = np.random.default_rng(seed) if xp is np else xp.random.RandomState(seed)
        self._numpy = xp is np

    def random(self, count: int):
        if self._numpy:
            return self._rng.random(count, dtype=np.float32)
        return self._rng.random_sample(count, dtype=np.float32)

    def integers(self, low: int, high: int, count: int):
        if self._numpy:
            return self._rng.integers(low, high, count)
        return self._rng.randint(low, high, count, dtype=np.int64)

    def permutation(self, n: int):
        return self._rng.permutation(n)


def _sync(xp) -> None:
    if xp is not np:
        xp.cuda.Device().synchronize()


def rmat_pairs(xp, rng, scale: int, count: int, perm, abc=(0.57, 0.19, 0.19)):
    """`count` R-MAT edges (u, v) over 2^scale vertices, ids scrambled by `perm`."""
    a, b, c = abc
    u = xp.zeros(count, dtype=np.int64)
    v = xp.zeros(count, dtype=np.int64)
    for bit in range(scale):
        r = rng.random(count)
        down = r >= a + b
        right = ((r >= a) & (r < a + b)) | (r >= a + b + c)
        u |= down.astype(np.int64) << bit
        v |= right.astype(np.int64) << bit
    return perm[u], perm[v]


def canonical(xp, u, v):
    """Undirected edge keys min -> max, loops dropped."""
    lo, hi = xp.minimum(u, v), xp.maximum(u, v)
    keep = lo != hi
    return edge_keys(xp, lo[keep], hi[keep])


def fresh_edges(xp, rng, args, perm, pma, count: int, taken):
    """`count` undirected edges absent from the graph and from `taken` (sorted keys)."""
    out = xp.zeros(0, dtype=np.uint64)
    while out.size < count:
        want = 2 * (count - out.size) + 1024
        if args.dist == "rmat":
            u, v = rmat_pairs(xp, rng, args.scale, want, perm)
        else:
            u = rng.integers(0, 1 << args.scale, want)
            v = rng.integers(0, 1 << args.scale, want)
        keys = xp.unique(xp.concatenate([out, canonical(xp, u, v)]))
        absent = pma.find(keys) < 0
        at = xp.minimum(xp.searchsorted(taken, keys), taken.size - 1)
        absent &= taken[at] != keys
        out = keys[absent]
    return out[rng.permutation(out.size)[:count]]


def _per_level(stats) -> dict:
    """Mean windows rewritten per batch at each level."""
    out: dict[int, float] = {}
    for st in stats:
        for level, windows, _slots in st.per_level:
            out[level] = out.get(level, 0) + windows / len(stats)
    return {str(k): round(v, 1) for k, v in sorted(out.items())}


def both_directions(xp, keys):
    u, v = key_src(keys), key_dst(keys)
    return xp.concatenate([edge_keys(xp, u, v), edge_keys(xp, v, u)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--xp", choices=("cupy", "numpy"), default="cupy")
    ap.add_argument("--scale", type=int, default=24, help="2^scale vertices")
    ap.add_argument("--edges", type=int, default=100_000_000, help="undirected edges loaded")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1_000_000, 100_000, 10_000])
    ap.add_argument("--batches", type=int, default=7, help="batches per size and kind")
    ap.add_argument("--dist", choices=("rmat", "uniform"), default="rmat",
                    help="where inserted edges fall")
    ap.add_argument("--segment-size", type=int, default=PMAConfig.segment_size)
    ap.add_argument("--labels", type=int, default=5, help="edge labels drawn uniformly")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-kernels", action="store_true",
                    help="the generic array path instead of the CUDA kernels (comparison)")
    ap.add_argument("--block-window", type=int, default=PMAConfig.block_window,
                    help="largest window (slots) merged by one block; larger ones take the "
                         "multi-block kernels (0: every window above the leaves)")
    ap.add_argument("--merge-chunk", type=int, default=PMAConfig.merge_chunk,
                    help="slots per block of the multi-block window merge")
    ap.add_argument("--profile", action="store_true",
                    help="time each phase of a batch (synchronises between phases)")
    ap.add_argument("--check", action="store_true", help="check every invariant at the end")
    ap.add_argument("--json", help="append result lines here")
    args = ap.parse_args(argv)
    xp = _xp(args.xp)
    rng = _Rng(xp, args.seed)
    device = "cpu (numpy)"
    if xp is not np:
        props = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)
        device = props["name"].decode()

    def report(record: dict) -> None:
        record = {"device": device, "scale": args.scale, "dist": args.dist,
                  "kernels": not args.no_kernels, "profile": args.profile,
                  "segment_size": args.segment_size, "block_window": args.block_window,
                  "merge_chunk": args.merge_chunk,
                  "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  **record}
        print(json.dumps(record), flush=True)
        if args.json:
            with open(args.json, "a") as out:
                out.write(json.dumps(record) + "\n")

    # ---- the graph ---------------------------------------------------------------
    t0 = time.perf_counter()
    perm = rng.permutation(1 << args.scale)
    graph = xp.zeros(0, dtype=np.uint64)
    while graph.size < args.edges:
        u, v = rmat_pairs(xp, rng, args.scale, int((args.edges - graph.size) * 1.3) + 1024,
                          perm)
        graph = xp.unique(xp.concatenate([graph, canonical(xp, u, v)]))
    graph = graph[rng.permutation(graph.size)[:args.edges]]
    keys = both_directions(xp, graph)
    labels = rng.integers(0, args.labels, graph.size).astype(np.int32)
    vals = xp.concatenate([labels, labels])
    _sync(xp)
    print(f"generated {graph.size} undirected edges in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr, flush=True)

    pma = PackedMemoryArray(xp, num_vertices=1 << args.scale,
                            config=PMAConfig(segment_size=args.segment_size,
                                             kernels=not args.no_kernels,
                                             block_window=args.block_window,
                                             merge_chunk=args.merge_chunk))
    if xp is not np:
        pool = xp.get_default_memory_pool()
        pool.free_all_blocks()
    _sync(xp)
    t0 = time.perf_counter()
    pma.load(keys, vals)
    _sync(xp)
    load_s = time.perf_counter() - t0
    del keys, vals
    report({"what": "load", "edges": int(graph.size), "directed": pma.num_edges,
            "seconds": round(load_s, 3), "directed_per_s": round(pma.num_edges / load_s),
            "capacity": pma.capacity, "density": round(pma.density(), 4),
            "bytes": pma.memory_bytes(),
            "bytes_per_directed_edge": round(pma.memory_bytes() / pma.num_edges, 2)})

    # ---- batches -------------------------------------------------------------------
    order = rng.permutation(graph.size)         # stored edges, deleted in this order
    deleted = 0
    inserted: list = []                         # batches of fresh keys, deletable later
    taken = xp.sort(graph)      # never re-insert a loaded edge: it may be deleted later
    for size in args.batch_sizes:
        for kind in ("insert", "delete", "mixed"):
            times, stats = [], []
            pma.profile = args.profile
            pma.phase_seconds = {}
            for _ in range(args.batches):
                n_ins = size if kind == "insert" else size // 2 if kind == "mixed" else 0
                n_del = size - n_ins
                ins = fresh_edges(xp, rng, args, perm, pma, n_ins, taken)
                dels = graph[order[deleted:deleted + n_del]]
                deleted += n_del
                ik = both_directions(xp, ins)
                iv = rng.integers(0, args.labels, ins.size).astype(np.int32)
                iv = xp.concatenate([iv, iv])
                dk = both_directions(xp, dels)
                _sync(xp)
                t0 = time.perf_counter()
                st = pma.apply(ik, iv, dk)
                _sync(xp)
                times.append(time.perf_counter() - t0)
                stats.append(st)
                inserted.append(ins)
            median = statistics.median(times)
            report({"what": kind, "batch": size, "batches": len(times),
                    "median_s": round(median, 5), "min_s": round(min(times), 5),
                    "max_s": round(max(times), 5),
                    "edges_per_s": round(size / median),
                    "directed_per_s": round(2 * size / median),
                    "rebuilds": sum(s.rebuilt for s in stats),
                    "max_level": max(s.levels for s in stats),
                    "slots_rewritten_median": int(statistics.median(s.slots for s in stats)),
                    "fixups": sum(s.fixup for s in stats),
                    "windows_per_level": _per_level(stats),
                    **({"phase_ms": {k: round(1000 * v / len(times), 2)
                                     for k, v in pma.phase_seconds.items()}}
                       if args.profile else {}),
                    "directed_edges": pma.num_edges, "density": round(pma.density(), 4),
                    "bytes_per_directed_edge": round(pma.memory_bytes() / pma.num_edges, 2)})
    if xp is not np:
        report({"what": "memory", "pool_bytes": int(pool.total_bytes()),
                "structure_bytes": pma.memory_bytes()})
    if args.check:
        t0 = time.perf_counter()
        pma.check()
        # Every batch's inserts are stored, every delete gone.
        every = xp.concatenate(inserted) if inserted else xp.zeros(0, dtype=np.uint64)
        assert bool((pma.find(both_directions(xp, every)) >= 0).all()), "an insert is missing"
        gone = both_directions(xp, graph[order[:deleted]])
        assert bool((pma.find(gone) < 0).all()), "a delete is still stored"
        report({"what": "check", "ok": True, "seconds": round(time.perf_counter() - t0, 2)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
