"""The CPU data graph: label-partitioned sorted neighbour lists with slack, updated in place.

Every vertex owns a block of a shared pool (`nbr`, `nlab`, `elab`, `rank`):
its neighbours sorted by (vertex label, internal id), so the neighbours of one
label form a contiguous id-sorted segment that a matcher scans alone; the
neighbours' labels (inline, so binary searches read contiguous memory); their
edge labels, and the update rank the
matcher reads for the total-order rule (0 = not an update edge).  A directed graph files
each arc u -> w twice, in u's list under key 2 label(w) (out) and in w's under 2 label(u) + 1
(in), and sorts by that key: a vertex's out- and in-neighbours of one label are two
segments, and u -> w beside w -> u are two entries (docs/design.md).  A block has
spare capacity; a list that outgrows it moves to a block twice the size at the
pool's top.  The pool doubles when full and is compacted when more than half
of it is garbage, so the cost of a batch is proportional to the batch and the
touched lists (amortised), never to the graph.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)
from gpu.config import EngineConfig
from gpu.graph.idmap import find_slot
from gpu.plan.signatures import candidate_edge_counts
from gpu.graph.sets import sorted_unique
from gpu.graph.vertices import VertexTable


@nb.njit(cache=True, inline="always")
def _before(label_a, a, label_b, b):
    """Neighbour-list order: by vertex label, then by id."""
    return label_a < label_b or (label_a == label_b and a < b)


@nb.njit(cache=True, inline="always")
def list_key(label, w, directed, incoming):
    """The key u's list files its neighbour w under: w's label, or for a directed graph
    2 label + 1 when the arc enters u (w -> u), + 0 when it leaves u."""
    if directed:
        return 2 * label[w] + (1 if incoming else 0)
    return label[w]


@nb.njit(cache=True)
def find_position(nbr, nlab, start, deg, u, w, w_label):
    """Position of w (filed under key w_label, list_key) in u's list, or -1."""
    lo = start[u]
    end = lo + deg[u]
    hi = end
    while lo < hi:
        mid = (lo + hi) >> 1
        if _before(nlab[mid], nbr[mid], w_label, w):
            lo = mid + 1
        else:
            hi = mid
    if lo < end and nbr[lo] == w and nlab[lo] == w_label:
        return lo
    return -1


@nb.njit(cache=True)
def label_segment(nlab, lo, hi, wanted):
    """[first, last) of the list positions in [lo, hi) whose neighbour label is `wanted`."""
    a, b = lo, hi
    while a < b:
        mid = (a + b) >> 1
        if nlab[mid] < wanted:
            a = mid + 1
        else:
            b = mid
    first = a
    b = hi
    while a < b:
        mid = (a + b) >> 1
        if nlab[mid] <= wanted:
            a = mid + 1
        else:
            b = mid
    return first, a


@nb.njit(cache=True)
def _find_many(nbr, nlab, label, start, deg, us, vs, out, directed):
    for i in range(us.shape[0]):
        out[i] = find_position(nbr, nlab, start, deg, us[i], vs[i],
                               list_key(label, vs[i], directed, False))


@nb.njit(cache=True)
def _find_edge(keys, vals, a, b, nbr, nlab, label, start, deg, elab, directed):
    """DynamicGraph.find_edge in one compiled call."""
    su = find_slot(keys, vals, a)
    sv = find_slot(keys, vals, b)
    if su < 0 or sv < 0 or su == sv:
        return su, sv, np.int64(-1)
    u, v = (su, sv) if directed else (min(su, sv), max(su, sv))
    pos = find_position(nbr, nlab, start, deg, u, v, list_key(label, v, directed, False))
    return u, v, np.int64(elab[pos] if pos >= 0 else -1)


@nb.njit(cache=True)
def _set_ranks(nbr, nlab, label, rank, start, deg, us, vs, ranks, directed):
    for i in range(us.shape[0]):
        p = find_position(nbr, nlab, start, deg, us[i], vs[i],
                          list_key(label, vs[i], directed, False))
        rank[p] = ranks[i]
        q = find_position(nbr, nlab, start, deg, vs[i], us[i],
                          list_key(label, us[i], directed, True))
        rank[q] = ranks[i]


