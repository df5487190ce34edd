"""Vertex signatures and per-query candidate bits, maintained per batch (GSI / GAMMA §IV-B).

A signature holds, for every label that occurs in a registered query, the
2-bit saturating count of the vertex's neighbours with that label (32 labels
per uint64 word).  Data vertex v is a candidate of query vertex u when the
labels agree, deg(v) >= deg(u) and every 2-bit field of v's signature is >=
the matching field of u's.  Exact neighbour-label counts are kept beside the
codes because a saturated code cannot be decremented.  Only vertices touched
by a batch are re-encoded, and only their candidate bits are recomputed.

On a directed graph a label has two fields, out-neighbours (slot 2s) and in-neighbours
(2s + 1) of label s: a query vertex's in- and out-label counts must both fit.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)

LABELS_PER_WORD = 32
_HI = np.uint64(0xAAAAAAAAAAAAAAAA)
_LO = np.uint64(0x5555555555555555)


@nb.njit(cache=True)
def candidate_edge_counts(start, deg, nbr, elab, num_slots, cand, qa, qb, ql):
    """For each query edge j = (qa[j], qb[j]) with label ql[j]: the data edges u - v with
    that label, counted once per orientation in which u is a candidate of qa[j] and v one
    of qb[j] (the planner's measured edge counts; one pass over the lists, skipping the
    vertices that are candidates of nothing)."""
    out = np.zeros(qa.shape[0], dtype=np.int64)
    for u in range(num_slots):
        cu = np.int64(cand[u])
        if cu == 0:
            continue
        for i in range(start[u], start[u] + deg[u]):
            v = nbr[i]
            if v <= u:
                continue
            cv = np.int64(cand[v])
            if cv == 0:
                continue
            for j in range(qa.shape[0]):
                if elab[i] == ql[j]:
                    a, b = qa[j], qb[j]
                    out[j] += ((cu >> a) & 1) * ((cv >> b) & 1) + ((cv >> a) & 1) * ((cu >> b) & 1)
    return out


@nb.njit(cache=True, inline="always")
def fields_ge(d, q):
    """True when every 2-bit field of d is >= the same field of q (branch-free SWAR)."""
    dh = d & _HI
    qh = q & _HI
    dl = (d & _LO) << np.uint64(1)
    ql = (q & _LO) << np.uint64(1)
    ok = (dh & ~qh) | (~(dh ^ qh) & (dl | ~ql))
    return (ok & _HI) == _HI


@nb.njit(cache=True)
def _encode(counts, codes, vertices):
    words = codes.shape[1]
    for i in range(vertices.shape[0]):
        v = vertices[i]
        for w in range(words):
            codes[v, w] = np.uint64(0)
        for s in range(counts.shape[1]):
            c = min(counts[v, s], 3)
            codes[v, s // LABELS_PER_WORD] |= np.uint64(c) << np.uint64(2 * (s % LABELS_PER_WORD))


@nb.njit(cache=True, inline="always")
def _field(slot, directed, incoming):
    """The count field of a neighbour whose label has `slot` (see the module docstring)."""
    return 2 * slot + (1 if incoming else 0) if directed else slot


@nb.njit(cache=True)
def _count_all(start, deg, nbr, nlab, slot_of, alive, counts, n, directed):
    for v in range(n):
        for s in range(counts.shape[1]):
            counts[v, s] = 0
        if not alive[v]:
            continue
        for i in range(start[v], start[v] + deg[v]):
            s = slot_of[nbr[i]]
            if s >= 0:
                # A directed list files an arc into v under an odd key (gpu/graph/lists.py).
                counts[v, _field(s, directed, (nlab[i] & 1) == 1)] += 1


@nb.njit(cache=True)
def _apply_edges(counts, slot_of, us, vs, delta, directed):
    """Edges us - vs (directed: arcs us -> vs) come (delta 1) or go (-1)."""
    for i in range(us.shape[0]):
        u, v = us[i], vs[i]
        s = slot_of[v]
        if s >= 0:
            counts[u, _field(s, directed, False)] += delta
        s = slot_of[u]
        if s >= 0:
            counts[v, _field(s, directed, True)] += delta


@nb.njit(cache=True)
def _candidates(cand, vertices, alive, label, deg, codes, q_label, q_deg, q_codes):
    for i in range(vertices.shape[0]):
        v = vertices[i]
        bits = np.uint32(0)
        if alive[v]:
            for u in range(q_label.shape[0]):
                if label[v] != q_label[u] or deg[v] < q_deg[u]:
                    continue
                ok = True
                for w in range(codes.shape[1]):
                    if not fields_ge(codes[v, w], q_codes[u, w]):
                        ok = False
                        break
                if ok:
                    bits |= np.uint32(1) << np.uint32(u)
        cand[v] = bits


def query_codes(labels: np.ndarray, query) -> np.ndarray:
    """2-bit codes of each query vertex's neighbour-label counts over the encoded
    `labels` (sorted; they include every label of the query); per direction for a directed
    query."""
    n = query.num_vertices
    fields = len(labels) * (2 if query.directed else 1)
    counts = np.zeros((n, max(1, fields)), dtype=np.int32)
    for a, b in query.edges.tolist():
        sa, sb = (int(np.searchsorted(labels, query.labels[x])) for x in (a, b))
        counts[a, 2 * sb if query.directed else sb] += 1
        counts[b, 2 * sa + 1 if query.directed else sa] += 1
    codes = np.zeros((n, max(1, -(-fields // LABELS_PER_WORD))), dtype=np.uint64)
    _encode(counts, codes, np.arange(n, dtype=np.int32))
    return codes


def label_slots(labels: np.ndarray, vertex_labels: np.ndarray) -> np.ndarray:
    """Each vertex label's slot among the encoded `labels` (sorted), or -1."""
    pos = np.searchsorted(labels, vertex_labels)
    hit = pos < len(labels)
    hit[hit] = labels[pos[hit]] == vertex_labels[hit]
    return np.where(hit, pos, -1).astype(np.int32)


