"""POST /v1/batches: exact deltas against the brute-force matcher, three body formats,
atomic rejection, idempotent retries."""
from __future__ import annotations

import io
import json
import random

import numpy as np

from tests.graphs import Pattern, embeddings, random_data
from tests.service.conftest import (batch_json, graph_json, graph_state, pattern_json,
                                    random_service_batch)

PATTERNS = {
    "triangle": Pattern([0, 0, 1], [(0, 1), (1, 2), (0, 2)]),
    "path": Pattern([0, 1, 0], [(0, 1), (1, 2)]),
    "labeled-edge": Pattern([1, 0, 1], [(0, 1, 1), (1, 2)]),
}


def _setup(client, seed: int, deliver: str = "matches"):
    rng = random.Random(seed)
    data = random_data(rng, 14, 2, 2, 0.3)
    assert client.put("/v1/graph", json=graph_json(data.labeled())).status_code == 200
    ids = {}
    for name, pattern in PATTERNS.items():
        r = client.post("/v1/queries", json={"pattern": pattern_json(pattern), "name": name,
                                             "deliver": deliver})
        assert r.status_code == 201, r.text
        ids[name] = r.json()["id"]
    return rng, data, ids


def _events(client, qid: int) -> dict[int, dict]:
    r = client.get(f"/v1/queries/{qid}/results", params={"limit": 10000})
    assert r.status_code == 200, r.text
    return {e["id"]: e["data"] for e in r.json()["events"]}


def test_deltas_and_listed_matches_equal_the_brute_force_matcher(client):
    rng, data, ids = _setup(client, seed=3)
    next_id = [100]
    expected = {name: {} for name in PATTERNS}
    for _ in range(12):
        before = {n: embeddings(data, p) for n, p in PATTERNS.items()}
        stream = random_service_batch(rng, data, 2, 2, next_id)
        r = client.post("/v1/batches", json=batch_json(stream))
        assert r.status_code == 200, r.text
        body = r.json()
        for name, pattern in PATTERNS.items():
            after = embeddings(data, pattern)
            pos, neg = after - before[name], before[name] - after
            assert body["results"][str(ids[name])] == {"positive": len(pos),
                                                      "negative": len(neg)}
            if pos or neg:
                expected[name][body["batch"]] = (pos, neg)
    for name, qid in ids.items():
        events = _events(client, qid)
        assert set(events) == set(expected[name])
        for seq, (pos, neg) in expected[name].items():
            event = events[seq]
            assert event["batch"] == seq and not event["truncated"]
            assert {tuple(m) for m in event["added"]} == pos
            assert {tuple(m) for m in event["removed"]} == neg


def test_text_npy_and_json_bodies_give_the_same_results(tmp_path):
    from tests.service.conftest import running
    responses = []
    for media in ("json", "text", "npy"):
        with running(tmp_path / media) as client:
            rng, data, _ = _setup(client, seed=5, deliver="counts")
            next_id = [100]
            out = []
            for _ in range(6):
                stream = random_service_batch(rng, data, 2, 2, next_id)
                if media == "json":
                    r = client.post("/v1/batches", json=batch_json(stream))
                elif media == "text":
                    from gpu.io.streams import _format_update
                    text = "".join(_format_update(*rec) for rec in zip(
                        stream.kind.tolist(), stream.a.tolist(), stream.b.tolist(),
                        stream.label.tolist()))
                    r = client.post("/v1/batches", content=text,
                                    headers={"content-type": "text/plain"})
                else:
                    buf = io.BytesIO()
                    np.save(buf, np.stack([stream.kind, stream.a, stream.b, stream.label],
                                          axis=1).astype(np.int64))
                    r = client.post("/v1/batches", content=buf.getvalue(),
                                    headers={"content-type": "application/x-npy"})
                assert r.status_code == 200, r.text
                body = r.json()
                out.append((body["batch"], body["applied"], body["ignored"], body["results"]))
            responses.append(out)
    assert responses[0] == responses[1] == responses[2]


def test_rejected_batch_names_the_item_and_changes_nothing(client):
    _setup(client, seed=1)
    graph = graph_state(client)
    r = client.post("/v1/batches", json={"insert_edges": [[0, 1], [2, 999]]})
    assert r.status_code == 422
    assert "insert_edges[1]" in r.json()["detail"]
    assert graph_state(client) == graph
    # Structure errors name the field and index too, and change nothing.
    r = client.post("/v1/batches", json={"insert_edges": [[0, "x"]]})
    assert r.status_code == 422 and "insert_edges[0][1]" in r.json()["detail"]
    r = client.post("/v1/batches", json={"insert_edgez": []})
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == ["body", "insert_edgez"]
    r = client.post("/v1/batches", content="e 0 1\nq 2 3\n",
                    headers={"content-type": "text/plain"})
    assert r.status_code == 422 and "body:2" in r.json()["detail"]
    r = client.post("/v1/batches", content=b"\x93NUMPY garbage",
                    headers={"content-type": "application/x-npy"})
    assert r.status_code == 422
    r = client.post("/v1/batches", content=b"<xml/>", headers={"content-type": "text/xml"})
    assert r.status_code == 415
    assert graph_state(client) == graph
    # The next good batch gets the next sequence number: nothing was consumed.
    r = client.post("/v1/batches", json={"insert_vertices": [[500, 0]]})
    assert r.status_code == 200 and r.json()["batch"] == graph["batches"] + 1


