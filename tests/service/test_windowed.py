"""Windowed standing queries through the service (issue 23): `window` on POST /v1/queries
(JSON and text), counted and listed deltas of timed batches, backfill, kept across a
restart, on either executor, on directed graphs too, and the 422s of a bad window."""
from __future__ import annotations

import pytest

from tests.service.conftest import running

PATH = "v 0 0\nv 1 0\nv 2 0\ne 0 1\ne 1 2\n"


def _post(client, edges) -> dict:
    r = client.post("/v1/batches", json={"insert_edges": edges})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def _paths(rows) -> set[tuple[int, ...]]:
    return {tuple(row) for row in rows}


def _last_event(client, qid) -> dict:
    return client.get(f"/v1/queries/{qid}/results").json()["events"][-1]["data"]


def test_a_windowed_query_counts_and_lists_the_paths_within_its_window(tmp_path):
    data = tmp_path / "data"
    with running(data) as client:
        client.put("/v1/graph", json={"vertices": [[v, 0] for v in (1, 2, 3, 4)],
                                      "edges": []})
        r = client.post("/v1/queries", json={"pattern": PATH, "deliver": "matches",
                                             "window": 5})
        assert r.status_code == 201, r.text
        listed = r.json()["id"]
        assert r.json()["window"] == 5
        r = client.post("/v1/queries?window=5&name=counted", content=PATH,
                        headers={"content-type": "text/plain"})
        assert r.status_code == 201, r.text
        counted = r.json()["id"]
        plain = client.post("/v1/queries", json={"pattern": PATH}).json()["id"]
        # 1-2-3 spans 3 (in the window); then 2-3-4 spans 7 (out of it).
        results = _post(client, [[1, 2, 0, 100], [2, 3, 0, 103]])
        assert results[str(listed)] == {"positive": 2, "negative": 0, "expired": 0}
        assert _paths(_last_event(client, listed)["added"]) == {(1, 2, 3), (3, 2, 1)}
        assert results[str(counted)] == {"positive": 2, "negative": 0, "expired": 0}
        results = _post(client, [[3, 4, 0, 110]])
        assert results[str(counted)]["positive"] == 0 and results[str(plain)]["positive"] == 2
        assert client.get(f"/v1/queries/{counted}").json()["window"] == 5
        assert client.get(f"/v1/queries/{plain}").json()["window"] is None
    with running(data) as client:       # the window is kept with the query
        assert client.get(f"/v1/queries/{listed}").json()["window"] == 5
        # 3-4-1 spans 4 (in); 4-1-2 spans 6 (out).  A refresh of (2, 3) to 108 takes
        # 1-2-3 out (span 8) and brings 2-3-4 in (span 2).
        results = _post(client, [[4, 1, 0, 106], [2, 3, 0, 108]])
        assert results[str(listed)] == {"positive": 4, "negative": 2, "expired": 0}
        delta = _last_event(client, listed)
        assert _paths(delta["added"]) == {(3, 4, 1), (1, 4, 3), (2, 3, 4), (4, 3, 2)}
        assert _paths(delta["removed"]) == {(1, 2, 3), (3, 2, 1)}
        assert delta["removed_expired"] == [False, False] and not delta["truncated"]
        # Backfill: the valid matches already there.
        r = client.post("/v1/queries", json={"pattern": PATH, "window": 5, "backfill": True,
                                             "deliver": "matches"})
        assert r.status_code == 201, r.text
        backfill = _last_event(client, r.json()["id"])
        assert backfill["backfill"] and backfill["positive"] == 4
        assert _paths(backfill["added"]) == {(3, 4, 1), (1, 4, 3), (2, 3, 4), (4, 3, 2)}


