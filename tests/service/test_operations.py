"""Health, readiness, metrics, bearer-token auth and request limits."""
from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from service.settings import Settings
from tests.service.conftest import running

KEY = "s3cret-key-0123456789"


def test_auth_guards_everything_but_health(tmp_path):
    with running(tmp_path / "d", api_key=KEY) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        for method, path in (("get", "/v1/graph"), ("get", "/v1/queries"),
                             ("post", "/v1/batches"), ("get", "/metrics"),
                             ("get", "/v1/queries/1/results")):
            r = getattr(client, method)(path)
            assert r.status_code == 401, (path, r.status_code)
            assert r.headers["www-authenticate"] == "Bearer"
        wrong = {"Authorization": "Bearer nope"}
        assert client.get("/v1/graph", headers=wrong).status_code == 401
        good = {"Authorization": f"Bearer {KEY}"}
        assert client.get("/v1/graph", headers=good).status_code == 200
        r = client.post("/v1/batches", json={"insert_vertices": [[1, 0]]}, headers=good)
        assert r.status_code == 200
        assert client.get("/v1/graph", headers=good).json()["vertices"] == 1


def test_auth_off_by_default(client):
    assert client.get("/v1/graph").status_code == 200


def test_settings_refuse_weak_keys():
    with pytest.raises(ValidationError, match="at least 16"):
        Settings(api_key="short")


def test_limits(tmp_path):
    with running(tmp_path / "d", max_request_bytes=2048, max_batch_updates=3) as client:
        big = {"insert_vertices": [[i, 0] for i in range(400)]}
        r = client.post("/v1/batches", json=big)
        assert r.status_code == 413 and "max_request_bytes" in r.json()["detail"]
        r = client.post("/v1/batches", json={"insert_vertices": [[i, 0] for i in range(4)]})
        assert r.status_code == 422 and "max_batch_updates" in r.json()["detail"]
        assert client.get("/v1/graph").json()["batches"] == 0


def test_metrics_count_batches_and_matches(client):
    client.put("/v1/graph", json={"vertices": [[1, 0], [2, 0], [3, 0]], "edges": [[1, 2]]})
    client.post("/v1/queries", json={"pattern": {
        "vertices": [{"id": 0, "label": 0}, {"id": 1, "label": 0}],
        "edges": [{"source": 0, "target": 1}]}})
    client.post("/v1/batches", json={"insert_edges": [[2, 3]]})
    client.post("/v1/batches", json={"insert_edges": [[2, 99]]})
    text = client.get("/metrics").text
    assert "motifstream_batches_total 1.0" in text
    assert "motifstream_rejected_batches_total 1.0" in text
    assert 'motifstream_matches_total{sign="positive"} 2.0' in text
    assert "motifstream_graph_edges 2.0" in text
    assert "motifstream_batch_seconds_bucket" in text
    assert "motifstream_ready 1.0" in text


def test_openapi_refers_only_to_schemas_it_defines(client):
    spec = client.get("/openapi.json").json()
    defined = set(spec["components"]["schemas"])
    text = json.dumps(spec)
    refs = set(re.findall(r'"#/components/schemas/([^"]+)"', text))
    assert {"QueryCreate", "BatchCreate", "GraphLoad"} <= refs
    assert refs <= defined, refs - defined
    assert client.get("/docs").status_code == 200


def test_settings_refuse_an_unknown_device_graph():
    with pytest.raises(ValidationError, match="device_graph"):
        Settings(device_graph="csr")


def test_both_device_graphs_serve_the_same_results(tmp_path):
    # On the CPU executor the setting is accepted and changes nothing; on CUDA the two
    # layouts must agree.
    square = {"vertices": [{"id": i, "label": 0} for i in range(4)],
              "edges": [{"source": i, "target": (i + 1) % 4} for i in range(4)]}
    batches = [{"insert_vertices": [[i, 0] for i in range(8)],
                "insert_edges": [[i, j] for i in range(8) for j in range(i + 1, 8)
                                 if (i + j) % 3]},
               {"delete_edges": [[0, 1], [2, 4]], "insert_edges": [[0, 3]]}]
    seen = []
    for layout in ("lists", "pma"):
        with running(tmp_path / layout, device_graph=layout) as client:
            qid = client.post("/v1/queries", json={"pattern": square}).json()["id"]
            results = [client.post("/v1/batches", json=b).json()["results"][str(qid)]
                       for b in batches]
            seen.append(results)
    assert seen[0] == seen[1]
    assert seen[0][0]["positive"] > 0 and seen[0][1]["negative"] > 0

