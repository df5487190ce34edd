"""Owns /v1/batches: atomic, durable, totally ordered batch ingest with idempotent retries."""
from __future__ import annotations

import hashlib

from fastapi import APIRouter, Depends, FastAPI, Header, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from service.deps import (ALWAYS_ACCEPTED_PARAMETERS, StateDep, bearer_token, key_accepted,
                          reject_unknown_parameters, unauthorized)
from service.engine_service import IngestResult
from service.ingest import (ARROW_COLUMNS, ARROW_FILE, ARROW_STREAM, JSON, NPY, TEXT,
                            InputError, PayloadTooLarge, parse_batch, read_media_type)
from service.schemas import UPDATE_TEXT_SCHEMA, BatchPublic
from service.state import ServiceState

router = APIRouter(prefix="/v1", tags=["batches"],
                   dependencies=[Depends(reject_unknown_parameters)])

PATH = "/v1/batches"
# Bodies above this are parsed off the event loop.
_INLINE_PARSE_BYTES = 1 << 16
# The longest Idempotency-Key accepted (longer ones are a 422).
_MAX_KEY_LENGTH = 200

# Why an empty batch is refused, per media type: a batch is a sequence number and a result
# for every query, and a body without updates is far more often a client's mistake (a
# misnamed file, an empty export) than a wish to record nothing.
_EMPTY = {JSON: "the batch is empty: insert_vertices, delete_vertices, insert_edges and "
                "delete_edges are all empty or missing; send at least one update",
          TEXT: "the batch is empty: the body has no update line (only blank lines or "
                "comments); send at least one update",
          NPY: "the batch is empty: the array has no rows; send at least one update",
          ARROW_STREAM: "the batch is empty: the table has no rows; send at least one update",
          ARROW_FILE: "the batch is empty: the table has no rows; send at least one update"}
_ARROW_BODY = {"schema": {"type": "string", "format": "binary", "description":
               f"Arrow IPC table, columns {', '.join(ARROW_COLUMNS)} of any integer type, as "
               "the .npy array's: kind, u (the vertex, or an edge's first endpoint), v (an "
               "edge's second; null on vertex rows), label (null or -1: none, on deletions), "
               "and optionally time (an edge insert's event time; null or -1: none); needs "
               "the `arrow` extra"}}

_BODY = {"requestBody": {"required": True, "content": {
    JSON: {"schema": {"$ref": "#/components/schemas/BatchCreate"}},
    TEXT: {"schema": UPDATE_TEXT_SCHEMA},
    NPY: {"schema": {"type": "string", "format": "binary", "description":
                     "NumPy .npy int64 array (n, 4): kind (0 add vertex, 1 delete vertex, "
                     "2 insert edge, 3 delete edge), a, b, label (-1: none); or (n, 5), the "
                     "fifth column an edge insert's event time (-1: none)"}},
    ARROW_STREAM: _ARROW_BODY, ARROW_FILE: _ARROW_BODY}}}


@router.post("/batches", response_model=BatchPublic, openapi_extra=_BODY,
             responses={409: {"description": "a request with this Idempotency-Key is still "
                                             "being applied (retry later)"},
                        413: {"description": "body too large"},
                        422: {"description": "invalid or empty batch, or an Idempotency-Key "
                                             "used before for another body (nothing applied)"},
                        503: {"description": "could not be made durable (nothing applied)"}})
async def post_batch(request: Request, state: StateDep,
                     idempotency_key: str | None = Header(None, max_length=_MAX_KEY_LENGTH)
                     ) -> Response:
    """Apply one batch atomically, after every earlier one; answered once it is durable.
    A batch without any update is refused (422).  The same `Idempotency-Key` with the same
    body returns the stored answer and applies nothing again; with another body it is a
    422, and while the first request is still being applied a 409."""
    return await _ingest(request, state, idempotency_key)


async def _ingest(request: Request, state: ServiceState, idempotency_key: str | None
                  ) -> Response:
    result = await _ingest_raw(state, _headers(request.scope["headers"]), request.receive,
                               idempotency_key)
    headers = {"Idempotent-Replayed": "true"} if result.replayed else None
    return Response(result.response, media_type=JSON, headers=headers)


