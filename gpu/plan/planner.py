"""Query planning shared by every executor: task types, matching orders, coalesced search.

Incremental matching (GAMMA Algorithm 1) maps an updated data edge (u, v),
u < v, onto a directed query edge (a -> b) with f(a) = u, f(b) = v, then
extends f level by level along a matching order.  Every directed query edge
is one task type; enumerating all of them covers both orientations of every
update edge, and automorphic images come out as distinct matches.

Total-order rule (GAMMA §IV-C): the updated edges of a batch get ranks
1..k.  A task started from the edge of rank r may use no other updated edge
of rank < r, so every incremental match is produced exactly once: from its
lowest-ranked updated edge, mapped onto the one query edge it covers.

Coalesced search (GAMMA §V-B): directed query edges related by a
label-preserving automorphism sigma of the query are equivalent: the matches
of task (e, sigma(a) -> sigma(b)) are exactly f o sigma^-1 for the matches f
of task (e, a -> b), and the edges they use (so the total-order rule) are the
same.  One representative per orbit is searched; its count is multiplied by
the orbit size and its matches are permuted to list the others.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu.plan.query import NO_EDGE, QueryGraph


@dataclass(frozen=True, eq=False)
class TaskTypes:
    """Arrays the executors read, one row per searched directed query edge."""
    query_labels: np.ndarray   # int32 [n]     vertex labels of the query
    roots: np.ndarray          # int32 [T, 2]  (a, b): f(a) = u, f(b) = v
    root_labels: np.ndarray    # int32 [T]     label the update edge must carry
    multiplicity: np.ndarray   # int64 [T]     orbit size: matches per searched match
    orders: np.ndarray         # int32 [T, n]  query vertex matched at each level
    bw_count: np.ndarray       # int32 [T, n]  backward neighbours per level
    bw_level: np.ndarray       # int32 [T, n, n] level of each backward neighbour
    bw_label: np.ndarray       # int32 [T, n, n] label of the edge to it
    tail_free: np.ndarray      # bool  [T]     last two order vertices are non-adjacent (n >= 4)
    leaf_from: np.ndarray      # int32 [T]     first level of the counted tail (n: none)
    tail_head: np.ndarray      # bool  [T]     the tail starts with a non-leaf "head" level
    perms: np.ndarray          # int32 [T, M, n] member m's match: g[q] = f[perms[t, m, q]]
    leaf_root: np.ndarray      # int32 [T]     level (0 or 1) of a root end that is a query
                               #               leaf searched grouped (_groupable_leaf), or -1
    bw_key: np.ndarray         # int32 [T, n, W] neighbour-list key to read in each backward
                               #               neighbour's list (gpu/graph/lists.py): the
                               #               level's label; directed: 2 label + direction.
                               #               Directed plans (W = 2n: an arc each way) also
                               #               list at level 1 the reverse arc of the root.

    @property
    def count(self) -> int:
        return int(self.roots.shape[0])

    @property
    def directed(self) -> bool:
        """Whether these are a directed query's types (entries 2n wide)."""
        return self.bw_key.shape[2] == 2 * self.orders.shape[1]


def mostly_intersecting(types: list[TaskTypes]) -> bool:
    """Whether more than half of the levels past the root edge, over all of `types`, have
    two or more backward neighbours (each candidate then probed in the other lists, not
    only read from one: the CUDA search runs these with fewer warps, EngineConfig's
    intersecting_blocks_per_sm).  Exactly half is not enough: of two GH sparse queries
    with half, one was 21% slower with fewer warps, the other 35% faster, and together
    they lost (docs/benchmarks.md, 2026-11-29)."""
    levels = np.concatenate([t.bw_count[:, 2:].ravel() for t in types])
    return 2 * int(np.count_nonzero(levels >= 2)) > levels.size


@dataclass(frozen=True, eq=False)
class QueryPlan:
    query: QueryGraph
    incremental: TaskTypes     # one type per orbit of directed query edges
    static: TaskTypes          # the orientations of one root edge (full matching)
    orbits: list[list[tuple[int, int]]]   # directed-edge orbits, representative first


