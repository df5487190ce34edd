"""Webhooks on the running service, against a receiver on 127.0.0.1: signed deliveries,
retries with backoff, dead letters, a durable cursor across restarts, and bad input."""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections import deque
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import asyncio

import httpx2
import pytest

from service.settings import Settings
from service.webhooks import (ATTEMPT_HEADER, BATCH_HEADER, QUERY_HEADER, SIGNATURE_HEADER,
                              Deliverer, Webhook, retry_after)
from storage import EventRecord
from tests.service.conftest import running

EDGE = {"vertices": [{"id": 0, "label": 0}, {"id": 1, "label": 0}],
        "edges": [{"source": 0, "target": 1}]}
SECRET = "a-webhook-secret-of-some-length"
# Tiny backoff so that retries take milliseconds.
FAST = {"webhook_backoff_seconds": 0.01, "webhook_backoff_max_seconds": 0.02}


class Receiver:
    """An HTTP server on 127.0.0.1 that records every POST and answers with the statuses
    scripted in `answers` (200 once they run out)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.answers: deque[int] = deque()
        self.always: int | None = None  # answer every request with this, when set
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    status = receiver.always or (receiver.answers.popleft()
                                                 if receiver.answers else 200)
                    receiver.requests.append({"path": self.path, "headers": dict(self.headers),
                                              "body": body, "status": status})
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def delivered(self) -> list[int]:
        """The batches of the requests answered 2xx, in order."""
        with self.lock:
            return [int(r["headers"][BATCH_HEADER]) for r in self.requests
                    if r["status"] < 300]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def wait_for(condition, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
    return value


def _query(client) -> int:
    vertices = [[v, 0] for v in range(8)]
    assert client.put("/v1/graph", json={"vertices": vertices}).status_code == 200
    return client.post("/v1/queries", json={"pattern": EDGE}).json()["id"]


def _batch(client, u: int, v: int) -> int:
    r = client.post("/v1/batches", json={"insert_edges": [[u, v]]})
    assert r.status_code == 200, r.text
    return r.json()["batch"]


def _hook(client, qid: int, url: str, **extra) -> dict:
    r = client.put(f"/v1/queries/{qid}/webhook", json={"url": url, "secret": SECRET, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _polled(client, qid: int) -> dict[int, bytes]:
    """The query's events as polled: batch -> the JSON of its data."""
    events = client.get(f"/v1/queries/{qid}/results").json()["events"]
    return {event["id"]: event["data"] for event in events}


def test_deliveries_are_the_stream_events_signed_with_the_batch_id(tmp_path, receiver):
    with running(tmp_path / "data", **FAST) as client:
        qid = _query(client)
        before = _batch(client, 0, 1)       # before the webhook: not delivered
        shown = _hook(client, qid, receiver.url)
        assert shown["delivered_through"] == before and "secret" not in shown
        batches = [_batch(client, 2, 3), _batch(client, 4, 5)]
        wait_for(lambda: len(receiver.delivered()) == 2)
        polled = _polled(client, qid)
        for request, batch in zip(receiver.requests, batches):
            body, headers = request["body"], request["headers"]
            expected = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            assert hmac.compare_digest(headers[SIGNATURE_HEADER], f"sha256={expected}")
            assert (headers[BATCH_HEADER], headers[QUERY_HEADER], headers[ATTEMPT_HEADER]) \
                == (str(batch), str(qid), "1")
            assert headers["Content-Type"] == "application/json"
            assert json.loads(body) == polled[batch]
            assert json.loads(body)["batch"] == batch and "time" in json.loads(body)
        wait_for(lambda: client.get(f"/v1/queries/{qid}/webhook").json()
                 ["delivered_through"] == batches[-1])


