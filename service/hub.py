"""Owns live delivery of query results: the hub the engine publishes every committed batch to,
and the subscriptions that hand a query's events out in order, first from the result log and
then live, with no gap and no duplicate.

Threads: `publish`, `query_deleted`, `stats` and `totals` may be called from any thread (the
engine calls them from its worker thread). They take one short lock, touch only bounded buffers
and never wait for a subscriber. A subscription is created and consumed on the event loop the hub
was made on; it reads the result log in a worker thread.

Ordering: a subscription registers for live delivery before it reads the log, and the engine
publishes a batch only after the batch is committed. So every event past the cursor is either in
the log when it is read or arrives live afterwards; live events the log already gave (seq <= the
cursor) are skipped.

Progress: a subscription knows the last batch through which it has handed out every event of
its query (`complete_through`), touched or not; the routes send it as `progress` events.

Slow subscribers: each subscription buffers at most `buffer` live events. When one more arrives,
publish drops that buffer and marks the subscription behind; the subscription then reads the log
from its cursor, as it did at the start, and re-attaches to live delivery. Ingest never waits for
a subscriber and memory stays bounded; a subscriber that stays too slow for too long finds its
cursor pruned by retention and gets SubscriptionGone. A subscription opened with `max_lag`
is cut sooner: when its buffer overflows while it is more than `max_lag` batches behind the
last published, it raises SubscriptionLagging instead of reading the log (its consumer
resumes later from its cursor, losing nothing).
"""
from __future__ import annotations

import asyncio
import enum
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from storage import ResultsPruned

if TYPE_CHECKING:
    from typing_extensions import Self

    from storage import EventRecord, Store

# Events read from the log per worker-thread call; small because one payload may list up to
# max_matches_per_batch matches.
LOG_PAGE = 100

# Log pages read at once, over every subscription.  Each worker thread that reads keeps a
# store connection with its own page cache (up to 2 MB); without this bound, many
# subscriptions catching up together (stalled clients reconnecting, say) would spread their
# reads over the whole thread pool and keep a cache in each thread (docs/benchmarks.md).
LOG_READERS = 4


# The cursor before every event: a query registered before the first batch has its backfill
# event at seq 0.
BEFORE_ALL = -1


def retained_events(store: Store, query_id: int, after: int | None,
                    limit: int) -> tuple[int, list[EventRecord]]:
    """Up to `limit` events of the query with seq > the cursor, and that cursor: `after`, or
    for None the one before every event still retained. Blocking: run it in a worker thread.
    Raises ResultsPruned only for a given `after` older than the retention."""
    if after is not None:
        return after, store.events_after(query_id, after, limit)
    start = BEFORE_ALL
    while True:
        try:
            return start, store.events_after(query_id, start, limit)
        except ResultsPruned as exc:  # pruning may move on between two reads
            start = exc.earliest


class SubscriptionEnded(str, enum.Enum):
    """Why a subscription's iteration ended cleanly (routes report the value)."""

    DELETED = "deleted"  # the query was deleted
    SHUTDOWN = "shutdown"  # the hub was closed (server shutting down)


class SubscriptionGone(Exception):
    """The subscription's cursor is older than the result retention: events were pruned."""

    def __init__(self, query_id: int, after: int, earliest: int):
        super().__init__(query_id, after, earliest)
        self.query_id = query_id
        self.after = after
        self.earliest = earliest  # the earliest cursor the log still serves

    def __str__(self) -> str:
        return (f"query {self.query_id}: events after {self.after} were pruned; the earliest "
                f"cursor still served is {self.earliest}")


class SubscriptionLagging(Exception):
    """The subscriber fell further behind than its subscription allows: it was cut, and
    resumes from its cursor."""

    def __init__(self, query_id: int, cursor: int, behind: int, max_lag: int):
        super().__init__(query_id, cursor, behind, max_lag)
        self.query_id = query_id
        self.cursor = cursor  # the seq of the last event delivered: where to resume
        self.behind = behind  # batches between the cursor and the last published
        self.max_lag = max_lag

    def __str__(self) -> str:
        return (f"query {self.query_id}: the subscriber is {self.behind} batches behind "
                f"(the limit is {self.max_lag}); resume after {self.cursor}")


