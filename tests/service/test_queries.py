"""/v1/queries: register (JSON or query-file text), validate only, list, inspect, delete."""
from __future__ import annotations

from tests.service.conftest import graph_json

TRIANGLE = {"vertices": [{"id": 10, "label": 0}, {"id": 11, "label": 0},
                         {"id": 12, "label": 0}],
            "edges": [{"source": 10, "target": 11}, {"source": 11, "target": 12},
                      {"source": 10, "target": 12}]}


def test_register_list_get_delete(client):
    r = client.post("/v1/queries", json={"pattern": TRIANGLE, "name": "tri"})
    assert r.status_code == 201, r.text
    q = r.json()
    assert (q["name"], q["vertices"], q["edges"], q["deliver"]) == ("tri", 3, 3, "counts")
    text = client.post("/v1/queries", content="v 1 0\nv 2 1\ne 1 2\n",
                       params={"name": "edge", "deliver": "matches"},
                       headers={"content-type": "text/plain"})
    assert text.status_code == 201, text.text
    assert text.json()["max_matches_per_batch"] == 10_000
    listed = client.get("/v1/queries").json()
    assert [x["id"] for x in listed["queries"]] == [q["id"], text.json()["id"]]
    assert listed["next"] is None
    one = client.get(f"/v1/queries/{q['id']}").json()
    assert one["stats"]["batches_seen"] == 0 and one["stats"]["subscribers"] == 0
    assert client.delete(f"/v1/queries/{q['id']}").status_code == 204
    assert client.get(f"/v1/queries/{q['id']}").status_code == 404
    assert client.delete(f"/v1/queries/{q['id']}").status_code == 404
    assert [x["id"] for x in client.get("/v1/queries").json()["queries"]] == \
        [text.json()["id"]]
    # Ids are never reused.
    again = client.post("/v1/queries", json={"pattern": TRIANGLE}).json()
    assert again["id"] == text.json()["id"] + 1 and again["name"] == f"query-{again['id']}"


def test_validation_only_registers_nothing(client):
    for r in (client.post("/v1/queries:validate", json={"pattern": TRIANGLE}),
              client.post("/v1/queries", json={"pattern": TRIANGLE},
                          params={"dry_run": "true"})):
        assert r.status_code == 200, r.text
        assert r.json()["valid"] is True and r.json()["edges"] == 3
    assert client.get("/v1/queries").json() == {"queries": [], "next": None}
    first = client.post("/v1/queries", json={"pattern": TRIANGLE}).json()
    assert first["id"] == 1


def test_bad_patterns_are_422_naming_the_problem(client):
    cases = [
        ({"pattern": {"vertices": [{"id": 1, "label": 0}, {"id": 2, "label": 0}],
                      "edges": []}}, "not connected"),
        ({"pattern": {"vertices": [{"id": 1, "label": 0}, {"id": 2, "label": 0}],
                      "edges": [{"source": 1, "target": 3}]}}, "undeclared vertex 3"),
        ({"pattern": {"vertices": [{"id": i, "label": 0} for i in range(33)],
                      "edges": [{"source": i, "target": i + 1} for i in range(32)]}},
         "max_query_vertices"),
        ({"pattern": {"vertices": [{"id": 1, "label": -3}, {"id": 2, "label": 0}],
                      "edges": [{"source": 1, "target": 2}]}}, "pattern.vertices[0].label"),
        ({"pattern": "v 1 0\nv 2 0\nx 1 2\n"}, "pattern:3"),
        ({"pattern": TRIANGLE, "deliver": "counts", "max_matches_per_batch": 5},
         "max_matches_per_batch"),
        ({"pattern": TRIANGLE, "deliver": "matches", "max_matches_per_batch": 10**9},
         "max_matches_per_batch"),
    ]
    for body, needle in cases:
        r = client.post("/v1/queries", json=body)
        assert r.status_code == 422, (body, r.text)
        assert needle in r.text, (needle, r.text)
    r = client.post("/v1/queries", json={"pattern": TRIANGLE, "deliver": "everything"})
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == ["body", "deliver"]
    assert client.get("/v1/queries").json() == {"queries": [], "next": None}


def test_backfill_delivers_current_matches_first(client):
    graph = {"vertices": [[1, 0], [2, 0], [3, 0], [4, 0]],
             "edges": [[1, 2], [2, 3], [1, 3], [3, 4]]}
    assert client.put("/v1/graph", json=graph).status_code == 200
    counts = client.post("/v1/queries", json={"pattern": TRIANGLE, "backfill": True}).json()
    matches = client.post("/v1/queries", json={"pattern": TRIANGLE, "backfill": True,
                                               "deliver": "matches",
                                               "max_matches_per_batch": 4}).json()
    c = client.get(f"/v1/queries/{counts['id']}/results").json()["events"]
    m = client.get(f"/v1/queries/{matches['id']}/results").json()["events"]
    assert c[0]["data"] == {"batch": 0, "time": counts["created_at"], "backfill": True,
                            "positive": 6, "negative": 0}
    assert m[0]["data"]["positive"] == 6 and m[0]["data"]["truncated"] is True
    assert len(m[0]["data"]["added"]) == 4
    assert all(sorted(row) == [1, 2, 3] for row in m[0]["data"]["added"])


def test_matches_are_capped_per_batch_and_flagged(client):
    graph = graph_json_from_clique(6)
    assert client.put("/v1/graph", json=graph).status_code == 200
    q = client.post("/v1/queries", json={"pattern": TRIANGLE, "deliver": "matches",
                                         "max_matches_per_batch": 5}).json()
    r = client.post("/v1/batches", json={"insert_vertices": [[6, 0]],
                                         "insert_edges": [[6, i] for i in range(6)]})
    # New triangles hold vertex 6 (any of 3 positions) and an ordered pair of the others.
    assert r.json()["results"][str(q["id"])]["positive"] == 3 * 6 * 5
    event = client.get(f"/v1/queries/{q['id']}/results").json()["events"][0]["data"]
    assert event["truncated"] is True and len(event["added"]) == 5
    assert all(6 in row for row in event["added"])


def graph_json_from_clique(n: int) -> dict:
    from tests.graphs import Data
    data = Data({v: 0 for v in range(n)},
                {frozenset((a, b)): 0 for a in range(n) for b in range(a + 1, n)})
    return graph_json(data.labeled())


def test_curls_form_default_is_read_as_json(client):
    """`curl -d '{"pattern": ...}'` (application/x-www-form-urlencoded) registers the query."""
    import json

    r = client.post("/v1/queries", content=json.dumps({"pattern": TRIANGLE, "name": "curl"}),
                    headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 201, r.text
    assert (r.json()["name"], r.json()["edges"]) == ("curl", 3)
