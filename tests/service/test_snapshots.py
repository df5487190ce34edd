"""/v1/snapshots: snapshots taken on demand, listed and downloaded."""
from __future__ import annotations

import io

import numpy as np

from storage.snapshots import read_snapshot
from tests.service.conftest import running


def download(client, batch: int):
    r = client.get(f"/v1/snapshots/{batch}")
    assert r.status_code == 200, r.text
    assert r.headers["x-motifstream-batch"] == str(batch)
    assert int(r.headers["content-length"]) == len(r.content)
    return np.load(io.BytesIO(r.content))


def test_take_list_and_download(client, tmp_path):
    assert client.put("/v1/graph", json={"vertices": [[1, 0], [2, "a"], [3, 1]],
                                         "edges": [[1, 2, 4]]}).status_code == 200
    assert [s["batch"] for s in client.get("/v1/snapshots").json()] == [0]   # the bulk load
    assert client.post("/v1/batches", json={"insert_edges": [[2, 3, 5]],
                                            "delete_vertices": [1]}).status_code == 200
    r = client.post("/v1/snapshots")
    assert r.status_code == 201, r.text
    assert r.headers["location"] == "/v1/snapshots/1"
    body = r.json()
    assert (body["batch"], body["vertices"], body["edges"]) == (1, 2, 1)
    assert body["bytes"] > 0 and body["download"] == "/v1/snapshots/1"
    # Nothing applied since: the same snapshot, not a second file.
    assert client.post("/v1/snapshots").json() == body
    assert [s["batch"] for s in client.get("/v1/snapshots").json()] == [1, 0]

    data = download(client, 1)
    a = client.get("/v1/graph").json()["labels"]["a"]
    assert data["vertex_ids"].tolist() == [2, 3]
    assert data["vertex_labels"].tolist() == [a, 1]
    assert (data["edge_src"].tolist(), data["edge_dst"].tolist(),
            data["edge_labels"].tolist()) in (([2], [3], [5]), ([3], [2], [5]))
    # The file is the store's own, digest and all.
    path = tmp_path / "snapshot.npz"
    path.write_bytes(client.get("/v1/snapshots/1").content)
    assert read_snapshot(path).num_edges == 1


def test_snapshot_survives_a_restart_and_older_ones_go(tmp_path):
    with running(tmp_path / "data", snapshot_every=0) as client:
        assert client.put("/v1/graph", json={"vertices": [[1, 0], [2, 0]]}).status_code == 200
        for seq in (1, 2):
            assert client.post("/v1/batches", json={"insert_vertices": [[10 + seq, 0]]}
                               ).status_code == 200
            assert client.post("/v1/snapshots").status_code == 201
    with running(tmp_path / "data", snapshot_every=0) as client:
        assert [s["batch"] for s in client.get("/v1/snapshots").json()] == [2, 1]
        assert download(client, 2)["vertex_ids"].tolist() == [1, 2, 11, 12]
        r = client.get("/v1/snapshots/0")   # dropped: only the newest two are kept
        assert r.status_code == 404 and "batch 0" in r.json()["detail"]


def test_snapshot_errors(client):
    r = client.post("/v1/snapshots")   # it would stand for a bulk load, and refuse one
    assert r.status_code == 409 and "nothing to snapshot" in r.json()["detail"]
    assert client.get("/v1/snapshots").json() == []
    assert client.put("/v1/graph", json={"vertices": [[1, 0]]}).status_code == 200
    assert client.get("/v1/snapshots/7").status_code == 404
    r = client.get("/v1/snapshots/-1")
    assert r.status_code == 422 and "batch" in r.json()["detail"]
    r = client.get("/v1/snapshots", params={"limit": 1})
    assert r.status_code == 422 and "limit" in r.json()["detail"]
