"""Tests for service.routes.events: the SSE stream, the WebSocket and polling, each with its
resume cursor, its endings (gone, deleted, shutdown) and its refusals (401/1008, 404, 410, 422).

The app runs under Starlette's TestClient (its own event loop in a thread), so the engine
stand-in publishes from the test's thread, as the real engine does from its worker thread.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import SimpleNamespace

import httpx
import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from service.deps import require_api_key
from service.hub import Hub
from service.main import add_error_handlers
from service.routes.events import router
from service.schemas_events import ResultsPublic
from service.settings import Settings
from tests.service.fakes import FakeEngine, FakeStore, payload

KEY = "test-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
Q, OTHER = 1, 2
RETRY_MS = 1500


def make_app(store: FakeStore, app_checks_key: bool = True) -> FastAPI:
    """The events router, behind the API key as the service includes it (or, with
    `app_checks_key` False, without the app's check), with the hub built in the lifespan."""
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        hub = Hub(store, buffer=4, page_size=2)
        # Progress often, so "a progress event came" tells a test the stream has sent all
        # it had.
        settings = Settings(api_key=KEY, heartbeat_seconds=0.02, sse_retry_ms=RETRY_MS)
        app.state.motifstream = SimpleNamespace(settings=settings, store=store, hub=hub)
        try:
            yield
        finally:
            await hub.close()

    app = FastAPI(lifespan=lifespan)
    app.include_router(router, dependencies=[Depends(require_api_key)] if app_checks_key else [])
    add_error_handlers(app)
    return app


@dataclass
class Service:
    client: TestClient
    store: FakeStore
    hub: Hub
    engine: FakeEngine


@pytest.fixture
def service() -> Iterator[Service]:
    """Query Q (backfill event at seq 0) and OTHER; batches 1 (Q), 2 (OTHER), 3 (Q)."""
    store = FakeStore()
    store.register(Q, backfill=True)
    store.register(OTHER)
    app = make_app(store)
    with TestClient(app, headers=AUTH) as client:
        hub = app.state.motifstream.hub
        engine = FakeEngine(store, hub)
        for touched in (Q, OTHER, Q):
            engine.batch(touched)
        yield Service(client, store, hub, engine)


def sse_blocks(response: httpx.Response) -> Iterator[dict[str, str]]:
    """The blocks of a text/event-stream response, each as its fields."""
    event: dict[str, str] = {}
    for line in response.iter_lines():
        if not line:
            if event:
                yield event
            event = {}
            continue
        name, _, value = line.partition(":")
        event[name or "comment"] = value.removeprefix(" ")


def sse(response: httpx.Response) -> Iterator[dict[str, str]]:
    """The events of a text/event-stream response, after the `retry:` block it opens with."""
    blocks = sse_blocks(response)
    assert next(blocks) == {"retry": str(RETRY_MS)}
    yield from blocks


def until_idle(events: Iterator[dict[str, str]], through: int = -1) -> list[dict[str, str]]:
    """The events before the first progress event through batch `through` or later (one
    comes only when nothing up to it is left to send).  Earlier progress events are passed
    over: the stream sends one every heartbeat while idle, so some may wait in the
    response, sent before the batches a test has just made (a loaded CI machine took
    longer than the tests' 20 ms heartbeat between two steps of a test)."""
    got = []
    for event in events:
        if event.get("event") == "progress":
            if json.loads(event["data"])["through"] >= through:
                return got
            continue
        got.append(event)
    raise AssertionError(f"the stream ended without a progress event after {got}")


def without_progress(events: Iterator[dict[str, str]]) -> list[dict[str, str]]:
    return [event for event in events if event.get("event") != "progress"]


def receive(ws) -> dict:
    """The next WebSocket message that is not a progress event."""
    while True:
        message = ws.receive_json()
        if message.get("event") != "progress":
            return message


def wait_for_subscribers(hub: Hub, query_id: int, count: int) -> None:
    deadline = time.monotonic() + 5
    while hub.stats(query_id).subscribers != count:
        assert time.monotonic() < deadline, hub.stats(query_id)
        time.sleep(0.001)


def batch_message(seq: int, query_id: int = Q) -> dict:
    return {"id": seq, "event": "batch", "data": json.loads(payload(seq, query_id))}


# ---- Server-Sent Events --------------------------------------------------------------
def test_sse_sends_history_then_live_events_then_deleted(service):
    with service.client.stream("GET", "/v1/queries/1/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse(response)
        assert until_idle(events) == [  # no cursor: every event retained, the backfill first
            {"event": "batch", "data": payload(seq, Q), "id": str(seq)} for seq in (0, 1, 3)]
        service.engine.batch(OTHER)
        last = service.engine.batch(Q)
        assert until_idle(events, last) == [{"event": "batch", "data": payload(5, Q), "id": "5"}]
        service.engine.delete(Q)
        assert without_progress(events) == [{"event": "deleted", "data": '{"query": 1}'}]


def test_sse_resumes_after_last_event_id(service):
    for _ in range(3):
        service.engine.batch(Q)  # 4, 5, 6
    # EventSource repeats the URL it was opened with: the header wins over ?after=.
    with service.client.stream("GET", "/v1/queries/1/events?after=1",
                               headers={"Last-Event-ID": "4"}) as response:
        assert [e["id"] for e in until_idle(sse(response))] == ["5", "6"]
    with service.client.stream("GET", "/v1/queries/1/events?after=1") as response:
        assert [e["id"] for e in until_idle(sse(response))] == ["3", "4", "5", "6"]


def test_sse_client_leaving_ends_its_subscription(service):
    with service.client.stream("GET", "/v1/queries/1/events?after=3") as response:
        events = sse(response)  # kept: dropping the iterator closes the response
        until_idle(events)
        assert service.hub.stats(Q).subscribers == 1
    wait_for_subscribers(service.hub, Q, 0)


def test_sse_pruned_cursor_is_gone(service):
    service.store.prune(Q, through=1)
    with service.client.stream("GET", "/v1/queries/1/events",
                               headers={"Last-Event-ID": "0"}) as response:
        assert list(sse(response)) == [{"event": "gone", "data": '{"earliest": 1}'}]
    with service.client.stream("GET", "/v1/queries/1/events") as response:  # what is retained
        assert [e["id"] for e in until_idle(sse(response))] == ["3"]


def test_sse_shutdown_ends_the_stream(service):
    with service.client.stream("GET", "/v1/queries/1/events?after=3") as response:
        events = sse(response)
        assert until_idle(events) == []
        service.client.portal.call(service.hub.close)
        assert without_progress(events) == [{"event": "shutdown", "data": '{"query": 1}'}]


def progress_through(events: Iterator[dict[str, str]], seq: int) -> list[dict[str, str]]:
    """The events up to the first progress event through `seq` (included); each progress
    event's id is its `through`, and never goes back."""
    got, last = [], -1
    for event in events:
        got.append(event)
        if event.get("event") == "progress":
            through = json.loads(event["data"])["through"]
            assert event["id"] == str(through) and through >= last
            last = through
            if through >= seq:
                return got
    raise AssertionError(f"the stream ended before progress through {seq}: {got}")


def test_sse_progress_advances_past_batches_that_did_not_touch_the_query(service):
    with service.client.stream("GET", "/v1/queries/1/events?after=3") as response:
        events = sse(response)
        assert until_idle(events) == []
        last = [service.engine.batch(OTHER) for _ in range(3)][-1]  # 4, 5, 6: Q untouched
        got = progress_through(events, last)
        assert {event["event"] for event in got} == {"progress"}
        assert got[-1] == {"event": "progress", "data": '{"through": 6}', "id": "6"}
        last = service.engine.batch(Q)
        assert until_idle(events, last) == [{"event": "batch", "data": payload(7, Q), "id": "7"}]


def test_sse_progress_id_is_a_resume_cursor(service):
    with service.client.stream("GET", "/v1/queries/1/events?after=0") as response:
        events = sse(response)
        until_idle(events)
        service.engine.batch(OTHER)  # 4
        last_event_id = progress_through(events, 4)[-1]["id"]
    service.engine.batch(Q)  # 5
    with service.client.stream("GET", "/v1/queries/1/events",
                               headers={"Last-Event-ID": last_event_id}) as response:
        assert until_idle(sse(response)) == [
            {"event": "batch", "data": payload(5, Q), "id": "5"}]


def test_sse_works_with_an_event_source(service):
    """What a browser's EventSource makes of the stream (the WHATWG parsing rules): the
    reconnection time from `retry:`, the named events it dispatches (none reaches
    `onmessage`, whose type is "message"), and the lastEventId it would reconnect with."""
    with service.client.stream("GET", "/v1/queries/1/events?after=1") as response:
        dispatched, reconnection_ms, last_event_id = [], None, ""
        kind, data, event_id = "", [], None
        for line in response.iter_lines():
            if line == "":  # dispatch, as EventSource does: only blocks with data
                if event_id is not None:
                    last_event_id = event_id
                if data:
                    dispatched.append((kind or "message", "\n".join(data), last_event_id))
                kind, data, event_id = "", [], None
                if dispatched and dispatched[-1][0] == "progress":
                    break
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "retry":
                reconnection_ms = int(value)
            elif name == "event":
                kind = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                event_id = value
    assert reconnection_ms == RETRY_MS
    assert dispatched == [("batch", payload(3, Q), "3"),
                          ("progress", '{"through": 3}', "3")]


def test_sse_unknown_query_is_404(service):
    response = service.client.get("/v1/queries/99/events")
    assert response.status_code == 404
    assert response.json()["detail"] == "query 99 not found"


@pytest.mark.parametrize(("params", "headers", "where"), [
    ({"after": "-1"}, {}, ["query", "after"]),
    ({"after": "two"}, {}, ["query", "after"]),
    ({}, {"Last-Event-ID": "x7"}, ["header", "last-event-id"]),
    ({}, {"Last-Event-ID": "-7"}, ["header", "last-event-id"]),
])
def test_sse_bad_cursor_is_422(service, params, headers, where):
    response = service.client.get("/v1/queries/1/events", params=params, headers=headers)
    assert response.status_code == 422
    assert [error["loc"] for error in response.json()["errors"]] == [where]


def test_sse_needs_the_api_key(service):
    response = service.client.get("/v1/queries/1/events", headers={"Authorization": "Bearer no"})
    assert response.status_code == 401


# ---- WebSocket -------------------------------------------------------------------------
def test_ws_sends_history_then_live_events_then_deleted(service):
    with service.client.websocket_connect("/v1/queries/1/ws?after=0") as ws:
        assert [receive(ws), receive(ws)] == [batch_message(1), batch_message(3)]
        service.engine.batch(OTHER)
        service.engine.batch(Q)
        assert receive(ws) == batch_message(5)
        service.engine.delete(Q)
        assert receive(ws) == {"event": "deleted", "data": {"query": 1}}
        with pytest.raises(WebSocketDisconnect) as closed:
            receive(ws)
        assert closed.value.code == 1000


def test_ws_progress_advances_past_batches_that_did_not_touch_the_query(service):
    with service.client.websocket_connect("/v1/queries/1/ws?after=1") as ws:
        assert receive(ws) == batch_message(3)
        for _ in range(2):
            service.engine.batch(OTHER)  # 4, 5
        through = 0
        while through < 5:
            message = ws.receive_json()
            assert message["event"] == "progress", message
            assert message["id"] == message["data"]["through"] >= through
            through = message["id"]
        assert through == 5


def test_ws_without_cursor_starts_with_the_backfill_event(service):
    with service.client.websocket_connect("/v1/queries/1/ws") as ws:
        assert receive(ws) == batch_message(0)


def test_ws_client_leaving_ends_its_subscription(service):
    with service.client.websocket_connect("/v1/queries/1/ws?after=1") as ws:
        assert receive(ws) == batch_message(3)
        ws.send_text("ignored")
        service.engine.batch(Q)
        assert receive(ws) == batch_message(4)
    wait_for_subscribers(service.hub, Q, 0)


def test_ws_pruned_cursor_is_gone(service):
    service.store.prune(Q, through=1)
    with service.client.websocket_connect("/v1/queries/1/ws?after=0") as ws:
        assert receive(ws) == {"event": "gone", "data": {"earliest": 1}}
        with pytest.raises(WebSocketDisconnect) as closed:
            receive(ws)
        assert closed.value.code == 4410


def test_ws_shutdown_ends_the_stream(service):
    with service.client.websocket_connect("/v1/queries/1/ws?after=1") as ws:
        assert receive(ws) == batch_message(3)
        service.client.portal.call(service.hub.close)
        assert receive(ws) == {"event": "shutdown", "data": {"query": 1}}
        with pytest.raises(WebSocketDisconnect) as closed:
            receive(ws)
        assert closed.value.code == 1001


@pytest.mark.parametrize("headers", [{"Authorization": ""}, {"Authorization": "Bearer wrong"}])
def test_ws_refuses_a_missing_or_wrong_key_with_1008(headers):
    # The handler's own check, for when the app does not check the key before it.
    store = FakeStore()
    store.register(Q)
    app = make_app(store, app_checks_key=False)
    with TestClient(app) as client, \
            client.websocket_connect("/v1/queries/1/ws", headers=dict(headers)) as ws, \
            pytest.raises(WebSocketDisconnect) as refused:
        receive(ws)
    assert (refused.value.code, refused.value.reason) == (1008, "missing or wrong API key")
    assert app.state.motifstream.hub.stats(Q).subscribers == 0


def test_ws_behind_the_apps_key_check_is_refused_at_the_handshake(service):
    # The service's router-level require_api_key runs first: a 401 denial, no socket.
    with pytest.raises(WebSocketDenialResponse) as refused, \
            service.client.websocket_connect("/v1/queries/1/ws",
                                             headers={"Authorization": "Bearer wrong"}):
        pass
    assert refused.value.status_code == 401
    assert service.hub.stats(Q).subscribers == 0


def test_ws_accepts_the_key_as_access_token(service):
    # Browsers cannot set headers on a WebSocket.
    with service.client.websocket_connect(f"/v1/queries/1/ws?after=1&access_token={KEY}",
                                          headers={"Authorization": ""}) as ws:
        assert receive(ws) == batch_message(3)


@pytest.mark.parametrize(("path", "code", "reason"), [
    ("/v1/queries/99/ws", 4404, "query 99 not found"),
    ("/v1/queries/1/ws?after=-1", 4422, "after: must be a non-negative integer"),
    ("/v1/queries/1/ws?after=", 4422, "after: must be a non-negative integer"),
])
def test_ws_unknown_query_or_bad_cursor_closes(service, path, code, reason):
    with service.client.websocket_connect(path) as ws, \
            pytest.raises(WebSocketDisconnect) as closed:
        receive(ws)
    assert (closed.value.code, closed.value.reason) == (code, reason)


def test_openapi_documents_the_http_routes(service):
    paths = service.client.get("/openapi.json").json()["paths"]
    stream = paths["/v1/queries/{query_id}/events"]["get"]
    assert "text/event-stream" in stream["responses"]["200"]["content"]
    assert {p["name"] for p in stream["parameters"]} == {"query_id", "after", "last-event-id"}
    assert "every event still retained" in stream["description"]
    poll = paths["/v1/queries/{query_id}/results"]["get"]
    assert set(poll["responses"]) == {"200", "404", "410", "422"}


# ---- polling ---------------------------------------------------------------------------
@asynccontextmanager
async def polling_client(store: FakeStore):
    """An httpx client on the app in this test's event loop (the lifespan run by hand)."""
    app = make_app(store)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test",
            headers=AUTH) as client:
        yield client


@pytest.fixture
def polled_store() -> FakeStore:
    """Query Q (backfill at 0) with events 0, 1, 3, 4 of batches 1..4."""
    store = FakeStore()
    store.register(Q, backfill=True)
    store.register(OTHER)
    for touched in ((Q,), (OTHER,), (Q,), (Q, OTHER)):
        store.commit(touched)
    return store


def results(response: httpx.Response) -> tuple[list[int], int, int]:
    """The page's event ids, `next` and `last_batch`; `complete_through` is `next` here."""
    page = polled(response)
    assert page.complete_through == page.next
    return [event.id for event in page.events], page.next, page.last_batch


def polled(response: httpx.Response) -> ResultsPublic:
    assert response.status_code == 200, response.text
    page = ResultsPublic.model_validate_json(response.content)
    assert page.query == Q
    for event in page.events:
        assert event.data == json.loads(payload(event.id, Q))
    return page


@pytest.mark.anyio
async def test_poll_pages_through_the_events(polled_store):
    async with polling_client(polled_store) as client:
        url = "/v1/queries/1/results"
        assert results(await client.get(url, params={"limit": 2})) == ([0, 1], 1, 4)
        assert results(await client.get(url, params={"after": 1, "limit": 2})) == ([3, 4], 4, 4)
        assert results(await client.get(url, params={"after": 4})) == ([], 4, 4)
        polled_store.commit((Q,))
        assert results(await client.get(url, params={"after": 4})) == ([5], 5, 5)


@pytest.mark.anyio
async def test_poll_is_complete_through_batches_that_did_not_touch_the_query(polled_store):
    async with polling_client(polled_store) as client:
        url = "/v1/queries/1/results"
        for _ in range(3):
            polled_store.commit((OTHER,))  # 5, 6, 7
        page = polled(await client.get(url, params={"after": 4}))
        assert (page.events, page.complete_through, page.next, page.last_batch) == ([], 7, 7, 7)
        # A full page is complete only through its last event, whatever came later.
        page = polled(await client.get(url, params={"after": 0, "limit": 2}))
        assert ([e.id for e in page.events], page.complete_through) == ([1, 3], 3)
        page = polled(await client.get(url, params={"after": 3, "limit": 2}))
        assert ([e.id for e in page.events], page.complete_through) == ([4], 7)
        # A cursor ahead of the log was never given out: refused (issue 21), naming `after`.
        response = await client.get(url, params={"after": 50})
        assert response.status_code == 422
        assert response.json()["errors"][0]["loc"] == ["query", "after"]


@pytest.mark.anyio
async def test_poll_pruned_cursor_is_410(polled_store):
    polled_store.prune(Q, through=3)
    async with polling_client(polled_store) as client:
        response = await client.get("/v1/queries/1/results", params={"after": 1})
        assert response.status_code == 410
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        del problem["request_id"]   # (this test's app has no request-id middleware)
        assert problem == {
            "type": "about:blank", "title": "Gone", "status": 410, "code": "results_gone",
            "detail": "query 1: events after 1 were pruned; the earliest cursor still served "
                      "is 3",
            "instance": "/v1/queries/1/results", "earliest": 3}
        # Without a cursor: what is retained; with nothing retained, `next` skips the pruned.
        assert results(await client.get("/v1/queries/1/results")) == ([4], 4, 4)
        polled_store.prune(Q, through=4)
        assert results(await client.get("/v1/queries/1/results")) == ([], 4, 4)


@pytest.mark.anyio
@pytest.mark.parametrize(("params", "field"), [
    ({"after": "-1"}, "after"), ({"after": "one"}, "after"),
    ({"limit": "0"}, "limit"), ({"limit": "10001"}, "limit"),
])
async def test_poll_bad_parameters_are_422(polled_store, params, field):
    async with polling_client(polled_store) as client:
        response = await client.get("/v1/queries/1/results", params=params)
    assert response.status_code == 422
    assert [error["loc"] for error in response.json()["errors"]] == [["query", field]]


@pytest.mark.anyio
async def test_poll_unknown_query_is_404_and_the_key_is_needed(polled_store):
    async with polling_client(polled_store) as client:
        response = await client.get("/v1/queries/99/results")
        assert (response.status_code, response.json()["detail"]) == (404, "query 99 not found")
        response = await client.get("/v1/queries/1/results", headers={"Authorization": ""})
        assert response.status_code == 401