@dataclass(frozen=True)
class SubscriberStats:
    """Open subscriptions, and how many batches the slowest one is behind the last published."""

    subscribers: int
    max_lag: int


class Hub:
    """Fans committed batches out to subscriptions; see the module docstring for the promises."""

    def __init__(self, store: Store, buffer: int,
                 loop: asyncio.AbstractEventLoop | None = None, *, page_size: int = LOG_PAGE):
        """`store` needs events_after/last_seq; `buffer` bounds each subscriber's live events.

        Reads `store.last_seq()` once (a blocking read, at start-up) so lag is right before the
        first publish. `loop` defaults to the running loop.
        """
        if buffer < 1 or page_size < 1:
            raise ValueError(f"buffer and page_size must be >= 1, got {buffer}, {page_size}")
        self.store = store
        self.buffer = buffer
        self.page_size = page_size
        self.loop = loop if loop is not None else asyncio.get_running_loop()
        # Guards everything publish touches: the registry, _last_seq, _deleted, _closed and the
        # fields of each Subscription marked "guarded".
        self.lock = threading.Lock()
        self._subscriptions: dict[int, set[Subscription]] = {}
        self._deleted: set[int] = set()  # query ids are never reused, so this only grows
        self._last_seq = store.last_seq()
        self._closed = False
        self._log_readers = anyio.CapacityLimiter(LOG_READERS)

    def publish(self, seq: int, events: Sequence[EventRecord]) -> None:
        """Hand batch `seq`'s events (only the queries it touched, maybe none) to subscribers."""
        woken: set[Subscription] = set()
        with self.lock:
            self._last_seq = max(self._last_seq, seq)
            for record in events:
                for subscription in self._subscriptions.get(record.query_id, ()):
                    if subscription._offer(record):
                        woken.add(subscription)
        for subscription in woken:
            self._wake(subscription)

    def query_deleted(self, query_id: int) -> None:
        """End the query's subscriptions, and the ones opened later."""
        with self.lock:
            self._deleted.add(query_id)
            ending = self._subscriptions.pop(query_id, set())
        self._end(ending, SubscriptionEnded.DELETED)

    async def close(self) -> None:
        """End every subscription (reason SHUTDOWN); later ones end at once. Safe to call twice."""
        with self.lock:
            self._closed = True
            ending = [s for group in self._subscriptions.values() for s in group]
            self._subscriptions.clear()
        self._end(ending, SubscriptionEnded.SHUTDOWN)

    def subscribe(self, query_id: int, after: int | None, *,
                  max_lag: int | None = None) -> Subscription:
        """Events of `query_id` with seq > `after` (None: every event still retained); use as
        `async with hub.subscribe(...) as subscription: async for event in subscription`.
        With `max_lag`, falling more than that many batches behind raises SubscriptionLagging
        (checked when the live buffer overflows); without, the subscription reads the log.

        Call on the hub's event loop. The caller checks that the query exists; a query the hub
        saw deleted gives a subscription that ends at once.
        """
        if after is not None and after < 0:
            raise ValueError(f"after must be >= 0, got {after}")
        if max_lag is not None and max_lag < 1:
            raise ValueError(f"max_lag must be >= 1, got {max_lag}")
        if asyncio.get_running_loop() is not self.loop:
            raise RuntimeError("subscribe on the event loop the hub was made on")
        subscription = Subscription(self, query_id, after, max_lag)
        with self.lock:
            if self._closed:
                subscription._end(SubscriptionEnded.SHUTDOWN)
            elif query_id in self._deleted:
                subscription._end(SubscriptionEnded.DELETED)
            else:
                self._subscriptions.setdefault(query_id, set()).add(subscription)
        return subscription

    def stats(self, query_id: int) -> SubscriberStats:
        """The query's open subscriptions and the lag of its slowest."""
        with self.lock:
            return self._stats(self._subscriptions.get(query_id, ()))

    def totals(self) -> SubscriberStats:
        """Stats over every query's subscriptions (for /metrics)."""
        with self.lock:
            return self._stats([s for group in self._subscriptions.values() for s in group])

    def _stats(self, subscriptions: Iterable[Subscription]) -> SubscriberStats:
        last = self._last_seq
        lags = [max(0, last - max(0, s._position(last))) for s in subscriptions]
        return SubscriberStats(subscribers=len(lags), max_lag=max(lags, default=0))

    def _unregister(self, subscription: Subscription) -> None:
        with self.lock:
            group = self._subscriptions.get(subscription.query_id)
            if group is not None:
                group.discard(subscription)
                if not group:
                    del self._subscriptions[subscription.query_id]

    def _end(self, subscriptions: Iterable[Subscription], reason: SubscriptionEnded) -> None:
        with self.lock:
            woken = [s for s in subscriptions if s._end(reason)]
        for subscription in woken:
            self._wake(subscription)

    def _wake(self, subscription: Subscription) -> None:
        try:
            self.loop.call_soon_threadsafe(subscription._wakeup.set)
        except RuntimeError:  # the loop is closed: nobody is left waiting on it
            pass


