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


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_operations_routes_refuse_unknown_query_parameters(client, path):
    assert client.get(path, params={"access_token": "x"}).status_code == 200
    r = client.get(path, params={"verbose": "1"})
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    assert r.json()["errors"][0]["loc"] == ["query", "verbose"]
    assert r.json()["detail"].startswith("query.verbose: unknown query parameter")


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



# ---- request ids -------------------------------------------------------------------------


def test_request_id_is_echoed_generated_and_in_error_bodies(client):
    given = {"X-Request-ID": "trace-4711.a"}
    # The batch fast path, a FastAPI route and an unknown path all carry it.
    for method, path, body in (("post", "/v1/batches", {"insert_vertices": [[1, 0]]}),
                               ("get", "/v1/graph", None), ("get", "/no/such/path", None)):
        r = client.request(method, path, json=body, headers=given)
        assert r.headers["x-request-id"] == "trace-4711.a", path
    made = client.get("/v1/graph").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", made)
    assert client.get("/v1/graph").headers["x-request-id"] != made
    # An id that could forge log lines is replaced, not echoed.
    r = client.get("/v1/graph", headers={"X-Request-ID": "a b\"c"})
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])
    errors = (client.post("/v1/batches", json={"insert_edges": [[1, 99]]}, headers=given),
              client.post("/v1/batches", content=b"nonsense", headers={
                  **given, "content-type": "text/plain"}),
              client.get("/v1/queries/7", headers=given),
              client.get("/v1/queries/x", headers=given))
    assert [r.status_code for r in errors] == [422, 422, 404, 422]
    for r in errors:
        assert r.json()["request_id"] == "trace-4711.a" == r.headers["x-request-id"]
        assert r.json()["detail"]


# ---- metrics -----------------------------------------------------------------------------


def _metric(text: str, line_start: str) -> float:
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(line_start + " ")]
    assert len(values) == 1, (line_start, values)
    return values[0]


def test_every_refused_batch_is_counted_once_and_changes_nothing(tmp_path):
    from tests.service.conftest import graph_state
    auth = {"Authorization": f"Bearer {KEY}"}
    with running(tmp_path / "d", api_key=KEY, max_request_bytes=2048,
                 max_batch_updates=3) as client:
        assert client.post("/v1/batches", json={"insert_vertices": [[1, 0], [2, 0]]},
                           headers=auth).status_code == 200
        client.headers.update(auth)
        before_state = graph_state(client)
        before = client.get("/metrics").text
        text = {"content-type": "text/plain"}
        refusals = [
            (client.post("/v1/batches", content=b"v 1 0\nzz 1 2", headers=text), 422),
            (client.post("/v1/batches", content=b'{"insert_edges": [[1,', headers={
                "content-type": "application/json"}), 422),                  # unreadable
            (client.post("/v1/batches", json={"insert_edges": "12"}), 422),      # schema
            (client.post("/v1/batches", json={"insert_edges": [[1, 2]], "extra": 1}), 422),
            (client.post("/v1/batches", json={"insert_vertices": [[i, 0] for i in range(4)]}),
             422),                                                            # max updates
            (client.post("/v1/batches", content=b"v 1 0\n" * 500, headers=text), 413),
            (client.post("/v1/batches", content=b"x", headers={"content-type": "image/png"}),
             415),
            (client.post("/v1/batches", content=b"not npy", headers={
                "content-type": "application/x-npy"}), 422),
            (client.post("/v1/batches", json={"insert_edges": [[1, 99]]}), 422),  # engine
            (client.post("/v1/batches", json={"insert_edges": [[1, 1]]}), 422),   # self-loop
            # An Idempotency-Key the fast path leaves to the FastAPI route.
            (client.post("/v1/batches", json={"insert_edges": [[1, 2]]},
                         headers={"Idempotency-Key": "k" * 201}), 422),
        ]
        assert [r.status_code for r, _ in refusals] == [status for _, status in refusals]
        # Refusals of the caller, not of a batch: not counted.
        assert client.post("/v1/batches", json={"insert_edges": [[1, 2]]},
                           headers={"Authorization": "Bearer wrong"}).status_code == 401
        after = client.get("/metrics").text
        assert graph_state(client) == before_state
    rejected = "motifstream_rejected_batches_total"
    assert _metric(after, rejected) - _metric(before, rejected) == len(refusals)
    for unchanged in ("motifstream_batches_total", "motifstream_updates_total",
                      'motifstream_edges_changed_total{op="insert"}',
                      "motifstream_last_batch", "motifstream_graph_vertices",
                      "motifstream_graph_edges"):
        assert _metric(after, unchanged) == _metric(before, unchanged), unchanged


