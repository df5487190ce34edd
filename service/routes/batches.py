"""Owns /v1/batches: atomic, durable, totally ordered batch ingest with idempotent retries."""
from __future__ import annotations

import asyncio
import hashlib

from fastapi import APIRouter, Header, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from service.deps import StateDep, require_api_key
from service.ingest import JSON, NPY, TEXT, media_type, parse_batch, read_body
from service.schemas import BatchPublic
from service.state import ServiceState

router = APIRouter(prefix="/v1", tags=["batches"])

PATH = "/v1/batches"
# Bodies above this are parsed off the event loop.
_INLINE_PARSE_BYTES = 1 << 16
# The longest Idempotency-Key accepted (longer ones are a 422).
_MAX_KEY_LENGTH = 200

_BODY = {"requestBody": {"required": True, "content": {
    JSON: {"schema": {"$ref": "#/components/schemas/BatchCreate"}},
    TEXT: {"schema": {"type": "string", "description": "update stream: v <id> <label>, "
                      "-v <id>, e <u> <v> [label], -e <u> <v> lines"}},
    NPY: {"schema": {"type": "string", "format": "binary", "description":
                     "NumPy .npy int64 array (n, 4): kind (0 add vertex, 1 delete vertex, "
                     "2 insert edge, 3 delete edge), a, b, label (-1: none)"}}}}}


@router.post("/batches", response_model=BatchPublic, openapi_extra=_BODY,
             responses={409: {"description": "Idempotency-Key reused for another request"},
                        413: {"description": "body too large"},
                        422: {"description": "invalid batch (nothing applied)"},
                        503: {"description": "could not be made durable (nothing applied)"}})
async def post_batch(request: Request, state: StateDep,
                     idempotency_key: str | None = Header(None, max_length=_MAX_KEY_LENGTH)
                     ) -> Response:
    """Apply one batch atomically, after every earlier one; answered once it is durable.
    The same `Idempotency-Key` with the same body returns the stored answer and applies
    nothing again."""
    return await _ingest(request, state, idempotency_key)


async def _ingest(request: Request, state: ServiceState, idempotency_key: str | None
                  ) -> Response:
    settings = state.settings
    body = await read_body(request, settings.max_request_bytes)
    media = media_type(request.headers)
    if len(body) > _INLINE_PARSE_BYTES:
        batch = await run_in_threadpool(parse_batch, body, media, settings.max_batch_updates)
    else:
        batch = parse_batch(body, media, settings.max_batch_updates)
    key = None
    if idempotency_key is not None:
        key = (idempotency_key, hashlib.sha256(media.encode() + b"\0" + body).hexdigest())
    acknowledged = await state.engine.call(state.engine.ingest, batch, key)
    result = await asyncio.wrap_future(acknowledged)   # durable from here on
    headers = {"Idempotent-Replayed": "true"} if result.replayed else None
    return Response(result.response, media_type=JSON, headers=headers)


class BatchFastPath:
    """ASGI middleware that serves POST /v1/batches without FastAPI's request machinery.

    A one-edge batch costs the engine well under a millisecond, and FastAPI's routing,
    dependency solving and inner middleware cost the event loop about three times the
    handler's own work.  This runs the route's handler (`_ingest`) directly, after the
    same API-key check, and answers its errors with the app's own exception handlers, so
    every status and body is the route's.  A request it does not take as it is (another
    path or method, a root path, an Idempotency-Key the route would refuse) goes on to
    the app: the FastAPI route stays the documented one (OpenAPI) and the reference.
    """

    def __init__(self, app: ASGIApp, handlers: dict) -> None:
        self.app = app
        self.handlers = handlers    # the app's exception handlers (the same dict object)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST" \
                or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        key = request.headers.get("idempotency-key")
        if key is not None and len(key) > _MAX_KEY_LENGTH:
            await self.app(scope, receive, send)    # the route's 422 names the header
            return
        try:
            await require_api_key(request)
            response = await _ingest(request, scope["app"].state.motifstream, key)
        except Exception as exc:
            handler = next((self.handlers[cls] for cls in type(exc).__mro__
                            if cls in self.handlers), None)
            if handler is None:
                raise                               # a 500, as from the route
            response = await handler(request, exc)
        await response(scope, receive, send)
