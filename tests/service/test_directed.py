"""A directed graph served (issue 22): its kind fixed at creation (`directed` setting,
PUT /v1/graph?directed=), shown by GET /v1/graph, kept across restarts; patterns read as
arcs; every batch's deltas equal the directed oracle's."""
from __future__ import annotations

import random

from fastapi.testclient import TestClient

from service.main import create_app
from service.settings import Settings
from tests import reference as ref
from tests.gpu.test_reference_directed import random_digraph
from tests.reference import RefGraph, RefQuery
from tests.service.conftest import BACKEND, running, settled

CYCLE = {"vertices": [{"id": i, "label": 0} for i in range(3)],
         "edges": [{"source": 0, "target": 1}, {"source": 1, "target": 2},
                   {"source": 2, "target": 0}]}
PAIR = {"vertices": [{"id": i, "label": 0} for i in range(2)],
        "edges": [{"source": 0, "target": 1}, {"source": 1, "target": 0}]}
ORACLE = {"cycle": RefQuery.build([0, 0, 0], [(0, 1, 0), (1, 2, 0), (2, 0, 0)], directed=True),
          "pair": RefQuery.build([0, 0], [(0, 1, 0), (1, 0, 0)], directed=True)}


def _graph_body(g: RefGraph) -> dict:
    return {"vertices": [[v, lab] for v, lab in sorted(g.vertices.items())],
            "edges": [[u, v, lab] for u, v, lab in g.edge_list()]}


def _register(client) -> dict[str, int]:
    ids = {}
    for name, pattern in (("cycle", CYCLE), ("pair", PAIR)):
        r = client.post("/v1/queries", json={"name": name, "pattern": pattern})
        assert r.status_code == 201, r.text
        ids[name] = r.json()["id"]
    return ids


def _batches(rng: random.Random, g: RefGraph, count: int) -> list[list[tuple]]:
    """Batches of arc inserts and deletes (reverse arcs among them), applied to `g`."""
    out = []
    for _ in range(count):
        verts = sorted(g.vertices)
        absent = [(u, v) for u in verts for v in verts if u != v and (u, v) not in g.edges]
        records = [(ref.INSERT_EDGE, u, v, 0) for u, v in rng.sample(absent, 3)]
        records += [(ref.DELETE_EDGE, u, v, ref.NO_LABEL)
                    for u, v in rng.sample(sorted(g.edges), 2)]
        out.append(records)
        g.apply(records)
    return out


def _body(records) -> dict:
    return {"insert_edges": [[a, b, lab] for kind, a, b, lab in records
                             if kind == ref.INSERT_EDGE],
            "delete_edges": [[a, b] for kind, a, b, _ in records if kind == ref.DELETE_EDGE]}


def _apply_and_check(client, ids: dict[str, int], oracle: RefGraph, records) -> None:
    """POST one batch; its results must be the oracle's deltas (which it then applies)."""
    before = {name: oracle.embeddings(q) for name, q in ORACLE.items()}
    oracle.apply(records)
    results = client.post("/v1/batches", json=_body(records)).json()["results"]
    for name, q in ORACLE.items():
        after = oracle.embeddings(q)
        assert results[str(ids[name])] == {"positive": len(after - before[name]),
                                           "negative": len(before[name] - after)}


def test_a_directed_graph_served_and_restarted(tmp_path):
    rng = random.Random(3)
    start = random_digraph(rng, 9, 0.35, 1, 1, 0.5)
    oracle = start.copy()
    batches = _batches(rng, oracle.copy(), 8)
    data = tmp_path / "data"
    with running(data) as client:
        assert client.get("/v1/graph").json()["directed"] is False
        r = client.put("/v1/graph", params={"directed": "true"}, json=_graph_body(start))
        assert r.status_code == 200, r.text
        assert r.json()["directed"] is True and r.json()["edges"] == len(start.edges)
        ids = _register(client)
        for records in batches[:4]:
            _apply_and_check(client, ids, oracle, records)
    # The kind and the queries' arcs survive a restart.
    with running(data) as client:
        assert client.get("/v1/graph").json()["directed"] is True
        for records in batches[4:]:
            _apply_and_check(client, ids, oracle, records)
        exported = client.get("/v1/graph/export").text
        arcs = sorted(tuple(int(x) for x in line.split()[1:3])
                      for line in exported.splitlines() if line.startswith("e "))
        assert arcs == sorted(oracle.edges)


def test_the_directed_setting_makes_a_new_store_directed_and_guards_an_old_one(tmp_path):
    data = tmp_path / "data"
    with running(data, directed=True) as client:
        assert client.get("/v1/graph").json()["directed"] is True
        # Both arcs of a pair in a graph file: fine on a directed graph.
        r = client.put("/v1/graph", content="v 1 0\nv 2 0\ne 1 2\ne 2 1\n",
                       headers={"Content-Type": "text/plain"})
        assert r.status_code == 200, r.text
        _register(client)
    settings = Settings(data_dir=data, synchronous="normal", backend=BACKEND,
                        directed=False)
    with TestClient(create_app(settings)) as client:
        body = settled(client)
        assert body["status"] == "failed" and "holds a directed graph" in body["detail"]
        r = client.get("/v1/graph")
        assert r.status_code == 503 and "holds a directed graph" in r.text
    with running(data) as client:
        assert client.get("/v1/graph").json()["directed"] is True


def test_loading_a_graph_of_the_other_kind_with_queries_registered_is_409(tmp_path):
    with running(tmp_path / "data") as client:
        r = client.post("/v1/queries", json={"name": "pair", "pattern": PAIR})
        # On an undirected graph the pair pattern has one edge twice: refused, naming it.
        assert r.status_code == 422 and "appears twice" in r.text
        r = client.post("/v1/queries", json={"name": "cycle", "pattern": CYCLE})
        assert r.status_code == 201
        r = client.put("/v1/graph", params={"directed": "true"},
                       json={"vertices": [[1, 0], [2, 0]], "edges": [[1, 2], [2, 1]]})
        assert r.status_code == 409 and "directed" in r.text
        assert client.get("/v1/graph").json()["directed"] is False
        # The undirected reading of the same body: one edge twice, refused by the parser.
        r = client.put("/v1/graph", json={"vertices": [[1, 0], [2, 0]],
                                          "edges": [[1, 2], [2, 1]]})
        assert r.status_code == 422 and "edges[1]" in r.text
