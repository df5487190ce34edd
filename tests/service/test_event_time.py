"""Event times through the service (issue 23): timed JSON and text batches, retention
fixed with the store, expired matches in results and events, the watermark in GET
/v1/graph, and times that survive a restart from the log and from a snapshot."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.main import create_app
from service.settings import Settings
from tests.service.conftest import BACKEND, running, settled

PATH = "v 0 0\nv 1 0\nv 2 0\ne 0 1\ne 1 2\n"


def _post(client, **body) -> dict:
    r = client.post("/v1/batches", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _start(client) -> int:
    r = client.put("/v1/graph", json={"vertices": [[v, 0] for v in (1, 2, 3, 4)],
                                      "edges": []})
    assert r.status_code == 200, r.text
    r = client.post("/v1/queries", json={"pattern": PATH, "deliver": "matches"})
    assert r.status_code == 201, r.text
    qid = r.json()["id"]
    # Paths 1-2-3 and 2-3-4 (both ways); (3, 4) untimed, so it never expires.
    body = _post(client, insert_edges=[[1, 2, 0, 100], [2, 3, 0, 105], [3, 4]])
    assert body["results"][str(qid)] == {"positive": 4, "negative": 0, "expired": 0}
    # Text, time after the label: the watermark moves to 111 and (1, 2) at 100 expires.
    r = client.post("/v1/batches", content="e 1 4 0 111\n",
                    headers={"content-type": "text/plain"})
    assert r.status_code == 200, r.text
    assert r.json()["results"][str(qid)] == {"positive": 2, "negative": 2, "expired": 2}
    assert r.json()["applied"]["edges_deleted"] == 1
    return qid


@pytest.mark.parametrize("snapshot", [False, True])
def test_timed_batches_expire_edges_and_survive_a_restart(tmp_path, snapshot):
    data = tmp_path / "data"
    with running(data, retention=10) as client:
        qid = _start(client)
        graph = client.get("/v1/graph").json()
        assert (graph["watermark"], graph["timed_edges"], graph["retention"]) == (111, 2, 10)
        events = client.get(f"/v1/queries/{qid}/results").json()["events"]
        last = events[-1]["data"]
        assert last["expired"] == 2 and last["removed_expired"] == [True, True]
        assert sorted(map(tuple, last["removed"])) == [(1, 2, 3), (3, 2, 1)]
        if snapshot:
            assert client.post("/v1/snapshots").status_code == 201
    with running(data) as client:       # the store's retention; times from log or snapshot
        graph = client.get("/v1/graph").json()
        assert (graph["watermark"], graph["timed_edges"], graph["retention"]) == (111, 2, 10)
        # Watermark 116: (2, 3) at 105 goes; the triangle 1-3-4 closes.
        body = _post(client, insert_edges=[[1, 3, 0, 116]])
        assert body["results"][str(qid)] == {"positive": 4, "negative": 2, "expired": 2}
        assert client.get("/v1/graph").json()["edges"] == 3


def test_a_store_keeps_its_retention(tmp_path):
    data = tmp_path / "data"
    with running(data, retention=10) as client:
        _start(client)
    settings = Settings(data_dir=data, synchronous="normal", backend=BACKEND, retention=20)
    with TestClient(create_app(settings)) as client:
        body = settled(client)
        assert body["status"] == "failed" and "retention 10" in body["detail"]


def test_untimed_batches_answer_as_before(client):
    r = client.put("/v1/graph", json={"vertices": [[1, 0], [2, 0]], "edges": []})
    assert r.status_code == 200
    r = client.post("/v1/queries", json={"pattern": "v 0 0\nv 1 0\ne 0 1\n"})
    qid = r.json()["id"]
    body = _post(client, insert_edges=[[1, 2]])
    assert body["results"][str(qid)] == {"positive": 2, "negative": 0}
    graph = client.get("/v1/graph").json()
    assert (graph["watermark"], graph["timed_edges"], graph["retention"]) == (None, 0, None)


@pytest.mark.parametrize("item, fragment", [
    ([1, 2, 0, -1], "insert_edges[0][3]: event time -1"),
    ([1, 2, 0, "soon"], "insert_edges[0][3]: event time 'soon'"),
    ([1, 2, 0, True], "body.insert_edges.0.3"),         # the schema's strict types
    ([1, 2, 0, 5, 6], "body.insert_edges.0"),
])
def test_a_bad_event_time_is_a_422_naming_it(client, item, fragment):
    client.put("/v1/graph", json={"vertices": [[1, 0], [2, 0]], "edges": []})
    r = client.post("/v1/batches", json={"insert_edges": [item]})
    assert r.status_code == 422, r.text
    assert fragment in r.text
    assert client.get("/v1/graph").json()["edges"] == 0


# ---- event times in the binary bodies ----------------------------------------------------

# The first batch of _start as rows kind, a, b, label, time (-1: none).
TIMED_ROWS = [[2, 1, 2, 0, 100], [2, 2, 3, 0, 105], [2, 3, 4, 0, -1]]


def _npy(rows) -> bytes:
    import io

    import numpy as np
    buf = io.BytesIO()
    np.save(buf, np.array(rows, dtype=np.int64))
    return buf.getvalue()


def _arrow(rows, time_type: str = "int64") -> bytes:
    import io
    pa = pytest.importorskip("pyarrow")
    names = ("kind", "u", "v", "label", "time")
    columns = {name: [row[i] for row in rows] for i, name in enumerate(names)}
    columns["time"] = [None if t == -1 else t for t in columns["time"]]    # null: none
    table = pa.table({name: pa.array(values, pa.int64() if name != "time"
                                     else getattr(pa, time_type)())
                      for name, values in columns.items()})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


BODIES = {"npy": ("application/x-npy", _npy),
          "arrow": ("application/vnd.apache.arrow.stream", _arrow)}


@pytest.mark.parametrize("form", sorted(BODIES))
def test_npy_and_arrow_bodies_carry_event_times(tmp_path, form):
    """A fifth .npy column, or an Arrow `time` column, gives the same timed batch as JSON's
    [u, v, label, time]: the same results, watermark and expiry."""
    media, encode = BODIES[form]
    body = encode(TIMED_ROWS)
    with running(tmp_path / "data", retention=10) as client:
        client.put("/v1/graph", json={"vertices": [[v, 0] for v in (1, 2, 3, 4)],
                                      "edges": []})
        qid = client.post("/v1/queries", json={"pattern": PATH}).json()["id"]
        r = client.post("/v1/batches", content=body, headers={"content-type": media})
        assert r.status_code == 200, r.text
        assert r.json()["results"][str(qid)] == {"positive": 4, "negative": 0, "expired": 0}
        graph = client.get("/v1/graph").json()
        assert (graph["watermark"], graph["timed_edges"]) == (105, 2)
        r = client.post("/v1/batches", content=encode([[2, 1, 4, 0, 111]]),
                        headers={"content-type": media})
        assert r.json()["results"][str(qid)] == {"positive": 2, "negative": 2, "expired": 2}


@pytest.mark.parametrize("form", sorted(BODIES))
def test_binary_bodies_without_times_stay_untimed(client, form):
    media, encode = BODIES[form]
    client.put("/v1/graph", json={"vertices": [[1, 0], [2, 0]], "edges": []})
    r = client.post("/v1/batches", content=encode([[2, 1, 2, 0, -1]]),
                    headers={"content-type": media})
    assert r.status_code == 200, r.text
    graph = client.get("/v1/graph").json()
    assert (graph["edges"], graph["watermark"], graph["timed_edges"]) == (1, None, 0)


@pytest.mark.parametrize("form", sorted(BODIES))
@pytest.mark.parametrize("rows, fragment", [
    ([[2, 1, 2, 0, 7], [3, 1, 2, -1, 8]], "row 1: a time is only for an edge insert (kind 2)"),
    ([[0, 9, 0, 0, 3]], "row 0: a time is only for an edge insert"),
    ([[2, 1, 2, 0, -2]], "row 0: time must be >= 0 (-1: none)"),
])
def test_a_bad_time_in_a_binary_body_is_a_422_naming_the_row(client, form, rows, fragment):
    media, encode = BODIES[form]
    client.put("/v1/graph", json={"vertices": [[1, 0], [2, 0]], "edges": []})
    r = client.post("/v1/batches", content=encode(rows), headers={"content-type": media})
    assert r.status_code == 422, r.text
    assert fragment in r.text
    graph = client.get("/v1/graph").json()
    assert (graph["edges"], graph["vertices"], graph["watermark"]) == (0, 2, None)


def test_an_arrow_time_column_of_floats_is_a_422_naming_it(client):
    client.put("/v1/graph", json={"vertices": [[1, 0], [2, 0]], "edges": []})
    r = client.post("/v1/batches", content=_arrow([[2, 1, 2, 0, 5]], "float64"),
                    headers={"content-type": "application/vnd.apache.arrow.stream"})
    assert r.status_code == 422, r.text
    assert "column 'time' has type double" in r.text
