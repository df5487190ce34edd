"""/v1/graph: inspection and the one-time bulk load."""
from __future__ import annotations

from tests.service.conftest import BACKEND


def test_bulk_load_once_then_conflict(client):
    empty = client.get("/v1/graph").json()
    assert (empty["vertices"], empty["edges"], empty["batches"]) == (0, 0, 0)
    assert empty["backend"] == BACKEND
    assert (empty["device_memory_bytes"] is None) == (BACKEND == "cpu")
    r = client.put("/v1/graph", content="v 1 0\nv 2 1\nv 3 1\ne 1 2\ne 2 3 4\n",
                   headers={"content-type": "text/plain"})
    assert r.status_code == 200, r.text
    assert (r.json()["vertices"], r.json()["edges"]) == (3, 2)
    assert client.put("/v1/graph", json={"vertices": [[9, 0]]}).status_code == 409


def test_bulk_load_errors_name_the_item(client):
    r = client.put("/v1/graph", json={"vertices": [[1, 0], [2, 0]], "edges": [[1, 2], [1, 7]]})
    assert r.status_code == 422 and "edges[1]" in r.json()["detail"]
    r = client.put("/v1/graph", json={"vertices": [[1, 0], [1, 1]]})
    assert r.status_code == 422 and "vertices[1]" in r.json()["detail"]
    r = client.put("/v1/graph", content="v 1 0\ne 1 1\n", headers={"content-type": "text/plain"})
    assert r.status_code == 422 and "body:2" in r.json()["detail"]
    assert client.get("/v1/graph").json()["vertices"] == 0


def test_no_bulk_load_after_a_batch(client):
    assert client.post("/v1/batches", json={"insert_vertices": [[1, 0]]}).status_code == 200
    assert client.put("/v1/graph", json={"vertices": [[2, 0]]}).status_code == 409