@nb.njit(cache=True, inline="always")
def _run_end(src, i):
    """The end of the run of list entries of one source that starts at i (src sorted)."""
    j = i
    while j < src.shape[0] and src[j] == src[i]:
        j += 1
    return j


@nb.njit(cache=True)
def _fill_empty(nbr, nlab, elab, rank, start, deg, cap, src, dst, keys, lab, min_cap):
    """_insert_sorted into a pool that holds no list (every capacity 0): each source's
    entries (sorted by src, then list order) become its list from the bottom up, with room
    for max(their number, min_cap), as _insert_sorted would place them; no merge, no
    relocation.  Returns the new pool top and the longest list."""
    top = 0
    longest = 0
    i = 0
    while i < src.shape[0]:
        u, j = src[i], _run_end(src, i)
        k = j - i
        start[u] = top
        deg[u] = k
        cap[u] = max(k, min_cap)
        for x in range(k):
            nbr[top + x] = dst[i + x]
            nlab[top + x] = keys[i + x]
            elab[top + x] = lab[i + x]
            rank[top + x] = 0
        top += cap[u]
        longest = max(longest, k)
        i = j
    return top, longest


@nb.njit(cache=True)
def _insert_sorted(nbr, nlab, elab, rank, start, deg, cap, src, dst, keys, lab, top, min_cap):
    """Merge list entries (dst filed under keys in src's list; sorted by src, then list
    order) into their lists.

    Returns the new pool top and the garbage produced by relocations.  The
    caller has reserved room for every list to relocate.
    """
    garbage = 0
    i = 0
    while i < src.shape[0]:
        u, j = src[i], _run_end(src, i)
        k = j - i
        d = deg[u]
        old = start[u]
        if d + k <= cap[u]:
            dest = old
        else:
            new_cap = max(2 * cap[u], d + k, min_cap)
            dest = top
            top += new_cap
            garbage += cap[u]
            cap[u] = new_cap
        # Merge from the back so an in-place merge never overwrites unread entries.
        a = d - 1
        b = j - 1
        out = d + k - 1
        while b >= i:
            if a >= 0 and _before(keys[b], dst[b], nlab[old + a], nbr[old + a]):
                nbr[dest + out] = nbr[old + a]
                nlab[dest + out] = nlab[old + a]
                elab[dest + out] = elab[old + a]
                rank[dest + out] = rank[old + a]
                a -= 1
            else:
                nbr[dest + out] = dst[b]
                nlab[dest + out] = keys[b]
                elab[dest + out] = lab[b]
                rank[dest + out] = 0
                b -= 1
            out -= 1
        if dest != old:
            while a >= 0:
                nbr[dest + a] = nbr[old + a]
                nlab[dest + a] = nlab[old + a]
                elab[dest + a] = elab[old + a]
                rank[dest + a] = rank[old + a]
                a -= 1
        start[u] = dest
        deg[u] = d + k
        i = j
    return top, garbage


@nb.njit(cache=True)
def _insert_one(nbr, nlab, elab, rank, label, start, deg, cap, u, v, lab, top, min_cap,
                directed):
    """_insert_sorted of the one edge u - v (u < v; directed: the arc u -> v, either way
    round) when the pool has room for both lists to relocate: returns (top, garbage, the
    larger new degree), or top = -1 and nothing changed when it has not (the caller
    reserves room the general way)."""
    need = max(2 * cap[u], deg[u] + 1, min_cap) + max(2 * cap[v], deg[v] + 1, min_cap)
    if top + need > nbr.shape[0]:
        return np.int64(-1), np.int64(0), np.int64(0)
    src = np.empty(2, dtype=np.int32)
    dst = np.empty(2, dtype=np.int32)
    keys = np.empty(2, dtype=np.int32)
    labs = np.empty(2, dtype=np.int32)
    first = 0 if u < v else 1      # entries sorted by source
    src[first], dst[first], keys[first] = u, v, list_key(label, v, directed, False)
    src[1 - first], dst[1 - first], keys[1 - first] = v, u, list_key(label, u, directed, True)
    labs[0], labs[1] = lab, lab
    top, garbage = _insert_sorted(nbr, nlab, elab, rank, start, deg, cap, src, dst, keys, labs,
                                  top, min_cap)
    return np.int64(top), np.int64(garbage), np.int64(max(deg[u], deg[v]))


