"""Self-tests of the test oracle on directed graphs (tests/reference.py, `directed=True`,
issue 22): its embeddings against networkx's DiGraphMatcher monomorphisms, labels on
vertices and arcs, and its batch rules per arc."""
from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest
from networkx.algorithms.isomorphism import DiGraphMatcher

from tests.reference import (ADD_VERTEX, DELETE_EDGE, DELETE_VERTEX, INSERT_EDGE, NO_LABEL,
                             RefGraph, RefQuery)


def _nx(vertices, arcs) -> nx.DiGraph:
    g = nx.DiGraph()
    for v, lab in vertices:
        g.add_node(v, label=lab)
    for a, b, lab in arcs:
        g.add_edge(a, b, label=lab)
    return g


def nx_embeddings(g: RefGraph, q: RefQuery) -> set[tuple[int, ...]]:
    matcher = DiGraphMatcher(
        _nx(g.vertices.items(), g.edge_list()), _nx(enumerate(q.labels), q.edge_list()),
        node_match=lambda a, b: a["label"] == b["label"],
        edge_match=lambda a, b: a["label"] == b["label"])
    out = set()
    for mapping in matcher.subgraph_monomorphisms_iter():
        inverse = {qv: dv for dv, qv in mapping.items()}
        out.add(tuple(inverse[i] for i in range(q.n)))
    return out


def random_digraph(rng: random.Random, n: int, p: float, vlabels: int, elabels: int,
                   reciprocal: float) -> RefGraph:
    """Arcs with probability p, and for each arc its reverse too with `reciprocal`."""
    ids = rng.sample(range(1000), n)
    vertices = {v: rng.randrange(vlabels) for v in ids}
    arcs = {}
    for u in ids:
        for v in ids:
            if u != v and rng.random() < p:
                arcs[(u, v)] = rng.randrange(elabels)
                if rng.random() < reciprocal:
                    arcs[(v, u)] = rng.randrange(elabels)
    return RefGraph.build(vertices, [(u, v, lab) for (u, v), lab in arcs.items()], True)


def random_directed_query(rng: random.Random, n: int, p: float, vlabels: int,
                          elabels: int) -> RefQuery:
    arcs = {}
    for i in range(1, n):       # weakly connected: a spanning tree of random directions
        j = rng.randrange(i)
        arcs[(i, j) if rng.random() < 0.5 else (j, i)] = rng.randrange(elabels)
    for a in range(n):
        for b in range(n):
            if a != b and rng.random() < p:
                arcs.setdefault((a, b), rng.randrange(elabels))
    return RefQuery.build([rng.randrange(vlabels) for _ in range(n)],
                          [(a, b, lab) for (a, b), lab in arcs.items()], directed=True)


@pytest.mark.parametrize("seed", range(60))
def test_directed_embeddings_match_networkx(seed):
    rng = random.Random(seed)
    vlabels, elabels = rng.randint(1, 3), rng.randint(1, 2)
    g = random_digraph(rng, rng.randint(0, 9), rng.uniform(0.15, 0.5), vlabels, elabels,
                       rng.uniform(0.0, 0.6))
    for _ in range(4):
        q = random_directed_query(rng, rng.randint(1, 5), rng.uniform(0.0, 0.4), vlabels,
                                  elabels)
        assert q.is_connected()
        assert g.embeddings(q) == nx_embeddings(g, q), (g, q)


def _cycle(order) -> RefQuery:
    return RefQuery.build([0] * len(order),
                          [(order[k], order[(k + 1) % len(order)]) for k in range(len(order))],
                          directed=True)


