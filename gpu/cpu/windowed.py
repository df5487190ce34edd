"""Windowed counting on the CPU executor (issue 23): the matches that use at least one
update edge and whose data edges' event times lie within a window, pruned during the
search, not filtered afterwards.

The engine counts its windowed queries (`Engine.add_query(query, window=W)`) in phases of
their own around a timed batch (gpu/event_time.py), checked against the timed reference
(tests/reference_time.py) by tests/gpu/cpu/test_windowed.py (the phases alone) and
tests/gpu/test_event_time.py (the engine):

* the expiry batch's phase searches the graph before it from the expired edges;
* the deletion phase searches the graph before the batch, with its times, from the
  deleted edges and the refreshed ones (an edge inserted again with another time);
* the insertion phase searches the graph after it, with its times, from the inserted
  edges and the refreshed ones;
* a match a phase finds that uses no deleted (resp. inserted) edge, only refreshed ones,
  exists on the other side of the batch too; it counts only if the other side's times
  put it out of the window (`other`, the refreshed edges' times there), so that each
  phase gives exactly the set difference of the valid matches before and after.

The times are read from the engine's TimeTable (gpu/graph/times.py) by key, one probe per
data edge a candidate would add; the refreshed edges' other-side times and the phase's
structural edges come as small sorted arrays (a batch's worth).

A match is valid when every data edge it uses is timed, the largest time minus the
smallest is at most the window (untimed edges are outside every window, as the
reference has it) and each `before` pair (i, j) of query edges has edge i's time below
edge j's.  The time span only grows as a match grows, so a partial match whose span
already exceeds the window is never extended, nor one with a `before` pair out of order
(checked at the level that matches the pair's later edge).

Each task is (update edge u - v, query edge (a, b), orientation): a -> u, b -> v.  Every
match is found once, from its lowest-ranked update edge, by the total-order rule (an
update edge ranked below the task's own is off limits); automorphic images are distinct
matches and are each found (with `before` pairs they differ in validity).

Directed graphs: each task is (update arc u -> v, query arc a -> b), a -> u, b -> v; a
backward entry reads the placed vertex's list under the key of the arc's direction (2
label + 0 for an arc out of it, + 1 for one into it: gpu/graph/lists.py) and the arc's own
time (the times table keys arcs as they run); the root's reverse arc b -> a, when the query
has it, is level 1's entry, checked with the root.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numba as nb
import numpy as np

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)
from gpu.cpu.search import _lower_bound
from gpu.graph.lists import find_position, label_segment
from gpu.graph.times import table_find
from gpu.io.records import NO_TIME
from gpu.plan.query import NO_EDGE
from gpu.results import MatchSet


class WindowEdges(NamedTuple):
    """A phase's window subgraph as edges (gpu/event_time.py, for either executor): keys
    u << 32 | v (u < v, slots) ascending, and each edge's time and label."""
    keys: np.ndarray        # int64 [E]
    times: np.ndarray       # int64 [E]
    labels: np.ndarray      # int32 [E]


@dataclass(frozen=True)
class WindowPlan:
    """A query's tasks for windowed counting: per task type (an undirected query edge in
    one orientation, or a query arc), the matching order from the edge's two ends, and
    each level's backward entries (their levels, the edge labels to them, the list key the
    placed vertex files the new one under, and which way the arc runs)."""
    q_label: np.ndarray     # int32 [n]
    orders: np.ndarray      # int32 [T, n]: the query vertex matched at each level
    root_label: np.ndarray  # int32 [T]: the label of the root query edge
    bw_count: np.ndarray    # int32 [T, n]
    bw_level: np.ndarray    # int32 [T, n, W] (W: n, or 2n for a directed query)
    bw_label: np.ndarray    # int32 [T, n, W]
    # `before` constraints (edge i's time < edge j's, query edge indices): each query
    # edge's index as the type matches it (the root's, each backward entry's), and the
    # pairs checked at each level (those whose later edge that level matches).
    root_edge: np.ndarray   # int32 [T]
    bw_edge: np.ndarray     # int32 [T, n, W]
    bc_count: np.ndarray    # int32 [T, n]
    bc_pairs: np.ndarray    # int32 [T, n, P, 2]
    before: np.ndarray      # int32 [P, 2]
    # Directed queries (the CPU's search only: gpu/cuda/windowed.py fits): the list key of
    # each backward entry (the vertex's label, directed 2 label + 0 for an arc out of the
    # placed vertex, + 1 for one into it: gpu/graph/lists.py list_key) and its arc, ARC_*.
    # Level 1 of a directed type holds the root's reverse arc, when the query has it.
    bw_key: np.ndarray      # int32 [T, n, W]
    bw_arc: np.ndarray      # int32 [T, n, W]
    directed: bool = False