def test_http_and_process_metrics_beside_the_engines(client):
    for _ in range(3):
        client.get("/v1/graph")
    client.get("/v1/queries/5")
    text = client.get("/metrics").text
    assert _metric(text, 'http_requests_total{handler="/v1/graph",method="GET",'
                         'status="2xx"}') == 3
    assert _metric(text, 'http_requests_total{handler="/v1/queries/{query_id}",'
                         'method="GET",status="4xx"}') == 1
    assert _metric(text, 'http_request_duration_seconds_count{handler="/v1/graph",'
                         'method="GET",status="2xx"}') == 3
    assert _metric(text, 'http_response_size_bytes_count{handler="/v1/graph"}') == 3
    assert _metric(text, "process_resident_memory_bytes") > 0
    assert "python_gc_objects_collected_total" in text
    assert "motifstream_batches_total" in text


@pytest.mark.parametrize("fast", [True, False])
def test_the_batch_route_has_the_same_http_metrics_as_every_route(client, fast):
    """POST /v1/batches is counted outside the instrumentator (service/metrics.py
    HttpMetrics): the same series, labels and sizes as the routes it counts."""
    if not fast:
        client.app.batch_fast_path = None
    client.put("/v1/graph", json={"vertices": [[1, 0], [2, 0], [3, 0]], "edges": []})
    accepted = [client.post("/v1/batches", json={"insert_edges": [[1, 2 + i]]})
                for i in range(2)]
    refused = client.post("/v1/batches", content=b"zz", headers={"content-type": "text/plain"})
    unnumbered = client.post("/v1/batches", content=b"{}", headers={
        "content-type": "application/json", "content-length": "x"})
    assert [r.status_code for r in (*accepted, refused)] == [200, 200, 422]
    text = client.get("/metrics").text
    series = '{handler="/v1/batches",method="POST",status="%s"}'
    assert _metric(text, "http_requests_total" + series % "2xx") == 2
    assert _metric(text, "http_requests_total" + series % "4xx") == 2
    assert _metric(text, "http_request_duration_seconds_count" + series % "2xx") == 2
    assert _metric(text, "http_request_duration_seconds_sum" + series % "2xx") > 0
    assert _metric(text, 'http_request_duration_seconds_bucket{handler="/v1/batches",le="+Inf",'
                         'method="POST",status="4xx"}') == 2
    # Sizes from Content-Length; a request whose header is not a number has no size.
    sent = sum(len(r.request.content) for r in (*accepted, refused))
    assert _metric(text, 'http_request_size_bytes_count{handler="/v1/batches"}') == 3
    assert _metric(text, 'http_request_size_bytes_sum{handler="/v1/batches"}') == sent
    answered = sum(int(r.headers["content-length"]) for r in (*accepted, refused, unnumbered))
    assert _metric(text, 'http_response_size_bytes_count{handler="/v1/batches"}') == 4
    assert _metric(text, 'http_response_size_bytes_sum{handler="/v1/batches"}') == answered
    # Every other route, through the instrumentator, has the same label names.
    labels = {tuple(sorted(re.findall(r'(\w+)="', line)))
              for line in text.splitlines() if line.startswith("http_requests_total{")}
    assert labels == {("handler", "method", "status")}
    assert _metric(text, 'http_requests_total{handler="/v1/graph",method="PUT",'
                         'status="2xx"}') == 1


def test_the_batch_route_skips_the_instrumentators_route_matching(client, monkeypatch):
    """The hot path's metrics cost no walk over the routes (HttpMetrics); others do."""
    from prometheus_fastapi_instrumentator import routing
    matched, original = [], routing.get_route_name

    def counted(request, **options):
        matched.append(request.url.path)
        return original(request, **options)
    monkeypatch.setattr(routing, "get_route_name", counted)
    client.put("/v1/graph", json={"vertices": [[1, 0], [2, 0]], "edges": []})
    assert client.post("/v1/batches", json={"insert_edges": [[1, 2]]}).status_code == 200
    assert client.post("/v1/batches", json={}).status_code == 422
    assert matched == ["/v1/graph"]
    text = client.get("/metrics").text
    assert _metric(text, 'http_requests_total{handler="/v1/batches",method="POST",'
                         'status="2xx"}') == 1


