"""Scale benchmark: the engine on a large R-MAT graph (the GPU issue's scale experiment).

Generates an undirected R-MAT graph (uniform random vertex labels, no edge labels), holds
out a share of its edges as the update stream, and measures on one engine:

* load: building the engine on the rest (host graph, signatures, device mirror), and the
  device memory it then holds per stored directed edge;
* update throughput with no query standing: insertion batches of the held-out edges, then
  their deletion, in edge updates per second;
* registration: seconds of `Engine.add_query` per query (the random-walk generation of the
  queries, which indexes the whole graph, is logged apart);
* match latency: random-walk queries of the graph registered together, then insertion
  batches of each size, seconds per batch (`Engine.apply`, p50 / p99) and matches found.

With ``--cross-check`` a CPU engine on the same graph applies the same batches and every
query's counts must agree (use a smaller --scale: it doubles host memory and load time).

    python -m benchmarks.scale_bench --scale 24 --edges 100000000 --backend cuda
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from benchmarks.gh_table import run_header
from benchmarks.pma_bench import _Rng, canonical, rmat_pairs
from benchmarks.plots import PLOT_HELP
from benchmarks.querygen import generate_queries
from gpu.config import DEVICE_GRAPHS, EngineConfig
from gpu.cuda.device import cuda_available, device_memory_bytes, resolve_backend
from gpu.engine import Engine
from gpu.io.records import DELETE_EDGE, INSERT_EDGE, LabeledGraph, UpdateStream
from gpu.graph.pma.layout import key_dst, key_src
from gpu.plan.query import QueryGraph


def rmat_graph(scale: int, edges: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`edges` distinct undirected R-MAT edges (u < v) in random order, on the device when
    CuPy is there, returned on the host."""
    if cuda_available():
        import cupy as xp
    else:
        xp = np
    rng = _Rng(xp, seed)
    perm = rng.permutation(1 << scale)
    keys = xp.zeros(0, dtype=np.uint64)
    while keys.size < edges:
        u, v = rmat_pairs(xp, rng, scale, int((edges - keys.size) * 1.3) + 1024, perm)
        keys = xp.unique(xp.concatenate([keys, canonical(xp, u, v)]))
    keys = keys[rng.permutation(keys.size)[:edges]]
    src, dst = key_src(keys), key_dst(keys)
    if xp is not np:
        src, dst = src.get(), dst.get()
    return src, dst


def edge_stream(kind: int, src: np.ndarray, dst: np.ndarray) -> UpdateStream:
    n = len(src)
    return UpdateStream(np.full(n, kind, dtype=np.int8), src, dst, np.zeros(n, np.int32),
                        np.arange(1, n + 1), "scale_bench")