# bw_arc: an undirected edge (keyed by its ends in order), an arc from the placed vertex
# to the new one, an arc from the new one to the placed one.
ARC_NONE, ARC_OUT, ARC_IN = 0, 1, 2


def before_problem(query, before) -> str | None:
    """Why `before` (pairs (i, j) of query edge indices: edge i's time < edge j's) does not
    fit `query`, or None."""
    k = query.num_edges
    for p, pair in enumerate(before):
        if len(pair) != 2 or not all(isinstance(x, (int, np.integer)) and
                                     not isinstance(x, bool) for x in pair):
            return f"before[{p}]: a pair of query edge indices, got {pair!r}"
        i, j = (int(x) for x in pair)
        if not (0 <= i < k and 0 <= j < k):
            return f"before[{p}]: ({i}, {j}) names an edge the query lacks (it has {k})"
        if i == j:
            return f"before[{p}]: ({i}, {j}) orders an edge before itself"
    return None


def window_plan(query, before=()) -> WindowPlan:
    """The WindowPlan of a QueryGraph (connected, as every QueryGraph is) with at least one
    edge, and its `before` pairs (before_problem: none).  An undirected query has a type
    per edge and orientation, a directed one a type per arc (an update arc u -> v can only
    be an arc a -> b as a -> u, b -> v)."""
    n, k = query.num_vertices, query.num_edges
    if k == 0:
        raise ValueError("a windowed query needs at least one edge")
    problem = before_problem(query, before)
    if problem is not None:
        raise ValueError(problem)
    directed = bool(query.directed)
    before = np.array([(int(i), int(j)) for i, j in before], dtype=np.int32).reshape(-1, 2)
    edge_index = {(int(a), int(b)): e for e, (a, b) in enumerate(query.edges.tolist())}
    adjacency = query.adjacency
    matrix = query.edge_label_matrix
    q_label = np.asarray(query.labels, dtype=np.int32)

    def index(p, q):
        return edge_index[p, q] if directed else edge_index[min(p, q), max(p, q)]

    def entries(q, placed):
        """(level, edge label, list key, arc, edge index) of q's edges to `placed`."""
        found = []
        for j, p in enumerate(placed):
            if not directed:
                if adjacency[q, p]:
                    found.append((j, matrix[min(p, q), max(p, q)], q_label[q], ARC_NONE,
                                  index(p, q)))
                continue
            if matrix[p, q] != NO_EDGE:
                found.append((j, matrix[p, q], 2 * q_label[q], ARC_OUT, index(p, q)))
            if matrix[q, p] != NO_EDGE:
                found.append((j, matrix[q, p], 2 * q_label[q] + 1, ARC_IN, index(q, p)))
        return found

    roots = [(int(a), int(b)) for a, b in query.edges]
    if not directed:
        roots += [(b, a) for a, b in roots]
    t_count, width = len(roots), 2 * n if directed else n
    orders = np.zeros((t_count, n), dtype=np.int32)
    root_label = np.zeros(t_count, dtype=np.int32)
    bw_count = np.zeros((t_count, n), dtype=np.int32)
    per_entry = {name: np.zeros((t_count, n, width), dtype=np.int32)
                 for name in ("bw_level", "bw_label", "bw_key", "bw_arc", "bw_edge")}
    root_edge = np.zeros(t_count, dtype=np.int32)
    bc_count = np.zeros((t_count, n), dtype=np.int32)
    bc_pairs = np.zeros((t_count, n, max(1, len(before)), 2), dtype=np.int32)
    for t, (a, b) in enumerate(roots):
        order = [a, b]
        while len(order) < n:
            # The unmatched vertex with the most matched neighbours (ties: the lowest).
            # (QueryGraph is connected: some unmatched vertex has a matched neighbour.)
            best = max((q for q in range(n) if q not in order),
                       key=lambda q: (sum(adjacency[q, p] for p in order), -q))
            order.append(best)
        orders[t] = order
        root_label[t] = matrix[a, b] if directed else matrix[min(a, b), max(a, b)]
        root_edge[t] = index(a, b)
        matched_at = {int(root_edge[t]): 1}       # query edge -> the level matching it
        for level in range(1, n):
            found = entries(order[level], order[:level])
            if level == 1:      # the root's reverse arc b -> a, if any (directed only)
                found = [e for e in found if e[3] == ARC_IN] if directed else []
            bw_count[t, level] = len(found)
            for i, entry in enumerate(found):
                for name, value in zip(("bw_level", "bw_label", "bw_key", "bw_arc",
                                        "bw_edge"), entry):
                    per_entry[name][t, level, i] = value
                matched_at[int(entry[4])] = level
        for i, j in before.tolist():
            level = max(matched_at[i], matched_at[j])
            bc_pairs[t, level, bc_count[t, level]] = (i, j)
            bc_count[t, level] += 1
    return WindowPlan(q_label, orders, root_label, bw_count, per_entry["bw_level"],
                      per_entry["bw_label"], root_edge, per_entry["bw_edge"], bc_count,
                      bc_pairs, before, per_entry["bw_key"], per_entry["bw_arc"], directed)


