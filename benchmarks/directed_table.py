"""The directed GH benchmark (issue 22): per-query times on a directed GH beside the undirected.

The data is gh_table's setup (benchmarks/gh_table.py: GH, uniform random vertex labels, 10%
of the edges held out as one insertion batch), once as it is and once with each edge given a
random direction (u -> v or v -> u, one arc per edge, from ``--direction-seed``); both share
the vertex labels and hold out the same edges. Query sets, each measured alone as gh_table
does (register, apply the batch, time, remove, undo):

* dense / sparse / tree: random walks on the initial graph (benchmarks/querygen.py, the
  walk ignoring directions); the directed sets orient each query edge as the data arc it was
  taken from, so every query matches where its walk went;
* cycle3 .. cycle6 (the directed cycle 0 -> 1 -> ... -> 0) and fan-in / fan-out (three leaves
  into / out of a centre): fixed shapes whose vertex labels are those of a witness, an
  occurrence of the shape in the whole directed graph through one arc of the batch, found
  from ``--seed``; so each has at least one new match in the batch. The undirected side runs
  the same labelled shape without directions (both fans are then the same star).

Directed and undirected columns come from one run on one backend (on CUDA both on the
engine's default device graph, the packed memory array's read view, unless
`--device-graph` says otherwise).  A backend that refuses
directed graphs gets its directed cells marked so, and the undirected ones still run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.gh_table import (INSERT_FRACTION, _provenance, add_setup_args,
                                 deletions_of, match_seconds, measure_alone, query_sets,
                                 resolve_queries_dir, run_header, warm_up)
from gpu.config import DEVICE_GRAPHS, EngineConfig
from gpu.cuda.device import resolve_backend
from gpu.engine import Engine
from gpu.io.graphs import load_graph, write_graph
from gpu.io.records import LabeledGraph, UpdateStream
from gpu.io.streams import split_stream
from gpu.plan.query import QueryGraph

CYCLES = tuple(f"cycle{k}" for k in range(3, 7))
FANS = ("fan-in", "fan-out")
PATTERNS = CYCLES + FANS
FAN_LEAVES = 3
# A witness search gives up after this many batch arcs tried, and each try after this many
# partial paths: a shape with no witness is reported, not searched for forever.
WITNESS_ARCS = 5000
WITNESS_PATHS = 200
QUICK_VERTICES = 400
QUICK_PER_SET = 2


def _parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.directed_table", description=__doc__.split("\n", 1)[0]
    )
    add_setup_args(p)
    p.add_argument("--direction-seed", type=int, default=0,
                   help="seed of the edges' random directions (default 0)")
    p.add_argument("--patterns", nargs="*", choices=PATTERNS, default=list(PATTERNS),
                   help="fixed shapes to run (default all; none: only the walk sets)")
    p.add_argument("--directed-queries-dir", type=Path,
                   help="saved directed query sets (default: --queries-dir's name with "
                        "_directed<direction-seed>)")
    p.add_argument("--max-vertices", type=int,
                   help="use only the subgraph induced by the N vertices of highest degree "
                        "(a smaller graph, for a quick look; its query sets live in their "
                        "own directories)")
    p.add_argument("--quick", action="store_true",
                   help=f"a smoke run: --max-vertices {QUICK_VERTICES} and --per-set "
                        f"{QUICK_PER_SET} unless given")
    p.add_argument("--backend", choices=("cpu", "cuda", "auto"), default="cpu")
    p.add_argument("--repeat", type=int, default=1,
                   help="measure each query this many times in turn (default 1): medians "
                        "over every measurement; a one-query pattern's figure is then not one "
                        "batch's")
    p.add_argument("--device-graph", choices=DEVICE_GRAPHS, default=EngineConfig.device_graph,
                   help="cuda: the data graph's layout on the device, for both engines "
                        "(default %(default)s)")
    p.add_argument("--json", type=Path, help="append one JSON line per query to this file")
    p.add_argument("--check", action="store_true",
                   help="verify each query's positive matches against static counts "
                        "before/after")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed JIT warm-up")
    p.add_argument("--verbose", action="store_true", help="progress lines on stderr")
    args = p.parse_args(argv)
    if args.quick:
        args.max_vertices = args.max_vertices or QUICK_VERTICES
        given = argv if argv is not None else sys.argv[1:]
        if not any(a.startswith("--per-set") for a in given):
            args.per_set = QUICK_PER_SET
    if args.max_vertices is not None and args.max_vertices < 2:
        p.error(f"--max-vertices must be >= 2, got {args.max_vertices}")
    if args.per_set < 1:
        p.error(f"--per-set must be >= 1, got {args.per_set}")
    if args.repeat < 1:
        p.error(f"--repeat must be >= 1, got {args.repeat}")
    if args.queries_dir is None:
        # gh_table's default, so a full run shares gh_table's undirected sets.
        resolve_queries_dir(args)
        if args.max_vertices:
            args.queries_dir = args.queries_dir.with_name(
                f"{args.queries_dir.name}_core{args.max_vertices}")
    if args.directed_queries_dir is None:
        args.directed_queries_dir = args.queries_dir.with_name(
            f"{args.queries_dir.name}_directed{args.direction_seed}")
    return args


def provenance(args, kind: str, directed: bool) -> dict:
    """What made a query set: gh_table's record, plus the core size and the directions."""
    record = _provenance(args, kind)
    if args.max_vertices:
        record["max_vertices"] = args.max_vertices
    if directed:
        record.update(directed=True, direction_seed=args.direction_seed)
    return record


