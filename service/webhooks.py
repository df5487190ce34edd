"""Owns webhook delivery: each webhook is one more subscriber of its query's result events,
POSTed signed to its URL, retried with backoff, at least once, from a durable cursor.

A webhook follows its query through a hub subscription (service/hub.py) opened at its cursor,
so it is served from the result log and then live, and never slows ingest (a slow receiver
falls behind onto the log as a slow SSE client does).  Each event is POSTed as the JSON the
result streams carry (`batch`, `time`, counts...), byte for byte, with

- `X-Motifstream-Signature: sha256=<hex>`, HMAC-SHA256 of the body under the webhook's secret;
- `X-Motifstream-Batch` (the batch id: a receiver deduplicates redeliveries by it),
  `X-Motifstream-Query` and `X-Motifstream-Attempt` (1 for the first try).

A 2xx answer delivers it.  A connection error, a timeout, a 5xx or a 429 is retried after
`webhook_backoff_seconds`, doubling up to `webhook_backoff_max_seconds`, at most
`webhook_attempts` tries in all; a 429 or 5xx with `Retry-After` (seconds or an HTTP date,
RFC 9110) waits as long as it asks if that is longer, up to `webhook_backoff_max_seconds`
(a receiver cannot hold delivery up for longer than the service's own cap); any other
answer (a 3xx, a 4xx) will not change by retrying.
An event given up on goes to the query's dead-letter log, and delivery goes on with the next.
Events go out one at a time, in batch order.

The cursor (the last batch delivered or dead-lettered) is committed after each event, or after
the last of the events that were already waiting (at most CURSOR_COMMIT_EVERY), so a restart
resumes after it: an event whose POST succeeded but whose cursor was not yet committed is
delivered again (at least once; the batch id tells the receiver).  Delivery runs as asyncio
tasks on the event loop, never on the engine thread; store writes leave the loop.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

from service.hub import Hub, SubscriptionGone
from service.query_tasks import QueryTasks
from service.settings import Settings
from storage import EventRecord, Store

if TYPE_CHECKING:
    # Imported with the client, at the first delivery (Deliverer._http): a restart that
    # delivers nothing before it is ready does not pay for importing the HTTP stack.
    import httpx2

log = logging.getLogger("motifstream.webhooks")

SIGNATURE_HEADER = "X-Motifstream-Signature"
BATCH_HEADER = "X-Motifstream-Batch"
QUERY_HEADER = "X-Motifstream-Query"
ATTEMPT_HEADER = "X-Motifstream-Attempt"
# A webhook cursor before every event (a backfill event may carry batch 0).
EVERY_RETAINED = -1
# The most events delivered between two commits of the cursor: events already waiting
# (a burst, or a log being caught up) share one store transaction.
CURSOR_COMMIT_EVERY = 64


def signature(secret: str, body: bytes) -> str:
    """The signature header's value for `body`: what a receiver recomputes and compares
    (with a constant-time comparison) to authenticate a delivery."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def retryable(status: int) -> bool:
    """Whether an answer of `status` may change on a later try: the receiver's failure (5xx)
    or its request to slow down (429)."""
    return status >= 500 or status == 429


def retry_after(response: httpx2.Response, now: datetime | None = None) -> float | None:
    """The seconds a receiver's `Retry-After` asks to wait (delay-seconds or an HTTP date,
    RFC 9110 section 10.2.3; a date in the past is 0), or None without a valid one."""
    value = response.headers.get("Retry-After", "").strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:         # an HTTP date is GMT; a malformed one may lack its zone
        return None
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())


@dataclass(frozen=True)
class Webhook:
    """A query's webhook as stored (Store.webhook's row)."""

    query_id: int
    url: str
    secret: str
    delivered_through: int  # the cursor: every event up to this batch was handled
    created_at: str