@nb.njit(cache=True)
def _find(keys, key):
    """Index of `key` in the sorted int64 `keys`, or -1."""
    lo = _lower_bound(keys, 0, keys.shape[0], key)
    return lo if lo < keys.shape[0] and keys[lo] == key else -1


@nb.njit(cache=True)
def _edge_key(a, b):
    lo, hi = min(a, b), max(a, b)
    return (np.int64(lo) << np.int64(32)) | np.int64(hi)


@nb.njit(cache=True)
def _entry_key(y, w, arc):
    """The times table's key of a backward entry's edge between the placed vertex y and
    the candidate w (ARC_*: the edge's ends in order, or the arc as it runs)."""
    if arc == ARC_OUT:
        return (np.int64(y) << np.int64(32)) | np.int64(w)
    if arc == ARC_IN:
        return (np.int64(w) << np.int64(32)) | np.int64(y)
    return _edge_key(y, w)


@nb.njit(cache=True)
def _time_of(times, key):
    """An edge's time in `times` = a TimeTable's (keys, vals), NO_TIME when untimed."""
    i = table_find(times[0], key)
    return times[1][i] if i >= 0 else NO_TIME


@nb.njit(cache=True)
def _found(t, orders, m, out, filled):
    """Write the match m (by level) as row filled[0] of `out` (by query vertex), while
    there is room; count it in filled[0] either way."""
    k = filled[0]
    if k < out.shape[0]:
        for level in range(orders.shape[1]):
            out[k, orders[t, level]] = m[level]
    filled[0] = k + 1