@nb.njit(cache=True)
def _delete_sorted(nbr, nlab, elab, rank, start, deg, src, dst, keys):
    """Remove list entries (dst under keys in src's list; sorted by src, then list order);
    all of them must exist."""
    i = 0
    n = src.shape[0]
    while i < n:
        u = src[i]
        j = i
        while j < n and src[j] == u:
            j += 1
        s = start[u]
        d = deg[u]
        write = 0
        b = i
        for read in range(d):
            w = nbr[s + read]
            if b < j and dst[b] == w and keys[b] == nlab[s + read]:
                b += 1
                continue
            nbr[s + write] = w
            nlab[s + write] = nlab[s + read]
            elab[s + write] = elab[s + read]
            rank[s + write] = rank[s + read]
            write += 1
        deg[u] = write
        i = j


@nb.njit(cache=True)
def _compact(nbr, nlab, elab, rank, start, deg, cap, alive, new_nbr, new_nlab, new_elab,
             new_rank, min_cap):
    top = 0
    for u in range(start.shape[0]):
        if not alive[u]:
            cap[u] = 0
            start[u] = top
            continue
        c = max(min_cap, deg[u] + (deg[u] >> 2))
        s = start[u]
        for i in range(deg[u]):
            new_nbr[top + i] = nbr[s + i]
            new_nlab[top + i] = nlab[s + i]
            new_elab[top + i] = elab[s + i]
            new_rank[top + i] = rank[s + i]
        start[u] = top
        cap[u] = c
        top += c
    return top


@nb.njit(cache=True, inline="always")
def _owns(u, i, nbr, nlab, directed):
    """Whether u's entry i is the one of its edge that lists it: u < w, or directed, the
    arc leaves u."""
    return (nlab[i] & 1) == 0 if directed else u < nbr[i]


@nb.njit(cache=True)
def all_edges(start, deg, nbr, nlab, elab, num_slots, directed):
    """Every edge once, u < v (directed: every arc u -> v), with its label."""
    total = 0
    for u in range(num_slots):
        for i in range(start[u], start[u] + deg[u]):
            if _owns(u, i, nbr, nlab, directed):
                total += 1
    us = np.empty(total, dtype=np.int32)
    vs = np.empty(total, dtype=np.int32)
    ls = np.empty(total, dtype=np.int32)
    k = 0
    for u in range(num_slots):
        for i in range(start[u], start[u] + deg[u]):
            if _owns(u, i, nbr, nlab, directed):
                us[k] = u
                vs[k] = nbr[i]
                ls[k] = elab[i]
                k += 1
    return us, vs, ls


def _list_entries(us, vs, labels, vertex_label, directed: bool):
    """The two list entries of each edge us-vs (directed: arc us -> vs) as (src, dst, key,
    label), sorted by source, then neighbour-list order (key, id)."""
    src = np.concatenate([us, vs]).astype(np.int32)
    dst = np.concatenate([vs, us]).astype(np.int32)
    lab = np.concatenate([labels, labels]).astype(np.int32)
    if directed:
        keys = 2 * vertex_label[dst].astype(np.int32)
        keys[len(us):] += 1
    else:
        keys = vertex_label[dst].astype(np.int32)
    if len(us) == 1:    # two entries with distinct sources: sorted by source alone
        order = np.argsort(src)
    else:
        order = _entry_order(src, keys, dst)
    return src[order], dst[order], keys[order], lab[order]