class Deliverer(QueryTasks):
    """Runs one delivery task per webhook; made and closed by the lifespan."""

    TASK_PREFIX = "webhook"
    WHAT = "webhook"
    LOG = log

    def __init__(self, store: Store, hub: Hub, settings: Settings,
                 transport: httpx2.AsyncBaseTransport | None = None) -> None:
        """`transport` replaces the network (tests hand in an ASGI app or a mock)."""
        self.store = store
        self.hub = hub
        self.attempts = settings.webhook_attempts
        self.backoff = settings.webhook_backoff_seconds
        self.backoff_max = settings.webhook_backoff_max_seconds
        self._timeout = settings.webhook_timeout_seconds
        self._transport = transport
        # Made by the first delivery (_http), not at start-up: most starts deliver nothing
        # before they are ready, and building it (with httpx2's import) delayed /readyz.
        self._client: httpx2.AsyncClient | None = None
        super().__init__()
        # Held while a webhook is replaced or removed, so that two requests at once cannot
        # leave two tasks delivering one query's events.
        self._changing = asyncio.Lock()

    async def start(self) -> None:
        """Resume every stored webhook from its cursor."""
        for row in await asyncio.to_thread(self.store.webhooks):
            self._follow(Webhook(*row))

    async def set(self, query_id: int, url: str, secret: str, after: int | None) -> Webhook:
        """Create or replace the query's webhook and (re)start its delivery, from `after`
        (None: where it was, or after the last committed batch for a new one)."""
        async with self._changing:
            # Stopped first, so its last cursor write cannot land after the new cursor.
            await self._stop(query_id)
            try:
                await asyncio.to_thread(self.store.set_webhook, query_id, url, secret, after)
            finally:    # the old webhook goes on if the new one could not be stored
                webhook = await self.get(query_id)
                if webhook is not None:
                    self._follow(webhook)
        assert webhook is not None
        return webhook

    async def get(self, query_id: int) -> Webhook | None:
        row = await asyncio.to_thread(self.store.webhook, query_id)
        return None if row is None else Webhook(*row)

    async def remove(self, query_id: int) -> bool:
        """Stop and forget the query's webhook (its dead letters stay); False if it had none."""
        async with self._changing:
            await self._stop(query_id)
            return await asyncio.to_thread(self.store.delete_webhook, query_id)

    async def close(self) -> None:
        """Stop every delivery (what is in flight is delivered again after a restart)."""
        await self._stop_all()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _http(self) -> httpx2.AsyncClient:
        """The client every delivery shares, made on the first one."""
        if self._client is None:
            import httpx2
            # Redirects are not followed: a signed POST re-sent elsewhere is not what was
            # set up.
            self._client = httpx2.AsyncClient(timeout=self._timeout, transport=self._transport,
                                              follow_redirects=False)
        return self._client

    async def _run(self, webhook: Webhook) -> None:
        """Deliver the query's events after the cursor until the query is deleted or the
        hub closes."""
        cursor = webhook.delivered_through
        while True:
            after = None if cursor == EVERY_RETAINED else cursor
            try:
                async with self.hub.subscribe(webhook.query_id, after) as subscription:
                    async for event in subscription:
                        waiting = subscription.ready(CURSOR_COMMIT_EVERY - 1)
                        for each in (event, *waiting):
                            await self._deliver(webhook, each)
                            cursor = each.seq
                        await self._advance(webhook, cursor, None)
                    return
            except SubscriptionGone as exc:
                # The receiver was unreachable for longer than the result retention.
                log.error("webhook of query %d: the events after batch %d were pruned before "
                          "they were delivered; going on after batch %d", webhook.query_id,
                          cursor, exc.earliest)
                cursor = exc.earliest

    async def _deliver(self, webhook: Webhook, event: EventRecord) -> None:
        body = event.payload.encode()
        headers = {"Content-Type": "application/json",
                   SIGNATURE_HEADER: signature(webhook.secret, body),
                   BATCH_HEADER: str(event.seq), QUERY_HEADER: str(webhook.query_id)}
        client = self._http()
        import httpx2       # loaded by _http
        error = ""
        attempt = 0
        delay = min(self.backoff, self.backoff_max)
        asked = None        # the last answer's Retry-After, seconds
        while attempt < self.attempts:
            if attempt:
                await asyncio.sleep(delay if asked is None else
                                    max(delay, min(asked, self.backoff_max)))
                delay = min(delay * 2, self.backoff_max)
            attempt += 1
            asked = None
            try:
                response = await client.post(
                    webhook.url, content=body, headers={**headers, ATTEMPT_HEADER: str(attempt)})
            except httpx2.RequestError as exc:  # connection refused, timeout, protocol error
                error = f"{type(exc).__name__}: {exc}"
                self.failures += 1
                continue
            if response.is_success:
                self.delivered += 1
                return      # its cursor is committed with the events delivered with it
            error = f"HTTP {response.status_code}"
            self.failures += 1
            if not retryable(response.status_code):
                break
            asked = retry_after(response)
        self.dead_letters += 1
        log.warning("webhook of query %d: batch %d is a dead letter after %d attempts (%s)",
                    webhook.query_id, event.seq, attempt, error)
        now = datetime.now(timezone.utc).isoformat()
        await self._advance(webhook, event.seq, (event.payload, attempt, error, now))

    async def _advance(self, webhook: Webhook, seq: int,
                       dead_letter: tuple[str, int, str, str] | None) -> None:
        await self._record(webhook.query_id, seq, self.store.webhook_delivered,
                           webhook.query_id, seq, dead_letter)