def densest_core(graph: LabeledGraph, count: int | None) -> LabeledGraph:
    """The subgraph induced by the `count` vertices of highest degree (ties: lower id first),
    in the edges' order; all of it if None. GH's edge list is sorted by its first column, so
    a prefix of it would be nearly a forest; its core keeps the dense pockets queries need."""
    if count is None or count >= graph.num_vertices:
        return graph
    ids = graph.vertex_ids
    order = np.argsort(ids, kind="stable")
    ends = order[np.searchsorted(ids, np.concatenate([graph.edge_src, graph.edge_dst]),
                                 sorter=order)]
    degree = np.bincount(ends, minlength=ids.shape[0])
    keep = np.zeros(ids.shape[0], dtype=bool)
    keep[np.lexsort((ids, -degree))[:count]] = True
    m = graph.num_edges
    edges = keep[ends[:m]] & keep[ends[m:]]
    return LabeledGraph(ids[keep], graph.vertex_labels[keep], graph.edge_src[edges],
                        graph.edge_dst[edges], graph.edge_labels[edges])


def orient(graph: LabeledGraph, seed: int) -> LabeledGraph:
    """Each edge as one arc, u -> v or v -> u with even odds (the same edges, in order)."""
    flip = np.random.default_rng(seed).random(graph.num_edges) < 0.5
    return LabeledGraph(graph.vertex_ids, graph.vertex_labels,
                        np.where(flip, graph.edge_dst, graph.edge_src),
                        np.where(flip, graph.edge_src, graph.edge_dst), graph.edge_labels)


class Arcs:
    """Out- and in-neighbour lists (sorted) of a directed graph, by vertex index."""

    def __init__(self, graph: LabeledGraph):
        self.ids = np.asarray(graph.vertex_ids, dtype=np.int64)
        order = np.argsort(self.ids, kind="stable")
        index = order[np.searchsorted(self.ids, graph.edge_src, sorter=order)], \
            order[np.searchsorted(self.ids, graph.edge_dst, sorter=order)]
        self.labels = np.asarray(graph.vertex_labels)
        self.edge_labels = {}
        for s, d, lab in zip(*index, graph.edge_labels.tolist()):
            self.edge_labels[(int(s), int(d))] = int(lab)
        self.out = self._lists(*index)
        self.into = self._lists(index[1], index[0])

    def _lists(self, src, dst):
        n = self.ids.shape[0]
        order = np.lexsort((dst, src))
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
        nbrs = dst[order]
        return [nbrs[indptr[v]:indptr[v + 1]] for v in range(n)]

    def index(self, vertex_ids) -> np.ndarray:
        order = np.argsort(self.ids, kind="stable")
        return order[np.searchsorted(self.ids, np.asarray(vertex_ids), sorter=order)]


