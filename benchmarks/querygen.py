"""Random-walk query generation for the matching benchmarks (dense, sparse and tree query sets).

Follows the procedure of the batch-dynamic matching literature (GAMMA, RapidFlow, the CSM
study): walk from a random vertex until ``size`` distinct vertices are seen, then shape the
visited vertices into a query of the requested kind:

* ``dense``  -- the induced subgraph, kept only if its average degree is at least 3;
* ``sparse`` -- the induced subgraph thinned by dropping random non-bridge edges until the
  average degree is below 3, kept only if it still has a cycle (not a tree);
* ``tree``   -- the spanning tree of the walk's first-visit edges.

The data graph is treated as undirected. Query vertex ``i`` is the ``i``-th vertex the walk
visited, so every query edge ``(i, j)`` is the data edge ``(data_vertices[i], data_vertices[j])``
with the same label. Query sets contain no two isomorphic (label-preserving) queries.

With ``directed=True`` the data graph's edges are arcs: the walk still treats them as
undirected, and each query edge becomes the arc it was taken from (``i -> j`` when the data
holds ``data_vertices[i] -> data_vertices[j]``), so every query still matches the data graph
where its walk went; isomorphism (for the no-duplicates rule) then respects direction.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np

from gpu.io.graphs import load_graph, write_graph
from gpu.io.records import LabeledGraph

KINDS = ("dense", "sparse", "tree")
MIN_SIZE = 2
MAX_SIZE = 32
# The smallest size for which each kind exists at all: a dense query needs 2|E| >= 3k, which
# K4 is the first simple graph to reach; a sparse query needs a cycle, so at least a triangle.
_KIND_MIN_SIZE = {"dense": 4, "sparse": 3, "tree": 2}
# Average degree separating dense from sparse queries in the papers' query sets.
DENSITY_THRESHOLD = 3.0


class QueryGenerationError(RuntimeError):
    """Raised when a query set cannot be filled within the attempt budget."""


@dataclass(frozen=True)
class GeneratedQuery:
    """One generated query and where it came from in the data graph."""

    kind: str
    graph: LabeledGraph
    # data_vertices[i] is the data vertex id that query vertex i was taken from.
    data_vertices: np.ndarray

    @property
    def num_vertices(self) -> int:
        return int(self.graph.vertex_ids.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.graph.edge_src.shape[0])


class QueryGenerator:
    """Undirected CSR view of a data graph, built once and shared by every query set.

    `directed`: the graph's edges are arcs; the view remembers each entry's direction so
    that queries are oriented as the arcs they were taken from.
    """

    def __init__(self, graph: LabeledGraph, directed: bool = False):
        self.directed = bool(directed)
        ids = np.asarray(graph.vertex_ids, dtype=np.int64)
        n = ids.shape[0]
        self._ids = ids
        self._labels = np.asarray(graph.vertex_labels, dtype=np.int32)
        src = self._index_of(np.asarray(graph.edge_src, dtype=np.int64))
        dst = self._index_of(np.asarray(graph.edge_dst, dtype=np.int64))
        lab = np.asarray(graph.edge_labels, dtype=np.int32)

        # Both directions so a walk can leave a vertex over any incident edge; self-loops can
        # never join two distinct query vertices, so they are dropped.
        keep = src != dst
        s = np.concatenate([src[keep], dst[keep]])
        d = np.concatenate([dst[keep], src[keep]])
        lab = np.concatenate([lab[keep], lab[keep]])
        # Whether the entry (s, d) is the arc s -> d as stored (else d -> s).
        out = np.concatenate([np.ones(int(keep.sum()), bool), np.zeros(int(keep.sum()), bool)])
        # Sorted by (src, dst, label); of parallel edges the smallest label is kept, so a
        # vertex pair has exactly one edge and one label in every query built from it (and,
        # directed, one direction: of a reciprocal pair with one label, the arc s -> d).
        order = np.lexsort((~out, lab, d, s))
        s, d, lab, out = s[order], d[order], lab[order], out[order]
        first = np.ones(s.shape[0], dtype=bool)
        first[1:] = (s[1:] != s[:-1]) | (d[1:] != d[:-1])
        s, d, lab, out = s[first], d[first], lab[first], out[first]

        self._indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(s, minlength=n), out=self._indptr[1:])
        self._indices = d
        self._edge_labels = lab
        self._outgoing = out
        self._starts = np.flatnonzero(np.diff(self._indptr) > 0)

    def _index_of(self, vertex: np.ndarray) -> np.ndarray:
        ids = self._ids
        if ids.shape[0] and ids[0] == 0 and np.array_equal(ids, np.arange(ids.shape[0])):
            idx = vertex
        else:
            order = np.argsort(ids, kind="stable")
            pos = np.searchsorted(ids, vertex, sorter=order)
            pos = np.minimum(pos, ids.shape[0] - 1)
            idx = order[pos]
        if vertex.size and (
            idx.min() < 0 or idx.max() >= ids.shape[0] or not np.array_equal(ids[idx], vertex)
        ):
            raise ValueError("data graph has an edge endpoint that is not in vertex_ids")
        return idx

    def generate(
        self,
        kind: str,
        size: int = 6,
        count: int = 10,
        seed: int = 0,
        *,
        max_attempts: int | None = None,
    ) -> list[GeneratedQuery]:
        """Return ``count`` pairwise non-isomorphic queries of ``kind`` with ``size`` vertices.

        Raises ``QueryGenerationError`` after ``max_attempts`` walks (default ``1000 * count``)
        if the set is still short, e.g. when the graph has too few distinct such subgraphs.
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if not MIN_SIZE <= size <= MAX_SIZE:
            raise ValueError(f"size must be in [{MIN_SIZE}, {MAX_SIZE}], got {size}")
        if size < _KIND_MIN_SIZE[kind]:
            need = _KIND_MIN_SIZE[kind]
            raise ValueError(f"no {kind} query has {size} vertices (need >= {need})")
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        if max_attempts is None:
            max_attempts = 1000 * count

        rng = np.random.default_rng(seed)
        accepted: list[GeneratedQuery] = []
        # Cheap isomorphism invariant -> networkx graphs already accepted with that invariant,
        # so the exact check only runs against plausible duplicates.
        seen: dict[tuple, list[nx.Graph]] = {}
        for _ in range(max_attempts):
            walk = self._walk(rng, size)
            if walk is None:
                continue
            query = self._shape(kind, walk, rng)
            if query is None:
                continue
            g = _to_networkx(query.graph, self.directed)
            bucket = seen.setdefault(_invariant(g), [])
            if any(_isomorphic(g, other) for other in bucket):
                continue
            bucket.append(g)
            accepted.append(query)
            if len(accepted) == count:
                return accepted
        raise QueryGenerationError(
            f"found only {len(accepted)} of {count} distinct {kind} queries with {size} vertices "
            f"after {max_attempts} random walks"
        )

    def _walk(self, rng: np.random.Generator, size: int):
        """Walk until ``size`` distinct vertices are seen; ``None`` if the walk runs too long.

        Returns the visited vertex indices in first-visit order and, for every vertex after
        the first, the (parent position, child position, label) edge it was reached over.
        """
        if self._starts.shape[0] == 0:
            raise QueryGenerationError("data graph has no edges to walk on")
        indptr, indices = self._indptr, self._indices
        current = int(self._starts[rng.integers(self._starts.shape[0])])
        position = {current: 0}
        visited = [current]
        tree_edges = []
        # A walk stuck in a component smaller than ``size`` never finishes; the bound lets it
        # restart elsewhere instead.
        for _ in range(50 * size):
            lo, hi = indptr[current], indptr[current + 1]
            slot = int(lo + rng.integers(hi - lo))
            nxt = int(indices[slot])
            if nxt not in position:
                position[nxt] = len(visited)
                visited.append(nxt)
                tree_edges.append((position[current], position[nxt], int(self._edge_labels[slot])))
                if len(visited) == size:
                    return np.asarray(visited, dtype=np.int64), tree_edges
            current = nxt
        return None

    def _induced_edges(self, visited: np.ndarray) -> list[tuple[int, int, int]]:
        # Every visited vertex was entered or left over an edge, so no neighbour list is empty.
        edges = []
        for i, v in enumerate(visited):
            lo, hi = self._indptr[v], self._indptr[v + 1]
            nbrs = self._indices[lo:hi]
            pos = np.minimum(np.searchsorted(nbrs, visited), hi - lo - 1)
            for j in range(i + 1, visited.shape[0]):
                if nbrs[pos[j]] == visited[j]:
                    edges.append((i, j, int(self._edge_labels[lo + pos[j]])))
        return edges

    def _shape(self, kind: str, walk, rng: np.random.Generator) -> GeneratedQuery | None:
        visited, tree_edges = walk
        k = visited.shape[0]
        if kind == "tree":
            edges = tree_edges
        else:
            edges = self._induced_edges(visited)
            if kind == "dense":
                if 2 * len(edges) < DENSITY_THRESHOLD * k:
                    return None
            else:
                edges = _thin_to_sparse(edges, k, rng)
                if edges is None:
                    return None
        return GeneratedQuery(kind, self._query_graph(visited, edges), self._ids[visited])

    def _query_graph(self, visited: np.ndarray, edges) -> LabeledGraph:
        if self.directed:
            # Each edge as the data arc it was taken from, sorted so that the same walk always
            # yields the same file.
            edges = sorted((i, j, lab) if self._is_arc(visited[i], visited[j]) else (j, i, lab)
                           for i, j, lab in edges)
        else:
            # Sorted (src, dst) with src < dst, so the same walk always yields the same file.
            edges = sorted((min(i, j), max(i, j), lab) for i, j, lab in edges)
        arr = np.asarray(edges, dtype=np.int64).reshape(-1, 3)
        return LabeledGraph(
            vertex_ids=np.arange(visited.shape[0], dtype=np.int64),
            vertex_labels=self._labels[visited].copy(),
            edge_src=arr[:, 0].copy(),
            edge_dst=arr[:, 1].copy(),
            edge_labels=arr[:, 2].astype(np.int32),
        )

    def _is_arc(self, v: int, w: int) -> bool:
        """Whether the kept entry for the pair {v, w} (indices) is the data arc v -> w."""
        lo, hi = self._indptr[v], self._indptr[v + 1]
        slot = lo + int(np.searchsorted(self._indices[lo:hi], w))
        return bool(self._outgoing[slot])