@nb.njit(cache=True)
def _check(graph, plan, window, times, other, structural, check_other, t, level, w, at,
           cur, state):
    """Whether candidate w (at list position `at` of the level's pivot entry, -1: none)
    extends the partial match to `level`: every backward entry's edge there (label, rank,
    time within the window of the span so far), and the `before` pairs whose later edge
    this level matches.  With it: (True, the span, the other side's span, the flags);
    the entries' times are in the state's per-edge times."""
    start, deg, nbr, nlab, elab, rank, label = graph
    bw_count, bw_level, bw_label = plan[3], plan[4], plan[5]
    bw_edge, bc_count, bc_pairs, bw_key, bw_arc = plan[7], plan[8], plan[9], plan[11], \
        plan[12]
    m, pos, end, pivot, lo, hi, lo2, hi2, flags, etime, etime2 = state
    tl, th = lo[level - 1], hi[level - 1]
    tl2, th2, f = lo2[level - 1], hi2[level - 1], flags[level - 1]
    j0 = pivot[level] if at >= 0 else -1
    for j in range(bw_count[t, level]):
        y = m[bw_level[t, level, j]]
        q = at
        if j != j0:
            q = find_position(nbr, nlab, start, deg, y, w, bw_key[t, level, j])
            if q < 0 or elab[q] != bw_label[t, level, j] or (rank[q] != 0 and rank[q] < cur):
                return False, tl, th, tl2, th2, f
        key = _entry_key(y, w, bw_arc[t, level, j])
        te = _time_of(times, key)
        if te == NO_TIME:
            return False, tl, th, tl2, th2, f
        tl, th = min(tl, te), max(th, te)
        if th - tl > window:      # the span only grows: prune here
            return False, tl, th, tl2, th2, f
        etime[bw_edge[t, level, j]] = te
        if check_other:
            i = _find(other[0], key)
            t2 = other[1][i] if i >= 0 else te
            etime2[bw_edge[t, level, j]] = t2
            if t2 == NO_TIME:
                f |= 2
            else:
                tl2, th2 = min(tl2, t2), max(th2, t2)
            if _find(structural, key) >= 0:
                f |= 1
    for c in range(bc_count[t, level]):     # the pairs whose later edge is this level's
        if etime[bc_pairs[t, level, c, 0]] >= etime[bc_pairs[t, level, c, 1]]:
            return False, tl, th, tl2, th2, f
    return True, tl, th, tl2, th2, f


@nb.njit(cache=True)
def _counts(check_other, f, tl2, th2, window, etime2, before):
    """Whether a complete match found in a phase counts (module docstring: `other`)."""
    return not check_other or f & 3 or th2 - tl2 > window or not _in_order(etime2, before)


@nb.njit(cache=True)
def _count_task(graph, plan, cand, window, times, other, structural, check_other, t, u, v,
                cur, first, state, out, filled):
    """Valid matches of task type t from the update edge u - v (rank cur, time `first`),
    whose ends and label fit the type's root (_count_all checked), each counted once
    (module docstring); the first out.shape[0] of the call's (`filled`, _found) listed."""
    start, deg, nbr, nlab, elab, rank, label = graph
    orders, bw_label, root_edge, before = plan[1], plan[5], plan[6], plan[10]
    m, pos, end, pivot, lo, hi, lo2, hi2, flags, etime, etime2 = state
    n = orders.shape[1]
    key = _entry_key(u, v, ARC_OUT if plan[13] else ARC_NONE)
    m[0], m[1] = u, v
    # Level 0 holds the root edge's span and flags, level 1 those with the root's reverse
    # arc (a directed query's level-1 entry), if the type has one.
    lo[0], hi[0] = first, first
    etime[root_edge[t]] = etime2[root_edge[t]] = first
    # flags: bit 0 a structural edge used, bit 1 the other side has an untimed edge.
    flags[0] = 0
    lo2[0], hi2[0] = first, first
    if check_other:
        i = _find(other[0], key)
        t2 = other[1][i] if i >= 0 else first
        lo2[0], hi2[0] = t2, t2
        etime2[root_edge[t]] = t2
        if t2 == NO_TIME:
            flags[0] |= 2
        if _find(structural, key) >= 0:
            flags[0] |= 1
    ok, lo[1], hi[1], lo2[1], hi2[1], flags[1] = _check(
        graph, plan, window, times, other, structural, check_other, t, 1, v, -1, cur, state)
    if not ok:
        return 0
    if n == 2:
        if _counts(check_other, flags[1], lo2[1], hi2[1], window, etime2, before):
            _found(t, orders, m, out, filled)
            return 1
        return 0
    count = 0
    level = 2
    _open_level(graph, plan, t, level, m, pos, end, pivot)
    while level >= 2:
        if pos[level] >= end[level]:
            level -= 1
            continue
        p = pos[level]
        pos[level] += 1
        w = nbr[p]
        if (cand[w] >> np.uint32(orders[t, level])) & 1 == 0 \
                or elab[p] != bw_label[t, level, pivot[level]] \
                or (rank[p] != 0 and rank[p] < cur):
            continue
        used = False
        for i in range(level):
            if m[i] == w:
                used = True
                break
        if used:
            continue
        ok, tl, th, tl2, th2, f = _check(graph, plan, window, times, other, structural,
                                         check_other, t, level, w, p, cur, state)
        if not ok:
            continue
        m[level] = w
        if level == n - 1:
            if _counts(check_other, f, tl2, th2, window, etime2, before):
                count += 1
                _found(t, orders, m, out, filled)
            continue
        lo[level], hi[level], lo2[level], hi2[level], flags[level] = tl, th, tl2, th2, f
        level += 1
        _open_level(graph, plan, t, level, m, pos, end, pivot)
    return count