def find_automorphism(query: QueryGraph, fixed: dict[int, int]) -> np.ndarray | None:
    """A label- and edge-preserving automorphism extending `fixed`, or None."""
    n = query.num_vertices
    labels, matrix, degrees = query.labels, query.edge_label_matrix, query.degrees
    image = np.full(n, -1, dtype=np.int64)
    used = np.zeros(n, dtype=bool)
    for a, c in fixed.items():
        if labels[a] != labels[c] or degrees[a] != degrees[c] or used[c]:
            return None
        image[a] = c
        used[c] = True
    for a, c in fixed.items():
        for b, d in fixed.items():
            if matrix[a, b] != matrix[c, d]:
                return None
    free = [a for a in range(n) if image[a] < 0]

    def extend(i: int) -> bool:
        if i == len(free):
            return True
        a = free[i]
        for c in range(n):
            if used[c] or labels[c] != labels[a] or degrees[c] != degrees[a]:
                continue
            if all(matrix[a, b] == matrix[c, image[b]] for b in range(n) if image[b] >= 0):
                image[a], used[c] = c, True
                if extend(i + 1):
                    return True
                image[a], used[c] = -1, False
        return False

    return image if extend(0) else None


def root_edges(query: QueryGraph) -> list[tuple[int, int]]:
    """The directed query edges a task may start from, sorted: both orientations of every
    edge, or a directed query's arcs as they are (an update arc is never flipped)."""
    arcs = [(a, b) for a, b in query.edges.tolist()]
    if not query.directed:
        arcs += [(b, a) for a, b in query.edges.tolist()]
    return sorted(arcs)


def directed_edge_orbits(query: QueryGraph) -> tuple[list[list[tuple[int, int]]], dict]:
    """Orbits of directed query edges under Aut(query), and a sigma for each member."""
    directed = root_edges(query)
    assigned: dict[tuple[int, int], tuple[int, int]] = {}
    sigma: dict[tuple[int, int], np.ndarray] = {}
    orbits: list[list[tuple[int, int]]] = []
    identity = np.arange(query.num_vertices)
    for edge in directed:
        if edge in assigned:
            continue
        orbit = [edge]
        assigned[edge] = edge
        sigma[edge] = identity
        a, b = edge
        for other in directed:
            if other in assigned:
                continue
            found = find_automorphism(query, {a: other[0], b: other[1]})
            if found is not None:
                orbit.append(other)
                assigned[other] = edge
                sigma[other] = found
        orbits.append(orbit)
    return orbits, sigma


@dataclass(frozen=True, eq=False)
class PlanStats:
    """What planning knows of the data graph, measured when the query is registered."""
    candidates: np.ndarray   # float [n]    data vertices that are candidates of each q
    edges: np.ndarray        # float [n, n] directed data edges x -> y, x in C(a), y in C(b),
                             #              carrying the label of query edge (a, b)


def matching_order(query: QueryGraph, a: int, b: int,
                   stats: PlanStats | None = None) -> list[int]:
    """Root edge first, then repeatedly the vertex with the most matched neighbours (each
    one an intersection that prunes), ties to the fewest candidates (measured, with
    `stats`), then the highest degree.  Leaves (degree 1) go last, where they are
    counted, not enumerated.

    An estimate of partial matches that assumes independent edges (|C(c)| times, per
    matched neighbour, the chance a candidate pair is an edge) was tried in place of
    this rule: it undercounts clustered structure such as triangles and chose orders up
    to 8x slower on GH's dense queries.
    """
    n = query.num_vertices
    adjacent = query.adjacency
    degrees = query.degrees
    sizes = stats.candidates if stats is not None else np.zeros(n)

    def back(c: int, placed: list[int]) -> int:
        return sum(1 for x in placed if adjacent[c, x])

    order = [a, b]
    for leaves_now in (False, True):
        rest = [c for c in range(n) if c not in (a, b) and (degrees[c] == 1) == leaves_now]
        while rest:
            ready = [c for c in rest if back(c, order)]
            c = min(ready, key=lambda c: (-back(c, order), sizes[c], -int(degrees[c]), c))
            order.append(c)
            rest.remove(c)
    return order


def _backward_entries(query: QueryGraph, c: int, placed: list[int]):
    """(level, edge label, list key) of each edge between c and the vertices placed at
    levels 0..: the key is what the placed vertex's neighbour list files c under (its
    label; directed, 2 label + 0 for an arc out of the placed vertex, + 1 for one in)."""
    matrix, label = query.edge_label_matrix, int(query.labels[c])
    entries = []
    for lv, x in enumerate(placed):
        if not query.directed:
            if matrix[c, x] != NO_EDGE:
                entries.append((lv, int(matrix[c, x]), label))
            continue
        if matrix[x, c] != NO_EDGE:
            entries.append((lv, int(matrix[x, c]), 2 * label))
        if matrix[c, x] != NO_EDGE:
            entries.append((lv, int(matrix[c, x]), 2 * label + 1))
    return entries