def _entry_order(src: np.ndarray, keys: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The order of list entries by (src, key, dst): one sort of the three packed into an
    int64 where their bits fit (ids below 2^31 and small label keys, as always in
    practice: four times faster than lexsort's three passes, which were most of a window
    subgraph's fill), else lexsort."""
    if int(keys.min()) >= 0 and int(src.min()) >= 0 and int(dst.min()) >= 0:
        kb = int(keys.max()).bit_length()
        db = int(dst.max()).bit_length()
        if int(src.max()).bit_length() + kb + db <= 63:
            packed = (src.astype(np.int64) << (kb + db)) | \
                (keys.astype(np.int64) << db) | dst.astype(np.int64)
            return np.argsort(packed, kind="stable")
    return np.lexsort((dst, keys, src))


class DynamicGraph(VertexTable):
    """Simple labeled graph over dense internal vertex slots: undirected, or directed (arcs
    u -> v, both ways allowed)."""

    ARRAYS = {**VertexTable.ARRAYS, "start": (np.int64, 0), "cap": (np.int32, 0)}

    def __init__(self, config: EngineConfig | None = None, directed: bool = False) -> None:
        super().__init__(config)
        self.directed = bool(directed)
        ecap = self.config.initial_edge_capacity
        self.nbr = np.zeros(ecap, dtype=np.int32)
        self.nlab = np.zeros(ecap, dtype=np.int32)
        self.elab = np.zeros(ecap, dtype=np.int32)
        self.rank = np.zeros(ecap, dtype=np.int32)
        self.top = 0
        self.garbage = 0

    # ---- construction -------------------------------------------------
    @classmethod
    def from_labeled(cls, graph, config: EngineConfig | None = None,
                     directed: bool = False) -> "DynamicGraph":
        """Bulk-load a `LabeledGraph` (one CSR build; later batches update in place)."""
        g = cls(config, directed)
        g.add_vertices(graph.vertex_ids, graph.vertex_labels)
        g.insert_edges(*g.edge_slots(graph))
        return g

    # ---- queries ------------------------------------------------------
    def neighbors(self, u: int) -> np.ndarray:
        s = self.start[u]
        return self.nbr[s: s + self.deg[u]]

    def edge_positions(self, us: np.ndarray, vs: np.ndarray) -> np.ndarray:
        """Pool position of each edge (u -> v, in u's list), -1 where absent."""
        out = np.empty(len(us), dtype=np.int64)
        _find_many(self.nbr, self.nlab, self.label, self.start, self.deg,
                   np.ascontiguousarray(us, dtype=np.int32),
                   np.ascontiguousarray(vs, dtype=np.int32), out, self.directed)
        return out

    def edge_labels(self, us: np.ndarray, vs: np.ndarray) -> np.ndarray:
        """The stored label of each edge u - v (directed: arc u -> v; int32), -1 where
        absent."""
        pos = self.edge_positions(us, vs)
        return np.where(pos >= 0, self.elab[np.maximum(pos, 0)], -1).astype(np.int32)

    def find_edge(self, a: int, b: int) -> tuple[int, int, int]:
        """For external ids a and b: their slots (u < v; directed: a's, b's) and the stored
        label of the edge u - v (arc a -> b; -1 when absent); when a or b is unknown (-1)
        or a == b, their slots as they are (u, v = a's, b's) and -1.  One call instead of a
        lookup and a search (the one-edge batches of a stream)."""
        keys, vals = self.ids.table
        return _find_edge(keys, vals, a, b, self.nbr, self.nlab, self.label, self.start,
                          self.deg, self.elab, self.directed)

    def incident_edges(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All edges touching `slots`, each once, as (u, v, label) with u < v (directed:
        the arcs u -> v into and out of them)."""
        parts_u, parts_v, parts_l, parts_k = [], [], [], []
        for u in sorted_unique(slots).tolist():
            s, d = self.start[u], self.deg[u]
            parts_u.append(np.full(d, u, dtype=np.int32))
            parts_v.append(self.nbr[s: s + d].copy())
            parts_l.append(self.elab[s: s + d].copy())
            parts_k.append(self.nlab[s: s + d].copy())
        if not parts_u:
            empty = np.empty(0, dtype=np.int32)
            return empty, empty.copy(), empty.copy()
        u = np.concatenate(parts_u)
        v = np.concatenate(parts_v)
        lab = np.concatenate(parts_l)
        if self.directed:
            incoming = (np.concatenate(parts_k) & 1) == 1
            lo, hi = np.where(incoming, v, u), np.where(incoming, u, v)
        else:
            lo, hi = np.minimum(u, v), np.maximum(u, v)
        key = lo.astype(np.int64) << 32 | hi.astype(np.int64)
        _, first = np.unique(key, return_index=True)
        return lo[first], hi[first], lab[first]

    def set_ranks(self, us: np.ndarray, vs: np.ndarray, ranks: np.ndarray) -> None:
        """Write the total-order rank of existing edges (both of their list entries)."""
        _set_ranks(self.nbr, self.nlab, self.label, self.rank, self.start, self.deg,
                   np.ascontiguousarray(us, dtype=np.int32),
                   np.ascontiguousarray(vs, dtype=np.int32),
                   np.ascontiguousarray(ranks, dtype=np.int32), self.directed)

    # ---- vertex updates ---------------------------------------------
    def _release(self, slots: np.ndarray) -> None:
        self.garbage += int(self.cap[slots].sum())
        self.cap[slots] = 0

    # ---- edge updates -------------------------------------------------
    def insert_edges(self, us: np.ndarray, vs: np.ndarray, labels: np.ndarray) -> None:
        """Insert absent edges (directed: arcs us -> vs; the engine has deduplicated them)."""
        if len(us) == 0:
            return
        if len(us) == 1:    # one edge: one compiled call unless the pool must grow first
            u, v = int(us[0]), int(vs[0])
            if not self.directed:
                u, v = min(u, v), max(u, v)
            top, garbage, degree = _insert_one(self.nbr, self.nlab, self.elab, self.rank,
                                               self.label, self.start, self.deg, self.cap, u,
                                               v, int(labels[0]), self.top,
                                               self.config.min_list_capacity, self.directed)
            if top >= 0:
                self.top = int(top)
                self.garbage += int(garbage)
                self.num_edges += 1
                self._max_degree = max(self._max_degree, int(degree))
                return
        src, dst, keys, lab = _list_entries(us, vs, labels, self.label, self.directed)
        if self.top == 0:   # no list holds storage (a scratch graph just emptied): lay out
            runs = 1 + int(np.count_nonzero(src[1:] != src[:-1]))
            self._reserve_pool(lambda: len(src) + runs * self.config.min_list_capacity)
            self.top, longest = _fill_empty(self.nbr, self.nlab, self.elab, self.rank,
                                            self.start, self.deg, self.cap, src, dst, keys,
                                            lab, self.config.min_list_capacity)
            self.num_edges += len(us)
            self._max_degree = max(self._max_degree, int(longest))
            return
        if len(us) == 1:    # one edge: two lists, one entry each (scalar code is faster)
            touched = src.tolist()

            def worst() -> int:
                """Room for every touched list to relocate under the current capacities."""
                return sum(max(2 * int(self.cap[t]), int(self.deg[t]) + 1,
                               self.config.min_list_capacity) for t in touched)
        else:
            touched, counts = np.unique(src, return_counts=True)

            def worst() -> int:
                """Room for every touched list to relocate under the current capacities."""
                return int(np.maximum(np.maximum(2 * self.cap[touched],
                                                 self.deg[touched] + counts),
                                      self.config.min_list_capacity).sum())
        self._reserve_pool(worst)
        self.top, garbage = _insert_sorted(self.nbr, self.nlab, self.elab, self.rank,
                                           self.start, self.deg, self.cap, src, dst, keys,
                                           lab, self.top, self.config.min_list_capacity)
        self.garbage += garbage
        self.num_edges += len(us)
        self._max_degree = max(self._max_degree, int(self.deg[touched].max()))

    def delete_edges(self, us: np.ndarray, vs: np.ndarray) -> None:
        """Delete present edges (directed: arcs us -> vs; the engine has checked they
        exist)."""
        if len(us) == 0:
            return
        src, dst, keys, _ = _list_entries(us, vs, np.zeros(len(us), dtype=np.int32),
                                          self.label, self.directed)
        _delete_sorted(self.nbr, self.nlab, self.elab, self.rank, self.start, self.deg, src, dst,
                       keys)
        self.num_edges -= len(us)

    def _reserve_pool(self, needed) -> None:
        """Make room above `top` for `needed()` slots, compacting or doubling the pool.

        `needed` is re-evaluated after a compaction, which gives every list a new capacity.
        """
        size = self.nbr.shape[0]
        extra = needed()
        if self.top + extra <= size:
            return
        live = self.top - self.garbage
        if self.garbage > live:
            self._compact(max(size, 2 * (live + extra)))
            size = self.nbr.shape[0]
            extra = needed()
            if self.top + extra <= size:
                return
        while self.top + extra > size:
            size *= 2
        for name in ("nbr", "nlab", "elab", "rank"):
            old = getattr(self, name)
            new = np.zeros(size, dtype=old.dtype)
            new[: self.top] = old[: self.top]
            setattr(self, name, new)

    def _compact(self, size: int) -> None:
        n = self.num_slots
        new = [np.zeros(size, dtype=np.int32) for _ in range(4)]
        need = int(np.maximum(self.config.min_list_capacity,
                              self.deg[:n] + (self.deg[:n] >> 2))[self.alive[:n]].sum())
        if need > size:
            new = [np.zeros(need, dtype=np.int32) for _ in range(4)]
        self.top = _compact(self.nbr, self.nlab, self.elab, self.rank, self.start[:n],
                            self.deg[:n], self.cap[:n], self.alive[:n], *new,
                            self.config.min_list_capacity)
        self.nbr, self.nlab, self.elab, self.rank = new
        self.garbage = 0

    # ---- export -------------------------------------------------------
    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every edge once as (u, v, label) slots with u < v (directed: every arc u -> v)."""
        return all_edges(self.start, self.deg, self.nbr, self.nlab, self.elab, self.num_slots,
                         self.directed)

    def candidate_edge_counts(self, cand: np.ndarray, qa: np.ndarray, qb: np.ndarray,
                              ql: np.ndarray) -> np.ndarray:
        """For each query edge qa[j] - qb[j] with label ql[j], the data edges with that label
        between candidates of its ends, once per orientation (the planner's statistics)."""
        return candidate_edge_counts(self.start, self.deg, self.nbr, self.elab,
                                     self.num_slots, cand, qa, qb, ql)

    def host_lists(self) -> "DynamicGraph":
        """The graph as host neighbour lists (this one; tests check structures against it)."""
        return self

    @classmethod
    def on_slots_of(cls, graph, config: EngineConfig | None = None) -> "DynamicGraph":
        """An empty DynamicGraph with `graph`'s vertex table (slots, labels, ids; any
        VertexTable): edges added to it sit on the same slots."""
        return cls(config, graph.directed).emptied_onto(graph)

    def emptied_onto(self, graph) -> "DynamicGraph":
        """This graph, its edges dropped, on `graph`'s vertex table (as on_slots_of makes
        one), keeping its arrays: a scratch graph filled again and again costs its edges,
        not allocations."""
        self._grow_vertices(graph.label.shape[0])
        n = graph.num_slots
        for name in ("label", "alive", "ext"):
            getattr(self, name)[:n] = getattr(graph, name)[:n]
        self.deg[:n] = 0
        self.cap[:n] = 0
        self.top = self.garbage = self.num_edges = self._max_degree = 0
        self.ids = graph.ids
        self.num_slots, self.num_vertices = n, graph.num_vertices
        self._free = list(graph._free)
        return self

    def check(self) -> None:
        """Assert the structural invariants (tests call this after every batch)."""
        n = self.num_slots
        total = 0
        for u in range(n):
            d = self.deg[u]
            if not self.alive[u]:
                assert d == 0
                continue
            assert d <= self.cap[u] and d <= self._max_degree
            assert self.start[u] + self.cap[u] <= self.top <= self.nbr.shape[0]
            lst = self.neighbors(u)
            s = self.start[u]
            keys = self.nlab[s: s + d]
            stored = keys >> 1 if self.directed else keys
            assert np.array_equal(stored, self.label[lst]), f"nlab of {u} stale"
            key = keys.astype(np.int64) << 32 | lst
            assert (np.diff(key) > 0).all(), f"list of {u} not strictly sorted"
            assert not (lst == u).any()
            assert self.alive[lst].all()
            total += d
        assert total == 2 * self.num_edges
        self._check_vertices()
