"""Stream semantics on the running service: every event carries its batch and its time,
polling is complete through batches that did not touch a query, and the result retention is
pruned by the lifespan's timer (service/retention.py) between the multiples of prune_every."""
from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from service.settings import Settings
from tests.service.conftest import running

EDGE = {"vertices": [{"id": 0, "label": 0}, {"id": 1, "label": 0}],
        "edges": [{"source": 0, "target": 1}]}


def _graph(client) -> None:
    vertices = [[v, 0] for v in range(8)]
    assert client.put("/v1/graph", json={"vertices": vertices}).status_code == 200


def _batch(client, *edges) -> int:
    r = client.post("/v1/batches", json={"insert_edges": [list(e) for e in edges]})
    assert r.status_code == 200, r.text
    return r.json()["batch"]


def test_events_carry_their_batch_and_time_and_polls_advance_past_untouched_batches(tmp_path):
    with running(tmp_path / "data") as client:
        _graph(client)
        qid = client.post("/v1/queries", json={"pattern": EDGE}).json()["id"]
        before = datetime.now(timezone.utc)
        touched = _batch(client, (0, 1))
        # A batch the query does not see: deleting an edge that is not there is a no-op.
        r = client.post("/v1/batches", json={"delete_edges": [[2, 3]]})
        untouched = r.json()["batch"]
        after = datetime.now(timezone.utc)
        page = client.get(f"/v1/queries/{qid}/results").json()
        assert [event["id"] for event in page["events"]] == [touched]
        data = page["events"][0]["data"]
        assert (data["batch"], data["positive"], data["negative"]) == (touched, 2, 0)
        assert before <= datetime.fromisoformat(data["time"]) <= after
        assert page["complete_through"] == page["next"] == untouched
        assert client.get(f"/v1/queries/{qid}/results",
                          params={"after": page["next"]}).json()["events"] == []


def _two_events(client) -> tuple[int, int]:
    """A query and two batches that each give it an event: (query id, first batch)."""
    _graph(client)
    qid = client.post("/v1/queries", json={"pattern": EDGE}).json()["id"]
    first = _batch(client, (0, 1))
    _batch(client, (2, 3))
    return qid, first


def test_the_timer_prunes_between_the_multiples_of_prune_every(tmp_path):
    with running(tmp_path / "data", result_retention=1, prune_every=1000,
                 prune_seconds=0.05) as client:
        qid, first = _two_events(client)
        url = f"/v1/queries/{qid}/results"
        deadline = time.monotonic() + 10
        while (r := client.get(url, params={"after": 0})).status_code != 410:
            assert time.monotonic() < deadline, r.json()
            time.sleep(0.02)
        assert r.json()["earliest"] == first  # only the last batch's event is kept
        assert [event["id"] for event in client.get(url).json()["events"]] == [first + 1]


def test_without_the_timer_nothing_is_pruned_before_prune_every(tmp_path):
    with running(tmp_path / "data", result_retention=1, prune_every=1000,
                 prune_seconds=0) as client:
        qid, first = _two_events(client)
        time.sleep(0.2)
        page = client.get(f"/v1/queries/{qid}/results", params={"after": 0}).json()
        assert [event["id"] for event in page["events"]] == [first, first + 1]


def test_stream_and_retention_settings_refuse_bad_values_naming_them():
    for field, value in (("heartbeat_seconds", 0), ("sse_retry_ms", -1), ("prune_every", 0),
                         ("prune_seconds", -1)):
        with pytest.raises(ValidationError, match=field):
            Settings(**{field: value})
    assert Settings(prune_seconds=0).prune_seconds == 0  # 0: no timer
