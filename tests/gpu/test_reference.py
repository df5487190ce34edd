"""Self-tests of the test oracle (tests/reference.py): matching vs networkx, batch rules.

The engine tests are only as good as the oracle, so the oracle is checked on its
own: its embedding enumeration against networkx's VF2 monomorphism search, and
its batch semantics rule by rule (plus generic invariants under hypothesis).
"""

from __future__ import annotations

import random

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from networkx.algorithms.isomorphism import GraphMatcher

from tests.reference import (
    ADD_VERTEX,
    COUNT_KEYS,
    DELETE_EDGE,
    DELETE_VERTEX,
    INSERT_EDGE,
    NO_LABEL,
    RefGraph,
    RefQuery,
    Rejected,
)

# --------------------------------------------------------------------------
# matching vs networkx


def _to_nx_graph(g: RefGraph) -> nx.Graph:
    G = nx.Graph()
    for v, lab in g.vertices.items():
        G.add_node(v, label=lab)
    for u, v, lab in g.edge_list():
        G.add_edge(u, v, label=lab)
    return G


def _to_nx_query(q: RefQuery) -> nx.Graph:
    Q = nx.Graph()
    for i, lab in enumerate(q.labels):
        Q.add_node(i, label=lab)
    for a, b, lab in q.edge_list():
        Q.add_edge(a, b, label=lab)
    return Q


def nx_embeddings(g: RefGraph, q: RefQuery) -> set[tuple[int, ...]]:
    """networkx yields data->query dicts; invert them into query-order tuples."""
    gm = GraphMatcher(
        _to_nx_graph(g), _to_nx_query(q),
        node_match=lambda a, b: a["label"] == b["label"],
        edge_match=lambda a, b: a["label"] == b["label"],
    )
    out = set()
    for mapping in gm.subgraph_monomorphisms_iter():
        inv = {qv: dv for dv, qv in mapping.items()}
        out.add(tuple(inv[i] for i in range(q.n)))
    return out


def random_graph(rng: random.Random, n: int, p: float, vlabels: int, elabels: int) -> RefGraph:
    # Sparse, non-contiguous ids: the reference must not assume 0..n-1.
    ids = rng.sample(range(1000), n)
    vertices = {v: rng.randrange(vlabels) for v in ids}
    edges = [(u, v, rng.randrange(elabels))
             for i, u in enumerate(ids) for v in ids[i + 1:] if rng.random() < p]
    return RefGraph.build(vertices, edges)


def random_query(rng: random.Random, n: int, p: float, vlabels: int, elabels: int,
                 connected: bool = True) -> RefQuery:
    edges = set()
    if connected:
        # A random spanning tree first keeps it connected, then extra edges.
        for i in range(1, n):
            edges.add((rng.randrange(i), i))
    for a in range(n):
        for b in range(a + 1, n):
            if rng.random() < p:
                edges.add((a, b))
    return RefQuery.build([rng.randrange(vlabels) for _ in range(n)],
                          [(a, b, rng.randrange(elabels)) for a, b in sorted(edges)])


@pytest.mark.parametrize("seed", range(60))
def test_embeddings_match_networkx_random(seed):
    rng = random.Random(seed)
    vlabels, elabels = rng.randint(1, 3), rng.randint(1, 2)
    g = random_graph(rng, rng.randint(0, 10), rng.uniform(0.2, 0.7), vlabels, elabels)
    for _ in range(4):
        q = random_query(rng, rng.randint(1, 5), rng.uniform(0.0, 0.6), vlabels, elabels,
                         connected=rng.random() < 0.8)
        assert g.embeddings(q) == nx_embeddings(g, q), (g, q)


def _uniform(n: int, edges) -> RefQuery:
    return RefQuery.build([0] * n, edges)