class BatchFastPath:
    """Serves POST /v1/batches ahead of FastAPI, for the app class that calls it first.

    A one-edge batch costs the engine well under a millisecond; FastAPI's and Starlette's
    request machinery (telemetry check, error and body-limit middleware, routing,
    dependency solving, `Request` and `Response` objects) cost the event loop more than
    the handler's own work.  This reads the four headers the route needs in one pass over
    the raw ones, checks the API key as `require_api_key` does, reads the body under the
    same limit, runs the route's own parsing and engine call, and writes the stored
    response as it is, waking the event loop once per batch.  Refusals go through the
    app's exception handlers, so every status and body is the route's.  A request it does
    not take as it is (another path or method, a root path, an Idempotency-Key or a query
    parameter the route would refuse) goes on to the app: the FastAPI route stays the
    documented one (OpenAPI) and the reference.
    """

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def takes(self, scope: Scope) -> bool:
        return scope["type"] == "http" and scope["path"] == PATH \
            and scope["method"] == "POST" and not scope.get("root_path")

    async def __call__(self, scope: Scope, receive: Receive, send: Send,
                       fallback: ASGIApp) -> None:
        headers = _headers(scope["headers"])
        key = headers.get(b"idempotency-key")
        if (key is not None and len(key) > _MAX_KEY_LENGTH) \
                or not _only_accepted_parameters(scope["query_string"]):
            await fallback(scope, receive, send)    # the route's 422 names what is wrong
            return
        state: ServiceState = self.app.state.motifstream
        try:
            authorization = headers.get(b"authorization")
            if not key_accepted(state.settings, bearer_token(
                    None if authorization is None else authorization.decode("latin-1"),
                    scope["query_string"])):
                raise unauthorized()
            result = await _ingest_raw(state, headers, receive,
                                       None if key is None else key.decode("latin-1"))
        except ClientDisconnect:
            return
        except Exception as exc:
            handler = next((self.app.exception_handlers[cls] for cls in type(exc).__mro__
                            if cls in self.app.exception_handlers), None)
            if handler is None:
                raise                               # a 500, as from the route
            response = await handler(Request(scope, receive), exc)
            await response(scope, receive, send)
            return
        body = result.response.encode()
        response_headers = [(b"content-length", str(len(body)).encode()),
                            (b"content-type", JSON.encode())]
        if result.replayed:
            response_headers.insert(0, (b"idempotent-replayed", b"true"))
        await send({"type": "http.response.start", "status": 200,
                    "headers": response_headers})
        await send({"type": "http.response.body", "body": body})


def _only_accepted_parameters(query_string: bytes) -> bool:
    """Whether the query string has no parameter but those every route takes (the route
    itself has none)."""
    if not query_string:
        return True
    return all(name in ALWAYS_ACCEPTED_PARAMETERS
               for name in QueryParams(query_string).keys())


# The request headers the fast path reads (Starlette, too, serves the first of repeats).
_WANTED = frozenset((b"content-type", b"content-length", b"idempotency-key", b"authorization"))


def _headers(raw: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    found: dict[bytes, bytes] = {}
    for name, value in raw:
        if name in _WANTED and name not in found:
            found[name] = value
    return found


async def _ingest_raw(state: ServiceState, headers: dict[bytes, bytes], receive: Receive,
                      idempotency_key: str | None) -> IngestResult:
    """Read, check and apply one batch from the raw headers (`_headers`) and the ASGI
    messages; returns once it is durable.  Raises what the route answers with a 4xx/503."""
    settings = state.settings
    limit = settings.max_request_bytes
    declared = headers.get(b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the request body has {declared.decode()} bytes; the limit is "
                              f"{limit} (max_request_bytes)")
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the request body is over the limit of {limit} bytes "
                                  "(max_request_bytes)")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    content_type = headers.get(b"content-type")
    media = read_media_type(None if content_type is None else content_type.decode("latin-1"))
    if len(body) > _INLINE_PARSE_BYTES:
        batch = await run_in_threadpool(parse_batch, body, media, settings.max_batch_updates)
    else:
        batch = parse_batch(body, media, settings.max_batch_updates)
    if batch.size == 0:
        raise InputError(_EMPTY[batch.media_type])
    key = None
    if idempotency_key is not None:
        key = (idempotency_key, hashlib.sha256(media.encode() + b"\0" + body).hexdigest())
    return await state.engine.ingest_async(batch, key)
