"""/v1/graph data in and out: edge lists and labels files, label names in text bodies,
and the graph-file export."""
from __future__ import annotations

import gzip

import numpy as np

from gpu.io.edge_lists import random_labels
from gpu.io.graphs import parse_graph_text
from gpu.io.records import LabeledGraph
from service.labels import GRAPH_LABEL_TOKENS, parse_named
from tests.service.conftest import graph_state, running

TEXT = {"content-type": "text/plain"}


def put_text(client, text: str, **params):
    return client.put("/v1/graph", content=text, headers=TEXT, params=params)


def exported(client):
    r = client.get("/v1/graph/export")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return r


def edge_set(graph) -> set:
    return {(min(u, v), max(u, v), lab) for u, v, lab in zip(
        graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_labels.tolist())}


def parse_export(text: str, dictionary: dict[str, int]):
    """An export read back, its label names replaced by their ids in `dictionary`."""
    graph, names = parse_named(parse_graph_text, text.encode(), GRAPH_LABEL_TOKENS, "export")

    def ids(labels):
        return [dictionary[n] if isinstance(n := names.name_of(lab), str) else n
                for lab in labels.tolist()]
    return LabeledGraph(graph.vertex_ids, ids(graph.vertex_labels), graph.edge_src,
                        graph.edge_dst, ids(graph.edge_labels))


# ---- export -----------------------------------------------------------------------


def test_export_after_batches_reloads_into_the_same_state(client, tmp_path):
    assert client.put("/v1/graph", json={
        "vertices": [[1, "person"], [2, "person"], [3, 7], [4, "two words"]],
        "edges": [[1, 2, "knows"], [2, 3], [3, 4, 5]]}).status_code == 200
    assert client.post("/v1/batches", json={
        "insert_vertices": [[5, "city"]], "insert_edges": [[1, 5, "lives_in"]],
        "delete_edges": [[2, 3]]}).status_code == 200
    assert client.post("/v1/batches", content="v 6 person\ne 6 5 lives_in\n-v 4\n",
                       headers=TEXT).status_code == 200
    r = exported(client)
    assert r.headers["x-motifstream-batch"] == "2"
    assert r.text.startswith("# motifstream graph export: batch 2, 5 vertices, 3 edges\n")
    names = client.get("/v1/graph").json()["labels"]
    graph = parse_export(r.text, names)
    lines = set(r.text.splitlines())
    assert {"v 1 person", "v 3 7", "v 5 city", "v 6 person", "e 1 5 lives_in"} <= lines
    assert "v 4" not in r.text and "e 2 3" not in r.text   # deleted
    assert sorted(graph.vertex_ids.tolist()) == [1, 2, 3, 5, 6]
    assert edge_set(graph) == {(1, 2, names["knows"]), (1, 5, names["lives_in"]),
                               (5, 6, names["lives_in"])}

    with running(tmp_path / "fresh") as fresh:
        assert put_text(fresh, r.text).status_code == 200
        assert graph_state(fresh)["vertices"] == 5 and graph_state(fresh)["edges"] == 3
        again = exported(fresh)
        assert again.headers["x-motifstream-batch"] == "0"
        assert again.text.splitlines()[1:] == r.text.splitlines()[1:]


def test_export_writes_unsafe_names_as_ids(client):
    assert client.put("/v1/graph", json={"vertices": [[1, "two words"], [2, "7"]]}
                      ).status_code == 200
    labels = client.get("/v1/graph").json()["labels"]
    lines = exported(client).text.splitlines()
    assert lines[2:] == [f"v 1 {labels['two words']}", f"v 2 {labels['7']}"]


def test_export_of_an_empty_graph(client):
    r = exported(client)
    assert r.headers["x-motifstream-batch"] == "0"
    assert r.text.splitlines()[1] == "t 0 0"


def test_export_across_chunk_boundaries(client, monkeypatch):
    from service.routes import graph as graph_route
    monkeypatch.setattr(graph_route, "EXPORT_CHUNK_ROWS", 3)
    text = "".join(f"v {i} {i % 4}\n" for i in range(10)) + \
        "".join(f"e {i} {i + 1} 1\n" for i in range(9))
    assert put_text(client, text).status_code == 200
    with client.stream("GET", "/v1/graph/export") as r:
        chunks = [c for c in r.iter_text() if c]
    exported_graph = parse_graph_text("".join(chunks))
    assert edge_set(exported_graph) == {(i, i + 1, 1) for i in range(9)}
    assert exported_graph.vertex_labels.tolist() == [i % 4 for i in range(10)]


# ---- edge lists -------------------------------------------------------------------


EDGES = "# a SNAP edge list\n1\t2\n2\t3\n3\t1\n3\t3\n"


def test_edge_list_with_num_labels_as_the_cli(client):
    r = put_text(client, EDGES, num_labels=3, label_seed=5)
    assert r.status_code == 200, r.text
    assert (r.json()["vertices"], r.json()["edges"]) == (3, 3)   # the self-loop dropped
    graph = parse_graph_text(exported(client).text)
    expected = random_labels(np.array([1, 2, 3]), 3, 5)
    assert graph.vertex_labels.tolist() == expected.tolist()


def test_csv_edge_list_gzipped(client):
    r = client.put("/v1/graph", content=gzip.compress(b"src,dst\n10,11\n11,12\n"),
                   headers={"content-type": "text/csv"}, params={"num_labels": 1})
    assert r.status_code == 200, r.text
    assert (r.json()["vertices"], r.json()["edges"]) == (3, 2)


