"""Slow, obviously-correct reference for batch-dynamic labeled subgraph matching.

This module owns the test oracle: ``RefGraph`` applies batches by the literal
batch (GAMMA) semantics and ``RefGraph.embeddings`` enumerates subgraph
monomorphisms by brute-force backtracking. Nothing here is clever on purpose:
every rule is written out as a separate, readable step so that the engine can be
judged against it. It deliberately imports nothing from ``gpu`` so that it stays
usable (and self-tested) even when the engine is broken or absent.

Records are ``(kind, a, b, label)`` tuples with ``kind`` one of the string
constants below; ``label`` is ``NO_LABEL`` when omitted and ``b`` is ignored for
vertex records. Batch semantics implemented (see the project brief):

* a batch is a *set* of updates: record order inside a batch does not matter;
* ``+v id label``: adding an existing vertex with the same label is a no-op, with
  a different label rejects the batch (as do two adds of one new id with
  different labels);
* ``-v id``: removes the vertex and all its edges; deleting a vertex that does
  not exist is a no-op; a vertex both added and deleted in one batch rejects;
* ``+e u v label`` (label omitted = 0): inserting an edge that already exists
  (whatever its label) is a no-op; two inserts of one edge with different labels
  reject; self-loops reject; an endpoint that neither exists nor is added in the
  batch rejects (for deletes too);
* ``-e u v [label]``: deleting a missing edge is a no-op, as is a delete whose
  label differs from the stored one, and a delete of an edge incident to a
  vertex deleted in the same batch;
* an insert and a delete of the same edge in one batch cancel (net: the edge is
  left exactly as it was before the batch).

Directed graphs (``directed=True``, issue 22): an edge is the arc ``a -> b``; ``a -> b``
and ``b -> a`` are different edges and may both exist; every rule above holds per arc
(an insert and a delete cancel when they name the same arc; deleting ``a -> b`` leaves
``b -> a``). A match maps every query arc onto a data arc of the same direction and label.

Cases the brief leaves open get a documented choice here, but the engine tests
never generate them (see ``UNSPECIFIED`` notes inline).

Applied/ignored accounting: every record lands in exactly one of ``applied`` or
``ignored`` under its kind's key; duplicates inside a batch count once as
applied and the rest as ignored; both halves of a cancel pair are ignored; edges
removed with a deleted vertex count as applied edge deletions (they left the graph),
so applied counts every change the graph saw.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Iterable, Sequence

ADD_VERTEX = "+v"
DELETE_VERTEX = "-v"
INSERT_EDGE = "+e"
DELETE_EDGE = "-e"
NO_LABEL = -1
DEFAULT_EDGE_LABEL = 0

COUNT_KEYS = ("vertices_added", "vertices_deleted", "edges_inserted", "edges_deleted")
_KEY_OF_KIND = {
    ADD_VERTEX: "vertices_added",
    DELETE_VERTEX: "vertices_deleted",
    INSERT_EDGE: "edges_inserted",
    DELETE_EDGE: "edges_deleted",
}

Record = tuple  # (kind, a, b, label)


class Rejected(ValueError):
    """The reference refused a batch; the graph was left untouched."""


def _zero_counts() -> dict[str, int]:
    return {k: 0 for k in COUNT_KEYS}


def edge_key(a: int, b: int, directed: bool):
    """An edge's key: the arc (a, b) when directed, else the pair {a, b}."""
    return (a, b) if directed else frozenset((a, b))


@dataclass
class RefQuery:
    """A query pattern: vertex i has label ``labels[i]``; edges map {a, b} (or the arc
    (a, b) when directed) -> label."""

    labels: list[int]
    edges: dict = field(default_factory=dict)
    directed: bool = False

    @property
    def n(self) -> int:
        return len(self.labels)

    @classmethod
    def build(cls, labels: Sequence[int], edges: Iterable[tuple],
              directed: bool = False) -> "RefQuery":
        """Edges are ``(a, b)`` (label 0) or ``(a, b, label)`` over indices 0..n-1 (arcs
        a -> b when directed)."""
        q = cls(list(int(x) for x in labels), {}, directed)
        for e in edges:
            a, b = int(e[0]), int(e[1])
            lab = int(e[2]) if len(e) > 2 else DEFAULT_EDGE_LABEL
            assert a != b and 0 <= a < q.n and 0 <= b < q.n, e
            key = edge_key(a, b, directed)
            assert key not in q.edges, f"duplicate query edge {e}"
            q.edges[key] = lab
        return q

    def edge_list(self) -> list[tuple[int, int, int]]:
        """Edges as sorted ``(a, b, label)`` with a < b (arcs as they are when directed),
        in a stable order."""
        return _edge_list(self.edges, self.directed)

    def is_connected(self) -> bool:
        """Connected, ignoring direction (weakly connected when directed)."""
        if self.n == 0:
            return False
        seen, stack = {0}, [0]
        while stack:
            x = stack.pop()
            for k in self.edges:
                if x in k:
                    (y,) = set(k) - {x}
                    if y not in seen:
                        seen.add(y)
                        stack.append(y)
        return len(seen) == self.n