def test_before_pairs_keep_the_paths_whose_edges_come_in_order(tmp_path):
    with running(tmp_path / "data") as client:
        client.put("/v1/graph", json={"vertices": [[v, 0] for v in (1, 2, 3)], "edges": []})
        # Edge 0 is 0-1, edge 1 is 1-2: 0-1 timed before 1-2.
        r = client.post("/v1/queries", json={"pattern": PATH, "window": 10,
                                             "before": [[0, 1]], "deliver": "matches"})
        assert r.status_code == 201, r.text
        qid = r.json()["id"]
        assert r.json()["before"] == [[0, 1]]
        results = _post(client, [[1, 2, 0, 5], [2, 3, 0, 7]])
        assert results[str(qid)]["positive"] == 1
        assert _last_event(client, qid)["added"] == [[1, 2, 3]]
    with running(tmp_path / "data") as client:      # kept with the query
        assert client.get(f"/v1/queries/{qid}").json()["before"] == [[0, 1]]
        # Refreshing 1-2 to 9 turns the order around: 3-2-1 in, 1-2-3 out.
        results = _post(client, [[1, 2, 0, 9]])
        assert (results[str(qid)]["positive"], results[str(qid)]["negative"]) == (1, 1)
        event = _last_event(client, qid)
        assert (event["added"], event["removed"]) == ([[3, 2, 1]], [[1, 2, 3]])


@pytest.mark.parametrize("body, fragment", [
    ({"before": [[0, 1]]}, "before takes a window"),
    ({"window": 5, "before": [[0, 2]]}, "before[0]: (0, 2) names an edge the query lacks"),
    ({"window": 5, "before": [[1, 1]]}, "before[0]: (1, 1) orders an edge before itself"),
    ({"window": 5, "before": [[0]]}, "before"), ({"window": 5, "before": [[0, -1]]}, "before"),
    ({"window": 5, "before": [[0, "1"]]}, "before")])
def test_bad_before_pairs_are_a_422_naming_them(client, body, fragment):
    r = client.post("/v1/queries", json={"pattern": PATH, **body})
    assert r.status_code == 422, r.text
    assert fragment in r.text
    assert client.get("/v1/queries").json()["queries"] == []


@pytest.mark.parametrize("window, fragment", [(-1, "window"), ("5", "window"),
                                              (1.5, "window"), (True, "window")])
def test_a_bad_window_is_a_422_naming_it(client, window, fragment):
    r = client.post("/v1/queries", json={"pattern": PATH, "window": window})
    assert r.status_code == 422, r.text
    assert fragment in r.text
    r = client.post("/v1/queries?window=-1", content=PATH,
                    headers={"content-type": "text/plain"})
    assert r.status_code == 422 and "window" in r.text
    assert client.get("/v1/queries").json()["queries"] == []


def test_a_cycle_of_transfers_within_a_window_on_a_directed_graph(tmp_path):
    """The issue's example: a cycle of transfers (arcs) whose times all lie within the
    window; a cycle the wrong way round, or one that spans more, does not count."""
    cycle = "v 0 0\nv 1 0\nv 2 0\ne 0 1\ne 1 2\ne 2 0\n"
    with running(tmp_path / "data", backend="cpu") as client:
        r = client.put("/v1/graph?directed=true",
                       json={"vertices": [[v, 0] for v in (1, 2, 3, 4)], "edges": []})
        assert r.status_code == 200, r.text
        r = client.post("/v1/queries", json={"pattern": cycle, "deliver": "matches",
                                             "window": 60})
        assert r.status_code == 201, r.text
        qid = r.json()["id"]
        # 1 -> 2 -> 3 -> 1 within 50: its three rotations; 3 -> 2 runs against it.
        results = _post(client, [[1, 2, 0, 1000], [2, 3, 0, 1020], [3, 2, 0, 1030]])
        assert results[str(qid)]["positive"] == 0
        results = _post(client, [[3, 1, 0, 1050]])
        assert results[str(qid)] == {"positive": 3, "negative": 0, "expired": 0}
        assert _paths(_last_event(client, qid)["added"]) == {(1, 2, 3), (2, 3, 1), (3, 1, 2)}
        # 1 -> 3 -> 4 -> 1 spans 90: out of the window.
        results = _post(client, [[1, 3, 0, 1060], [3, 4, 0, 1100], [4, 1, 0, 1150]])
        assert results[str(qid)]["positive"] == 0
        assert client.get(f"/v1/queries/{qid}").json()["window"] == 60
