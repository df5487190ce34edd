"""Query plans: directed-edge orbits against networkx automorphisms, matching orders,
backward-neighbour tables, leaf runs, the static root and task filtering."""
from __future__ import annotations

import itertools
import random

import networkx as nx
import numpy as np
import pytest
from networkx.algorithms.isomorphism import GraphMatcher

from gpu.plan.planner import (PlanStats, _leaf_run_start, build_plan, make_tasks,
                              mostly_intersecting)
from gpu.plan.query import NO_EDGE, QueryGraph


def query(labels, edges, elabels=None, name="q") -> QueryGraph:
    return QueryGraph.build(name, np.arange(len(labels)), labels, edges, elabels)


def uniform(n, edges) -> QueryGraph:
    return query([0] * n, edges)


NAMED = {
    "edge": uniform(2, [(0, 1)]),
    "triangle": uniform(3, [(0, 1), (1, 2), (0, 2)]),
    "cycle4": uniform(4, [(0, 1), (1, 2), (2, 3), (3, 0)]),
    "star3": uniform(4, [(0, 1), (0, 2), (0, 3)]),
    "star5": uniform(6, [(0, i) for i in range(1, 6)]),
    "path4": uniform(4, [(0, 1), (1, 2), (2, 3)]),
    "path5": uniform(5, [(0, 1), (1, 2), (2, 3), (3, 4)]),
    "k4": uniform(4, [(a, b) for a in range(4) for b in range(a + 1, 4)]),
    "paw": uniform(4, [(0, 1), (1, 2), (0, 2), (2, 3)]),
    "diamond": uniform(4, [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)]),
    "labeled_path": query([0, 1, 1, 0], [(0, 1), (1, 2), (2, 3)]),
    "labeled_star": query([0, 1, 1, 2], [(0, 1), (0, 2), (0, 3)]),
    "elabel_cycle4": query([0] * 4, [(0, 1), (1, 2), (2, 3), (3, 0)], [0, 1, 0, 1]),
    "elabel_star": query([0] * 4, [(0, 1), (0, 2), (0, 3)], [0, 0, 1]),
    "k23": uniform(5, [(a, b) for a in (0, 1) for b in (2, 3, 4)]),
}


