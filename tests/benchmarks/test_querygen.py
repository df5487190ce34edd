"""Tests for the random-walk query generator: shape rules, provenance, determinism, dedup."""

import networkx as nx
import numpy as np
import pytest

from benchmarks.querygen import (
    KINDS,
    GeneratedQuery,
    QueryGenerationError,
    QueryGenerator,
    generate_queries,
    main,
)
from gpu.io.graphs import read_query
from gpu.io.records import LabeledGraph


def _labeled(g: nx.Graph, num_labels: int, seed: int, id_offset: int = 100) -> LabeledGraph:
    # Non-contiguous ids (100, 103, 106, ...) so the generator's id <-> index mapping is exercised.
    rng = np.random.default_rng(seed)
    nodes = sorted(g.nodes)
    ids = {v: id_offset + 3 * i for i, v in enumerate(nodes)}
    edges = np.array([(ids[u], ids[v]) for u, v in g.edges], dtype=np.int64)
    return LabeledGraph(
        vertex_ids=np.array([ids[v] for v in nodes], dtype=np.int64),
        vertex_labels=rng.integers(0, num_labels, len(nodes)).astype(np.int32),
        edge_src=edges[:, 0],
        edge_dst=edges[:, 1],
        edge_labels=rng.integers(0, 2, len(edges)).astype(np.int32),
    )


@pytest.fixture(scope="module")
def data() -> LabeledGraph:
    # Rewired cliques: dense pockets for dense queries, sparse bridges for the rest.
    g = nx.relaxed_caveman_graph(12, 7, 0.25, seed=3)
    # Rewiring can make self-loops, which graph files reject.
    g.remove_edges_from(list(nx.selfloop_edges(g)))
    return _labeled(g, num_labels=3, seed=4)


@pytest.fixture(scope="module")
def generator(data) -> QueryGenerator:
    return QueryGenerator(data)


def _data_edges(data: LabeledGraph) -> dict[frozenset, int]:
    return {
        frozenset((s, d)): lab
        for s, d, lab in zip(
            data.edge_src.tolist(), data.edge_dst.tolist(), data.edge_labels.tolist()
        )
    }


def _nx(q: GeneratedQuery) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(q.graph.vertex_ids.tolist())
    g.add_edges_from(zip(q.graph.edge_src.tolist(), q.graph.edge_dst.tolist()))
    return g


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("size", [4, 6, 9])
def test_queries_have_the_kind_shape_and_are_data_subgraphs(data, generator, kind, size):
    queries = generator.generate(kind, size, count=5, seed=7)
    edges = _data_edges(data)
    label_of = dict(zip(data.vertex_ids.tolist(), data.vertex_labels.tolist()))
    assert len(queries) == 5
    for q in queries:
        k, m = q.num_vertices, q.num_edges
        assert q.kind == kind
        assert k == size and np.array_equal(q.graph.vertex_ids, np.arange(size))
        assert nx.is_connected(_nx(q))
        if kind == "dense":
            assert 2 * m >= 3 * k
        elif kind == "sparse":
            assert k <= m and 2 * m < 3 * k
        else:
            assert m == k - 1
        # Distinct data vertices, labels carried over, every query edge a data edge.
        assert len(set(q.data_vertices.tolist())) == k
        assert q.graph.vertex_labels.tolist() == [label_of[v] for v in q.data_vertices.tolist()]
        for s, d, lab in zip(q.graph.edge_src, q.graph.edge_dst, q.graph.edge_labels):
            assert edges[frozenset((q.data_vertices[s], q.data_vertices[d]))] == lab


def test_dense_queries_are_induced_subgraphs(data, generator):
    edges = _data_edges(data)
    for q in generator.generate("dense", 6, count=5, seed=2):
        dv = q.data_vertices.tolist()
        induced = sum(frozenset((dv[i], dv[j])) in edges for i in range(6) for j in range(i + 1, 6))
        assert induced == q.num_edges


def test_same_seed_same_queries_and_different_seed_differs(data):
    def snapshot(seed):
        return [
            (q.data_vertices.tolist(), q.graph.edge_src.tolist(), q.graph.edge_dst.tolist(),
             q.graph.edge_labels.tolist(), q.graph.vertex_labels.tolist())
            for q in generate_queries(data, "sparse", 6, count=6, seed=seed)
        ]

    assert snapshot(11) == snapshot(11)
    assert snapshot(11) != snapshot(12)


def test_prefix_stable_in_count(generator):
    few = generator.generate("tree", 6, count=3, seed=5)
    more = generator.generate("tree", 6, count=6, seed=5)
    assert [q.data_vertices.tolist() for q in few] == [q.data_vertices.tolist() for q in more[:3]]


@pytest.mark.parametrize("kind", KINDS)
def test_no_two_queries_in_a_set_are_isomorphic(generator, kind):
    queries = generator.generate(kind, 5, count=8, seed=1)
    graphs = []
    for q in queries:
        g = _nx(q)
        nx.set_node_attributes(g, dict(enumerate(q.graph.vertex_labels.tolist())), "label")
        for s, d, lab in zip(q.graph.edge_src.tolist(), q.graph.edge_dst.tolist(),
                             q.graph.edge_labels.tolist()):
            g.edges[s, d]["label"] = lab
        graphs.append(g)
    for i in range(len(graphs)):
        for j in range(i + 1, len(graphs)):
            assert not nx.is_isomorphic(
                graphs[i], graphs[j],
                node_match=lambda a, b: a["label"] == b["label"],
                edge_match=lambda a, b: a["label"] == b["label"],
            )


