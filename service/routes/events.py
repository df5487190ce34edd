"""Owns the result-subscription endpoints of a standing query: Server-Sent Events, WebSocket
and polling.

All three serve the same events, one per batch that touched the query (plus its backfill event,
which carries the batch seq at registration), with `id` = the batch seq, and take the same
cursor: the events with seq > `after`; without a cursor, every event still retained. A cursor
older than the result retention is answered with `gone` (410 when polling) and the earliest
cursor still served.

Progress: batches that did not touch the query have no event, so each transport also says how
far the consumer is complete (as Materialize's SUBSCRIBE progress rows and Feldera's do): the
streams send a `progress` event `{"through": N}` with `id` N after `heartbeat_seconds` without
an event, and a polled page carries `complete_through`. N is a valid resume cursor.

Slow clients: a stream's memory on the server is bounded whatever its client does (the hub's
live buffer, one write, and the server's socket buffers). A stream whose client has not taken
a write for `subscriber_stall_seconds`, or (with `subscriber_max_lag`) one that fell too far
behind, is cut: its subscription is released and its last event is `lagging`, naming the
reason and the id of the last event the client's socket took, from which it resumes.
"""
from __future__ import annotations

import enum
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Protocol

import anyio
from fastapi import APIRouter, Depends, Header, HTTPException, Query, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from starlette import status
from starlette.concurrency import run_in_threadpool
from starlette.types import Send
from starlette.websockets import WebSocketDisconnect

from service.deps import (ALWAYS_ACCEPTED_PARAMETERS, StateDep, key_accepted, presented_key,
                          reject_unknown_parameters)
from service.hub import Subscription, SubscriptionGone, SubscriptionLagging, retained_events
from service.state import ServiceState
from service.schemas_events import ResultsPublic
from storage import EventRecord, ResultsPruned

router = APIRouter(prefix="/v1/queries", tags=["events"],
                   dependencies=[Depends(reject_unknown_parameters)])

log = logging.getLogger("motifstream.events")

MAX_PAGE = 10_000

# WebSocket close codes besides 1008 (no API key): after a stream's last event, and refusals.
# `lagging`: 1013 Try Again Later, the registered code for a server that drops a client for
# a temporary condition.
WS_LAST_EVENT_CLOSE = {"deleted": status.WS_1000_NORMAL_CLOSURE,
                       "shutdown": status.WS_1001_GOING_AWAY, "gone": 4410,
                       "lagging": status.WS_1013_TRY_AGAIN_LATER}
WS_NOT_FOUND = 4404
WS_BAD_CURSOR = 4422

# Ids and cursors are SQLite integers: anything above is refused before it reaches the store.
MAX_ID = 2**63 - 1

AfterQuery = Annotated[int | None, Query(
    ge=0, le=MAX_ID,
    description="Resume cursor: only events with id > after. Default: every event still "
                "retained.")]


async def _query_exists(state: StateDep, query_id: int) -> bool:
    if not 0 <= query_id <= MAX_ID:     # no such id can have been given out
        return False
    return await run_in_threadpool(state.store.query, query_id) is not None  # a blocking read


def _not_found(query_id: int) -> str:
    return f"query {query_id} not found"


async def require_query(query_id: int, state: StateDep) -> None:
    """404 unless the query exists."""
    if not await _query_exists(state, query_id):
        raise HTTPException(404, _not_found(query_id))


NOT_FOUND_RESPONSE = {404: {"description": "No such query"}}


def past_the_end(after: int, last_batch: int) -> str | None:
    """Why a cursor cannot be served, or None.  A cursor is a batch some answer named, and
    every batch named was committed first: one past the last committed batch was never
    given out (a typo, or another service's), and following it would skip the events of
    the batches up to it in silence.  The last batch itself is a valid cursor: nothing
    new yet."""
    if after <= last_batch:
        return None
    return f"{after} is past the last batch, {last_batch}"


async def refuse_cursor_past_the_end(state: ServiceState, after: int | None,
                                       where: tuple[str, str]) -> None:
    """422 naming the cursor's parameter (`where`, its place and name) when it is past the
    last committed batch (past_the_end): every route that takes a cursor."""
    if after is None:
        return
    why = past_the_end(after, await run_in_threadpool(state.store.last_seq))
    if why is not None:
        raise cursor_refused(where, why)