def random_query(rng: random.Random) -> QueryGraph:
    n = rng.randint(2, 6)
    edges = {(rng.randrange(i), i) for i in range(1, n)}
    edges |= {(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < 0.3}
    edges = sorted(edges)
    return query([rng.randrange(2) for _ in range(n)], edges,
                 [rng.choice([0, 0, 1]) for _ in edges])


RANDOM = {f"random{i}": random_query(random.Random(i)) for i in range(25)}
ALL = {**NAMED, **RANDOM}


def to_nx(q: QueryGraph) -> nx.Graph:
    g = nx.Graph()
    for a in range(q.num_vertices):
        g.add_node(a, label=int(q.labels[a]))
    for (a, b), lab in zip(q.edges.tolist(), q.edge_labels.tolist()):
        g.add_edge(a, b, label=lab)
    return g


def automorphisms(q: QueryGraph) -> list[dict[int, int]]:
    g = to_nx(q)
    same = lambda x, y: x["label"] == y["label"]
    return list(GraphMatcher(g, g, node_match=same, edge_match=same).isomorphisms_iter())


def directed(q: QueryGraph) -> list[tuple[int, int]]:
    return sorted([(a, b) for a, b in q.edges.tolist()] + [(b, a) for a, b in q.edges.tolist()])


def is_automorphism(q: QueryGraph, p: np.ndarray) -> bool:
    n = q.num_vertices
    if sorted(p.tolist()) != list(range(n)):
        return False
    if any(q.labels[p[x]] != q.labels[x] for x in range(n)):
        return False
    m = q.edge_label_matrix
    return all(m[p[x], p[y]] == m[x, y] for x in range(n) for y in range(n))


# --------------------------------------------------------------------------- orbits


@pytest.mark.parametrize("name", sorted(ALL))
def test_orbits_are_automorphism_classes(name):
    q = ALL[name]
    plan = build_plan(q)
    auts = automorphisms(q)
    edges = directed(q)
    flat = [e for orbit in plan.orbits for e in orbit]
    assert sorted(flat) == edges                        # a partition of the directed edges
    assert sum(len(o) for o in plan.orbits) == 2 * q.num_edges
    orbit_of = {e: i for i, orbit in enumerate(plan.orbits) for e in orbit}
    for (a, b), (c, d) in itertools.product(edges, repeat=2):
        related = any(phi[a] == c and phi[b] == d for phi in auts)
        assert (orbit_of[(a, b)] == orbit_of[(c, d)]) == related, ((a, b), (c, d))
    # orbit-stabiliser: |orbit| * |stabiliser of the representative| = |Aut|
    for orbit in plan.orbits:
        a, b = orbit[0]
        stab = sum(1 for phi in auts if phi[a] == a and phi[b] == b)
        assert len(orbit) * stab == len(auts)


@pytest.mark.parametrize("name, aut", [("triangle", 6), ("cycle4", 8), ("star3", 6),
                                       ("path4", 2), ("k4", 24), ("star5", 120)])
def test_uniform_shapes_have_one_orbit(name, aut):
    """Edge-transitive uniform shapes: one type whose orbit is every directed edge."""
    q = NAMED[name]
    assert len(automorphisms(q)) == aut
    plan = build_plan(q)
    if name == "star3" or name == "star5":
        # centre->leaf and leaf->centre are different types
        assert sorted(len(o) for o in plan.orbits) == [q.num_edges, q.num_edges]
    elif name == "path4":
        # {0->1, 3->2}, {1->0, 2->3}, {1->2, 2->1}
        assert sorted(sorted(o) for o in plan.orbits) == [[(0, 1), (3, 2)], [(1, 0), (2, 3)],
                                                          [(1, 2), (2, 1)]]
    else:
        assert [len(o) for o in plan.orbits] == [2 * q.num_edges]


@pytest.mark.parametrize("name", sorted(ALL))
def test_task_types_agree_with_orbits(name):
    q = ALL[name]
    plan = build_plan(q)
    t = plan.incremental
    assert t.count == len(plan.orbits)
    assert t.query_labels.tolist() == q.labels.tolist()
    for i, orbit in enumerate(plan.orbits):
        a, b = orbit[0]
        assert tuple(t.roots[i]) == (a, b)
        assert t.root_labels[i] == q.edge_label_matrix[a, b]
        assert t.multiplicity[i] == len(orbit)
        for m, (c, d) in enumerate(orbit):
            p = t.perms[i, m]
            assert is_automorphism(q, p), (orbit, m, p)
            # member m's match g = f o p: f(a) = u, f(b) = v must give g(c) = u, g(d) = v
            assert (p[c], p[d]) == (a, b)
            # the inverse maps the representative onto the member
            inv = np.argsort(p)
            assert (inv[a], inv[b]) == (c, d)
        # every member's edge carries the root's edge label
        assert all(q.edge_label_matrix[c, d] == t.root_labels[i] for c, d in orbit)


def test_no_coalescing_gives_singleton_types():
    for name, q in ALL.items():
        plan = build_plan(q, coalesce=False)
        t = plan.incremental
        assert t.count == 2 * q.num_edges, name
        assert [tuple(r) for r in t.roots.tolist()] == directed(q)
        assert (t.multiplicity == 1).all()
        assert all(len(o) == 1 for o in plan.orbits)
        assert (t.perms[:, 0] == np.arange(q.num_vertices)).all()


# --------------------------------------------------------------------------- orders


def check_types(q: QueryGraph, t) -> None:
    n = q.num_vertices
    m = q.edge_label_matrix
    deg = q.degrees
    for i in range(t.count):
        order = t.orders[i].tolist()
        assert sorted(order) == list(range(n))
        assert order[:2] == t.roots[i].tolist()
        assert m[order[0], order[1]] != NO_EDGE
        assert t.bw_count[i, 0] == t.bw_count[i, 1] == 0
        for level in range(2, n):
            c = order[level]
            back = [lv for lv in range(level) if m[c, order[lv]] != NO_EDGE]
            assert back, f"level {level} of {order} has no earlier neighbour"
            k = t.bw_count[i, level]
            assert k == len(back)
            assert t.bw_level[i, level, :k].tolist() == back
            assert t.bw_label[i, level, :k].tolist() == [m[c, order[lv]] for lv in back]
        # leaves (degree 1) come after every non-leaf, from level 2 on
        kinds = [deg[c] == 1 for c in order[2:]]
        assert kinds == sorted(kinds), (order, deg)
        assert bool(t.tail_free[i]) == (n >= 4 and m[order[-1], order[-2]] == NO_EDGE)
        # counted tail: an optional head level, then a run of leaves whose candidate sets
        # are equal or disjoint
        lf = int(t.leaf_from[i])
        assert 2 <= lf <= n
        if t.tail_head[i]:
            head = order[lf]
            lf += 1
            assert lf < n, "a head needs leaves after it"
            assert all(order[t.bw_level[i, lv, 0]] != head for lv in range(lf, n)), \
                "no leaf of the run may hang from the head"
            assert all(q.labels[c] != q.labels[head] for c in order[lf:]), \
                "the head's label must differ from every leaf's"
        run = order[lf:]
        parent = {c: order[t.bw_level[i, lv, 0]] for lv, c in zip(range(lf, n), run)}
        assert all(deg[c] == 1 for c in run)
        for x, y in itertools.combinations(run, 2):
            if q.labels[x] == q.labels[y]:
                assert parent[x] == parent[y]
        # maximal: the vertex just before the run could not have joined it
        if lf > 2:
            c = order[lf - 1]
            p = order[t.bw_level[i, lf - 1, 0]]
            assert deg[c] != 1 or any(q.labels[c] == q.labels[r] and parent[r] != p
                                      for r in run)


@pytest.mark.parametrize("name", sorted(ALL))
def test_orders_and_backward_tables(name):
    q = ALL[name]
    for coalesce in (True, False):
        plan = build_plan(q, coalesce=coalesce)
        check_types(q, plan.incremental)
        check_types(q, plan.static)


@pytest.mark.parametrize("seed", range(12))
def test_order_is_most_matched_neighbours_then_fewest_candidates(seed):
    """Every step takes a vertex with the most matched neighbours, then the fewest
    candidates, then the highest degree; leaves only once no non-leaf is left."""
    q = random_query(random.Random(100 + seed))
    rng = np.random.default_rng(seed)
    n = q.num_vertices
    sizes = rng.integers(1, 1000, n).astype(float)
    stats = PlanStats(candidates=sizes, edges=np.ones((n, n)))
    plan = build_plan(q, stats, coalesce=False)
    deg = q.degrees
    for t in range(plan.incremental.count):
        order = plan.incremental.orders[t].tolist()
        for i in range(2, n):
            placed, rest = order[:i], order[i:]
            pool = [c for c in rest if deg[c] > 1] or rest
            pool = [c for c in pool if any(q.edge_label_matrix[c, x] >= 0 for x in placed)]

            def key(c):
                back = sum(1 for x in placed if q.edge_label_matrix[c, x] >= 0)
                return (-back, sizes[c], -int(deg[c]), c)
            assert order[i] == min(pool, key=key), (order, i)


def test_static_root_has_fewest_data_edges():
    q = uniform(4, [(0, 1), (1, 2), (2, 3)])
    edges = np.zeros((4, 4))
    for (a, b), count in zip([(0, 1), (1, 2), (2, 3)], [50.0, 7.0, 90.0]):
        edges[a, b] = edges[b, a] = count
    plan = build_plan(q, PlanStats(candidates=np.full(4, 10.0), edges=edges))
    assert set(map(tuple, plan.static.roots.tolist())) <= {(1, 2), (2, 1)}


# --------------------------------------------------------------------------- static


@pytest.mark.parametrize("name", sorted(ALL))
def test_static_types_cover_one_edge_both_ways(name):
    q = ALL[name]
    plan = build_plan(q)
    s = plan.static
    roots = [tuple(r) for r in s.roots.tolist()]
    a, b = roots[0]
    assert q.edge_label_matrix[a, b] != NO_EDGE
    assert int(s.multiplicity.sum()) == 2
    flip = any(phi[a] == b and phi[b] == a for phi in automorphisms(q))
    if flip:
        assert roots == [(a, b)] and s.multiplicity.tolist() == [2]
        assert (s.perms[0, 0] == np.arange(q.num_vertices)).all()
        p = s.perms[0, 1]
        assert is_automorphism(q, p) and (p[b], p[a]) == (a, b)
    else:
        assert roots == [(a, b), (b, a)] and s.multiplicity.tolist() == [1, 1]
    plain = build_plan(q, coalesce=False).static
    assert [tuple(r) for r in plain.roots.tolist()] == [(a, b), (b, a)]


def test_static_root_ties_go_to_the_best_connected_edge():
    # equal data-edge counts everywhere: the edge with the largest degree sum wins
    q = query([0] * 5, [(0, 1), (1, 2), (2, 3), (2, 4)])
    edges = np.zeros((5, 5))
    for a, b in q.edges.tolist():
        edges[a, b] = edges[b, a] = 10.0
    plan = build_plan(q, PlanStats(candidates=np.full(5, 10.0), edges=edges))
    assert sorted(plan.static.roots[0].tolist()) == [1, 2]


# --------------------------------------------------------------------------- leaf runs


def leaf_from_for_root(q: QueryGraph, root: tuple[int, int]) -> tuple[list, int]:
    plan = build_plan(q, coalesce=False)
    i = [tuple(r) for r in plan.incremental.roots.tolist()].index(root)
    return plan.incremental.orders[i].tolist(), int(plan.incremental.leaf_from[i])


def test_leaf_run_covers_same_label_leaves_of_one_parent():
    star = uniform(5, [(0, 1), (0, 2), (0, 3), (0, 4)])
    order, lf = leaf_from_for_root(star, (0, 1))
    assert order[:2] == [0, 1] and lf == 2
    order, lf = leaf_from_for_root(star, (1, 0))
    assert order[:2] == [1, 0] and lf == 2


def test_leaf_run_stops_at_same_label_leaves_of_different_parents():
    q = query([5, 1, 1, 5], [(0, 1), (1, 2), (2, 3)])
    order, lf = leaf_from_for_root(q, (1, 2))
    assert order[:2] == [1, 2] and lf == 3
    # with different leaf labels the candidate sets are disjoint: both leaves in the run
    q = query([5, 1, 1, 6], [(0, 1), (1, 2), (2, 3)])
    _, lf = leaf_from_for_root(q, (1, 2))
    assert lf == 2


def test_leaf_run_with_edge_labels_and_mixed_parents():
    # centre 0 has leaves 2, 3 (label 7; edge labels 0 and 1) and non-leaf 1 with leaf 4
    # (label 8): labels differ across parents, so the whole tail is one run
    q = query([0, 0, 7, 7, 8], [(0, 1), (0, 2), (0, 3), (1, 4)], [0, 0, 1, 0])
    order, lf = leaf_from_for_root(q, (0, 1))
    assert order[:2] == [0, 1] and lf == 2
    # the same leaf label under both parents: the run breaks between them
    q = query([0, 0, 7, 7, 7], [(0, 1), (0, 2), (0, 3), (1, 4)], [0, 0, 1, 0])
    order, lf = leaf_from_for_root(q, (0, 1))
    assert lf > 2
    tail = order[lf:]
    parents = {q.neighbors(c)[0] for c in tail}
    assert len(parents) == 1


def test_leaf_run_start_direct():
    q = query([0, 1, 2, 2, 2], [(0, 1), (1, 2), (1, 3), (0, 4)])
    n = q.num_vertices
    order = [0, 1, 2, 3, 4]
    bw = np.zeros((n, n), dtype=np.int32)
    bw[2, 0] = bw[3, 0] = 1        # parents of 2, 3: level 1 (vertex 1)
    bw[4, 0] = 0                   # parent of 4: level 0 (vertex 0)
    # 4 (label 2, parent 0) then 3 (label 2, parent 1): stops after 4
    assert _leaf_run_start(q, order, bw) == 4
    q2 = query([0, 1, 2, 2, 3], [(0, 1), (1, 2), (1, 3), (0, 4)])
    assert _leaf_run_start(q2, order, bw) == 2
    # a non-leaf at the end: no run at all
    q3 = query([0, 1, 2], [(0, 1), (1, 2), (0, 2)])
    assert _leaf_run_start(q3, [0, 1, 2], np.zeros((3, 3), dtype=np.int32)) == 3


# --------------------------------------------------------------------------- tasks


@pytest.mark.parametrize("name", ["triangle", "labeled_star", "elabel_cycle4", "random3",
                                  "random7", "paw"])
def test_make_tasks_filters_by_candidates_and_edge_label(name):
    q = ALL[name]
    rng = random.Random(sum(map(ord, name)))
    for coalesce in (True, False):
        types = build_plan(q, coalesce=coalesce).incremental
        nv = 30
        cand = np.array([rng.getrandbits(q.num_vertices) for _ in range(nv)], dtype=np.uint32)
        k = 60
        us = np.array([rng.randrange(nv) for _ in range(k)], dtype=np.int32)
        vs = np.array([rng.randrange(nv) for _ in range(k)], dtype=np.int32)
        labels = np.array([rng.randrange(3) for _ in range(k)], dtype=np.int32)
        ranks = np.arange(1, k + 1, dtype=np.int32)
        got = list(zip(*(x.tolist() for x in make_tasks(types, cand, us, vs, labels, ranks))))
        want = []
        for t in range(types.count):
            a, b = types.roots[t].tolist()
            for i in range(k):
                if (cand[us[i]] >> a) & 1 and (cand[vs[i]] >> b) & 1 \
                        and labels[i] == q.edge_label_matrix[a, b]:
                    want.append((int(us[i]), int(vs[i]), int(ranks[i]), t))
        assert got == want
        assert want, "the random input should start some tasks"


def test_make_tasks_empty():
    types = build_plan(NAMED["triangle"]).incremental
    empty = np.empty(0, dtype=np.int32)
    out = make_tasks(types, np.zeros(4, dtype=np.uint32), empty, empty, empty, empty)
    assert len(out) == 4 and all(len(x) == 0 for x in out)


@pytest.mark.parametrize("name, expected", [
    # Trees: every level past the root edge has one backward neighbour.
    ("path4", False), ("path5", False), ("star5", False), ("labeled_star", False),
    # Cliques: every such level has two or more.
    ("triangle", True), ("k4", True),
    # One of the two levels has two (the third triangle vertex, or the cycle's last):
    # half is not more than half.
    ("paw", False), ("cycle4", False), ("diamond", True),
    # The root edge alone: no level to probe.
    ("edge", False),
])
def test_mostly_intersecting_counts_levels_with_two_backward_neighbours(name, expected):
    assert mostly_intersecting([build_plan(NAMED[name]).incremental]) is expected


def test_mostly_intersecting_weighs_every_type_of_every_query():
    tree = build_plan(NAMED["path5"]).incremental      # 4 types x 3 levels, none
    clique = build_plan(NAMED["k4"]).incremental       # 1 type x 2 levels, both
    assert not mostly_intersecting([tree, clique])
    assert not mostly_intersecting([tree] + [clique] * 6)     # 12 of 24: half
    assert mostly_intersecting([tree] + [clique] * 7)         # 14 of 26


def test_device_leaf_root_keeps_only_types_whose_tail_is_the_last_level():
    """The CUDA grouped search counts no tail but the last level: a leaf-rooted type whose
    one-by-one search counts a non-adjacent last pair or a leaf run from an earlier level
    is searched one by one there, as are the types of plans whose levels mostly
    intersect; the others keep their leaf's root level."""
    from gpu.plan.planner import device_leaf_root

    for edges, labels in (
            # path: leaf-rooted types whose tail is the other end, the last level
            ([(0, 1), (1, 2), (2, 3)], [1, 0, 0, 0]),
            # a star of three leaves of other labels: a leaf run from level 2
            ([(0, 1), (0, 2), (0, 3)], [0, 1, 2, 2]),
            # a triangle with two pendant leaves on one vertex
            ([(0, 1), (1, 2), (0, 2), (2, 3), (2, 4)], [0, 1, 0, 2, 1])):
        types = build_plan(QueryGraph.build("q", range(len(labels)), labels, edges)).incremental
        got = device_leaf_root(types)
        last = types.orders.shape[1] - 1
        assert got.dtype == np.int32 and got.shape == types.leaf_root.shape
        for t in range(types.count):
            tail_at_last = not types.tail_free[t] and types.leaf_from[t] >= last
            want = types.leaf_root[t] if tail_at_last else -1
            assert got[t] == want, (edges, t)
    path = build_plan(QueryGraph.build("path", range(4), [1, 0, 0, 0],
                                       [(0, 1), (1, 2), (2, 3)])).incremental
    assert (device_leaf_root(path) == path.leaf_root).all() and (path.leaf_root >= 0).any()
    tailed = build_plan(QueryGraph.build("tailed", range(5), [0, 1, 0, 2, 1],
                                         [(0, 1), (1, 2), (0, 2), (2, 3), (2, 4)])).incremental
    assert (tailed.leaf_root >= 0).any() and (device_leaf_root(tailed) == -1).all()
    # A leaf on a 4-clique: its levels mostly intersect, every type one by one.
    clique = [(a, b) for a in range(4) for b in range(a + 1, 4)]
    dense = build_plan(QueryGraph.build("dense", range(5), [0, 0, 0, 0, 1],
                                        clique + [(0, 4)])).incremental
    assert mostly_intersecting([dense]) and (dense.leaf_root >= 0).any()
    assert (device_leaf_root(dense) == -1).all()