def _stats(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_s": round(statistics.median(ordered), 5), "p99_s": round(p99, 5),
            "batches": len(ordered)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=24, help="2^scale vertices")
    ap.add_argument("--edges", type=int, default=100_000_000, help="undirected edges")
    ap.add_argument("--labels", type=int, default=5, help="uniform random vertex labels")
    ap.add_argument("--backend", choices=("cpu", "cuda", "auto"), default="auto")
    ap.add_argument("--device-graph", choices=DEVICE_GRAPHS, default=EngineConfig.device_graph,
                    help="cuda: the data graph's layout on the device (default pma: the "
                        "packed memory array; lists: the mirrored host lists)")
    ap.add_argument("--kinds", nargs="+", default=["dense", "sparse"])
    ap.add_argument("--size", type=int, default=5, help="query vertices")
    ap.add_argument("--queries", type=int, default=2, help="queries per kind")
    ap.add_argument("--update-batch", type=int, default=1_000_000,
                    help="edges per batch of the no-query update throughput run")
    ap.add_argument("--update-batches", type=int, default=3)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 100, 10_000])
    ap.add_argument("--batches", type=int, default=5, help="batches per size")
    ap.add_argument("--cross-check", action="store_true",
                    help="a CPU engine applies the same batches; counts must agree")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="append result lines here")
    ap.add_argument("--plot", action="store_true", help=PLOT_HELP)
    args = ap.parse_args(argv)
    if args.plot and not args.json:
        ap.error("--plot draws the --json file: give --json")
    backend = resolve_backend(args.backend)
    header = run_header(backend, "benchmarks.scale_bench", argv)

    def report(record: dict) -> None:
        record = {**header, "scale": args.scale, "labels": args.labels,
                  "device_graph": args.device_graph, **record}
        print(json.dumps(record), flush=True)
        if args.json:
            with open(args.json, "a") as out:
                out.write(json.dumps(record) + "\n")

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    src, dst = rmat_graph(args.scale, args.edges, args.seed)
    held = args.update_batch * args.update_batches
    held = max(held, sum(args.batch_sizes) * (args.batches + 1))
    if held >= len(src):
        raise SystemExit(f"--edges {args.edges} leaves nothing after holding out {held}")
    rng = np.random.default_rng(args.seed)
    n = 1 << args.scale
    graph = LabeledGraph(np.arange(n, dtype=np.int64),
                         rng.integers(0, args.labels, n).astype(np.int32),
                         src[held:], dst[held:], np.zeros(len(src) - held, np.int32))
    hs, hd = src[:held], dst[:held]
    log(f"generated {len(src)} edges in {time.perf_counter() - t0:.1f} s")

    engines = {}
    for name in [backend] + (["cpu"] if args.cross_check and backend != "cpu" else []):
        t0 = time.perf_counter()
        engines[name] = Engine(graph, backend=name,
                               config=EngineConfig(device_graph=args.device_graph))
        seconds = time.perf_counter() - t0
        record = {"what": "load", "backend": name, "edges": len(graph.edge_src),
                  "directed": 2 * len(graph.edge_src), "seconds": round(seconds, 2)}
        if name == "cuda":
            # Held by CuPy's pool, and in live arrays (the engine's own device memory).
            for key, used in (("device_bytes", False), ("device_used_bytes", True)):
                record[key] = device_memory_bytes(used)
                record[f"{key}_per_directed_edge"] = round(
                    device_memory_bytes(used) / (2 * len(graph.edge_src)), 2)
            record.update(_signature_bytes(engines[name], graph))
        report(record)
    engine = engines[backend]

    # Update throughput with no query standing: insert held-out edges, then delete them
    # (after an untimed batch of a hundred, so compilation is not timed).
    for kind in (INSERT_EDGE, DELETE_EDGE):
        for e in engines.values():
            e.apply(edge_stream(kind, hs[:100], hd[:100]))
    for kind, what in ((INSERT_EDGE, "insert"), (DELETE_EDGE, "delete")):
        seconds, device = [], []
        for i in range(args.update_batches):
            part = slice(i * args.update_batch, (i + 1) * args.update_batch)
            stream = edge_stream(kind, hs[part], hd[part])
            t0 = time.perf_counter()
            res = engine.apply(stream)
            seconds.append(time.perf_counter() - t0)
            device.append(res.timings["device_update"])
            for other in engines.values():
                if other is not engine:
                    other.apply(stream)
        median = statistics.median(seconds)
        report({"what": f"update-{what}", "backend": backend, "batch": args.update_batch,
                **_stats(seconds), "edges_per_s": round(args.update_batch / median),
                # the device graph's share (PMA batch or mirror copies, candidate bits)
                "device_update_p50_s": round(statistics.median(device), 5)})

    # Match latency: queries standing, insertion batches of each size.
    qids: dict[str, list[tuple[int, dict]]] = {}
    for kind in args.kinds:
        t0 = time.perf_counter()
        generated = generate_queries(graph, kind, args.size, args.queries, args.seed)
        log(f"generated {len(generated)} {kind} queries in {time.perf_counter() - t0:.1f} s")
        for i, q in enumerate(generated):
            query = QueryGraph.from_labeled(q.graph, f"{kind}_{i}")
            t0 = time.perf_counter()
            ids = {backend: engine.add_query(query)}
            report({"what": "register", "backend": backend, "query": query.name,
                    "vertices": query.num_vertices, "edges": query.num_edges,
                    "seconds": round(time.perf_counter() - t0, 2),
                    **(_signature_bytes(engine, graph) if backend == "cuda" else {})})
            ids.update({name: e.add_query(query) for name, e in engines.items()
                        if e is not engine})
            qids.setdefault(kind, []).append((ids[backend], ids))
    offset = 0
    for size in args.batch_sizes:
        seconds, matches = [], []
        for i in range(args.batches + 1):     # the first batch of a size is not timed
            stream = edge_stream(INSERT_EDGE, hs[offset:offset + size], hd[offset:offset + size])
            offset += size
            res = engine.apply(stream)
            if i:
                seconds.append(res.seconds)
            if i:
                matches.append(sum(d.positive for d in res.queries.values()))
            for name, other in engines.items():
                if other is engine:
                    continue
                check = other.apply(stream)
                for kind_ids in qids.values():
                    for own, ids in kind_ids:
                        a, b = res.queries[own], check.queries[ids[name]]
                        if (a.positive, a.negative) != (b.positive, b.negative):
                            raise SystemExit(f"{backend} and {name} differ on a batch of "
                                             f"{size}: {a.positive}/{a.negative} against "
                                             f"{b.positive}/{b.negative}")
        report({"what": "match", "backend": backend, "batch": size,
                "queries": sum(len(v) for v in qids.values()), **_stats(seconds),
                "matches_per_batch_median": int(statistics.median(matches)),
                "cross_checked": len(engines) > 1})
    if args.plot:
        from benchmarks.plots import plot_beside
        plot_beside(args.json)
    return 0


def _signature_bytes(engine, graph) -> dict:
    """The device signature table's and candidate bits' memory (gpu/cuda/signatures.py),
    in all and per stored directed edge."""
    used = engine.signatures.nbytes
    return {"signature_bytes": used,
            "signature_bytes_per_directed_edge": round(used / (2 * len(graph.edge_src)), 2)}


if __name__ == "__main__":
    sys.exit(main())
