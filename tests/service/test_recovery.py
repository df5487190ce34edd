"""Restarts: the store rebuilds the same graph, queries and stats; a failed commit applies
nothing."""
from __future__ import annotations

import random

from tests.graphs import random_batch, random_data
from tests.service.conftest import batch_json, graph_json, pattern_json, running
from tests.service.test_batches import PATTERNS


def _stream(seed: int, batches: int):
    rng = random.Random(seed)
    data = random_data(rng, 14, 2, 2, 0.3)
    start = data.labeled()
    next_id = [100]
    return start, [batch_json(random_batch(rng, data, 2, 2, next_id)) for _ in range(batches)]


def _register(client) -> list[int]:
    return [client.post("/v1/queries", json={"pattern": pattern_json(p), "name": n}).json()["id"]
            for n, p in PATTERNS.items()]


def test_restart_resumes_exactly_where_it_stopped(tmp_path):
    start, batches = _stream(seed=11, batches=16)
    # Reference: one uninterrupted run.
    with running(tmp_path / "ref") as client:
        client.put("/v1/graph", json=graph_json(start))
        ids = _register(client)
        reference = [client.post("/v1/batches", json=b).json()["results"] for b in batches]
        ref_graph = client.get("/v1/graph").json()
        ref_queries = client.get("/v1/queries").json()
    # The same stream across three restarts, with snapshots every 5 batches.
    data = tmp_path / "restarted"
    got = []
    for part in range(3):
        with running(data, snapshot_every=5) as client:
            if part == 0:
                client.put("/v1/graph", json=graph_json(start))
                assert _register(client) == ids
            for b in batches[part * 6:(part + 1) * 6]:
                got.append(client.post("/v1/batches", json=b).json()["results"])
    assert got == reference
    with running(data, snapshot_every=5) as client:
        assert client.get("/v1/graph").json() == ref_graph | {
            "store_bytes": client.get("/v1/graph").json()["store_bytes"]}
        queries = client.get("/v1/queries").json()
        for q, ref in zip(queries, ref_queries):
            for key in ("batches_seen", "total_positive", "total_negative", "last_batch"):
                assert q["stats"][key] == ref["stats"][key], key
        assert [q["id"] for q in queries] == ids


def test_failed_commit_is_503_and_applies_nothing(tmp_path):
    start, batches = _stream(seed=12, batches=4)
    with running(tmp_path / "ref") as client:
        client.put("/v1/graph", json=graph_json(start))
        _register(client)
        reference = [client.post("/v1/batches", json=b).json() for b in batches]
    with running(tmp_path / "data") as client:
        client.put("/v1/graph", json=graph_json(start))
        ids = _register(client)
        state = client.app.state.motifstream
        assert client.post("/v1/batches", json=batches[0]).status_code == 200
        graph = client.get("/v1/graph").json()
        real = state.store.append_batch

        def broken(record):
            raise OSError("disk full")
        state.store.append_batch = broken
        r = client.post("/v1/batches", json=batches[1])
        assert r.status_code == 503 and "not applied" in r.json()["detail"]
        state.store.append_batch = real
        assert client.get("/v1/graph").json() == graph
        for qid in ids:
            assert client.get(f"/v1/queries/{qid}").json()["stats"]["batches_seen"] == 1
        # The rebuilt engine goes on exactly as the uninterrupted one.
        for b, ref in zip(batches[1:], reference[1:]):
            r = client.post("/v1/batches", json=b).json()
            assert (r["batch"], r["results"]) == (ref["batch"], ref["results"])


def test_graph_flag_loads_an_empty_store_only(tmp_path):
    graph = tmp_path / "g.graph"
    graph.write_text("v 1 0\nv 2 0\nv 3 0\ne 1 2\ne 2 3\n")
    with running(tmp_path / "data", graph=graph) as client:
        assert client.get("/v1/graph").json()["edges"] == 2
        client.post("/v1/batches", json={"delete_edges": [[1, 2]]})
    with running(tmp_path / "data", graph=graph) as client:
        info = client.get("/v1/graph").json()
        assert (info["edges"], info["batches"]) == (1, 1)
