"""Owns /v1/batches: atomic, durable, totally ordered batch ingest with idempotent retries."""
from __future__ import annotations

import asyncio
import hashlib

from fastapi import APIRouter, Header, Request, Response
from starlette.concurrency import run_in_threadpool

from service.deps import StateDep
from service.ingest import JSON, NPY, TEXT, media_type, parse_batch, read_body
from service.schemas import BatchPublic

router = APIRouter(prefix="/v1", tags=["batches"])

# Bodies above this are parsed off the event loop.
_INLINE_PARSE_BYTES = 1 << 16

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
                     idempotency_key: str | None = Header(None, max_length=200)) -> Response:
    """Apply one batch atomically, after every earlier one; answered once it is durable.
    The same `Idempotency-Key` with the same body returns the stored answer and applies
    nothing again."""
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