def _task_types(query: QueryGraph, orbits, sigma, stats: PlanStats | None) -> TaskTypes:
    n = query.num_vertices
    t_count = len(orbits)
    width = max(len(o) for o in orbits)
    entries_max = 2 * n if query.directed else n
    roots = np.zeros((t_count, 2), dtype=np.int32)
    root_labels = np.zeros(t_count, dtype=np.int32)
    multiplicity = np.zeros(t_count, dtype=np.int64)
    orders = np.zeros((t_count, n), dtype=np.int32)
    bw_count = np.zeros((t_count, n), dtype=np.int32)
    bw_level = np.zeros((t_count, n, entries_max), dtype=np.int32)
    bw_label = np.zeros((t_count, n, entries_max), dtype=np.int32)
    bw_key = np.zeros((t_count, n, entries_max), dtype=np.int32)
    perms = np.zeros((t_count, width, n), dtype=np.int32)
    matrix = query.edge_label_matrix
    for t, orbit in enumerate(orbits):
        a, b = orbit[0]
        roots[t] = (a, b)
        root_labels[t] = matrix[a, b]
        multiplicity[t] = len(orbit)
        order = matching_order(query, a, b, stats)
        orders[t] = order
        # Level 1 of a directed plan checks the root's reverse arc, if the query has it.
        first = 1 if query.directed else 2
        for level in range(first, n):
            entries = _backward_entries(query, order[level], order[:level])
            if level == 1:
                entries = [e for e in entries if e[2] % 2 == 1]     # b -> a, not a -> b
            bw_count[t, level] = len(entries)
            for j, (lv, elabel, key) in enumerate(entries):
                bw_level[t, level, j], bw_label[t, level, j], bw_key[t, level, j] = \
                    lv, elabel, key
        for m, member in enumerate(orbit):
            # g = f o sigma^-1, i.e. g[q] = f[sigma^-1(q)]
            inverse = np.empty(n, dtype=np.int32)
            inverse[sigma[member]] = np.arange(n, dtype=np.int32)
            perms[t, m] = inverse
    adjacent = query.adjacency
    tail_free = np.array([n >= 4 and not adjacent[o[-1], o[-2]] for o in orders.tolist()],
                         dtype=np.bool_)
    tails = [_counted_tail(query, o, bw_level[t]) for t, o in enumerate(orders.tolist())]
    leaf_from = np.array([first for first, _ in tails], dtype=np.int32)
    tail_head = np.array([head for _, head in tails], dtype=np.bool_)
    if query.directed:
        # Grouped leaf search (gpu/cpu/leaf_groups.py) counts a group's leaves by label and
        # edge label, not by arc direction: directed plans search those tasks one by one.
        leaf_root = np.full(t_count, -1, dtype=np.int32)
    else:
        leaf_root = np.array([_groupable_leaf(query, o, int(leaf_from[t]), bool(tail_free[t]))
                              for t, o in enumerate(orders.tolist())], dtype=np.int32)
    return TaskTypes(query.labels.astype(np.int32), roots, root_labels, multiplicity, orders,
                     bw_count, bw_level, bw_label, tail_free, leaf_from, tail_head, perms,
                     leaf_root, bw_key)


def _groupable_leaf(query: QueryGraph, order: list[int], leaf_from: int, tail_free: bool) -> int:
    """The root level (0 or 1) holding a query leaf, for grouped search; -1 for none.

    Not when a leaf-product or pair tail holds a vertex with the leaf's label: such a
    tail could take a member's own leaf vertex and would have to be evaluated member
    by member, which measured slower than searching the tasks one by one.
    """
    n = len(order)
    for level in (0, 1):
        if n < 3 or query.degrees[order[level]] != 1:
            continue
        tail = min(leaf_from, n - 2 if tail_free else n)   # as the executors descend
        label = query.labels[order[level]]
        if any(query.labels[order[k]] == label for k in range(tail, n)):
            return -1
        return level
    return -1