def _thin_to_sparse(edges, k: int, rng: np.random.Generator):
    """Drop random non-bridge edges until 2|E|/k < 3; ``None`` if the result would be a tree."""
    # Largest edge count with average degree below the threshold.
    target = math.ceil(DENSITY_THRESHOLD * k / 2) - 1
    if len(edges) < k:
        return None
    if len(edges) <= target:
        return edges
    g = nx.Graph()
    g.add_nodes_from(range(k))
    g.add_weighted_edges_from(edges, weight="label")
    # One pass in random order suffices: an edge that is a bridge when visited stays a bridge
    # as edges are removed, and since target >= k a cycle (hence a removable edge) remains
    # until the target is reached.
    kept = len(edges)
    for idx in rng.permutation(len(edges)):
        if kept == target:
            break
        i, j, _ = edges[idx]
        g.remove_edge(i, j)
        if nx.is_connected(g):
            kept -= 1
        else:
            g.add_edge(i, j, label=edges[idx][2])
    return [(i, j, lab) for i, j, lab in edges if g.has_edge(i, j)]


def _to_networkx(graph: LabeledGraph, directed: bool = False) -> nx.Graph:
    g = nx.DiGraph() if directed else nx.Graph()
    for v, lab in zip(graph.vertex_ids.tolist(), graph.vertex_labels.tolist()):
        g.add_node(v, label=lab)
    edges = zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_labels.tolist())
    for s, d, lab in edges:
        g.add_edge(s, d, label=lab)
    return g


