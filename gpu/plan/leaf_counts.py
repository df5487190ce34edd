"""Per-leaf neighbour-candidate counts, maintained per batch, so leaf levels are counted in O(1).

For a query leaf q (degree 1, parent p, edge label l) and a data vertex y,
nc[y, j] = |{w in N(y) : w is a candidate of q and label(y, w) = l}|; for a directed
query, over the arcs of the leaf's direction only (`leaf_dir`: 0 for the arc p -> q, so
the arcs y -> w; 1 for q -> p, the arcs w -> y; -1, undirected, every edge).  A
trailing run of leaves in a matching order is then counted from these
numbers instead of being enumerated (RapidFlow's leaf handling, adapted to
batches).  At rest nc reflects the whole current graph; while a phase of a
batch runs, the phase's update edges are taken out (`UpdateIndex` lists
them per vertex) so the executor can add back exactly those the total-order
rule allows.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)


@nb.njit(cache=True, inline="always")
def _entry_fits(leaf_dir, nlab, k, owner_is_parent):
    """Whether list entry k (its key's low bit: 0 for an arc out of the list's owner, 1 for
    one into it) is an arc of the leaf's direction, the owner being the parent's match or
    the leaf's.  Undirected: every entry."""
    if leaf_dir < 0:
        return True
    out = (nlab[k] & 1) == 0
    return out == (owner_is_parent == (leaf_dir == 0))


@nb.njit(cache=True)
def _edge_contrib(nc, cand, leaf_q, leaf_elab, leaf_dir, us, vs, labels, sign):
    # Edge (arc) u -> v: v is a leaf candidate under parent u for an arc p -> q (or an
    # undirected leaf), u one under parent v for an arc q -> p (or an undirected leaf).
    for i in range(us.shape[0]):
        u, v, lab = us[i], vs[i], labels[i]
        for j in range(leaf_q.shape[0]):
            if leaf_elab[j] != lab:
                continue
            bit = np.uint32(1) << np.uint32(leaf_q[j])
            if leaf_dir[j] != 1 and cand[v] & bit:
                nc[u, j] += sign
            if leaf_dir[j] != 0 and cand[u] & bit:
                nc[v, j] += sign


@nb.njit(cache=True)
def _cand_changed(nc, leaf_q, leaf_elab, leaf_dir, vertices, old_bits, new_bits, start, deg,
                  nbr, nlab, elab):
    for i in range(vertices.shape[0]):
        w = vertices[i]
        for j in range(leaf_q.shape[0]):
            bit = np.uint32(1) << np.uint32(leaf_q[j])
            delta = np.int32((new_bits[i] & bit) != 0) - np.int32((old_bits[i] & bit) != 0)
            if delta == 0:
                continue
            for k in range(start[w], start[w] + deg[w]):
                if elab[k] == leaf_elab[j] and _entry_fits(leaf_dir[j], nlab, k, False):
                    nc[nbr[k], j] += delta


@nb.njit(cache=True)
def _full(nc, cand, leaf_q, leaf_elab, leaf_dir, start, deg, nbr, nlab, elab, alive, n):
    for y in range(n):
        for j in range(leaf_q.shape[0]):
            nc[y, j] = 0
        if not alive[y]:
            continue
        for k in range(start[y], start[y] + deg[y]):
            w = nbr[k]
            for j in range(leaf_q.shape[0]):
                if elab[k] == leaf_elab[j] and _entry_fits(leaf_dir[j], nlab, k, True) \
                        and cand[w] & (np.uint32(1) << np.uint32(leaf_q[j])):
                    nc[y, j] += 1