def device_leaf_root(types: TaskTypes) -> np.ndarray:
    """leaf_root for the CUDA executor's grouped search (match.cu search_group), which
    counts no tail but the last level: a type whose one-by-one search counts a non-adjacent
    last pair or a leaf run from before the last level is searched one by one there (-1)
    (GH tree_8's star at a hub: 0.22 s one by one, 18.7 s grouped with its leaves
    enumerated), and so is every type of a plan whose levels mostly intersect
    (mostly_intersecting), where a task's own search is short: GH dense_1 and dense_5
    took 12.8 and 7.1 ms one by one, 18.2 and 10.2 ms grouped (H200, 2026-11-29)."""
    last = types.orders.shape[1] - 1
    if mostly_intersecting([types]):
        return np.full(types.count, -1, dtype=np.int32)
    keep = (types.leaf_root >= 0) & ~types.tail_free & (types.leaf_from >= last)
    return np.where(keep, types.leaf_root, -1).astype(np.int32)


def _counted_tail(query: QueryGraph, order: list[int], bw_level: np.ndarray) -> tuple[int, bool]:
    """Where the counted tail starts, and whether it starts with a head level.

    The tail is the trailing leaf run (`_leaf_run_start`), extended by the level just
    before it when no leaf of the run hangs from that level and its label is none of
    the leaves': then its candidates are disjoint from theirs and do not change their
    counts, so the tail counts |head candidates| x the leaves' product.
    """
    first = _leaf_run_start(query, order, bw_level)
    head = first - 1
    if first == len(order) or head < 2:
        return first, False
    run = range(first, len(order))
    if any(int(bw_level[level, 0]) == head for level in run):
        return first, False
    if any(query.labels[order[level]] == query.labels[order[head]] for level in run):
        return first, False
    return head, True


def _leaf_run_start(query: QueryGraph, order: list[int], bw_level: np.ndarray) -> int:
    """First level of the longest trailing run of leaves whose candidate sets are equal or
    disjoint, so their count is a product of falling factorials.

    Two leaves with different labels, or one parent and different edge labels, have
    disjoint candidates; with one parent, label and edge label they share one set.  Two
    leaves of one label under different parents may overlap: the run stops there.  So may
    two directed leaves of one label under one parent whose arcs point different ways (a
    data vertex can hold both arcs): the run stops there too.
    """
    n = len(order)
    degrees = query.degrees
    run: list[tuple[int, int, bool]] = []     # (query vertex, parent level, arc into it)
    first = n
    for level in range(n - 1, 1, -1):
        q = order[level]
        if degrees[q] != 1:
            break
        parent = int(bw_level[level, 0])
        inward = bool(query.directed and
                      query.edge_label_matrix[order[parent], q] != NO_EDGE)
        if any(query.labels[q] == query.labels[r] and (parent != pr or inward != into)
               for r, pr, into in run):
            break
        run.append((q, parent, inward))
        first = level
    return first


def build_plan(query: QueryGraph, stats: PlanStats | None = None,
               coalesce: bool = True) -> QueryPlan:
    """Plan a query.  `stats` (measured on the data) guides the orders; `coalesce=False`
    searches every directed edge (for ablation/tests)."""
    if coalesce:
        orbits, sigma = directed_edge_orbits(query)
    else:
        directed = root_edges(query)
        orbits = [[e] for e in directed]
        sigma = {e: np.arange(query.num_vertices) for e in directed}
    incremental = _task_types(query, orbits, sigma, stats)

    # Full matching: every embedding maps the root edge {a, b} onto exactly one data
    # edge in one orientation.  Root = the query edge with the fewest data edges between
    # its candidates (without stats: the best-connected ends).
    degrees = query.degrees

    def cost(edge):
        a, b = edge
        return (stats.edges[a, b] if stats is not None else 0, -int(degrees[a] + degrees[b]))
    a, b = min(query.edges.tolist(), key=cost)
    if query.directed:
        # A data arc maps onto the root arc one way only.
        static = _task_types(query, [[(a, b)]], {(a, b): np.arange(query.num_vertices)},
                             stats)
        return QueryPlan(query=query, incremental=incremental, static=static, orbits=orbits)
    flip = find_automorphism(query, {a: b, b: a}) if coalesce else None
    if flip is not None:
        static_orbits = [[(a, b), (b, a)]]
        static_sigma = {(a, b): np.arange(query.num_vertices), (b, a): flip}
    else:
        static_orbits = [[(a, b)], [(b, a)]]
        static_sigma = {(a, b): np.arange(query.num_vertices),
                        (b, a): np.arange(query.num_vertices)}
    static = _task_types(query, static_orbits, static_sigma, stats)
    return QueryPlan(query=query, incremental=incremental, static=static, orbits=orbits)