def _cycle_through(arcs: Arcs, u: int, v: int, k: int, rng) -> list[int] | None:
    """Vertices u, v, ..., x of a directed k-cycle u -> v -> ... -> x -> u, or None.

    Depth-first from v over out-arcs, the last step an intersection with u's in-neighbours,
    neighbours tried in a random rotation; at most WITNESS_PATHS partial paths.
    """
    budget = [WITNESS_PATHS]

    def extend(path):
        budget[0] -= 1
        if budget[0] < 0:
            return None
        last = path[-1]
        if len(path) == k - 1:
            # The cycle's last vertex: after `last`, before u, not on the path yet.
            ends = np.intersect1d(arcs.out[last], arcs.into[u], assume_unique=True)
            ends = ends[~np.isin(ends, path)]
            return path + [int(ends[rng.integers(ends.size)])] if ends.size else None
        nbrs = arcs.out[last]
        if nbrs.size == 0:
            return None
        for w in np.roll(nbrs, -int(rng.integers(nbrs.size))).tolist():
            if w not in path:
                found = extend(path + [w])
                if found is not None or budget[0] < 0:
                    return found
        return None

    return extend([u, v])


def _fan_through(arcs: Arcs, u: int, v: int, inward: bool, rng) -> list[int] | None:
    """Centre then leaves of a fan through the arc u -> v (its centre v when `inward`)."""
    centre, leaf = (v, u) if inward else (u, v)
    others = (arcs.into if inward else arcs.out)[centre]
    others = others[others != leaf]
    if others.size < FAN_LEAVES - 1:
        return None
    picked = rng.choice(others, FAN_LEAVES - 1, replace=False)
    return [centre, leaf, *sorted(int(w) for w in picked)]


def pattern_arcs(name: str) -> list[tuple[int, int]]:
    """The arcs of a fixed shape over vertices 0..n-1 (a fan's centre is 0)."""
    if name in CYCLES:
        k = int(name.removeprefix("cycle"))
        return [(i, (i + 1) % k) for i in range(k)]
    if name == "fan-out":
        return [(0, leaf) for leaf in range(1, FAN_LEAVES + 1)]
    return [(leaf, 0) for leaf in range(1, FAN_LEAVES + 1)]


def find_witness(name: str, arcs: Arcs, batch: UpdateStream, seed: int) -> list[int] | None:
    """Data vertex indices of one occurrence of `name` that uses an arc of `batch`, in the
    shape's vertex order (found from `seed`); None if the search gives up."""
    rng = np.random.default_rng([seed, PATTERNS.index(name)])
    src, dst = arcs.index(batch.a), arcs.index(batch.b)
    for i in rng.permutation(len(batch))[:WITNESS_ARCS].tolist():
        u, v = int(src[i]), int(dst[i])
        if name in CYCLES:
            found = _cycle_through(arcs, u, v, int(name.removeprefix("cycle")), rng)
        else:
            found = _fan_through(arcs, u, v, name == "fan-in", rng)
        if found is not None:
            return found
    return None


def pattern_sets(args, arcs: Arcs, batch: UpdateStream, log):
    """Each fixed shape, directed and undirected, labelled as its witness; saved beside the
    directed walk sets. Returns ({name: [(path, query)]} per side, {name: witness ids})."""
    directed, undirected, witnesses = {}, {}, {}
    out_dir = args.directed_queries_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.patterns:
        found = find_witness(name, arcs, batch, args.seed)
        if found is None:
            log(f"warning: no {name} through a batch arc found; {name} is left out")
            print(f"warning: no {name} through a batch arc found in {WITNESS_ARCS} tries; "
                  f"left out", file=sys.stderr)
            continue
        edges = pattern_arcs(name)
        witness = arcs.ids[found]
        witnesses[name] = witness.tolist()
        shape = LabeledGraph(
            np.arange(len(found), dtype=np.int64), arcs.labels[found].astype(np.int32),
            np.array([a for a, _ in edges], dtype=np.int64),
            np.array([b for _, b in edges], dtype=np.int64),
            np.array([arcs.edge_labels[(found[a], found[b])] for a, b in edges], np.int32),
        )
        path = out_dir / f"{name}.graph"
        write_graph(shape, path)
        directed[name] = [(path, QueryGraph.from_labeled(shape, name, directed=True))]
        undirected[name] = [(path, QueryGraph.from_labeled(shape, name, directed=False))]
        log(f"{name}: witness {witnesses[name]}")
    return directed, undirected, witnesses