def test_other_methods_and_paths_beside_the_batch_route_keep_their_templates(client):
    assert client.get("/v1/batches").status_code == 405
    assert client.post("/v1/batches/x", json={}).status_code == 404
    text = client.get("/metrics").text
    assert _metric(text, 'http_requests_total{handler="/v1/batches",method="GET",'
                         'status="4xx"}') == 1
    assert _metric(text, 'http_requests_total{handler="none",method="POST",'
                         'status="4xx"}') == 1


# ---- CORS --------------------------------------------------------------------------------


def _preflight(client, origin: str):
    return client.options("/v1/batches", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})


def test_cors_is_off_by_default(client):
    r = client.get("/v1/graph", headers={"Origin": "https://app.example"})
    assert "access-control-allow-origin" not in r.headers
    assert "access-control-allow-origin" not in _preflight(client, "https://app.example").headers


def test_cors_allows_only_the_configured_origins(tmp_path):
    with running(tmp_path / "d", cors_origins="https://app.example") as client:
        r = _preflight(client, "https://app.example")
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://app.example"
        r = client.get("/v1/graph", headers={"Origin": "https://app.example"})
        assert r.headers["access-control-allow-origin"] == "https://app.example"
        assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
        assert _preflight(client, "https://evil.example").status_code == 400
        r = client.get("/v1/graph", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers


# ---- the start-up warning ----------------------------------------------------------------


def test_an_open_service_on_a_public_host_warns_at_start(tmp_path, capsys, caplog):
    with running(tmp_path / "d", host="0.0.0.0"):
        pass
    assert "no API key is set and the service listens on 0.0.0.0" in capsys.readouterr().err
    assert [r.levelname for r in caplog.records if "no API key" in r.getMessage()] \
        == ["WARNING"]


@pytest.mark.parametrize(("host", "key"), [("127.0.0.1", None), ("localhost", None),
                                           ("::1", None), ("0.0.0.0", KEY)])
def test_no_warning_when_loopback_or_keyed(host, key, capsys, caplog):
    from service.main import warn_if_unprotected
    warn_if_unprotected(Settings(host=host, api_key=key))
    assert "no API key" not in capsys.readouterr().err
    assert not [r for r in caplog.records if "no API key" in r.getMessage()]


def test_an_unhandled_error_is_a_500_with_the_request_id(tmp_path):
    from fastapi.testclient import TestClient

    from service.main import create_app
    from tests.service.conftest import BACKEND

    app = create_app(Settings(data_dir=tmp_path / "d", backend=BACKEND))

    @app.get("/boom")
    async def boom():
        raise RuntimeError("a bug")

    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.get("/boom", headers={"X-Request-ID": "bug-report-1"})
    assert r.status_code == 500
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json() == {"type": "about:blank", "title": "Internal Server Error", "status": 500,
                        "detail": "internal server error", "instance": "/boom",
                        "code": "internal_error", "request_id": "bug-report-1"}
    assert r.headers["x-request-id"] == "bug-report-1"


def test_http_metrics_can_be_switched_off(tmp_path):
    with running(tmp_path / "d", http_metrics=False) as client:
        client.get("/v1/graph")
        text = client.get("/metrics").text
    assert "http_requests_total" not in text and "http_request_duration" not in text
    assert _metric(text, "motifstream_ready") == 1
    assert _metric(text, "process_resident_memory_bytes") > 0


def test_a_websocket_handshake_carries_the_request_id(client):
    client.post("/v1/queries", json={"pattern": {
        "vertices": [{"id": 0, "label": 0}, {"id": 1, "label": 0}],
        "edges": [{"source": 0, "target": 1}]}})
    with client.websocket_connect("/v1/queries/1/ws",
                                  headers={"X-Request-ID": "ws-trace-9"}) as ws:
        assert (b"x-request-id", b"ws-trace-9") in ws.extra_headers