SHAPES = {
    "edge": _uniform(2, [(0, 1)]),
    "path3": _uniform(3, [(0, 1), (1, 2)]),
    "triangle": _uniform(3, [(0, 1), (1, 2), (0, 2)]),
    "star3": _uniform(4, [(0, 1), (0, 2), (0, 3)]),
    "cycle4": _uniform(4, [(0, 1), (1, 2), (2, 3), (3, 0)]),
    "clique4": _uniform(4, [(a, b) for a in range(4) for b in range(a + 1, 4)]),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_named_shapes_on_complete_graph_count_automorphic_images(name):
    # In K_n every injective map preserves edges, so the count is n!/(n-k)!:
    # a closed form that checks automorphic images are all counted.
    n = 6
    g = RefGraph.build({v: 0 for v in range(n)},
                       [(u, v) for u in range(n) for v in range(u + 1, n)])
    q = SHAPES[name]
    expected = 1
    for i in range(q.n):
        expected *= n - i
    emb = g.embeddings(q)
    assert len(emb) == expected
    assert emb == nx_embeddings(g, q)


def test_triangle_has_six_automorphic_images():
    g = RefGraph.build({10: 0, 20: 0, 30: 0}, [(10, 20), (20, 30), (10, 30)])
    assert len(g.embeddings(SHAPES["triangle"])) == 6


def test_labels_and_injectivity_are_enforced():
    g = RefGraph.build({1: 0, 2: 1, 3: 0}, [(1, 2, 5), (2, 3, 6)])
    # Vertex labels: query 0-1 with labels (0, 1) and edge label 5 only matches (1, 2).
    assert g.embeddings(RefQuery.build([0, 1], [(0, 1, 5)])) == {(1, 2)}
    assert g.embeddings(RefQuery.build([0, 1], [(0, 1, 6)])) == {(3, 2)}
    assert g.embeddings(RefQuery.build([0, 1], [(0, 1, 7)])) == set()
    # A path 0-1-2 with labels (0, 1, 0) and any edge labels needs two distinct ends.
    q = RefQuery.build([0, 1, 0], [(0, 1, 5), (1, 2, 6)])
    assert g.embeddings(q) == {(1, 2, 3)}
    # Injectivity: a 2-path over a single edge must not reuse a vertex.
    g2 = RefGraph.build({1: 0, 2: 0}, [(1, 2)])
    assert g2.embeddings(_uniform(3, [(0, 1), (1, 2)])) == set()
    # Non-induced: a path matches inside a triangle.
    g3 = RefGraph.build({1: 0, 2: 0, 3: 0}, [(1, 2), (2, 3), (1, 3)])
    assert len(g3.embeddings(_uniform(3, [(0, 1), (1, 2)]))) == 6


# --------------------------------------------------------------------------
# batch semantics, rule by rule


def base() -> RefGraph:
    # 1 -0- 2 -1- 3 ; 4 isolated. Vertex labels 0, 0, 1, 2.
    return RefGraph.build({1: 0, 2: 0, 3: 1, 4: 2}, [(1, 2, 0), (2, 3, 1)])


def counts(**kw) -> dict[str, int]:
    return {k: kw.get(k, 0) for k in COUNT_KEYS}


def assert_rejected(records):
    g = base()
    before = g.snapshot()
    with pytest.raises(Rejected):
        g.apply(records)
    assert g.snapshot() == before  # nothing changed


def test_insert_new_edge_and_default_label():
    g = base()
    applied, ignored = g.apply([(INSERT_EDGE, 1, 3, NO_LABEL), (INSERT_EDGE, 4, 1, 7)])
    assert g.edges[frozenset((1, 3))] == 0
    assert g.edges[frozenset((1, 4))] == 7
    assert applied == counts(edges_inserted=2) and ignored == counts()


def test_insert_existing_edge_is_noop_even_with_other_label():
    g = base()
    applied, ignored = g.apply([(INSERT_EDGE, 2, 1, 0), (INSERT_EDGE, 3, 2, 9)])
    assert g == base()
    assert applied == counts() and ignored == counts(edges_inserted=2)


def test_duplicate_insert_in_batch_same_label():
    g = base()
    applied, ignored = g.apply([(INSERT_EDGE, 1, 3, 4), (INSERT_EDGE, 3, 1, 4)])
    assert g.edges[frozenset((1, 3))] == 4
    assert applied == counts(edges_inserted=1) and ignored == counts(edges_inserted=1)


def test_omitted_insert_label_equals_zero_for_duplicates():
    g = base()
    g.apply([(INSERT_EDGE, 1, 3, NO_LABEL), (INSERT_EDGE, 1, 3, 0)])
    assert g.edges[frozenset((1, 3))] == 0


def test_delete_edge_with_and_without_label():
    g = base()
    applied, ignored = g.apply([(DELETE_EDGE, 2, 1, NO_LABEL), (DELETE_EDGE, 3, 2, 1)])
    assert g.edges == {}
    assert applied == counts(edges_deleted=2) and ignored == counts()


def test_noop_deletes():
    g = base()
    applied, ignored = g.apply([
        (DELETE_EDGE, 1, 3, NO_LABEL),   # no such edge
        (DELETE_EDGE, 2, 3, 0),          # stored label is 1
        (DELETE_VERTEX, 99, 0, NO_LABEL),  # no such vertex
    ])
    assert g == base()
    assert applied == counts()
    assert ignored == counts(edges_deleted=2, vertices_deleted=1)


@pytest.mark.parametrize("existing", [True, False])
@pytest.mark.parametrize("delete_label", [NO_LABEL, "same"])
@pytest.mark.parametrize("delete_first", [True, False])
def test_insert_and_delete_of_same_edge_cancel(existing, delete_label, delete_first):
    g = base()
    u, v, lab = (2, 3, 1) if existing else (1, 3, 5)
    ins = (INSERT_EDGE, u, v, lab)
    dele = (DELETE_EDGE, v, u, lab if delete_label == "same" else NO_LABEL)
    applied, ignored = g.apply([dele, ins] if delete_first else [ins, dele])
    assert g == base()  # net: nothing happened to the edge
    assert applied == counts()
    assert ignored == counts(edges_inserted=1, edges_deleted=1)


def test_vertex_add_new_and_existing_same_label():
    g = base()
    applied, ignored = g.apply([(ADD_VERTEX, 5, 0, 3), (ADD_VERTEX, 1, 0, 0)])
    assert g.vertices[5] == 3 and g.vertices[1] == 0
    assert applied == counts(vertices_added=1) and ignored == counts(vertices_added=1)


def test_edges_to_vertices_added_in_same_batch_any_order():
    g = base()
    g.apply([(INSERT_EDGE, 5, 6, 2), (INSERT_EDGE, 1, 5, NO_LABEL),
             (ADD_VERTEX, 6, 0, 0), (ADD_VERTEX, 5, 0, 1)])
    assert g.vertices[5] == 1 and g.vertices[6] == 0
    assert g.edges[frozenset((5, 6))] == 2 and g.edges[frozenset((1, 5))] == 0


def test_delete_edge_touching_new_vertex_is_noop():
    g = base()
    applied, ignored = g.apply([(ADD_VERTEX, 5, 0, 1), (DELETE_EDGE, 1, 5, NO_LABEL)])
    assert 5 in g.vertices and len(g.edges) == 2
    assert ignored == counts(edges_deleted=1)


def test_vertex_delete_removes_incident_edges_only():
    g = base()
    applied, ignored = g.apply([(DELETE_VERTEX, 2, 0, NO_LABEL)])
    assert g.vertices == {1: 0, 3: 1, 4: 2}
    assert g.edges == {}
    # Both of vertex 2's edges left the graph with it.
    assert applied == counts(vertices_deleted=1, edges_deleted=2) and ignored == counts()


def test_edge_delete_covered_by_vertex_delete_is_noop():
    g = base()
    applied, ignored = g.apply([(DELETE_EDGE, 1, 2, NO_LABEL), (DELETE_VERTEX, 2, 0, NO_LABEL)])
    assert g.edges == {} and 2 not in g.vertices
    assert applied == counts(vertices_deleted=1, edges_deleted=2) \
        and ignored == counts(edges_deleted=1)


def test_mixed_batch_uses_pre_batch_state():
    g = base()
    g.apply([(DELETE_EDGE, 1, 2, NO_LABEL), (INSERT_EDGE, 1, 3, 2), (INSERT_EDGE, 3, 4, 0),
             (ADD_VERTEX, 7, 0, 0), (INSERT_EDGE, 7, 4, 1), (DELETE_VERTEX, 8, 0, NO_LABEL)])
    assert g == RefGraph.build({1: 0, 2: 0, 3: 1, 4: 2, 7: 0},
                               [(2, 3, 1), (1, 3, 2), (3, 4, 0), (7, 4, 1)])


@pytest.mark.parametrize("records", [
    pytest.param([(INSERT_EDGE, 1, 1, 0)], id="self-loop-insert"),
    pytest.param([(DELETE_EDGE, 2, 2, NO_LABEL)], id="self-loop-delete"),
    pytest.param([(INSERT_EDGE, 1, 3, 0), (INSERT_EDGE, 1, 99, 0)], id="missing-endpoint"),
    pytest.param([(DELETE_EDGE, 1, 99, NO_LABEL)], id="missing-endpoint-delete"),
    pytest.param([(ADD_VERTEX, 5, 0, 0), (DELETE_VERTEX, 5, 0, NO_LABEL)], id="add-and-delete-new"),
    pytest.param([(ADD_VERTEX, 1, 0, 0), (DELETE_VERTEX, 1, 0, NO_LABEL)],
                 id="add-and-delete-existing"),
    pytest.param([(ADD_VERTEX, 1, 0, 1)], id="relabel-existing"),
    pytest.param([(ADD_VERTEX, 5, 0, 1), (ADD_VERTEX, 5, 0, 2)], id="new-vertex-two-labels"),
    pytest.param([(INSERT_EDGE, 1, 3, 0), (INSERT_EDGE, 3, 1, 1)], id="insert-two-labels"),
    pytest.param([(INSERT_EDGE, 1, 3, NO_LABEL), (INSERT_EDGE, 3, 1, 1)],
                 id="insert-default-vs-explicit-label"),
    pytest.param([(ADD_VERTEX, 5, 0, NO_LABEL)], id="vertex-without-label"),
])
def test_rejections_leave_graph_unchanged(records):
    assert_rejected(records + [(INSERT_EDGE, 1, 4, 0), (DELETE_EDGE, 1, 2, NO_LABEL)])


# --------------------------------------------------------------------------
# generic invariants under random batches

_ids = st.integers(0, 7)
_record = st.one_of(
    st.tuples(st.just(ADD_VERTEX), _ids, st.just(0), st.integers(0, 1)),
    st.tuples(st.just(DELETE_VERTEX), _ids, st.just(0), st.just(NO_LABEL)),
    st.tuples(st.just(INSERT_EDGE), _ids, _ids, st.sampled_from([NO_LABEL, 0, 1])),
    st.tuples(st.just(DELETE_EDGE), _ids, _ids, st.sampled_from([NO_LABEL, 0, 1])),
)


def _start_graph(seed: int) -> RefGraph:
    rng = random.Random(seed)
    ids = rng.sample(range(8), 5)
    return RefGraph.build({v: rng.randrange(2) for v in ids},
                          [(u, v, rng.randrange(2)) for i, u in enumerate(ids)
                           for v in ids[i + 1:] if rng.random() < 0.5])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 50), batch=st.lists(_record, max_size=8))