def measure_sets(args, engine: Engine, sets, batch: UpdateStream, header: dict,
                 directed: bool, witnesses: dict, out, log) -> list[dict]:
    """Every query of `sets` measured alone on `engine`, `args.repeat` times in turn; one
    record each time."""
    undo = deletions_of(batch)
    side = "directed" if directed else "undirected"
    records = []
    for kind, queries in sets.items():
        queries = queries[: args.max_queries]
        runs = [(i, path, query, repeat) for i, (path, query) in enumerate(queries)
                for repeat in range(args.repeat)]
        for i, path, query, repeat in runs:
            res, delta, wall, exact = measure_alone(engine, query, batch, undo, args.check,
                                                    str(path))
            record = {
                **header,
                "kind": kind,
                "directed": directed,
                "index": i,
                "repeat": repeat,
                "query": str(path),
                "vertices": query.num_vertices,
                "edges": query.num_edges,
                "backend": engine.backend,
                "batch": len(batch),
                "positive": int(delta.positive),
                "negative": int(delta.negative),
                "seconds": float(res.seconds),
                "match_seconds": match_seconds(res),
                "wall_seconds": wall,
            }
            if kind in witnesses:
                record["witness"] = witnesses[kind]
            if args.check:
                record["check"] = exact
            records.append(record)
            if out:
                out.write(json.dumps(record) + "\n")
                out.flush()
            check = f", check {'ok' if exact else 'FAILED'}" if args.check else ""
            log(f"{side} {kind} {i + 1}/{len(queries)} (run {repeat + 1}/{args.repeat}): "
                f"{record['positive']} matches in {record['match_seconds']:.4g} s "
                f"(wall {wall:.4g} s){check}")
    return records


def _cells(records: list[dict], refused: str | None) -> list[str]:
    """A side's cells: `apply` (end to end) median, matching median and mean (one phase),
    and the matches found (each query's first run)."""
    if refused is not None:
        return [f"refused: {refused}", "", "", ""]
    if not records:
        return ["-", "-", "-", "-"]
    secs = [r["match_seconds"] for r in records]
    return [f"{statistics.median(r['wall_seconds'] for r in records):.4g}",
            f"{statistics.median(secs):.4g}", f"{statistics.fmean(secs):.4g}",
            str(sum(r["positive"] for r in records if r.get("repeat", 0) == 0))]


def _ratio(d: list[dict], u: list[dict], field: str) -> str:
    if not d or not u:
        return "-"
    under = statistics.median(r[field] for r in u)
    return f"{statistics.median(r[field] for r in d) / under:.3g}" if under > 0 else "-"