def make_tasks(types: TaskTypes, cand: np.ndarray, us: np.ndarray, vs: np.ndarray,
               labels: np.ndarray, ranks: np.ndarray):
    """(u, v, rank, type) for every update edge and task type its ends can start.

    The candidate bits of u and v and the edge label are checked here, on the
    host and vectorised, so the executors only receive tasks that can match.
    """
    # One (types x edges) mask in a few array operations: a per-type loop costs more in
    # interpreter overhead than the test itself for the small batches a service sees.
    roots = types.roots.astype(np.uint32)
    cu, cv = cand[us][None, :], cand[vs][None, :]
    ok = ((cu >> roots[:, :1]) & (cv >> roots[:, 1:]) & np.uint32(1)).astype(bool)
    ok &= labels[None, :] == types.root_labels[:, None]
    tt, hit = np.nonzero(ok)    # by type, then by edge
    return (np.ascontiguousarray(us[hit], dtype=np.int32),
            np.ascontiguousarray(vs[hit], dtype=np.int32),
            np.ascontiguousarray(ranks[hit], dtype=np.int32), tt.astype(np.int32))


@dataclass(frozen=True, eq=False)
class LeafGroups:
    """Leaf-rooted tasks grouped by (type, data vertex of the leaf's parent).

    Such a task's leaf end takes part in nothing but its own edge, so the tasks of
    one group share every partial match of the rest of the query; they differ only
    in their rank (the total-order rule) and in which vertex the leaf takes
    (injectivity).  A group is searched once and each match counted for the
    members it is valid for.  Members are listed twice: by rank and by leaf vertex.
    """
    task_type: np.ndarray    # int32 [G]
    parent: np.ndarray       # int32 [G]   data vertex at the parent's root level
    lo: np.ndarray           # int64 [G]   members lo..hi-1 in the arrays below
    hi: np.ndarray           # int64 [G]
    rank: np.ndarray         # int32 [K]   by rank within a group
    leaf: np.ndarray         # int32 [K]   leaf vertex of that member
    leaf_by_id: np.ndarray   # int32 [K]   by leaf vertex within a group
    rank_by_id: np.ndarray   # int32 [K]   rank of that member

    @property
    def count(self) -> int:
        return int(self.task_type.shape[0])


def group_leaf_tasks(types: TaskTypes, tu, tv, tr, tt, min_size: int):
    """Split make_tasks' output into tasks searched one by one and LeafGroups of at
    least `min_size` members, largest first (for dynamic scheduling)."""
    leaf_level = types.leaf_root[tt]
    pick = np.flatnonzero(leaf_level >= 0)
    parent = np.where(leaf_level[pick] == 1, tu[pick], tv[pick])
    leaf = np.where(leaf_level[pick] == 1, tv[pick], tu[pick])
    ptype = tt[pick]
    by_rank = np.lexsort((tr[pick], parent, ptype))
    key_t, key_p = ptype[by_rank], parent[by_rank]
    starts = np.flatnonzero(np.r_[True, (key_t[1:] != key_t[:-1]) | (key_p[1:] != key_p[:-1])])
    ends = np.r_[starts[1:], len(by_rank)]
    big = (ends - starts) >= max(2, min_size)
    # Tasks in small groups go back to the one-by-one path.
    member_of_big = np.repeat(big, ends - starts)
    plain = np.ones(len(tu), dtype=bool)
    plain[pick[by_rank[member_of_big]]] = False
    keep = np.flatnonzero(plain)
    singles = (tu[keep], tv[keep], tr[keep], tt[keep])
    starts, ends = starts[big], ends[big]
    order = np.argsort(-(ends - starts), kind="stable")
    starts, ends = starts[order], ends[order]
    sizes = ends - starts
    lo = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=lo[1:])
    take = np.arange(int(sizes.sum())) + np.repeat(starts - lo, sizes)
    rows = pick[by_rank[take]]
    group_of = np.repeat(np.arange(len(sizes)), sizes)
    by_id = np.lexsort((leaf[by_rank[take]], group_of))
    members_leaf = leaf[by_rank[take]].astype(np.int32)
    members_rank = tr[rows].astype(np.int32)
    groups = LeafGroups(
        task_type=tt[pick[by_rank[starts]]].astype(np.int32) if len(sizes)
        else np.empty(0, np.int32),
        parent=key_p[starts].astype(np.int32),
        lo=lo, hi=lo + sizes,
        rank=members_rank, leaf=members_leaf,
        leaf_by_id=members_leaf[by_id], rank_by_id=members_rank[by_id])
    return singles, groups