def test_edge_list_with_a_labels_file(client):
    files = {"graph": ("edges.txt", EDGES), "labels": ("labels.txt", "1 4\n2 5\n3 4\n9 6\n")}
    r = client.put("/v1/graph", files=files)
    assert r.status_code == 200, r.text
    assert (r.json()["vertices"], r.json()["edges"]) == (4, 3)   # 9: labelled, no edge
    lines = exported(client).text.splitlines()
    assert lines[2:6] == ["v 1 4", "v 2 5", "v 3 4", "v 9 6"]


def test_a_graph_file_as_a_multipart_part(client):
    r = client.put("/v1/graph", files={"graph": ("g.graph", "v 1 0\nv 2 0\ne 1 2\n")})
    assert r.status_code == 200, r.text


def test_edge_list_errors_name_the_field(client):
    cases = [
        (dict(content=EDGES, headers=TEXT), "num_labels"),
        (dict(content="v 1 0\n", headers=TEXT, params={"num_labels": 2}), "edge lists only"),
        (dict(json={"vertices": [[1, 0]]}, params={"label_seed": 1}), "edge lists only"),
        (dict(content=EDGES, headers=TEXT, params={"num_labels": 0}), "num_labels"),
        (dict(content=EDGES, headers=TEXT, params={"num_labels": 2, "label_seed": -1}),
         "label_seed"),
        (dict(content=EDGES, headers=TEXT, params={"num_labels": 2**30 + 1}), "num_labels"),
        (dict(files={"graph": ("e", EDGES), "labels": ("l", "1 0\n2 0\n")}), "labels"),
        (dict(files={"graph": ("e", EDGES), "labels": ("l", "1 0\n1 1\n2 0\n3 0\n")}),
         "labels:2"),
        (dict(files={"graph": ("e", EDGES), "labels": ("l", "1 0\n2 0\n3 1073741824\n")}),
         "out of range"),
        (dict(files={"graph": ("e", EDGES), "labels": ("l", "1 0\n")},
              params={"num_labels": 2}), "not both"),
        (dict(files={"labels": ("l", "1 0\n")}), "`graph` part"),
        (dict(files={"graph": ("e", EDGES), "extra": ("x", "")}), "'extra'"),
        (dict(content="1 2\n3 x\n", headers=TEXT, params={"num_labels": 2}), "body:2"),
        (dict(content=EDGES, headers={"content-type": "application/xml"}), "text/csv"),
    ]
    for request, named in cases:
        r = client.put("/v1/graph", **request)
        assert r.status_code in (415, 422), (request, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert named in r.json()["detail"], (request, r.json()["detail"])
    assert client.get("/v1/graph").json()["vertices"] == 0


def test_unparsable_edge_list_is_refused_naming_line_and_value(client):
    # Each had loaded as an empty graph (a 422 only for having no vertices) or, with a
    # good second line, as a graph without its first edge.
    for text, named in (("0;1\n1;2\n", "body:1: line '0;1' is missing the edge target"),
                        ("a,b\n", "body:1: no edges: only the header line 'a,b'"),
                        ("1,x\n2,3\n", "body:1: edge target 'x' is not an integer")):
        r = client.put("/v1/graph", content=text, headers={"content-type": "text/csv"},
                       params={"num_labels": 2})
        assert r.status_code == 422, r.text
        assert named in r.json()["detail"], r.json()["detail"]
    assert client.get("/v1/graph").json()["vertices"] == 0


# ---- label names in text ----------------------------------------------------------


def test_text_names_share_the_json_dictionary(client):
    r = put_text(client, "v 1 person\nv 2 person  # a comment\nv 3 3\ne 1 2 knows\ne 2 3\n")
    assert r.status_code == 200, r.text
    labels = r.json()["labels"]
    assert set(labels) == {"person", "knows"}
    r = client.post("/v1/queries", json={"pattern": "v 0 person\nv 1 person\ne 0 1 knows\n",
                                         "name": "pair"})
    assert r.status_code == 201, r.text
    pattern = r.json()["pattern"]
    assert [v["label"] for v in pattern["vertices"]] == ["person", "person"]
    assert pattern["edges"][0]["label"] == "knows"
    r = client.post("/v1/batches", json={"insert_vertices": [[4, "person"]],
                                         "insert_edges": [[4, 1, "knows"]]})
    assert r.status_code == 200, r.text
    r = client.post("/v1/batches", content="v 5 person\ne 5 2 knows\n-e 4 1 knows\n",
                    headers=TEXT)
    assert r.status_code == 200, r.text
    # One person-knows-person edge in, one out: the names reached the same ids.
    (delta,) = r.json()["results"].values()
    assert delta["positive"] == delta["negative"] > 0, delta
    assert client.get("/v1/graph").json()["labels"] == labels   # no name added twice


def test_text_name_errors_change_nothing(client):
    assert put_text(client, "v 1 a\nv 2 b\ne 1 2\n").status_code == 200
    before = graph_state(client)
    cases = [("v 3 c\nv 4 1073741824\n", "body:2"),       # an integer in the names' range
             ("v 3 c\ne 3 9 d\n", None),                    # the engine refuses vertex 9
             ("v 3 " + "x" * 257 + "\n", "body:1")]
    for text, named in cases:
        r = client.post("/v1/batches", content=text, headers=TEXT)
        assert r.status_code == 422, (text, r.text)
        if named:
            assert named in r.json()["detail"], r.json()["detail"]
    r = client.post("/v1/queries", json={"pattern": "v 0 c\nv 1 1073741824\ne 0 1\n"})
    assert r.status_code == 422 and "pattern:2" in r.json()["detail"], r.text
    assert graph_state(client) == before
