"""Query graphs: validation and the dense form planning works on.

A query is a small connected labeled pattern (2 to 32 vertices).  Its vertices
are renumbered 0..n-1 in file order; the original ids are kept for display.  A directed
query's edges are arcs a -> b as written (a -> b and b -> a may both be there); it is
connected when its underlying undirected graph is.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MAX_QUERY_VERTICES = 32
NO_EDGE = -1


class QueryError(ValueError):
    """The pattern is not a valid query."""


@dataclass(frozen=True, eq=False)
class QueryGraph:
    name: str
    labels: np.ndarray        # int32 [n] vertex labels
    edges: np.ndarray         # int32 [k, 2] with a < b; directed: arcs a -> b as written
    edge_labels: np.ndarray   # int32 [k]
    vertex_ids: np.ndarray    # int64 [n] ids as written by the user
    edge_label_matrix: np.ndarray = field(repr=False)  # int32 [n, n], NO_EDGE where absent;
                                                       # directed: [a, b] is the arc a -> b
    directed: bool = False

    @property
    def num_vertices(self) -> int:
        return int(self.labels.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edges.shape[0])

    @property
    def adjacency(self) -> np.ndarray:
        """bool [n, n]: a and b are joined by an edge (either arc, when directed)."""
        present = self.edge_label_matrix != NO_EDGE
        return present | present.T if self.directed else present

    @property
    def degrees(self) -> np.ndarray:
        """Edges at each vertex (directed: arcs in and out)."""
        present = self.edge_label_matrix != NO_EDGE
        if self.directed:
            return (present.sum(axis=1) + present.sum(axis=0)).astype(np.int32)
        return present.sum(axis=1).astype(np.int32)

    def neighbors(self, a: int) -> list[int]:
        return [int(b) for b in np.flatnonzero(self.adjacency[a])]

    @classmethod
    def from_labeled(cls, graph, name: str = "query", directed: bool = False) -> "QueryGraph":
        """Validate a parsed `LabeledGraph` as a query and renumber its vertices."""
        ids = np.asarray(graph.vertex_ids, dtype=np.int64)
        return cls.build(name, ids, graph.vertex_labels,
                         np.stack([graph.edge_src, graph.edge_dst], axis=1).reshape(-1, 2),
                         graph.edge_labels, directed=directed)

    @classmethod
    def build(cls, name, vertex_ids, labels, edges, edge_labels=None,
              directed: bool = False) -> "QueryGraph":
        """Validate and build from ids, labels and an edge list over those ids (arcs
        u -> v when `directed`)."""
        vertex_ids = np.asarray(vertex_ids, dtype=np.int64).reshape(-1)
        labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        edge_labels = (np.zeros(len(edges), dtype=np.int64) if edge_labels is None
                       else np.asarray(edge_labels, dtype=np.int64).reshape(-1))
        n = len(vertex_ids)
        if not 2 <= n <= MAX_QUERY_VERTICES:
            raise QueryError(f"query {name!r} has {n} vertices; queries need 2 to "
                             f"{MAX_QUERY_VERTICES}")
        if len(labels) != n:
            raise QueryError(f"query {name!r}: {len(labels)} labels for {n} vertices")
        if len(edge_labels) != len(edges):
            raise QueryError(f"query {name!r}: {len(edge_labels)} edge labels for "
                             f"{len(edges)} edges")
        if (labels < 0).any() or (labels >= 2**31).any():
            raise QueryError(f"query {name!r}: vertex labels must be in [0, 2^31)")
        if (edge_labels < 0).any() or (edge_labels >= 2**31).any():
            raise QueryError(f"query {name!r}: edge labels must be in [0, 2^31)")
        index = {}
        for i, vid in enumerate(vertex_ids.tolist()):
            if vid in index:
                raise QueryError(f"query {name!r}: vertex id {vid} appears twice")
            index[vid] = i
        matrix = np.full((n, n), NO_EDGE, dtype=np.int32)
        dense_edges = np.empty((len(edges), 2), dtype=np.int32)
        for k, (u, v) in enumerate(edges.tolist()):
            for end in (u, v):
                if end not in index:
                    raise QueryError(f"query {name!r}: edge {k} ({u}, {v}) uses undeclared "
                                     f"vertex {end}")
            a, b = index[u], index[v]
            if a == b:
                raise QueryError(f"query {name!r}: edge {k} is a self-loop on vertex {u}")
            if matrix[a, b] != NO_EDGE:
                raise QueryError(f"query {name!r}: edge {k} ({u}, {v}) appears twice")
            matrix[a, b] = edge_labels[k]
            if directed:
                dense_edges[k] = (a, b)
            else:
                matrix[b, a] = edge_labels[k]
                dense_edges[k] = (min(a, b), max(a, b))
        query = cls(name=str(name), labels=labels.astype(np.int32),
                    edges=dense_edges, edge_labels=edge_labels.astype(np.int32),
                    vertex_ids=vertex_ids, edge_label_matrix=matrix, directed=bool(directed))
        if not query.is_connected():
            raise QueryError(f"query {name!r} is not connected")
        return query

    def is_connected(self) -> bool:
        seen = {0}
        frontier = [0]
        while frontier:
            a = frontier.pop()
            for b in self.neighbors(a):
                if b not in seen:
                    seen.add(b)
                    frontier.append(b)
        return len(seen) == self.num_vertices