def test_batch_invariants(seed, batch):
    g = _start_graph(seed)
    old = g.copy()
    try:
        applied, ignored = g.apply(batch)
    except Rejected:
        assert g == old
        return
    # Every record is accounted exactly once; besides, the edges that left with a deleted
    # vertex count as applied deletions.
    implicit = sum(1 for key in old.edges if key - g.vertices.keys())
    assert sum(applied.values()) + sum(ignored.values()) == len(batch) + implicit
    # Still a simple graph whose edges join live vertices.
    for key in g.edges:
        assert len(key) == 2 and key <= g.vertices.keys()
    # Order inside a batch does not matter (a batch is a set).
    g2 = old.copy()
    g2.apply(list(reversed(batch)))
    assert g2 == g
    # Vertices: exactly old + added - deleted, and surviving labels unchanged.
    added = {r[1] for r in batch if r[0] == ADD_VERTEX}
    deleted = {r[1] for r in batch if r[0] == DELETE_VERTEX}
    assert g.vertices.keys() == (old.vertices.keys() | added) - deleted
    for v, lab in old.vertices.items():
        if v in g.vertices:
            assert g.vertices[v] == lab
    # Edges among surviving old vertices change only where the batch names them.
    touched = {frozenset(r[1:3]) for r in batch if r[0] in (INSERT_EDGE, DELETE_EDGE)}
    for key, lab in old.edges.items():
        if key not in touched and not key & deleted:
            assert g.edges.get(key) == lab
    for key in g.edges:
        assert key in old.edges or key in touched


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 50), record=_record)
def test_single_record_batches_follow_simple_rules(seed, record):
    # With one record per batch the rules collapse to plain sequential updates.
    g = _start_graph(seed)
    old = g.copy()
    kind, a, b, lab = record
    try:
        g.apply([record])
    except Rejected:
        if kind == ADD_VERTEX:
            assert a in old.vertices and old.vertices[a] != lab
        elif kind in (INSERT_EDGE, DELETE_EDGE):
            assert a == b or a not in old.vertices or b not in old.vertices
        else:
            pytest.fail("a lone vertex delete never rejects")
        return
    expected = old.copy()
    if kind == ADD_VERTEX:
        expected.vertices.setdefault(a, lab)
    elif kind == DELETE_VERTEX:
        expected.vertices.pop(a, None)
        expected.edges = {k: v for k, v in expected.edges.items() if a not in k}
    elif kind == INSERT_EDGE:
        expected.edges.setdefault(frozenset((a, b)), 0 if lab == NO_LABEL else lab)
    else:
        key = frozenset((a, b))
        if key in expected.edges and lab in (NO_LABEL, expected.edges[key]):
            del expected.edges[key]
    assert g == expected