class LeafCounts:
    """nc for the leaves of one query; columns follow `leaf_q`."""

    def __init__(self, query, capacity: int, kept: bool = True) -> None:
        """`kept=False`: no counts at all (the CUDA executor does not read them)."""
        degrees = query.degrees
        self.leaf_q = np.flatnonzero(degrees == 1).astype(np.int32) \
            if query.num_vertices >= 3 and kept else np.empty(0, dtype=np.int32)
        matrix = query.edge_label_matrix
        # A leaf's one edge: the arc parent -> leaf is column q of the matrix, leaf ->
        # parent row q (undirected: both, the same label).
        self.leaf_elab = np.array([max(matrix[:, q].max(), matrix[q].max())
                                   for q in self.leaf_q], dtype=np.int32)
        self.leaf_dir = np.array([(0 if matrix[:, q].max() >= 0 else 1) if query.directed
                                  else -1 for q in self.leaf_q], dtype=np.int32)
        self.column = np.full(query.num_vertices, -1, dtype=np.int32)
        self.column[self.leaf_q] = np.arange(len(self.leaf_q), dtype=np.int32)
        self.nc = np.zeros((capacity, max(1, len(self.leaf_q))), dtype=np.int32)

    @property
    def active(self) -> bool:
        return len(self.leaf_q) > 0

    def resize(self, capacity: int) -> None:
        if self.nc.shape[0] < capacity:
            grown = np.zeros((capacity, self.nc.shape[1]), dtype=np.int32)
            grown[: self.nc.shape[0]] = self.nc
            self.nc = grown

    def rebuild(self, graph, cand) -> None:
        """Whole-graph count (registration only)."""
        if self.active:
            _full(self.nc, cand, self.leaf_q, self.leaf_elab, self.leaf_dir, graph.start,
                  graph.deg, graph.nbr, graph.nlab, graph.elab, graph.alive, graph.num_slots)

    def check(self, graph, cand) -> None:
        """Assert nc equals a from-scratch count (tests)."""
        if not self.active:
            return
        fresh = np.zeros_like(self.nc)
        _full(fresh, cand, self.leaf_q, self.leaf_elab, self.leaf_dir, graph.start, graph.deg,
              graph.nbr, graph.nlab, graph.elab, graph.alive, graph.num_slots)
        n = graph.num_slots
        assert np.array_equal(fresh[:n], self.nc[:n]), "leaf counts drifted"

    def edges(self, cand, us, vs, labels, sign: int) -> None:
        """Add (+1) or take out (-1) the contribution of edges us-vs under bits `cand`."""
        if self.active and len(us):
            _edge_contrib(self.nc, cand, self.leaf_q, self.leaf_elab, self.leaf_dir, us, vs,
                          np.ascontiguousarray(labels, dtype=np.int32), np.int32(sign))

    def candidates_changed(self, graph, vertices, old_bits, new_bits) -> None:
        """Follow candidate-bit changes of `vertices` into their neighbours' counts."""
        if self.active and len(vertices):
            _cand_changed(self.nc, self.leaf_q, self.leaf_elab, self.leaf_dir, vertices,
                          old_bits, new_bits, graph.start, graph.deg, graph.nbr, graph.nlab,
                          graph.elab)


@nb.njit(cache=True)
def _fill_index(upd_start, upd_cnt, src, order):
    for i in range(order.shape[0]):
        s = src[order[i]]
        if upd_cnt[s] == 0:
            upd_start[s] = i
        upd_cnt[s] += 1


class UpdateIndex:
    """The update edges of the running phase, listed per endpoint by rank (batch-local CSR).

    `elab` is the edge label; in a directed graph, 2 label + the arc's direction at the
    entry's endpoint (0: the arc leaves it, 1: it enters), as a list key carries direction,
    so a leaf count takes the arcs of its leaf's direction alone."""

    def __init__(self, capacity: int) -> None:
        self.start = np.zeros(capacity, dtype=np.int64)
        self.count = np.zeros(capacity, dtype=np.int32)
        self.nbr = np.empty(0, dtype=np.int32)
        self.rank = np.empty(0, dtype=np.int32)
        self.elab = np.empty(0, dtype=np.int32)
        self._touched = np.empty(0, dtype=np.int32)

    def reserve(self, capacity: int) -> None:
        """Per-vertex arrays for `capacity` vertices (all counts zero: call between phases)."""
        if self.count.shape[0] < capacity:
            self.start = np.zeros(capacity, dtype=np.int64)
            self.count = np.zeros(capacity, dtype=np.int32)

    def fill(self, capacity: int, us, vs, labels, ranks, directed: bool = False) -> None:
        self.reserve(capacity)
        src = np.concatenate([us, vs]).astype(np.int32)
        both = np.concatenate([ranks, ranks]).astype(np.int32)
        order = np.lexsort((both, src))     # per vertex by rank (grouped search relies on it)
        self.nbr = np.concatenate([vs, us]).astype(np.int32)[order]
        self.rank = both[order]
        labels = np.asarray(labels, dtype=np.int32)
        elab = np.concatenate([2 * labels, 2 * labels + 1]) if directed else \
            np.concatenate([labels, labels])
        self.elab = elab.astype(np.int32)[order]
        _fill_index(self.start, self.count, src, order)
        self._touched = src

    def clear(self) -> None:
        self.count[self._touched] = 0
        self._touched = np.empty(0, dtype=np.int32)
