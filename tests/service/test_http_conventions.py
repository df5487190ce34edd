"""The HTTP conventions every route keeps: RFC 9457 problems, Idempotency-Key reuse (422) and
races (409), GET /v1/queries pages, unknown query parameters refused, Location, empty batches."""
from __future__ import annotations

import io
import threading
from concurrent.futures import Future

import numpy as np
import pytest
from starlette.websockets import WebSocketDisconnect

from tests.service.conftest import graph_state, running

PROBLEM = "application/problem+json"
EDGE = {"vertices": [{"id": 1, "label": 0}, {"id": 2, "label": 0}],
        "edges": [{"source": 1, "target": 2}]}
GRAPH = {"vertices": [[1, 0], [2, 0], [3, 0]], "edges": [[1, 2]]}


def problem(response, status: int, code: str) -> dict:
    """The answer's problem body, checked for the shape every error has."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["type"] == "about:blank" and body["status"] == status
    assert body["code"] == code, body
    assert body["instance"] == response.request.url.path
    assert body["request_id"] == response.headers["x-request-id"]
    assert isinstance(body["detail"], str) and body["detail"]
    return body


# ---- problems -------------------------------------------------------------------------


def test_errors_are_problems_with_title_detail_and_extensions(client):
    body = problem(client.get("/v1/queries/7"), 404, "not_found")
    assert (body["title"], body["detail"]) == ("Not Found", "query 7 not found")
    # Schema errors: every one in `errors`, the first in `detail`.
    r = client.post("/v1/batches", json={"insert_edges": [[1, "x", 0, 4, 5]], "insert_edgez": []})
    body = problem(r, 422, "invalid_input")
    assert body["title"] == "Unprocessable Content"     # RFC 9110's name, on any Python
    assert [error["loc"] for error in body["errors"]] == [["body", "insert_edges", 0],
                                                          ["body", "insert_edgez"]]
    assert body["detail"].startswith("body.insert_edges.0: ")
    assert body["detail"].endswith("(and 1 more in `errors`)")
    body = problem(client.post("/v1/batches", content=b"<a/>",
                               headers={"content-type": "text/xml"}), 415,
                   "unsupported_media_type")
    assert "text/xml" in body["detail"]
    assert client.put("/v1/graph", json=GRAPH).status_code == 200
    body = problem(client.put("/v1/graph", json=GRAPH), 409, "conflict")
    assert "only while it is empty" in body["detail"]


def test_401_is_a_problem_with_its_challenge(tmp_path):
    key = "k" * 20
    with running(tmp_path / "data", api_key=key) as client:
        r = client.get("/v1/graph")
        problem(r, 401, "unauthorized")
        assert r.headers["www-authenticate"] == "Bearer"
        # The key as a query parameter is taken on every route, not an unknown parameter.
        assert client.get("/v1/graph", params={"access_token": key}).status_code == 200


def test_openapi_declares_the_problem_shape_on_every_error(client):
    document = client.get("/openapi.json").json()
    error = document["components"]["schemas"]["Error"]
    assert {"type", "title", "status", "detail", "code"} <= set(error["required"])
    assert {"instance", "request_id", "errors", "earliest"} <= set(error["properties"])
    assert "HTTPValidationError" not in document["components"]["schemas"]
    declared = 0
    for path, operations in document["paths"].items():
        for operation in operations.values():
            for status, answer in operation["responses"].items():
                # /readyz's 503 is a probe's own body ({"status": "starting"}), no problem.
                if status[0] in "45" and (path, status) != ("/readyz", "503"):
                    assert answer["content"] == {PROBLEM: {"schema": {
                        "$ref": "#/components/schemas/Error"}}}, (status, answer)
                    declared += 1
    assert declared > 20
    ready = document["paths"]["/readyz"]["get"]["responses"]["503"]["content"]
    assert ready == {"application/json": {"schema": {
        "$ref": "#/components/schemas/ReadinessPending"}}}
    listing = document["paths"]["/v1/queries"]["get"]
    assert {p["name"] for p in listing["parameters"]} == {"limit", "after"}
    batches = document["paths"]["/v1/batches"]["post"]["responses"]
    assert "still being applied" in batches["409"]["description"]
    assert "another body" in batches["422"]["description"]
    created = document["paths"]["/v1/queries"]["post"]["responses"]["201"]
    assert "Location" in created["headers"]


# ---- Idempotency-Key --------------------------------------------------------------------


class _HeldCommits:
    """Holds every batch commit back (the store's futures resolve only once released), so
    that a batch stays applied but not durable: in flight."""

    def __init__(self, store, monkeypatch) -> None:
        self.handed = threading.Event()
        self.release = threading.Event()
        original = store.append_batches_async

        def held(records):
            commits = original(records)
            answers = [Future() for _ in commits]

            def forward() -> None:
                self.release.wait()
                for commit, answer in zip(commits, answers):
                    exc = commit.exception()
                    if exc is None:
                        answer.set_result(commit.result())
                    else:
                        answer.set_exception(exc)
            threading.Thread(target=forward, daemon=True).start()
            self.handed.set()
            return answers
        monkeypatch.setattr(store, "append_batches_async", held)


def test_idempotency_key_in_flight_is_409_and_reused_for_another_body_422(client, monkeypatch):
    assert client.put("/v1/graph", json=GRAPH).status_code == 200
    held = _HeldCommits(client.app.state.motifstream.store, monkeypatch)
    key = {"Idempotency-Key": "race-1"}
    body = {"insert_edges": [[2, 3]]}
    first: list = []
    sender = threading.Thread(target=lambda: first.append(
        client.post("/v1/batches", json=body, headers=key)))
    sender.start()
    assert held.handed.wait(60), "the first request never reached the writer"
    # The same request again while the first is not durable: its answer is not known yet.
    racing = problem(client.post("/v1/batches", json=body, headers=key), 409,
                     "idempotency_key_in_flight")
    assert "still being applied" in racing["detail"]
    # Another body under the key, in flight or not, is the client's mistake.
    reused = problem(client.post("/v1/batches", json={"insert_edges": [[1, 3]]}, headers=key),
                     422, "idempotency_key_reused")
    assert "race-1" in reused["detail"]
    held.release.set()
    sender.join(60)
    assert first[0].status_code == 200 and first[0].json()["batch"] == 1
    # Once it is durable, the same request replays its answer; another body is still a 422.
    again = client.post("/v1/batches", json=body, headers=key)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.json() == first[0].json()
    problem(client.post("/v1/batches", content="e 1 3\n", headers={
        **key, "content-type": "text/plain"}), 422, "idempotency_key_reused")
    assert client.get("/v1/graph").json()["batches"] == 1


# ---- GET /v1/queries pages ----------------------------------------------------------------


def test_queries_are_listed_in_pages_by_id(client):
    ids = [client.post("/v1/queries", json={"pattern": EDGE}).json()["id"] for _ in range(5)]
    assert client.delete(f"/v1/queries/{ids[2]}").status_code == 204
    expected = [ids[0], ids[1], ids[3], ids[4]]
    pages, after = [], None
    while True:
        params = {"limit": 3} if after is None else {"limit": 3, "after": after}
        page = client.get("/v1/queries", params=params).json()
        pages.append([q["id"] for q in page["queries"]])
        after = page["next"]
        if after is None:
            break
    assert pages == [expected[:3], expected[3:]]
    # The cursor of a deleted query, and of the last one, are inside the list.
    assert [q["id"] for q in client.get("/v1/queries", params={"after": ids[2]})
            .json()["queries"]] == expected[2:]
    assert client.get("/v1/queries", params={"after": ids[4]}).json() == \
        {"queries": [], "next": None}
    # A page that ends exactly at the last query says so.
    assert client.get("/v1/queries", params={"limit": 4}).json()["next"] is None
    assert client.get("/v1/queries", params={"limit": 2}).json()["next"] == ids[1]
    assert len(client.get("/v1/queries").json()["queries"]) == 4    # default limit 100


@pytest.mark.parametrize("params, where", [
    ({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"after": -1}, "after"),
    ({"after": "x"}, "after")])
def test_bad_page_parameters_are_422_naming_them(client, params, where):
    body = problem(client.get("/v1/queries", params=params), 422, "invalid_input")
    assert body["errors"][0]["loc"] == ["query", where]


def test_a_cursor_past_the_end_is_422(client):
    body = problem(client.get("/v1/queries", params={"after": 1}), 422, "invalid_input")
    assert body["detail"].startswith("after: 1 is past the end")
    qid = client.post("/v1/queries", json={"pattern": EDGE}).json()["id"]
    assert client.get("/v1/queries", params={"after": qid}).status_code == 200
    problem(client.get("/v1/queries", params={"after": qid + 1}), 422, "invalid_input")


# ---- cursors past the end --------------------------------------------------------------------


def test_a_result_cursor_past_the_last_batch_is_refused_naming_it(tmp_path):
    """Polling, SSE (`after` and Last-Event-ID) and the WebSocket: the last batch is a valid
    cursor (nothing new yet), one past it was never given out and is a 422 (4422)."""
    with running(tmp_path / "data", heartbeat_seconds=0.05) as client:
        assert client.put("/v1/graph", json=GRAPH).status_code == 200
        qid = client.post("/v1/queries", json={"pattern": EDGE}).json()["id"]
        results, events = f"/v1/queries/{qid}/results", f"/v1/queries/{qid}/events"
        # Before any batch the graph's load, batch 0, is the last one.
        assert client.get(results, params={"after": 0}).json()["events"] == []
        problem(client.get(results, params={"after": 1}), 422, "invalid_input")
        for edge in ([2, 3], [1, 3]):
            assert client.post("/v1/batches", json={"insert_edges": [edge]}).status_code == 200
        page = client.get(results, params={"after": 2}).json()
        assert (page["events"], page["next"], page["complete_through"]) == ([], 2, 2)
        assert len(client.get(results, params={"after": 1}).json()["events"]) == 1
        for status_of, where in (
                (lambda: client.get(results, params={"after": 3}), ["query", "after"]),
                (lambda: client.get(events, params={"after": 3}), ["query", "after"]),
                (lambda: client.get(events, params={"after": 0}, headers={
                    "Last-Event-ID": str(2**40)}), ["header", "last-event-id"])):
            body = problem(status_of(), 422, "invalid_input")
            assert body["errors"][0]["loc"] == where
            assert "is past the last batch, 2" in body["detail"]
        # SSE and the WebSocket from the last batch stream (its progress), past it close.
        with client.stream("GET", events, params={"after": 2}) as response:
            assert response.status_code == 200
            assert next(response.iter_lines()).startswith("retry: ")
        with client.websocket_connect(f"/v1/queries/{qid}/ws?after=2") as ws:
            assert ws.receive_json() == {"id": 2, "event": "progress", "data": {"through": 2}}
        with client.websocket_connect(f"/v1/queries/{qid}/ws?after=3") as ws:
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_text()
        assert (closed.value.code, closed.value.reason) == (
            4422, "after: 3 is past the last batch, 2")


# ---- unknown query parameters --------------------------------------------------------------


@pytest.mark.parametrize("method, url", [
    ("GET", "/v1/queries?limt=2"), ("GET", "/v1/graph?verbose=1"),
    ("POST", "/v1/queries:validate?dry_run=true"), ("GET", "/v1/queries/1?x=1"),
    ("DELETE", "/v1/queries/1?force=1"), ("GET", "/v1/queries/1/results?aftr=3"),
    ("GET", "/v1/queries/1/events?from=3"), ("PUT", "/v1/graph?format=csv")])
def test_unknown_query_parameters_are_422_naming_them(client, method, url):
    assert client.post("/v1/queries", json={"pattern": EDGE}).status_code == 201
    name = url.partition("?")[2].partition("=")[0]
    kwargs = {"json": GRAPH} if method == "PUT" else {}
    if url.startswith("/v1/queries:validate"):
        kwargs = {"json": {"pattern": EDGE}}
    body = problem(client.request(method, url, **kwargs), 422, "invalid_input")
    assert body["errors"][0]["loc"] == ["query", name]
    assert body["detail"].startswith(f"query.{name}: unknown query parameter")
    assert client.get("/v1/queries/1").status_code == 200     # DELETE did nothing
    assert client.get("/v1/graph").json()["vertices"] == 0    # PUT neither


@pytest.mark.parametrize("fast", [True, False])
def test_a_batch_with_an_unknown_query_parameter_applies_nothing(client, fast):
    if not fast:
        client.app.batch_fast_path = None
    assert client.put("/v1/graph", json=GRAPH).status_code == 200
    graph = graph_state(client)
    r = client.post("/v1/batches?dry_run=true", json={"insert_edges": [[2, 3]]})
    assert problem(r, 422, "invalid_input")["errors"][0]["loc"] == ["query", "dry_run"]
    assert graph_state(client) == graph
    assert client.post("/v1/batches", json={"insert_edges": [[2, 3]]}).json()["batch"] == 1


def test_websocket_unknown_query_parameter_closes_4422(client):
    qid = client.post("/v1/queries", json={"pattern": EDGE}).json()["id"]
    with client.websocket_connect(f"/v1/queries/{qid}/ws?after=0&aftr=1") as ws:
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    assert (closed.value.code, closed.value.reason) == (4422, "aftr: unknown query parameter")


# ---- Location, empty batches ----------------------------------------------------------------


def test_a_registered_query_has_its_location(client):
    r = client.post("/v1/queries", json={"pattern": EDGE})
    assert r.status_code == 201
    assert r.headers["location"] == f"/v1/queries/{r.json()['id']}"
    assert client.get(r.headers["location"]).json()["id"] == r.json()["id"]
    text = client.post("/v1/queries", content="v 1 0\nv 2 0\ne 1 2\n",
                       headers={"content-type": "text/plain"})
    assert text.headers["location"] == f"/v1/queries/{text.json()['id']}"
    dry = client.post("/v1/queries", json={"pattern": EDGE}, params={"dry_run": "true"})
    assert dry.status_code == 200 and "location" not in dry.headers


def _npy(rows) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(rows, dtype=np.int64).reshape(-1, 4))
    return buffer.getvalue()


@pytest.mark.parametrize("content, media, says", [
    (b"{}", "application/json", "insert_vertices, delete_vertices, insert_edges and "
                                "delete_edges are all empty"),
    (b'{"insert_edges": [], "delete_vertices": []}', "application/json", "all empty"),
    (b"# nothing yet\n\n", "text/plain", "no update line"),
    (b"", "text/plain", "no update line"),
    (_npy([]), "application/x-npy", "no rows")])
def test_an_empty_batch_is_refused_and_uses_no_number(client, content, media, says):
    assert client.put("/v1/graph", json=GRAPH).status_code == 200
    r = client.post("/v1/batches", content=content, headers={"content-type": media,
                                                             "idempotency-key": "empty"})
    body = problem(r, 422, "invalid_input")
    assert body["detail"].startswith("the batch is empty") and says in body["detail"]
    # Nothing was recorded, not even the key.
    r = client.post("/v1/batches", json={"insert_edges": [[2, 3]]},
                    headers={"idempotency-key": "empty"})
    assert r.status_code == 200 and r.json()["batch"] == 1