def count_neighbour_labels(graph, slot_of: np.ndarray, slots: int) -> np.ndarray:
    """Every vertex slot's neighbour count per label slot, from scratch ([capacity, slots];
    twice the slots, per direction, on a directed graph)."""
    directed = graph.directed
    counts = np.zeros((slot_of.shape[0], slots * (2 if directed else 1)), dtype=np.int32)
    _count_all(graph.start, graph.deg, graph.nbr, graph.nlab, slot_of, graph.alive, counts,
               graph.num_slots, directed)
    return counts


class SignatureTable:
    """Neighbour-label counts, 2-bit codes, and one candidate bitmap per query."""

    def __init__(self, directed: bool = False) -> None:
        self.directed = directed                       # count fields per direction too
        self.labels = np.empty(0, dtype=np.int64)     # encoded labels, sorted
        self.slot_of = np.full(0, -1, dtype=np.int32)  # per data vertex: its label's slot or -1
        self.counts = np.zeros((0, 0), dtype=np.int32)
        self.codes = np.zeros((0, 1), dtype=np.uint64)
        self.cand: dict[int, np.ndarray] = {}          # query id -> uint32 [vertex capacity]
        self._query_side: dict[int, tuple] = {}

    @property
    def words(self) -> int:
        fields = len(self.labels) * (2 if self.directed else 1)
        return max(1, -(-fields // LABELS_PER_WORD))

    # ---- the label set --------------------------------------------------
    def query_codes(self, query) -> np.ndarray:
        """2-bit codes of each query vertex's neighbour-label counts."""
        return query_codes(self.labels, query)

    def cover_labels(self, labels, graph) -> bool:
        """Make sure `labels` are encoded; re-encode the whole graph if the set grew."""
        new = np.union1d(self.labels, np.asarray(labels, dtype=np.int64))
        if len(new) == len(self.labels):
            return False
        self.labels = new
        self.resize(graph)
        n = graph.num_slots
        self.slot_of[:n] = self._slots_for(graph.label[:n])
        self.counts = count_neighbour_labels(graph, self.slot_of, len(new))
        self.codes = np.zeros((self.slot_of.shape[0], self.words), dtype=np.uint64)
        _encode(self.counts, self.codes, np.arange(n, dtype=np.int32))
        return True

    def _slots_for(self, labels: np.ndarray) -> np.ndarray:
        return label_slots(self.labels, labels)

    # ---- capacity -------------------------------------------------------
    def resize(self, graph) -> None:
        """Follow the graph's vertex capacity."""
        size = graph.label.shape[0]
        if self.slot_of.shape[0] >= size:
            return

        def grown(arr, fill):
            new = np.full((size,) + arr.shape[1:], fill, dtype=arr.dtype)
            new[: arr.shape[0]] = arr
            return new
        self.slot_of = grown(self.slot_of, -1)
        self.counts = grown(self.counts, 0)
        self.codes = grown(self.codes, 0)
        for qid in self.cand:
            self.cand[qid] = grown(self.cand[qid], 0)

    # ---- queries --------------------------------------------------------
    def add_query(self, qid: int, query, graph) -> None:
        grew = self.cover_labels(np.unique(query.labels), graph)
        self._query_side[qid] = (query, query.labels.astype(np.int32), query.degrees,
                                 self.query_codes(query))
        if grew:   # every query's codes have more words now
            for other, (q, lab, deg, _) in self._query_side.items():
                self._query_side[other] = (q, lab, deg, self.query_codes(q))
        self.cand[qid] = np.zeros(self.slot_of.shape[0], dtype=np.uint32)
        self.refresh(graph, np.arange(graph.num_slots, dtype=np.int32), only=qid)

    def host_cand(self, qid: int) -> np.ndarray:
        """The query's candidate bits (on the host already)."""
        return self.cand[qid]

    def query_side(self, qid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(labels, degrees, codes) of the query's vertices, as `_candidates` reads them."""
        return self._query_side[qid][1:]

    def encode(self, vertices: np.ndarray) -> None:
        """Re-encode `vertices` without recomputing any candidate bits (see refresh)."""
        _encode(self.counts, self.codes, vertices)

    def remove_query(self, qid: int) -> None:
        self.cand.pop(qid)
        self._query_side.pop(qid)

    # ---- per batch ------------------------------------------------------
    def vertices_added(self, graph, slots: np.ndarray) -> None:
        self.resize(graph)
        self.slot_of[slots] = self._slots_for(graph.label[slots])
        self.counts[slots] = 0

    def edges_changed(self, us: np.ndarray, vs: np.ndarray, delta: int) -> None:
        _apply_edges(self.counts, self.slot_of, us, vs, np.int32(delta), self.directed)

    def check(self, graph) -> None:
        """Assert counts, codes and candidate bits equal a from-scratch computation (tests)."""
        n = graph.num_slots
        fresh = SignatureTable(self.directed)
        fresh.labels = self.labels
        fresh.resize(graph)
        fresh.slot_of[:n] = fresh._slots_for(graph.label[:n])
        fresh.counts = np.zeros_like(self.counts)
        fresh.codes = np.zeros_like(self.codes)
        _count_all(graph.start, graph.deg, graph.nbr, graph.nlab, fresh.slot_of, graph.alive,
                   fresh.counts, n, self.directed)
        alive = graph.alive[:n]
        assert np.array_equal(fresh.counts[:n][alive], self.counts[:n][alive]), "counts drifted"
        everyone = np.arange(n, dtype=np.int32)
        _encode(fresh.counts, fresh.codes, everyone)
        for qid, (_, q_label, q_deg, q_codes) in self._query_side.items():
            bits = np.zeros(n, dtype=np.uint32)
            _candidates(bits, everyone, graph.alive, graph.label, graph.deg, fresh.codes,
                        q_label, q_deg, q_codes)
            assert np.array_equal(bits, self.cand[qid][:n]), f"candidates of {qid} drifted"

    def refresh(self, graph, vertices: np.ndarray, only: int | None = None) -> None:
        """Re-encode `vertices` and recompute their candidate bits."""
        vertices = np.ascontiguousarray(vertices, dtype=np.int32)
        _encode(self.counts, self.codes, vertices)
        for qid, (_, q_label, q_deg, q_codes) in self._query_side.items():
            if only is not None and qid != only:
                continue
            _candidates(self.cand[qid], vertices, graph.alive, graph.label, graph.deg,
                        self.codes, q_label, q_deg, q_codes)