@nb.njit(cache=True)
def _in_order(etime, before):
    """Whether every `before` pair (i, j) has edge i's time below edge j's."""
    for c in range(before.shape[0]):
        if etime[before[c, 0]] >= etime[before[c, 1]]:
            return False
    return True


@nb.njit(cache=True)
def _open_level(graph, plan, t, level, m, pos, end, pivot):
    """A level's candidates: the segment of its list key in the list of the backward
    entry with the shortest one."""
    start, deg, nbr, nlab, elab, rank, label = graph
    bw_count, bw_level, bw_key = plan[3], plan[4], plan[11]
    best = -1
    for j in range(bw_count[t, level]):
        x = m[bw_level[t, level, j]]
        a, b = label_segment(nlab, start[x], start[x] + deg[x], bw_key[t, level, j])
        if best < 0 or b - a < end[level] - pos[level]:
            best, pos[level], end[level] = j, a, b
    pivot[level] = best


@nb.njit(cache=True)
def _new_state(n):
    """One search's state (_count_task): per level and, last, per query edge."""
    k = n * n       # room for every query edge's index (at most n (n - 1) / 2 of them)
    return (np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
            np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
            np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
            np.zeros(k, np.int64), np.zeros(k, np.int64))


@nb.njit(cache=True)
def _count_all(graph, plan, cand, window, times, other, structural, check_other, us, vs,
               ranks, out):
    """The matches from every update edge, one after another, the first out.shape[0]
    listed."""
    return _count_edges(graph, plan, cand, window, times, other, structural, check_other,
                        us, vs, ranks, out, 0, us.shape[0], _new_state(plan[1].shape[1]),
                        np.zeros(1, np.int64))


@nb.njit(cache=True, parallel=True, nogil=True)
def _count_all_parallel(graph, plan, cand, window, times, other, structural, check_other,
                        us, vs, ranks, chunk):
    """_count_all counting only, the update edges in chunks of `chunk` on every core."""
    n = plan[1].shape[1]
    chunks = (us.shape[0] + chunk - 1) // chunk
    totals = np.zeros(chunks, np.int64)
    for c in nb.prange(chunks):
        totals[c] = _count_edges(graph, plan, cand, window, times, other, structural,
                                 check_other, us, vs, ranks, np.zeros((0, n), np.int32),
                                 c * chunk, min(us.shape[0], (c + 1) * chunk), _new_state(n),
                                 np.zeros(1, np.int64))
    return totals.sum()