def table(records: list[dict], kinds, refused: str | None) -> str:
    """Per query set, directed then undirected: the median of `Engine.apply`'s wall time
    (end to end), the median and mean matching seconds (one phase), and the matches found
    (positive, over the set's queries); the directed / undirected ratios of both medians."""
    rows = [
        "| query set | queries | directed apply median s | directed matching median s "
        "| directed matching avg s | directed matches | undirected apply median s "
        "| undirected matching median s | undirected matching avg s | undirected matches "
        "| directed / undirected apply median | directed / undirected matching median |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in kinds:
        d = [r for r in records if r["kind"] == kind and r["directed"]]
        u = [r for r in records if r["kind"] == kind and not r["directed"]]
        if not d and not u:
            continue
        queries = max(len({r["index"] for r in d}), len({r["index"] for r in u}))
        rows.append(f"| {kind} | {queries} | "
                    + " | ".join(_cells(d, refused if not d else None) + _cells(u, None))
                    + f" | {_ratio(d, u, 'wall_seconds')} | {_ratio(d, u, 'match_seconds')} |")
    return "\n".join(rows)


def run(args, backend: str, header: dict) -> tuple[list[dict], str | None]:
    """Both sides of the experiment on `backend`; the records and, when the directed engine
    was refused, why."""
    verbose = args.verbose or sys.stderr.isatty()

    def log(msg: str) -> None:
        if verbose:
            print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    graph = densest_core(
        load_graph(args.graph, num_labels=args.num_labels, seed=args.label_seed),
        args.max_vertices)
    arcs_graph = orient(graph, args.direction_seed)
    # One permutation of the edge count: both sides hold out the same edges.
    initial, batch = split_stream(graph, INSERT_FRACTION, args.seed)
    initial_arcs, batch_arcs = split_stream(arcs_graph, INSERT_FRACTION, args.seed)
    log(f"loaded {graph.num_vertices} vertices, {graph.num_edges} edges; batch of "
        f"{len(batch)} insertions ({time.perf_counter() - t0:.1f} s)")

    sets = query_sets(args, initial, log, provenance=lambda k: provenance(args, k, False))
    arc_sets = query_sets(args, initial_arcs, log, directed=True,
                          queries_dir=args.directed_queries_dir,
                          provenance=lambda k: provenance(args, k, True))
    arc_patterns, patterns, witnesses = pattern_sets(args, Arcs(arcs_graph), batch_arcs, log)
    arc_sets.update(arc_patterns)
    sets.update(patterns)

    refused = None
    config = EngineConfig(device_graph=args.device_graph)
    try:
        arc_engine = Engine(initial_arcs, backend=backend, config=config, directed=True)
    except ValueError as exc:
        refused, arc_engine = str(exc), None
        print(f"directed: refused on {backend}: {refused}", file=sys.stderr)
    if not args.no_warmup:
        warm_up(sets, backend, config=config)
        if arc_engine is not None:
            warm_up(arc_sets, backend, directed=True, config=config)
    engine = Engine(initial, backend=backend, config=config)
    log(f"engines built ({time.perf_counter() - t0:.1f} s in all)")

    records = []
    out = args.json.open("a") if args.json else None
    try:
        if refused is not None and out:
            for kind in arc_sets:
                out.write(json.dumps({**header, "kind": kind, "directed": True,
                                      "backend": backend, "refused": refused}) + "\n")
        if arc_engine is not None:
            records += measure_sets(args, arc_engine, arc_sets, batch_arcs, header, True,
                                    witnesses, out, log)
        records += measure_sets(args, engine, sets, batch, header, False, witnesses, out, log)
    finally:
        if out:
            out.close()
    return records, refused


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    # Resolved up front so that "auto" is reported as what actually ran.
    backend = resolve_backend(args.backend)
    header = run_header(backend, "benchmarks.directed_table", argv)
    records, refused = run(args, backend, header)
    print("\n".join(f"{key}: {value}" for key, value in header.items()))
    core = (f"the {args.max_vertices} highest-degree vertices' subgraph of "
            if args.max_vertices else "")
    print(f"graph: {core}{args.graph} ({args.num_labels} random labels, seed "
          f"{args.label_seed}); directed: each edge one arc, direction seed "
          f"{args.direction_seed}; {INSERT_FRACTION:.0%} insertion batch, seed {args.seed}; "
          f"{args.size}-vertex walk queries from {args.queries_dir} (undirected) and "
          f"{args.directed_queries_dir} (directed); per query: Engine.apply's wall seconds "
          f"(end to end) and its matching phase's, {args.repeat} run(s) each")
    print()
    print(table(records, [*args.kinds, *args.patterns], refused))
    failed = [r for r in records if r.get("check") is False]
    if failed:
        print(f"\n{len(failed)} queries FAILED the static-count check", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