def _edge_list(edges: dict, directed: bool) -> list[tuple[int, int, int]]:
    if directed:
        return sorted((a, b, lab) for (a, b), lab in edges.items())
    return sorted((min(k), max(k), lab) for k, lab in edges.items())


class RefGraph:
    """Simple labeled graph as two dicts, undirected or directed; see the module
    docstring."""

    def __init__(self, vertices: dict[int, int] | None = None,
                 edges: dict | None = None, directed: bool = False):
        self.directed = directed
        self.vertices: dict[int, int] = dict(vertices or {})
        self.edges: dict = dict(edges or {})
        for k in self.edges:
            assert len(set(k)) == 2 and set(k) <= self.vertices.keys(), k

    # ------------------------------------------------------------------ basics
    @classmethod
    def build(cls, vertices: dict[int, int], edges: Iterable[tuple],
              directed: bool = False) -> "RefGraph":
        """``edges`` are ``(u, v)`` (label 0) or ``(u, v, label)`` (arcs u -> v when
        directed)."""
        g = cls(vertices, {}, directed)
        for e in edges:
            u, v = int(e[0]), int(e[1])
            lab = int(e[2]) if len(e) > 2 else DEFAULT_EDGE_LABEL
            assert u != v and u in g.vertices and v in g.vertices, e
            g.edges[g.key(u, v)] = lab
        return g

    def key(self, u: int, v: int):
        return edge_key(u, v, self.directed)

    def copy(self) -> "RefGraph":
        return copy.deepcopy(self)

    def has_edge(self, u: int, v: int) -> bool:
        return self.key(u, v) in self.edges

    def edge_list(self) -> list[tuple[int, int, int]]:
        return _edge_list(self.edges, self.directed)

    def snapshot(self) -> tuple:
        """A hashable, comparable picture of the whole graph."""
        return (self.directed, tuple(sorted(self.vertices.items())), tuple(self.edge_list()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RefGraph) and self.snapshot() == other.snapshot()

    def __repr__(self) -> str:
        return (f"RefGraph(vertices={self.vertices!r}, edges={self.edge_list()!r}, "
                f"directed={self.directed})")

    # ------------------------------------------------------------------- batch
    def apply(self, records: Iterable[Record]) -> tuple[dict[str, int], dict[str, int]]:
        """Apply one batch; return ``(applied, ignored)`` counts.

        Raises ``Rejected`` without touching the graph if the batch is invalid.
        """
        records = [tuple(r) for r in records]
        applied, ignored = _zero_counts(), _zero_counts()

        # Split the batch by kind, normalising edge endpoints to keys (frozensets, or
        # arcs when directed).
        vertex_adds: list[tuple[int, int]] = []
        vertex_dels: list[int] = []
        edge_ins: list[tuple] = []
        edge_dels: list[tuple] = []
        for rec in records:
            kind, a, b, label = rec
            a, b, label = int(a), int(b), int(label)
            if kind == ADD_VERTEX:
                if label == NO_LABEL:
                    raise Rejected(f"vertex add without a label: {rec}")
                vertex_adds.append((a, label))
            elif kind == DELETE_VERTEX:
                vertex_dels.append(a)
            elif kind in (INSERT_EDGE, DELETE_EDGE):
                if a == b:
                    raise Rejected(f"self-loop: {rec}")
                key = self.key(a, b)
                if kind == INSERT_EDGE:
                    edge_ins.append((key, DEFAULT_EDGE_LABEL if label == NO_LABEL else label))
                else:
                    edge_dels.append((key, label))
            else:
                raise Rejected(f"unknown record kind: {rec}")

        # Rule: a vertex both added and deleted in one batch rejects.
        added_ids = {v for v, _ in vertex_adds}
        deleted_ids = set(vertex_dels)
        if added_ids & deleted_ids:
            raise Rejected(f"vertices both added and deleted: {sorted(added_ids & deleted_ids)}")

        # Rule: adding an existing vertex with another label rejects; so do two
        # adds of one id with different labels (UNSPECIFIED; not engine-tested).
        new_vertex_label: dict[int, int] = {}
        for v, lab in vertex_adds:
            if v in self.vertices and self.vertices[v] != lab:
                raise Rejected(f"vertex {v} exists with label {self.vertices[v]}, not {lab}")
            if new_vertex_label.setdefault(v, lab) != lab:
                raise Rejected(f"vertex {v} added twice with different labels")

        # Rule: every edge endpoint must exist before the batch or be added in it.
        known = set(self.vertices) | added_ids
        for key, _ in edge_ins + edge_dels:
            missing = set(key) - known
            if missing:
                raise Rejected(f"edge {sorted(key)} has missing endpoint(s) {sorted(missing)}")

        # Rule: two inserts of one edge with different labels reject.
        insert_label: dict = {}
        for key, lab in edge_ins:
            if insert_label.setdefault(key, lab) != lab:
                raise Rejected(f"edge {sorted(key)} inserted with labels "
                               f"{insert_label[key]}, {lab}")

        # ---- validation is over; from here on nothing can reject.
        new_vertices = dict(self.vertices)
        new_edges = dict(self.edges)

        seen_vadd: set[int] = set()
        for v, lab in vertex_adds:
            if v in self.vertices or v in seen_vadd:
                ignored["vertices_added"] += 1
            else:
                seen_vadd.add(v)
                new_vertices[v] = lab
                applied["vertices_added"] += 1

        # Cancel pairs: an edge key with an insert and a delete that could match
        # the inserted label. UNSPECIFIED (not engine-tested): a delete whose
        # explicit label differs from the insert's label does not cancel.
        def delete_matches_insert(key, lab: int) -> bool:
            return key in insert_label and (lab == NO_LABEL or lab == insert_label[key])

        cancelled = {key for key, lab in edge_dels if delete_matches_insert(key, lab)}

        # Edge deletions are judged against the pre-batch graph.
        seen_edel: set = set()
        for key, lab in edge_dels:
            stored = self.edges.get(key)
            if (key in cancelled
                    or set(key) & deleted_ids   # the vertex deletion covers it
                    or stored is None           # deleting a missing edge
                    or (lab != NO_LABEL and lab != stored)  # label mismatch
                    or key in seen_edel):       # UNSPECIFIED: in-batch duplicate
                ignored["edges_deleted"] += 1
            else:
                seen_edel.add(key)
                del new_edges[key]
                applied["edges_deleted"] += 1

        # Edge insertions: an edge that exists before the batch is a no-op.
        # UNSPECIFIED (not engine-tested): an insert touching a vertex deleted in
        # the same batch is ignored (the deletion covers it, like deletes); an
        # insert of an edge removed by a non-cancelling delete re-adds it.
        seen_eins: set = set()
        for key, lab in edge_ins:
            if (key in cancelled
                    or set(key) & deleted_ids
                    or key in new_edges         # already there
                    or key in seen_eins):
                ignored["edges_inserted"] += 1
            else:
                seen_eins.add(key)
                new_edges[key] = lab
                applied["edges_inserted"] += 1

        # Vertex deletions remove the vertex and all its edges.
        for v in vertex_dels:
            if v in new_vertices and v not in seen_vadd:
                del new_vertices[v]
                applied["vertices_deleted"] += 1
            else:
                ignored["vertices_deleted"] += 1
        for key in [k for k in new_edges if set(k) & deleted_ids]:
            del new_edges[key]
            applied["edges_deleted"] += 1

        self.vertices, self.edges = new_vertices, new_edges
        return applied, ignored

    # -------------------------------------------------------------- matching
    def embeddings(self, query: RefQuery) -> set[tuple[int, ...]]:
        """All injective label- and edge-preserving maps, as data-id tuples (on a
        directed graph, of a directed query: every query arc onto a data arc of the same
        direction and label).

        Backtracking over query vertices in index order; at each step every data
        vertex is tried and every constraint is checked directly against the
        already-mapped query vertices. Slow and plain by design.
        """
        assert query.directed == self.directed, "a query matches a graph of its kind"
        n = query.n
        qedges = query.edges
        out: set[tuple[int, ...]] = set()
        if n > len(self.vertices):
            return out  # injectivity: more query vertices than data vertices
        assignment: list[int] = []
        data_vertices = sorted(self.vertices)

        def extend(i: int) -> None:
            if i == n:
                out.add(tuple(assignment))
                return
            for x in data_vertices:
                if self.vertices[x] != query.labels[i]:
                    continue
                if x in assignment:  # injectivity
                    continue
                ok = True
                # Each pair (i, j) once when undirected; both arcs when directed.
                pairs = [(i, j, x, assignment[j]) for j in range(i)]
                if self.directed:
                    pairs += [(j, i, assignment[j], x) for j in range(i)]
                for qa, qb, da, db in pairs:
                    qlab = qedges.get(edge_key(qa, qb, self.directed))
                    if qlab is None:
                        continue
                    dlab = self.edges.get(self.key(da, db))
                    if dlab is None or dlab != qlab:
                        ok = False
                        break
                if ok:
                    assignment.append(x)
                    extend(i + 1)
                    assignment.pop()

        extend(0)
        return out
