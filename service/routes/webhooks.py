"""Owns /v1/queries/{id}/webhook: a query's webhook (set, read, remove) and its dead letters."""
from __future__ import annotations

import json
import re
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from pydantic import BaseModel, Field, field_validator
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from service.deps import StateDep, reject_unknown_parameters
from service.routes.events import (MAX_ID, NOT_FOUND_RESPONSE,
                                   refuse_cursor_past_the_end, require_query)
from service.webhooks import EVERY_RETAINED, Deliverer, Webhook

router = APIRouter(prefix="/v1/queries", tags=["webhooks"], responses=NOT_FOUND_RESPONSE,
                   dependencies=[Depends(reject_unknown_parameters), Depends(require_query)])

# The URLs a webhook takes, as its schema states them (`pattern`): http(s), a host name or
# an IPv4 or bracketed IPv6 address, an optional port, then a path, query or fragment of
# printable ASCII (what a client percent-encodes), nothing that urlsplit would rewrite.
WEBHOOK_URL = (r"^[Hh][Tt][Tt][Pp][Ss]?://(?:[A-Za-z0-9._~-]+|\[[0-9A-Fa-f:.]+\])"
               r"(?::[0-9]{1,5})?(?:[/?#][!-~]*)?$")
_WEBHOOK_URL = re.compile(WEBHOOK_URL)

DEAD_LETTER_PAGE_DEFAULT = 100
DEAD_LETTER_PAGE_MAX = 1000


async def get_deliverer(conn: HTTPConnection) -> Deliverer:
    return conn.app.state.webhooks


DelivererDep = Annotated[Deliverer, Depends(get_deliverer)]


# What PUT accepts: where to POST the query's events, the signing key, where to start.
class WebhookSet(BaseModel):
    model_config = {"extra": "forbid", "strict": True}

    url: str = Field(max_length=2048, description="http:// or https:// URL the events are "
                                                   "POSTed to",
                     json_schema_extra={"pattern": WEBHOOK_URL})
    secret: str = Field(min_length=16, max_length=1024, description=(
        "HMAC-SHA256 key of the X-Motifstream-Signature header (never returned)"))
    after: int | None = Field(None, ge=EVERY_RETAINED, le=MAX_ID, description=(
        "deliver the events after this batch (-1: every event still retained); default: "
        "from where this webhook was, or after the last committed batch for a new one"))

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not _WEBHOOK_URL.fullmatch(url):
            raise ValueError(f"{url!r} is not an http:// or https:// URL with a host (ASCII "
                             "host name or address, optional port, then printable ASCII)")
        return url


# What the API shows of a webhook: everything but its secret.
class WebhookPublic(BaseModel):
    query_id: int
    url: str
    delivered_through: int = Field(description="every event up to this batch was delivered "
                                               "or dead-lettered")
    created_at: str


# One event given up on: the event as it would have been POSTed, and why.
class DeadLetterPublic(BaseModel):
    batch: int
    attempts: int
    error: str = Field(description="the last failure: `HTTP <status>` or the connection error")
    failed_at: str
    event: dict


# A page of dead letters, by batch; `next` is the following page's `after`, null on the last.
class DeadLetterPage(BaseModel):
    dead_letters: list[DeadLetterPublic]
    next: int | None


def _public(webhook: Webhook) -> WebhookPublic:
    return WebhookPublic(query_id=webhook.query_id, url=webhook.url,
                         delivered_through=webhook.delivered_through,
                         created_at=webhook.created_at)


def _no_webhook(query_id: int) -> HTTPException:
    return HTTPException(404, f"query {query_id} has no webhook")


@router.put("/{query_id}/webhook", response_model=WebhookPublic)
async def set_webhook(query_id: int, body: WebhookSet, state: StateDep,
                      deliverer: DelivererDep):
    """Push the query's result events to `url` (replacing any webhook it had), each a
    signed POST, retried with backoff, at least once (docs/service.md, Webhooks)."""
    # A cursor past the last batch would skip the events of batches not yet applied.
    await refuse_cursor_past_the_end(state, body.after, ("body", "after"))
    return _public(await deliverer.set(query_id, body.url, body.secret, body.after))


@router.get("/{query_id}/webhook", response_model=WebhookPublic)
async def get_webhook(query_id: int, deliverer: DelivererDep):
    """The query's webhook and how far it has delivered."""
    webhook = await deliverer.get(query_id)
    if webhook is None:
        raise _no_webhook(query_id)
    return _public(webhook)


@router.delete("/{query_id}/webhook", status_code=204)
async def delete_webhook(query_id: int, deliverer: DelivererDep) -> Response:
    """Stop pushing the query's events (its dead letters stay until the query goes)."""
    if not await deliverer.remove(query_id):
        raise _no_webhook(query_id)
    return Response(status_code=204)


@router.get("/{query_id}/webhook/dead-letters", response_model=DeadLetterPage)
async def list_dead_letters(
        query_id: int, state: StateDep,
        limit: Annotated[int, Query(ge=1, le=DEAD_LETTER_PAGE_MAX)] = DEAD_LETTER_PAGE_DEFAULT,
        after: Annotated[int, Query(ge=EVERY_RETAINED, le=MAX_ID, description=(
            "cursor: only dead letters of later batches (a page's `next`)"))] = EVERY_RETAINED):
    """The events the query's webhook gave up on, oldest first, in pages (an `after`
    past the last batch is a 422)."""
    await refuse_cursor_past_the_end(state, after, ("query", "after"))
    rows = await run_in_threadpool(state.store.webhook_dead_letters, query_id, after, limit)
    letters = [DeadLetterPublic(batch=seq, event=json.loads(payload), attempts=attempts,
                                error=error, failed_at=failed_at)
               for seq, payload, attempts, error, failed_at in rows]
    return DeadLetterPage(dead_letters=letters,
                          next=letters[-1].batch if len(letters) == limit else None)