class Subscription:
    """One consumer's view of a query's events: an async context manager and async iterator of
    EventRecord. Iteration ends cleanly on deletion or shutdown (`ended` says which; events not
    yet delivered are dropped), raises SubscriptionGone when the log no longer holds the
    events past the cursor and SubscriptionLagging when it fell more than `max_lag` behind."""

    def __init__(self, hub: Hub, query_id: int, after: int | None, max_lag: int | None = None):
        self.hub = hub
        self.query_id = query_id
        self.max_lag = max_lag
        self.ended: SubscriptionEnded | None = None  # set once iteration has ended cleanly
        # Consumer-only state (the event loop).
        # Opened without a cursor and nothing delivered yet: a pruned log is not an error, the
        # subscription starts at the earliest retained event instead.
        self._from_retained = after is None
        self._page: deque[EventRecord] = deque()  # read from the log, not yet delivered
        self._log_exhausted = False  # the last page read was short
        self._closed = False
        self._wakeup = asyncio.Event()
        # Written by the consumer, read by publish and stats without the lock: an int, and it
        # only grows. The seq of the last event delivered (or the starting `after`; -1 is before
        # every event, as a backfill can carry seq 0).
        self._cursor = BEFORE_ALL if after is None else after
        # Guarded by hub.lock.
        self._live: deque[EventRecord] = deque()  # published events, at most hub.buffer
        self._catching_up = True  # reading the log (at the start, and after falling behind)
        self._behind = False  # the live buffer overflowed and was dropped
        self._ending: SubscriptionEnded | None = None
        self._waiting = False  # the consumer waits for _wakeup
        self._wake_pending = False  # a _wakeup.set is scheduled since it began waiting

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.close()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> EventRecord:
        record = await self.next()
        if record is None:
            raise StopAsyncIteration
        return record

    def close(self) -> None:
        """Stop receiving events; iteration then ends. Safe to call twice."""
        self._closed = True
        self.hub._unregister(self)

    async def next(self, timeout: float | None = None) -> EventRecord | None:
        """The next event, or None when iteration has ended (see `ended`) or when `timeout`
        seconds passed with nothing to deliver (then `ended` is None). Cancelling it loses
        nothing: an event leaves the buffers only when it is returned."""
        hub = self.hub
        deadline = None if timeout is None else hub.loop.time() + timeout
        behind = 0
        while not self._closed:
            if behind:
                assert self.max_lag is not None
                self.close()
                raise SubscriptionLagging(self.query_id, self._cursor, behind, self.max_lag)
            if self._ending is not None:
                break  # at once: a deleted query's log is gone, and a restart can resume
            if self._page:
                record = self._page.popleft()
                if record.seq > self._cursor:
                    return self._deliver(record)
                continue
            if self._catching_up:
                if not self._log_exhausted:
                    await self._read_page()
                    continue
                with hub.lock:
                    self._catching_up = False  # from now on the live buffer is complete
            with hub.lock:
                while self._live:
                    record = self._live.popleft()
                    if record.seq > self._cursor:
                        return self._deliver(record)
                if self._behind:
                    lag = hub._last_seq - self._cursor
                    if self.max_lag is not None and lag > self.max_lag:
                        behind = lag  # raised outside the lock
                        continue
                    # Re-attach before reading the log again, like a new subscription.
                    self._behind = False
                    self._catching_up = True
                    self._log_exhausted = False
                    continue
                if self._ending is not None:
                    break
                self._waiting = True
                self._wake_pending = False
                self._wakeup.clear()  # a set scheduled before _waiting was set is stale
            if not await self._wait(deadline):
                return None
        if not self._closed:
            self.ended = self._ending
            self.close()
        return None

    def ready(self, limit: int) -> list[EventRecord]:
        """Up to `limit` more events that `next` would return at once, without waiting or
        reading the log (none while it still has to read the log or is ending), taken
        now: a batch group's events, published together, go out in one write."""
        taken: list[EventRecord] = []
        if self._closed or self._ending is not None or limit < 1:
            return taken
        while self._page and len(taken) < limit:
            record = self._page.popleft()
            if record.seq > self._cursor:
                taken.append(self._deliver(record))
        if self._page or (self._catching_up and not self._log_exhausted):
            return taken
        with self.hub.lock:
            self._catching_up = False  # as in next: the log is read, live is complete
            while self._live and len(taken) < limit:
                record = self._live.popleft()
                if record.seq > self._cursor:
                    taken.append(self._deliver(record))
        return taken

    def complete_through(self) -> int:
        """The last batch through which every event of the query has been handed out (next
        or ready returned it), whether or not the batches touched the query: what a
        `progress` event tells the consumer.  -1 before the log was read.  Never past the
        last batch published: a batch committed but not yet published may still have an
        event for it."""
        with self.hub.lock:
            last = self.hub._last_seq
            return min(self._position(last), last)

    def _deliver(self, record: EventRecord) -> EventRecord:
        self._cursor = record.seq
        self._from_retained = False
        return record

    async def _read_page(self) -> None:
        hub = self.hub
        after = None if self._from_retained else self._cursor
        try:
            start, page = await anyio.to_thread.run_sync(
                retained_events, hub.store, self.query_id, after, hub.page_size,
                limiter=hub._log_readers)
        except ResultsPruned as exc:
            self.close()
            raise SubscriptionGone(self.query_id, self._cursor, exc.earliest) from exc
        self._cursor = max(self._cursor, start)
        self._page.extend(page)
        self._log_exhausted = len(page) < hub.page_size

    async def _wait(self, deadline: float | None) -> bool:
        """Wait for a wake-up from publish or an end; False when the deadline passed first."""
        try:
            if deadline is None:
                await self._wakeup.wait()
                return True
            with anyio.move_on_after(deadline - self.hub.loop.time()):
                await self._wakeup.wait()
                return True
            return False
        finally:
            with self.hub.lock:
                self._waiting = False

    # ---- called by the hub with hub.lock held ------------------------------------------
    def _offer(self, record: EventRecord) -> bool:
        """Buffer a published event; True when the consumer should be woken."""
        if self._behind or record.seq <= self._cursor:
            return False
        if len(self._live) >= self.hub.buffer:
            self._live.clear()  # it will read these from the log
            self._behind = True
        else:
            self._live.append(record)
        return self._claim_wake()

    def _end(self, reason: SubscriptionEnded) -> bool:
        if self._ending is None:
            self._ending = reason
        return self._claim_wake()

    def _claim_wake(self) -> bool:
        if self._waiting and not self._wake_pending:
            self._wake_pending = True
            return True
        return False

    def _position(self, last_seq: int) -> int:
        """The seq through which this subscriber has every event of its query."""
        if self._catching_up or self._behind:
            return self._cursor
        if self._live:  # everything before the oldest buffered event was delivered
            return max(self._cursor, self._live[0].seq - 1)
        return max(self._cursor, last_seq)  # up to date: unaffected batches count as seen