def cursor_refused(where: tuple[str, str], why: str) -> RequestValidationError:
    """A cursor past the end as a schema error of its parameter (a 422 problem naming it)."""
    return RequestValidationError([{"loc": where, "type": "less_than_equal", "msg": why}])


class EventStream(StreamingResponse):
    """A text/event-stream response that writes a query's events itself (FastAPI's
    EventSourceResponse would make FastAPI run the endpoint as its own SSE generator), giving
    each write `subscriber_stall_seconds` to be taken by the client's socket."""

    media_type = "text/event-stream"

    # status_code: FastAPI reads the documented status from the signature.
    def __init__(self, state: ServiceState, query_id: int, cursor: int | None,
                 status_code: int = 200) -> None:
        # The body is written by stream_response.
        super().__init__((), status_code=status_code, headers=_SSE_HEADERS)
        self.state, self.query_id, self.cursor = state, query_id, cursor

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})

        async def write(chunk: bytes, stall: float | None) -> bool:
            # uvicorn waits for its socket buffer to drain before it writes a chunk, so a
            # write given up on wrote nothing.
            with anyio.move_on_after(stall):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                return True
            return False

        await _sse_stream(self.state, self.query_id, self.cursor, write)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _event(name: str, data: dict, with_id: bool) -> dict:
    """One kind of SSE event as the OpenAPI document describes it (`itemSchema`): its name,
    its `id` when it is a resume cursor, and its `data`, one line of JSON."""
    schema = {"type": "object", "required": ["event", "data", *(["id"] if with_id else [])],
              "properties": {"event": {"const": name},
                             "data": {"type": "string", "contentMediaType": "application/json",
                                      "contentSchema": data}}}
    if with_id:
        schema["properties"]["id"] = {"type": "string", "pattern": "^[0-9]+$"}
    return schema


_CURSOR_DATA = {"type": "integer", "minimum": 0}
_SSE_EVENTS = {"200": {"description": "the event stream", "content": {EventStream.media_type: {
    "itemSchema": {"oneOf": [
        _event("batch", {"type": "object", "required": ["batch", "positive", "negative"]},
               True),
        _event("progress", {"type": "object", "required": ["through"],
                            "properties": {"through": _CURSOR_DATA}}, True),
        _event("gone", {"type": "object", "required": ["earliest"],
                        "properties": {"earliest": _CURSOR_DATA}}, False),
        *(_event(name, {"type": "object", "required": ["query"],
                        "properties": {"query": {"type": "integer"}}}, False)
          for name in ("deleted", "shutdown"))]}}}}}


@router.get("/{query_id}/events", response_class=EventStream,
            dependencies=[Depends(require_query)],
            responses={**NOT_FOUND_RESPONSE, **_SSE_EVENTS})
async def stream_events(
    query_id: int,
    state: StateDep,
    after: AfterQuery = None,
    last_event_id: Annotated[int | None, Header(
        ge=0, le=MAX_ID,
        description="Sent by EventSource on reconnection; wins over `after`.")] = None,
) -> EventStream:
    """Server-Sent Events of the query's results, as they are committed.

    Each batch that touched the query is an `event: batch` whose `id` is the batch seq and
    whose `data` is the result JSON. After `heartbeat_seconds` without one, an `event:
    progress` with `id` N and data `{"through": N}`: every event up to batch N was sent.
    The stream opens with `retry:` (EventSource's reconnection delay, `sse_retry_ms`) and
    starts after `Last-Event-ID`, else after `?after=`, else with every event still retained
    (the backfill event first). It ends with one last event: `gone` (data `{"earliest": N}`:
    the cursor is older than the retention; reconnect with `after=N` or later, and do not let
    EventSource retry as is), `deleted` (the query was deleted), `shutdown` (the server is
    stopping; reconnecting resumes) or `lagging` (data `{"reason": "stalled" | "behind",
    "last_id": N}`: the client took nothing for `subscriber_stall_seconds`, or fell more
    than `subscriber_max_lag` batches behind; reconnecting with `Last-Event-ID: N` resumes,
    as EventSource does). Every event is named, so a browser's EventSource sees them
    through `addEventListener("batch", ...)` (and "progress", ...), not `onmessage`.
    """
    if last_event_id is not None:
        await refuse_cursor_past_the_end(state, last_event_id, ("header", "last-event-id"))
        cursor = last_event_id
    else:
        await refuse_cursor_past_the_end(state, after, ("query", "after"))
        cursor = after
    # Written by EventStream rather than through FastAPI's generator endpoints: those run
    # the generator in a task of its own behind a memory stream and a keep-alive task, and
    # cost the event loop several times what the events' own writes did
    # (docs/benchmarks.md).
    return EventStream(state, query_id, cursor)