def test_a_failing_receiver_is_retried_until_it_answers(tmp_path, receiver):
    with running(tmp_path / "data", webhook_attempts=5, **FAST) as client:
        qid = _query(client)
        _hook(client, qid, receiver.url)
        receiver.answers.extend([500, 429, 503])
        batch = _batch(client, 0, 1)
        wait_for(receiver.delivered)
        assert [(r["headers"][BATCH_HEADER], r["headers"][ATTEMPT_HEADER], r["status"])
                for r in receiver.requests] == [
            (str(batch), "1", 500), (str(batch), "2", 429), (str(batch), "3", 503),
            (str(batch), "4", 200)]
        assert len({r["headers"][SIGNATURE_HEADER] for r in receiver.requests}) == 1
        assert client.get(f"/v1/queries/{qid}/webhook/dead-letters").json() \
            == {"dead_letters": [], "next": None}


def test_an_event_is_a_dead_letter_after_the_attempts_and_delivery_goes_on(tmp_path, receiver):
    with running(tmp_path / "data", webhook_attempts=3, **FAST) as client:
        qid = _query(client)
        _hook(client, qid, receiver.url)
        receiver.always = 502
        lost = _batch(client, 0, 1)
        wait_for(lambda: client.get(f"/v1/queries/{qid}/webhook/dead-letters")
                 .json()["dead_letters"])
        assert len(receiver.requests) == 3
        receiver.always = None
        receiver.answers.append(404)        # not retried: a dead letter at once
        refused = _batch(client, 2, 3)
        delivered = _batch(client, 4, 5)
        wait_for(receiver.delivered)
        assert receiver.delivered() == [delivered]
        letters = client.get(f"/v1/queries/{qid}/webhook/dead-letters").json()
        polled = _polled(client, qid)
        assert [(d["batch"], d["attempts"], d["error"], d["event"])
                for d in letters["dead_letters"]] == [
            (lost, 3, "HTTP 502", polled[lost]), (refused, 1, "HTTP 404", polled[refused])]
        page = client.get(f"/v1/queries/{qid}/webhook/dead-letters", params={"limit": 1})
        assert page.json()["next"] == lost
        rest = client.get(f"/v1/queries/{qid}/webhook/dead-letters",
                          params={"after": lost}).json()
        assert [d["batch"] for d in rest["dead_letters"]] == [refused]
        last = client.get("/v1/graph").json()["batches"]
        assert client.get(f"/v1/queries/{qid}/webhook/dead-letters",
                          params={"after": last}).status_code == 200
        past = client.get(f"/v1/queries/{qid}/webhook/dead-letters",
                          params={"after": last + 1})
        assert past.status_code == 422
        assert f"{last + 1} is past the last batch, {last}" in past.json()["detail"]
        # What /metrics says of it: one event delivered, two given up on after four
        # failed attempts (3 + 1), the webhook running and caught up.
        text = client.get("/metrics").text
        assert 'motifstream_push_events_total{outcome="delivered",output="webhook"} 1.0' in text
        assert 'motifstream_push_events_total{outcome="dead_letter",output="webhook"} 2.0' \
            in text
        assert 'motifstream_push_failures_total{output="webhook"} 4.0' in text
        assert 'motifstream_push_outputs{output="webhook"} 1.0' in text
        wait_for(lambda: 'motifstream_push_lag_max{output="webhook"} 0.0'
                 in client.get("/metrics").text)


def test_an_unreachable_receiver_is_a_dead_letter_with_the_connection_error(tmp_path, receiver):
    url = receiver.url
    receiver.close()                        # nothing listens on its port any more
    with running(tmp_path / "data", webhook_attempts=2, **FAST) as client:
        qid = _query(client)
        _hook(client, qid, url)
        batch = _batch(client, 0, 1)
        letters = wait_for(lambda: client.get(f"/v1/queries/{qid}/webhook/dead-letters")
                           .json()["dead_letters"])
        assert [(d["batch"], d["attempts"]) for d in letters] == [(batch, 2)]
        assert letters[0]["error"].startswith("ConnectError")