def test_gives_up_when_too_few_distinct_queries_exist():
    # One label, one edge label: a triangle has a single 3-vertex tree up to isomorphism.
    triangle = LabeledGraph(
        vertex_ids=np.arange(3), vertex_labels=np.zeros(3),
        edge_src=np.array([0, 1, 2]), edge_dst=np.array([1, 2, 0]), edge_labels=np.zeros(3),
    )
    assert len(generate_queries(triangle, "tree", 3, count=1, seed=0)) == 1
    with pytest.raises(QueryGenerationError, match="only 1 of 2"):
        QueryGenerator(triangle).generate("tree", 3, count=2, seed=0, max_attempts=200)


def test_walks_restart_outside_components_smaller_than_the_query():
    # A lone edge plus a 6-cycle: walks from the edge cannot reach 5 vertices and must restart.
    g = nx.cycle_graph(6)
    g.add_edge(10, 11)
    queries = generate_queries(_labeled(g, 1, 0), "tree", 5, count=1, seed=0)
    assert queries[0].num_vertices == 5


@pytest.mark.parametrize(
    ("kind", "size"), [("dense", 3), ("sparse", 2), ("tree", 1), ("tree", 33), ("star", 6)]
)
def test_rejects_impossible_requests(generator, kind, size):
    with pytest.raises(ValueError):
        generator.generate(kind, size, count=1)


def test_cli_writes_readable_query_files(tmp_path, capsys, data):
    from gpu.io.graphs import write_graph

    graph_path = tmp_path / "data.graph"
    write_graph(data, graph_path)
    out = tmp_path / "queries"
    assert main(["--graph", str(graph_path), "--kind", "dense", "--size", "5", "--count", "3",
                 "--seed", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / f"dense_{i}.graph") for i in range(3)]
    expected = generate_queries(data, "dense", 5, count=3, seed=1)
    for path, q in zip(printed, expected):
        back = read_query(path)
        assert back.vertex_labels.tolist() == q.graph.vertex_labels.tolist()
        assert back.edge_src.tolist() == q.graph.edge_src.tolist()
        assert back.edge_dst.tolist() == q.graph.edge_dst.tolist()
        assert back.edge_labels.tolist() == q.graph.edge_labels.tolist()
    assert (out / "dense.json").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_directed_queries_are_oriented_as_the_data_arcs(data, kind):
    # The same edges with random directions: a query's walk ignores them, its arcs keep them.
    flip = np.random.default_rng(9).random(data.edge_src.shape[0]) < 0.5
    arcs = LabeledGraph(data.vertex_ids, data.vertex_labels,
                        np.where(flip, data.edge_dst, data.edge_src),
                        np.where(flip, data.edge_src, data.edge_dst), data.edge_labels)
    arc_labels = dict(zip(zip(arcs.edge_src.tolist(), arcs.edge_dst.tolist()),
                          arcs.edge_labels.tolist()))
    queries = QueryGenerator(arcs, directed=True).generate(kind, 6, count=6, seed=3)
    # The walks are the undirected generator's: its first query (before the two generators'
    # duplicate rules can differ) has the same vertices and, direction aside, the same edges.
    first = QueryGenerator(data).generate(kind, 6, count=1, seed=3)[0]
    assert queries[0].data_vertices.tolist() == first.data_vertices.tolist()
    assert sorted(zip(np.minimum(queries[0].graph.edge_src, queries[0].graph.edge_dst).tolist(),
                      np.maximum(queries[0].graph.edge_src, queries[0].graph.edge_dst).tolist())) \
        == sorted(zip(first.graph.edge_src.tolist(), first.graph.edge_dst.tolist()))
    reversed_somewhere = False
    for q in queries:
        dv = q.data_vertices.tolist()
        for s, d, lab in zip(q.graph.edge_src.tolist(), q.graph.edge_dst.tolist(),
                             q.graph.edge_labels.tolist()):
            assert arc_labels[(dv[s], dv[d])] == lab
            reversed_somewhere |= s > d
    assert reversed_somewhere   # not merely the undirected (min, max) orientation
    # No two are isomorphic as labelled directed graphs.
    graphs = []
    for q in queries:
        g = nx.DiGraph()
        g.add_nodes_from((v, {"label": lab}) for v, lab in
                         enumerate(q.graph.vertex_labels.tolist()))
        g.add_edges_from((s, d, {"label": lab}) for s, d, lab in
                         zip(q.graph.edge_src.tolist(), q.graph.edge_dst.tolist(),
                             q.graph.edge_labels.tolist()))
        graphs.append(g)
    match = nx.algorithms.isomorphism.categorical_node_match("label", None)
    edge_match = nx.algorithms.isomorphism.categorical_edge_match("label", None)
    for a in range(len(graphs)):
        for b in range(a):
            assert not nx.is_isomorphic(graphs[a], graphs[b], node_match=match,
                                        edge_match=edge_match)