# As FastAPI's SSE responses: not cached, and not buffered by Nginx proxies.
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# Events sent in one write at most (those already buffered when the first is sent).
SSE_EVENTS_PER_WRITE = 64

# write(chunk, stall): False when the client's socket did not take it within `stall` seconds
# (None: as long as it takes).
Write = Callable[[bytes, "float | None"], Awaitable[bool]]


async def _sse_stream(state: ServiceState, query_id: int, cursor: int | None,
                      write: Write) -> None:
    settings = state.settings
    stall = settings.subscriber_stall_seconds
    # The id of the last event the client's socket took: where a cut client resumes.
    last_id = cursor
    if await write(f"retry: {settings.sse_retry_ms}\n\n".encode(), stall):
        async with state.hub.subscribe(query_id, cursor,
                                       max_lag=settings.subscriber_max_lag) as subscription:
            end = await _follow(subscription, settings.heartbeat_seconds, stall, last_id,
                                _SseWrites(write))
    else:
        end = _lagging("stalled", last_id)
    assert end is not None  # an SSE client that leaves cancels this task instead
    event, data = end
    if event == "lagging":
        log.info("SSE stream of query %d cut: %s", query_id, data)
    # The last event waits behind whatever the socket holds, as long as it takes: nothing
    # else of the stream is left on the server but this task and its socket.
    await write(_sse_event(event, json.dumps(data)), None)


class _Writes(Protocol):
    """How `_follow` writes to one transport: each write returns False when the client's
    socket did not take it within `stall` seconds."""

    per_write: int  # events in one write at most
    open: bool  # False once the client went away

    async def events(self, records: list[EventRecord], stall: float) -> bool: ...

    async def progress(self, through: int, stall: float) -> bool: ...


class _SseWrites:
    """The batch and progress writes of `_follow`, in the text/event-stream format."""

    per_write = SSE_EVENTS_PER_WRITE
    open = True  # a client that leaves cancels the response (StreamingResponse)

    def __init__(self, write: Write) -> None:
        self.write = write

    async def events(self, records: list[EventRecord], stall: float) -> bool:
        return await self.write(b"".join(_sse_event("batch", record.payload, record.seq)
                                         for record in records), stall)

    async def progress(self, through: int, stall: float) -> bool:
        return await self.write(_sse_event("progress", _progress_json(through), through), stall)


async def _follow(subscription: Subscription, heartbeat: float, stall: float,
                  last_id: int | None, writes: _Writes) -> tuple[str, dict[str, Any]] | None:
    """Write the subscription's events, with a progress event after `heartbeat` seconds
    without one, until it ends or is cut: the name and data of the stream's last event
    (None: the client went away). `last_id`: the stream's starting cursor."""
    try:
        while True:
            record = await subscription.next(timeout=heartbeat)
            if record is not None:
                records = [record, *subscription.ready(writes.per_write - 1)]
                taken = await writes.events(records, stall)
                seq = records[-1].seq
            elif subscription.ended is None:    # timed out: the log is read, `through` >= 0
                seq = subscription.complete_through()
                taken = await writes.progress(seq, stall)
            else:
                return subscription.ended.value, {"query": subscription.query_id}
            if not writes.open:
                return None
            if not taken:
                return _lagging("stalled", last_id)
            last_id = seq
    except SubscriptionGone as exc:
        return "gone", {"earliest": exc.earliest}
    except SubscriptionLagging as exc:
        return _lagging("behind", last_id, behind=exc.behind)