def test_delivery_resumes_from_the_durable_cursor_after_a_restart(tmp_path, receiver):
    data = tmp_path / "data"
    # A receiver that fails for longer than the first run lasts: its event stays undelivered.
    with running(data, webhook_attempts=1000, **FAST) as client:
        qid = _query(client)
        _hook(client, qid, receiver.url)
        first = _batch(client, 0, 1)
        wait_for(lambda: receiver.delivered() == [first])
        wait_for(lambda: client.get(f"/v1/queries/{qid}/webhook").json()
                 ["delivered_through"] == first)
        receiver.always = 500
        pending = _batch(client, 2, 3)
        wait_for(lambda: len(receiver.requests) >= 3)
    receiver.always = None
    with running(data, **FAST) as client:
        later = _batch(client, 4, 5)
        wait_for(lambda: len(receiver.delivered()) == 3)
        time.sleep(0.2)                     # room for a duplicate to show up
        assert receiver.delivered() == [first, pending, later]
        assert [r["headers"][BATCH_HEADER] for r in receiver.requests
                if r["status"] == 500] == [str(pending)] * (len(receiver.requests) - 3)


def test_put_replaces_the_webhook_and_delete_stops_it(tmp_path, receiver):
    other = Receiver()
    try:
        with running(tmp_path / "data", **FAST) as client:
            qid = _query(client)
            _hook(client, qid, other.url)
            first = _batch(client, 0, 1)
            wait_for(lambda: client.get(f"/v1/queries/{qid}/webhook").json()
                     ["delivered_through"] == first)
            # A new URL keeps the cursor; `after` replays from an earlier batch.
            assert _hook(client, qid, receiver.url)["delivered_through"] == first
            assert _hook(client, qid, receiver.url, after=-1)["delivered_through"] == -1
            wait_for(lambda: receiver.delivered() == [first])
            assert client.delete(f"/v1/queries/{qid}/webhook").status_code == 204
            assert client.get(f"/v1/queries/{qid}/webhook").status_code == 404
            assert client.delete(f"/v1/queries/{qid}/webhook").status_code == 404
            _batch(client, 2, 3)
            time.sleep(0.2)
            assert receiver.delivered() == [first] and other.delivered() == [first]
    finally:
        other.close()


def test_deleting_the_query_deletes_its_webhook(tmp_path, receiver):
    with running(tmp_path / "data", **FAST) as client:
        qid = _query(client)
        _hook(client, qid, receiver.url)
        assert client.delete(f"/v1/queries/{qid}").status_code == 204
        assert client.get(f"/v1/queries/{qid}/webhook").status_code == 404
    with running(tmp_path / "data", **FAST) as client:     # nothing left to resume
        assert client.app.state.motifstream.store.webhooks() == []