def test_a_directed_cycle_is_not_its_reverse():
    """A -> B -> C -> A is found where the arcs run that way, and not its mirror image
    on the same three vertices."""
    g = RefGraph.build({1: 0, 2: 0, 3: 0}, [(1, 2), (2, 3), (3, 1)], directed=True)
    forward = g.embeddings(_cycle([0, 1, 2]))
    assert forward == {(1, 2, 3), (2, 3, 1), (3, 1, 2)}     # its three rotations
    g.apply([(DELETE_EDGE, 3, 1, NO_LABEL), (INSERT_EDGE, 1, 3, 0)])
    assert g.embeddings(_cycle([0, 1, 2])) == set()
    assert RefGraph.build({1: 0, 2: 0, 3: 0}, [(1, 2), (2, 3), (3, 1)]).embeddings(
        RefQuery.build([0, 0, 0], [(0, 1), (1, 2), (2, 0)])) == \
        set(itertools.permutations((1, 2, 3)))      # undirected: all six


def test_both_arcs_of_a_pair_are_separate_edges():
    g = RefGraph.build({1: 0, 2: 0}, [(1, 2, 4)], directed=True)
    applied, ignored = g.apply([(INSERT_EDGE, 2, 1, 5)])
    assert applied["edges_inserted"] == 1 and g.edge_list() == [(1, 2, 4), (2, 1, 5)]
    # The same arc again is a no-op; its reverse exists already too.
    applied, ignored = g.apply([(INSERT_EDGE, 1, 2, 4), (INSERT_EDGE, 2, 1, 5)])
    assert applied["edges_inserted"] == 0 and ignored["edges_inserted"] == 2
    # Deleting one direction leaves the other; a delete naming the other arc's label
    # is a no-op.
    applied, ignored = g.apply([(DELETE_EDGE, 1, 2, 5)])
    assert ignored["edges_deleted"] == 1 and g.has_edge(1, 2)
    g.apply([(DELETE_EDGE, 1, 2, NO_LABEL)])
    assert g.edge_list() == [(2, 1, 5)]
    assert not g.has_edge(1, 2) and g.has_edge(2, 1)


def test_an_insert_and_a_delete_cancel_only_on_the_same_arc():
    g = RefGraph.build({1: 0, 2: 0}, [(2, 1, 0)], directed=True)
    # Insert 1 -> 2 and delete 2 -> 1: different arcs, both apply.
    applied, _ = g.apply([(INSERT_EDGE, 1, 2, 0), (DELETE_EDGE, 2, 1, NO_LABEL)])
    assert (applied["edges_inserted"], applied["edges_deleted"]) == (1, 1)
    assert g.edge_list() == [(1, 2, 0)]
    # Insert and delete 1 -> 2's reverse together: they cancel, 1 -> 2 stays.
    applied, ignored = g.apply([(INSERT_EDGE, 2, 1, 0), (DELETE_EDGE, 2, 1, NO_LABEL)])
    assert applied["edges_inserted"] == applied["edges_deleted"] == 0
    assert ignored["edges_inserted"] == ignored["edges_deleted"] == 1
    assert g.edge_list() == [(1, 2, 0)]


def test_a_vertex_delete_takes_its_arcs_both_ways():
    g = RefGraph.build({1: 0, 2: 0, 3: 0}, [(1, 2), (2, 1), (3, 2), (1, 3)], directed=True)
    applied, _ = g.apply([(DELETE_VERTEX, 2, 0, NO_LABEL), (ADD_VERTEX, 4, 0, 1)])
    assert applied["edges_deleted"] == 3 and g.edge_list() == [(1, 3, 0)]


def test_fan_in_and_fan_out_differ():
    g = RefGraph.build({0: 1, 1: 0, 2: 0, 3: 0}, [(1, 0), (2, 0), (3, 0)], directed=True)
    fan_in = RefQuery.build([1, 0, 0], [(1, 0), (2, 0)], directed=True)
    fan_out = RefQuery.build([1, 0, 0], [(0, 1), (0, 2)], directed=True)
    assert len(g.embeddings(fan_in)) == 6 and g.embeddings(fan_out) == set()
    assert g.embeddings(fan_in) == nx_embeddings(g, fan_in)