def _lagging(reason: str, last_id: int | None, **more: int) -> tuple[str, dict[str, Any]]:
    """A cut stream's last event: why, and the id its client resumes after (null: none was
    taken yet, and the stream's own starting point still holds)."""
    return "lagging", {"reason": reason, "last_id": last_id, **more}


def _progress_json(through: int) -> str:
    return f'{{"through": {through}}}'


def _sse_event(event: str, data: str, seq: int | None = None) -> bytes:
    """One event in the text/event-stream format; `data` is one line (JSON text)."""
    id_line = "" if seq is None else f"id: {seq}\n"
    return f"event: {event}\ndata: {data}\n{id_line}\n".encode()


@router.get("/{query_id}/results", response_model=ResultsPublic,
            dependencies=[Depends(require_query)],
            responses={**NOT_FOUND_RESPONSE, 410: {"description": "The cursor is older than "
                                                                  "the result retention"}})
async def poll_results(
    query_id: int,
    state: StateDep,
    after: AfterQuery = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> Response:
    """A page of the query's events: those with id > `after` (default: every event still
    retained), oldest first. `complete_through`: the page holds every event up to that
    batch, touched or not; pass `next` as `after` to get the following page. An `after`
    past the last batch is a 422 (the last batch itself: an empty page until the next)."""
    def read() -> tuple[int, list[EventRecord], int]:
        # Read first: the events read next include every event up to it (and maybe later).
        last_batch = state.store.last_seq()
        if after is not None and (why := past_the_end(after, last_batch)) is not None:
            raise cursor_refused(("query", "after"), why)
        start, events = retained_events(state.store, query_id, after, limit)
        return start, events, last_batch

    try:
        start, events, last_batch = await run_in_threadpool(read)
    except ResultsPruned as exc:   # a 410 problem with `earliest` (service/main.py)
        raise SubscriptionGone(query_id, exc.after, exc.earliest) from None
    if len(events) == limit:    # a full page: later events may follow its last
        through = events[-1].seq
    else:   # every event committed when the log was read, which was after last_batch
        through = max(last_batch, events[-1].seq) if events else last_batch
    next_after = max(start, through, 0)
    # The payloads are JSON text already: embedded as they are, not parsed and re-encoded.
    body = (f'{{"query": {query_id}, "events": [{", ".join(map(_event_json, events))}], '
            f'"next": {next_after}, "complete_through": {through}, '
            f'"last_batch": {last_batch}}}')
    return Response(body, media_type="application/json")


# The WebSocket route's query parameters (others close it with 4422).
_SOCKET_PARAMETERS = ALWAYS_ACCEPTED_PARAMETERS | {"after"}


@router.websocket("/{query_id}/ws")
async def events_socket(websocket: WebSocket, query_id: int, state: StateDep) -> None:
    """The SSE stream's events as WebSocket text messages.

    `?after=N` as for SSE. Each message is `{"id": seq, "event": "batch", "data": {...}}`, or
    after `heartbeat_seconds` without one `{"id": N, "event": "progress", "data": {"through":
    N}}` (every event up to batch N was sent); the last one is `{"event": "gone" | "deleted"
    | "shutdown" | "lagging", "data": {...}}` (as for SSE), then the socket closes with 4410,
    1000, 1001 or 1013 (`lagging`: resume with `?after=` its `last_id`). Refused
    with 1008 without the API key (`Authorization` header or `?access_token=`); closed with
    4404 for an unknown query and 4422 for a bad `after` or an unknown query parameter.
    Messages from the client are ignored.
    """
    socket = _EventSocket(websocket)
    # Accepted first, even without the key: a close code reaches the client only on an open
    # socket (refusing the handshake is a bare HTTP 403). Nothing else is sent before the check.
    await socket.accept()
    if not key_accepted(state.settings, presented_key(websocket)):
        await socket.close(status.WS_1008_POLICY_VIOLATION, "missing or wrong API key")
        return
    unknown = next((name for name in websocket.query_params
                    if name not in _SOCKET_PARAMETERS), None)
    if unknown is not None:
        await socket.close(WS_BAD_CURSOR, f"{unknown}: unknown query parameter")
        return
    raw_after = websocket.query_params.get("after")
    after = _cursor(raw_after)
    if raw_after is not None and after is None:
        await socket.close(WS_BAD_CURSOR, "after: must be a non-negative integer")
        return
    if not await _query_exists(state, query_id):
        await socket.close(WS_NOT_FOUND, _not_found(query_id))
        return
    if after is not None:
        why = past_the_end(after, await run_in_threadpool(state.store.last_seq))
        if why is not None:
            await socket.close(WS_BAD_CURSOR, f"after: {why}")
            return
    settings = state.settings
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(socket.watch_peer, tasks.cancel_scope)
        async with state.hub.subscribe(query_id, after,
                                       max_lag=settings.subscriber_max_lag) as subscription:
            end = await _follow(subscription, settings.heartbeat_seconds,
                                settings.subscriber_stall_seconds, after, socket)
        # The subscription is released: what follows holds only this task and its socket.
        if end is not None:
            event, data = end
            if event == "lagging":
                log.info("WebSocket stream of query %d cut: %s", query_id, data)
            await socket.send(json.dumps({"event": event, "data": data}))
            await socket.close(WS_LAST_EVENT_CLOSE[event], event)
        tasks.cancel_scope.cancel()


class _Phase(enum.Enum):
    CONNECTING = "connecting"  # handshake received, not answered yet
    OPEN = "open"  # accepted: events may be sent
    CLOSED = "closed"  # we sent the close or the peer left: nothing more is sent


class _EventSocket:
    """One WebSocket subscriber as a state machine: CONNECTING -> OPEN -> CLOSED. Sends only
    while OPEN; a peer that went away makes it CLOSED."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket
        self.phase = _Phase.CONNECTING

    async def accept(self) -> None:
        await self.websocket.accept()
        self.phase = _Phase.OPEN

    @property
    def open(self) -> bool:
        return self.phase is _Phase.OPEN

    async def send(self, text: str, stall: float | None = None) -> bool:
        """Send a message; False when the peer's socket did not take it within `stall`
        seconds (None: as long as it takes), or is gone."""
        if self.phase is not _Phase.OPEN:
            return False
        # uvicorn waits for its socket buffer to drain before it writes a message, so a
        # send given up on wrote nothing.
        with anyio.move_on_after(stall):
            try:
                await self.websocket.send_text(text)
                return True
            except WebSocketDisconnect:
                self.phase = _Phase.CLOSED
        return False

    # The writes of `_follow`: one event a message.
    per_write = 1

    async def events(self, records: list[EventRecord], stall: float) -> bool:
        (record,) = records
        return await self.send(_event_json(record, event="batch"), stall)

    async def progress(self, through: int, stall: float) -> bool:
        return await self.send(f'{{"id": {through}, "event": "progress", '
                               f'"data": {_progress_json(through)}}}', stall)

    async def close(self, code: int, reason: str = "") -> None:
        if self.phase is _Phase.CLOSED:
            return
        self.phase = _Phase.CLOSED
        try:
            await self.websocket.close(code, reason)
        except WebSocketDisconnect:
            pass

    async def watch_peer(self, stream: anyio.CancelScope) -> None:
        """Read (and drop) what the client sends; when it leaves, stop `stream`."""
        while self.phase is _Phase.OPEN:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                self.phase = _Phase.CLOSED
                stream.cancel()


def _cursor(text: str | None) -> int | None:
    """`after` as the WebSocket query string gives it: None when absent or not an int >= 0."""
    if text is None or not text.isascii() or not text.isdigit() or int(text) > MAX_ID:
        return None
    return int(text)


def _event_json(record: EventRecord, event: str | None = None) -> str:
    """An event as JSON text with its stored payload embedded verbatim."""
    kind = "" if event is None else f', "event": {json.dumps(event)}'
    return f'{{"id": {record.seq}{kind}, "data": {record.payload}}}'