def _invariant(g: nx.Graph) -> tuple:
    return (
        g.number_of_edges(),
        tuple(sorted((d["label"], g.degree(v)) for v, d in g.nodes(data=True))),
        tuple(sorted(d["label"] for _, _, d in g.edges(data=True))),
    )


def _isomorphic(a: nx.Graph, b: nx.Graph) -> bool:
    same = nx.algorithms.isomorphism.categorical_node_match("label", None)
    same_edge = nx.algorithms.isomorphism.categorical_edge_match("label", None)
    return nx.is_isomorphic(a, b, node_match=same, edge_match=same_edge)


def generate_queries(
    graph: LabeledGraph, kind: str, size: int = 6, count: int = 10, seed: int = 0,
    directed: bool = False,
) -> list[GeneratedQuery]:
    """One-shot form of ``QueryGenerator(graph, directed).generate(...)``."""
    return QueryGenerator(graph, directed).generate(kind, size, count, seed)


def write_query_set(queries: list[GeneratedQuery], out_dir: Path, provenance: dict) -> list[Path]:
    """Write ``<kind>_<i>.graph`` files plus a ``<kind>.json`` manifest; return the graph paths.

    The manifest records how the set was made (``provenance``) and each query's data vertices,
    so a later run can tell whether a saved set matches its own data graph and parameters.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, q in enumerate(queries):
        path = out_dir / f"{q.kind}_{i}.graph"
        write_graph(q.graph, path)
        paths.append(path)
    manifest = {
        **provenance,
        "queries": [
            {"file": p.name, "data_vertices": q.data_vertices.tolist()}
            for p, q in zip(paths, queries)
        ],
    }
    (out_dir / f"{queries[0].kind}.json").write_text(json.dumps(manifest) + "\n")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.querygen", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument("--graph", required=True, type=Path, help="data graph file")
    labels = parser.add_mutually_exclusive_group()
    labels.add_argument("--labels", type=Path, help="vertex label file for the data graph")
    labels.add_argument("--num-labels", type=int, help="assign this many uniform random labels")
    parser.add_argument("--label-seed", type=int, default=0, help="seed of the random labels")
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--size", type=int, default=6, help="query vertices (default 6)")
    parser.add_argument("--count", type=int, default=10, help="queries to generate (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random walks")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--directed", action="store_true",
                        help="the graph's edges are arcs; queries are oriented as the data")
    args = parser.parse_args(argv)

    graph = load_graph(
        args.graph, labels_path=args.labels, num_labels=args.num_labels, seed=args.label_seed,
        directed=args.directed,
    )
    try:
        queries = QueryGenerator(graph, args.directed).generate(
            args.kind, args.size, args.count, args.seed)
    except QueryGenerationError as exc:
        parser.exit(1, f"error: {exc}\n")
    provenance = {
        "kind": args.kind,
        "size": args.size,
        "seed": args.seed,
        "graph": str(args.graph.resolve()),
        "labels": str(args.labels.resolve()) if args.labels else None,
        "num_labels": args.num_labels,
        "label_seed": args.label_seed,
        "split": None,
    }
    if args.directed:
        provenance["directed"] = True
    for path in write_query_set(queries, args.out, provenance):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