def test_idempotency_key_replays_the_stored_answer_and_applies_once(client):
    _setup(client, seed=2)
    body = {"insert_vertices": [[700, 0], [701, 0]], "insert_edges": [[700, 701]]}
    key = {"Idempotency-Key": "batch-abc"}
    first = client.post("/v1/batches", json=body, headers=key)
    again = client.post("/v1/batches", json=body, headers=key)
    assert first.status_code == again.status_code == 200
    assert again.headers.get("idempotent-replayed") == "true"
    assert "idempotent-replayed" not in first.headers
    assert again.json() == first.json()
    assert client.get("/v1/graph").json()["batches"] == first.json()["batch"]
    other = client.post("/v1/batches", json={"insert_vertices": [[702, 0]]}, headers=key)
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    assert "another body" in other.json()["detail"]
    assert client.get("/v1/graph").json()["batches"] == first.json()["batch"]


def test_string_labels_share_one_dictionary(client):
    r = client.put("/v1/graph", json={"vertices": [[1, "person"], [2, "person"], [3, "repo"]],
                                      "edges": [[1, 3, "stars"]]})
    assert r.status_code == 200, r.text
    labels = r.json()["labels"]
    assert set(labels) == {"person", "repo", "stars"}
    pattern = {"vertices": [{"id": 0, "label": "person"}, {"id": 1, "label": "repo"}],
               "edges": [{"source": 0, "target": 1, "label": "stars"}]}
    qid = client.post("/v1/queries", json={"pattern": pattern, "deliver": "matches",
                                           "backfill": True}).json()["id"]
    r = client.post("/v1/batches", json={"insert_edges": [[2, 3, "stars"], [1, 2, "follows"]]})
    assert r.json()["results"][str(qid)] == {"positive": 1, "negative": 0}
    events = _events(client, qid)
    assert [e.get("added") for e in events.values()] == [[[1, 3]], [[2, 3]]]
    assert events[0]["backfill"] is True
    assert set(client.get("/v1/graph").json()["labels"]) == {"person", "repo", "stars",
                                                             "follows"}
    # A string label cannot pose as an integer one, nor an integer pass the string range.
    r = client.post("/v1/batches", json={"insert_vertices": [[9, 1 << 30]]})
    assert r.status_code == 422 and "insert_vertices[0][1]" in r.json()["detail"]


def test_events_are_stored_only_for_touched_queries(client):
    _, _, ids = _setup(client, seed=4, deliver="counts")
    r = client.post("/v1/batches", json={"insert_vertices": [[900, 0]]})
    assert all(v == {"positive": 0, "negative": 0} for v in r.json()["results"].values())
    for qid in ids.values():
        assert r.json()["batch"] not in _events(client, qid)
        stats = client.get(f"/v1/queries/{qid}").json()["stats"]
        assert stats["batches_seen"] == 1 and stats["last_latency_ms"] is not None


def test_response_is_json_with_timings(client):
    _setup(client, seed=6)
    r = client.post("/v1/batches", json={"insert_vertices": [[901, 1]]})
    body = json.loads(r.content)
    assert set(body) == {"batch", "applied", "ignored", "results", "timings"}
    assert body["applied"]["vertices_added"] == 1
    assert {"validate", "match", "update", "engine"} <= set(body["timings"])


_KEY = "k" * 24
# (body, content type, extra headers): good batches, and every kind of refusal the route has.
_REQUESTS = [
    (json.dumps({"insert_vertices": [[1, 0], [2, 0], [3, 1]]}), "application/json", {}),
    (json.dumps({"insert_edges": [[1, 2], [2, 3]]}), "application/json", {}),
    (json.dumps({"insert_edges": [[1, 3]]}), "application/json; charset=utf-8", {}),
    ("-e 1 2\ne 1 2 1\n", "text/plain", {}),
    (json.dumps({"delete_edges": [[2, 3]]}), None, {}),                    # JSON by default
    (json.dumps({"insert_edges": [[1, 99]]}), "application/json", {}),     # missing vertex
    (json.dumps({"insert_edges": [[1, "x"]]}), "application/json", {}),    # pydantic error
    (json.dumps({"insert_edgez": []}), "application/json", {}),
    ("e 1 2\nq 2 3\n", "text/plain", {}),
    ("<xml/>", "text/xml", {}),
    (json.dumps({"insert_edges": [[2, 2]]}), "application/json", {}),      # self-loop
    (json.dumps({"insert_vertices": [[4, "new-label"]]}), "application/json", {}),
    (json.dumps({"insert_vertices": [[5, 0]]}), "application/json", {"Idempotency-Key": "a"}),
    (json.dumps({"insert_vertices": [[5, 0]]}), "application/json", {"Idempotency-Key": "a"}),
    (json.dumps({"insert_vertices": [[6, 0]]}), "application/json", {"Idempotency-Key": "a"}),
    (json.dumps({"insert_vertices": [[7, 0]]}), "application/json",
     {"Idempotency-Key": "x" * 201}),                                      # header refused
    (json.dumps({"insert_vertices": [[7, 0]]}), "application/json",
     {"Idempotency-Key": "x" * 200}),
    ("x" * 5000, "application/json", {}),                                   # over the limit
    (json.dumps({"insert_vertices": [[8, 0]]}), "application/json", {"Authorization": ""}),
    (json.dumps({"insert_vertices": [[8, 0]]}), "application/json",
     {"Authorization": "Bearer wrong-key-wrong-key"}),
    (json.dumps({"insert_vertices": [[8, 0]]}), "application/json",
     {"Authorization": "Basic " + _KEY}),
]