@nb.njit(cache=True)
def _count_edges(graph, plan, cand, window, times, other, structural, check_other, us, vs,
                 ranks, out, first_edge, end_edge, state, filled):
    """The matches from update edges first_edge..end_edge - 1 (_count_task's listing)."""
    start, deg, nbr, nlab, elab, rank, label = graph
    q_label, orders, root_label, directed = plan[0], plan[1], plan[2], plan[13]
    total = 0
    for i in range(first_edge, end_edge):
        u, v = us[i], vs[i]
        # What does not depend on the task type, once per update edge; the cheap root
        # tests here, before a call (most types fail them).  Directed: the arc u -> v,
        # filed in u's list as an arc out.
        first = _time_of(times, _entry_key(u, v, ARC_OUT if directed else ARC_NONE))
        if first == NO_TIME:
            continue
        p = find_position(nbr, nlab, start, deg, u, v,
                          2 * label[v] if directed else label[v])
        if p < 0:
            continue
        lab = elab[p]
        for t in range(orders.shape[0]):
            a, b = orders[t, 0], orders[t, 1]
            if label[u] != q_label[a] or label[v] != q_label[b] or root_label[t] != lab \
                    or (cand[u] >> np.uint32(a)) & 1 == 0 or (cand[v] >> np.uint32(b)) & 1 == 0:
                continue
            total += _count_task(graph, plan, cand, window, times, other, structural,
                                 check_other, t, u, v, ranks[i], first, state, out,
                                 filled)
    return total


def count_windowed(graph, plan: WindowPlan, window: int, us, vs, times, other=None,
                   structural=None, cand=None, limit: int = 0, parallel_from: int = 64,
                   chunk: int = 16) -> MatchSet:
    """Valid matches (module docstring) using at least one of the update edges us - vs
    (slots of the DynamicGraph `graph`, whose rank pool holds their ranks 1..k in this
    order: `graph.set_ranks`); `times`: the edges' times, a TimeTable keyed by
    u << 32 | v with u < v, or arcs as they run (gpu/graph/times.py).  With `other` =
    (sorted keys, times) of the refreshed edges on the other side of the batch and
    `structural` the sorted keys of this phase's deleted or inserted edges, a match that
    uses no structural edge counts only if the other side's times put it out of the
    window.  `cand`: the query's candidate bits per slot (the engine's signatures: bit q
    set where a vertex may be query vertex q, a necessary condition), None: every vertex
    may be any.  The first
    `limit` of the matches counted are listed (slots, in query-vertex order; which ones
    when more are found is not specified).  Counting only (`limit` 0), `parallel_from`
    update edges or more are searched on every core in chunks of `chunk`
    (EngineConfig.serial_below_tasks and task_chunk)."""
    if graph.directed != plan.directed:
        kinds = ("undirected", "directed")
        raise ValueError(f"a {kinds[plan.directed]} windowed query on a "
                         f"{kinds[graph.directed]} graph")
    arrays = (graph.start, graph.deg, graph.nbr, graph.nlab, graph.elab, graph.rank,
              graph.label)
    check_other = other is not None
    none = np.empty(0, dtype=np.int64)
    other = other if other is not None else (none, none)
    structural = structural if structural is not None else none
    us = np.asarray(us, dtype=np.int64)
    vs = np.asarray(vs, dtype=np.int64)
    if cand is None:
        cand = np.full(graph.label.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    out = np.zeros((max(0, int(limit)), plan.orders.shape[1]), dtype=np.int32)
    args = (arrays, (plan.q_label, plan.orders, plan.root_label, plan.bw_count,
                     plan.bw_level, plan.bw_label, plan.root_edge, plan.bw_edge,
                     plan.bc_count, plan.bc_pairs, plan.before, plan.bw_key, plan.bw_arc,
                     bool(plan.directed)),
            np.ascontiguousarray(cand, dtype=np.uint32), np.int64(window),
            (times.keys, times.vals),
            (np.asarray(other[0], np.int64), np.asarray(other[1], np.int64)),
            np.asarray(structural, np.int64), check_other, us, vs,
            np.arange(1, len(us) + 1, dtype=np.int32))
    if out.shape[0] == 0 and len(us) >= parallel_from:
        count = int(_count_all_parallel(*args, np.int64(max(1, chunk))))
    else:
        count = int(_count_all(*args, out))
    rows = out[:min(count, out.shape[0])]
    return MatchSet(count, rows, rows.shape[0] < count)