@pytest.mark.parametrize(("body", "field"), [
    ({"url": "ftp://example.com/x", "secret": SECRET}, "url"),
    ({"url": "http:///nohost", "secret": SECRET}, "url"),
    ({"url": "http://127.0.0.1/x", "secret": "short"}, "secret"),
    ({"url": "http://127.0.0.1/x", "secret": SECRET, "after": -2}, "after"),
    ({"url": "http://127.0.0.1/x", "secret": SECRET, "after": 1}, "after"),   # past the end
    ({"url": "http://127.0.0.1/x", "secret": SECRET, "retries": 3}, "retries"),
])
def test_a_bad_webhook_is_refused_naming_the_field_and_changes_nothing(tmp_path, body, field):
    with running(tmp_path / "data") as client:
        qid = _query(client)
        r = client.put(f"/v1/queries/{qid}/webhook", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["loc"] == ["body", field]
        assert client.get(f"/v1/queries/{qid}/webhook").status_code == 404


def test_an_unknown_query_has_no_webhook(tmp_path):
    with running(tmp_path / "data") as client:
        r = client.put("/v1/queries/7/webhook", json={"url": "http://127.0.0.1/", "secret": SECRET})
        assert (r.status_code, r.json()["detail"]) == (404, "query 7 not found")
        assert client.get("/v1/queries/7/webhook/dead-letters").status_code == 404
        assert client.get("/v1/queries/7/webhook").status_code == 404


class _CursorLog:
    """Stands in for the store: records Deliverer's cursor writes."""

    def __init__(self) -> None:
        self.writes: list[tuple] = []

    def webhook_delivered(self, query_id, seq, dead_letter) -> None:
        self.writes.append((query_id, seq, dead_letter))


BACKOFF = Settings(webhook_attempts=6, webhook_backoff_seconds=1.0,
                   webhook_backoff_max_seconds=5.0)
EVENT = EventRecord(3, 12, '{"batch": 12}')


def _delays_to_a_dead_letter(monkeypatch, answering) -> tuple[list[float], tuple]:
    """One event delivered under BACKOFF to a receiver that answers `answering(request)`
    every time: the waits between the tries, and the dead letter's (query, batch, (payload,
    attempts, error, time))."""
    delays: list[float] = []

    async def no_wait(seconds: float) -> None:
        delays.append(seconds)

    store = _CursorLog()
    webhook = Webhook(3, "http://receiver.test/hook", SECRET, 11, "2026-11-25T00:00:00+00:00")

    async def deliver() -> None:
        deliverer = Deliverer(store, None, BACKOFF, transport=httpx2.MockTransport(answering))
        monkeypatch.setattr(asyncio, "sleep", no_wait)
        try:
            await deliverer._deliver(webhook, EVENT)
        finally:
            monkeypatch.undo()
            await deliverer.close()

    asyncio.run(deliver())
    [dead_letter] = store.writes
    return delays, dead_letter


def test_the_backoff_doubles_up_to_its_cap_then_the_event_is_a_dead_letter(monkeypatch):
    delays, dead_letter = _delays_to_a_dead_letter(monkeypatch,
                                                   lambda request: httpx2.Response(503))
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    query_id, seq, (payload, attempts, error, _) = dead_letter
    assert (query_id, seq, payload, attempts, error) == (3, 12, EVENT.payload, 6, "HTTP 503")


@pytest.mark.parametrize("answer, expected", [
    # Retry-After in seconds: longer than the backoff is waited, up to the cap; shorter
    # leaves the backoff as it is.
    ({"Retry-After": "3"}, [3.0, 3.0, 4.0, 5.0, 5.0]),
    ({"Retry-After": "120"}, [5.0, 5.0, 5.0, 5.0, 5.0]),
    ({"Retry-After": "0"}, [1.0, 2.0, 4.0, 5.0, 5.0]),
    # An HTTP date (RFC 9110): four seconds from now, as the receiver's clock says.
    ({"Retry-After": "date+4"}, [4.0, 4.0, 4.0, 5.0, 5.0]),
    # Not a delay: ignored.
    ({"Retry-After": "soon"}, [1.0, 2.0, 4.0, 5.0, 5.0]),
])
def test_retry_after_is_honoured_up_to_the_backoff_cap(monkeypatch, answer, expected):
    def answering(request):
        headers = dict(answer)
        if headers["Retry-After"].startswith("date+"):
            when = datetime.now(timezone.utc) + timedelta(
                seconds=int(headers["Retry-After"][5:]) + 0.9)   # HTTP dates drop fractions
            headers["Retry-After"] = format_datetime(when, usegmt=True)
        return httpx2.Response(429, headers=headers)

    delays, (_, _, (_, attempts, error, _)) = _delays_to_a_dead_letter(monkeypatch, answering)
    assert delays == pytest.approx(expected, abs=0.95)
    assert (attempts, error) == (6, "HTTP 429")


def test_retry_after_reads_seconds_and_http_dates():
    now = datetime(2026, 11, 27, 8, 0, 0, tzinfo=timezone.utc)

    def asked(value: str):
        return retry_after(httpx2.Response(503, headers={"Retry-After": value}), now)

    assert asked("7") == 7.0
    assert asked("Fri, 27 Nov 2026 08:00:30 GMT") == 30.0
    assert asked("Fri, 27 Nov 2026 07:59:00 GMT") == 0.0      # already past
    assert asked("-3") is None and asked("1.5") is None and asked("") is None
    assert asked("Fri, 27 Nov 2026 08:00:30") is None          # no zone: not an HTTP date