def _answers(tmp_path, name: str, fast: bool) -> list[tuple]:
    """Every request of _REQUESTS on a fresh service, with or without BatchFastPath."""
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.routes.batches import BatchFastPath
    from service.settings import Settings
    from tests.service.conftest import BACKEND, wait_ready

    settings = Settings(data_dir=tmp_path / name, synchronous="normal", backend=BACKEND,
                        api_key=_KEY, max_request_bytes=4096)
    app = create_app(settings)
    assert isinstance(app.batch_fast_path, BatchFastPath)
    if not fast:
        app.batch_fast_path = None
    out = []
    with TestClient(app) as client:
        wait_ready(client)
        for body, media, extra in _REQUESTS:
            headers = {"Authorization": f"Bearer {_KEY}", **extra}
            if media is not None:
                headers["Content-Type"] = media
            r = client.post("/v1/batches", content=body, headers=headers)
            answer = r.json()
            if r.status_code == 200:
                answer.pop("timings")
            else:   # each request's own id (service/logs.py)
                assert answer.pop("request_id") == r.headers["x-request-id"]
            out.append((r.status_code, answer, r.headers.get("content-type"),
                        r.headers.get("idempotent-replayed"),
                        r.headers.get("www-authenticate")))
        # The key as a query parameter (as WebSocket clients send it), right and wrong.
        for token in (_KEY, "wrong-key-wrong-key"):
            r = client.post(f"/v1/batches?access_token={token}",
                            json={"insert_vertices": [[9, 0]]})
            out.append((r.status_code, r.json().get("detail"), r.json().get("batch")))
        out.append(client.get("/v1/graph", headers={"Authorization": f"Bearer {_KEY}"})
                   .json()["batches"])
    return out


def test_fast_path_answers_exactly_as_the_route(tmp_path):
    """BatchFastPath (the default) against the FastAPI route alone: the same statuses,
    bodies and headers for accepted, refused, replayed and unauthorised batches."""
    fast, route = _answers(tmp_path, "fast", True), _answers(tmp_path, "route", False)
    statuses = {answer[0] for answer in fast[:-1]}
    # (A 409 needs a request still in flight: test_http_conventions.py.)
    assert {200, 401, 413, 415, 422} <= statuses
    assert fast == route


def test_curls_form_default_and_no_content_type_are_read_as_json(client):
    """`curl -d '{...}'` sends application/x-www-form-urlencoded: the body is read as JSON,
    as it is without a Content-Type.  A real form body is then a JSON error, other types
    stay refused."""
    _setup(client, seed=5)
    form = "application/x-www-form-urlencoded"
    for content_type, vertex in ((form, 600), (f"{form}; charset=utf-8", 601), (None, 602)):
        headers = {} if content_type is None else {"content-type": content_type}
        r = client.post("/v1/batches", content=json.dumps({"insert_vertices": [[vertex, 0]]}),
                        headers=headers)
        assert r.status_code == 200, (content_type, r.text)
        assert r.json()["applied"]["vertices_added"] == 1
    graph = graph_state(client)
    r = client.post("/v1/batches", content="insert_vertices=603", headers={"content-type": form})
    assert r.status_code == 422 and r.json()["errors"][0]["type"] == "json_invalid", r.text
    r = client.post("/v1/batches", content=b"{}", headers={"content-type": "multipart/form-data"})
    assert r.status_code == 415 and "multipart/form-data" in r.json()["detail"]
    assert graph_state(client) == graph
    # No Content-Type and curl's form default name the same request: a retry replays it.
    body = json.dumps({"insert_vertices": [[604, 0]]})
    first = client.post("/v1/batches", content=body, headers={"idempotency-key": "k-form"})
    again = client.post("/v1/batches", content=body,
                        headers={"idempotency-key": "k-form", "content-type": form})
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json() == first.json()

