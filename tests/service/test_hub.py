"""Tests for service.hub: ordered, gap-free delivery from the log then live, the slow-subscriber
policy, lag, and how subscriptions end."""
from __future__ import annotations

import random
import threading
import time

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.hub import (Hub, SubscriberStats, SubscriptionEnded, SubscriptionGone,
                         SubscriptionLagging)
from tests.service.fakes import FakeEngine, FakeStore

pytestmark = pytest.mark.anyio

Q, OTHER = 1, 2


def make(buffer: int = 8, page_size: int = 2, backfill: bool = False):
    """A store with queries Q and OTHER, a hub on the running loop and an engine feeding both."""
    store = FakeStore()
    store.register(Q, backfill=backfill)
    store.register(OTHER)
    hub = Hub(store, buffer=buffer, page_size=page_size)
    return store, hub, FakeEngine(store, hub)


async def take(subscription, count: int) -> list[int]:
    """The seqs of the next `count` events."""
    with anyio.fail_after(5):
        return [(await anext(subscription)).seq for _ in range(count)]


async def take_with_ready(subscription, count: int, rng: random.Random) -> list[int]:
    """The seqs of at least `count` events, each taken by `next` followed by what
    `ready` (a random limit) gives at once, as the SSE stream takes them."""
    got = []
    with anyio.fail_after(5):
        while len(got) < count:
            got.append((await subscription.next()).seq)
            got.extend(record.seq for record in subscription.ready(rng.randrange(4)))
    return got


async def drain(subscription) -> list[int]:
    """The seqs of every event until the subscription ends."""
    with anyio.fail_after(5):
        return [record.seq async for record in subscription]


def seqs(store: FakeStore, after: int = 0) -> list[int]:
    return [e.seq for e in store.events(Q, after)]


async def test_log_then_live_in_order():
    store, hub, engine = make()
    for touched in [(Q,), (OTHER,), (Q, OTHER), (), (Q,)]:
        engine.batch(*touched)
    async with hub.subscribe(Q, after=0) as subscription:
        assert await take(subscription, 3) == [1, 3, 5]  # two pages and a short one
        engine.batch(OTHER)
        engine.batch(Q)
        record = await anext(subscription)
        assert (record.query_id, record.seq) == (Q, 7)
        assert record.payload == store.events(Q, 6)[0].payload


async def test_after_skips_what_the_client_has():
    _, hub, engine = make()
    for _ in range(5):
        engine.batch(Q)
    async with hub.subscribe(Q, after=3) as subscription:
        assert await take(subscription, 2) == [4, 5]


async def test_no_cursor_starts_with_the_backfill_event_at_seq_0():
    _, hub, engine = make(backfill=True)
    engine.batch(Q)
    async with hub.subscribe(Q, after=None) as subscription:
        assert await take(subscription, 2) == [0, 1]
    async with hub.subscribe(Q, after=0) as subscription:  # the client has seq 0
        assert await take(subscription, 1) == [1]


async def test_no_cursor_starts_at_the_earliest_retained_event():
    store, hub, engine = make()
    for _ in range(6):
        engine.batch(Q)
    store.prune(Q, through=4)
    async with hub.subscribe(Q, after=None) as subscription:
        assert await take(subscription, 2) == [5, 6]


async def test_publish_from_another_thread_is_delivered_in_order():
    _, hub, engine = make(buffer=1024)
    async with hub.subscribe(Q, after=0) as subscription:
        publisher = threading.Thread(target=lambda: [engine.batch(Q) for _ in range(200)])
        publisher.start()
        try:
            assert await take(subscription, 200) == list(range(1, 201))
        finally:
            publisher.join()


async def test_no_gap_or_duplicate_while_a_thread_publishes():
    # The publisher runs while subscriptions start at random points, read the log and switch
    # to live delivery; a tiny buffer makes them fall behind and catch up again and again.
    rng = random.Random(7)
    store, hub, engine = make(buffer=2, page_size=3)
    done = threading.Event()

    def publish() -> None:
        batches = random.Random(8)
        while not done.is_set():
            engine.batch(*batches.choice([(Q,), (OTHER,), (Q, OTHER), ()]))
            time.sleep(0.0001)  # keeps the log (scanned by every fake read) small

    publisher = threading.Thread(target=publish)
    publisher.start()
    try:
        for _ in range(30):
            after = rng.randrange(store.last_seq() + 1)
            async with hub.subscribe(Q, after) as subscription:
                got = await take_with_ready(subscription, 25, rng)
            assert got == seqs(store, after)[:len(got)] and len(got) >= 25
    finally:
        done.set()
        publisher.join()


@settings(max_examples=150, deadline=None)
@given(before=st.lists(st.sampled_from([(Q,), (OTHER,), ()]), max_size=6),
       during_reads=st.lists(st.lists(st.sampled_from([(Q,), (OTHER,), (Q, OTHER)]),
                                      max_size=4), max_size=5),
       after_live=st.lists(st.sampled_from([(Q,), (OTHER,)]), max_size=6),
       after=st.integers(0, 3), buffer=st.integers(1, 3), page_size=st.integers(1, 3),
       ready_limit=st.integers(0, 3))
def test_log_to_live_switch_has_no_gap_or_duplicate(before, during_reads, after_live, after,
                                                     buffer, page_size, ready_limit):
    # Batches committed and published before subscribing, inside the subscription's log reads
    # (the race the register-then-read order closes) and after it went live.
    async def scenario() -> None:
        store = FakeStore()
        store.register(Q)
        store.register(OTHER)
        hub = Hub(store, buffer=buffer, page_size=page_size)
        engine = FakeEngine(store, hub)
        for touched in before:
            engine.batch(*touched)
        pending = list(during_reads)

        def commit_during_read() -> None:
            if pending:
                for touched in pending.pop(0):
                    engine.batch(*touched)

        store.before_read = commit_during_read
        async with hub.subscribe(Q, after) as subscription:
            got = []

            async def take_all() -> None:
                with anyio.fail_after(5):
                    while pending or len(got) < len(seqs(store, after)):
                        if (record := await subscription.next(timeout=0)) is not None:
                            got.append(record.seq)
                            got.extend(r.seq for r in subscription.ready(ready_limit))
                        elif pending:  # live and idle: the remaining reads never happen
                            commit_during_read()

            await take_all()
            for touched in after_live:
                engine.batch(*touched)
            await take_all()
            assert got == seqs(store, after)
            engine.delete(Q)
            assert await drain(subscription) == []

    anyio.run(scenario)


async def test_ready_takes_what_next_would_return_at_once():
    store, hub, engine = make(buffer=8, page_size=2)
    for _ in range(3):
        engine.batch(Q)
    async with hub.subscribe(Q, after=0) as subscription:
        assert subscription.ready(5) == []  # the log is not read yet: that is next's to do
        assert (await subscription.next()).seq == 1
        assert [r.seq for r in subscription.ready(5)] == [2]  # the rest of the page only
        assert (await subscription.next()).seq == 3
        for _ in range(4):
            engine.batch(Q)
        assert [r.seq for r in subscription.ready(2)] == [4, 5]  # live, up to the limit
        assert [r.seq for r in subscription.ready(5)] == [6, 7]
        assert subscription.ready(5) == []
        engine.batch(Q)
        engine.delete(Q)
        assert subscription.ready(5) == []  # ending: next ends it at once
        assert await drain(subscription) == []


async def test_slow_subscriber_catches_up_from_the_log():
    store, hub, engine = make(buffer=2, page_size=4)
    async with hub.subscribe(Q, after=0) as subscription:
        assert await subscription.next(timeout=0) is None  # up to date, now live
        reads = store.reads
        for _ in range(10):  # publish never waits: the third event drops the buffer
            engine.batch(Q)
        assert len(subscription._live) <= 2
        assert await take(subscription, 10) == list(range(1, 11))
        assert store.reads > reads  # they came from the log
        engine.batch(Q)
        reads = store.reads
        assert await take(subscription, 1) == [11]
        assert store.reads == reads  # and this one live again


async def test_lag_counts_batches_behind_the_last_published():
    _, hub, engine = make()
    for _ in range(3):
        engine.batch(Q)
    assert hub.stats(Q) == SubscriberStats(subscribers=0, max_lag=0)
    async with hub.subscribe(Q, after=0) as subscription:
        assert hub.stats(Q) == SubscriberStats(subscribers=1, max_lag=3)
        await take(subscription, 3)
        assert await subscription.next(timeout=0) is None  # live and idle
        assert hub.stats(Q).max_lag == 0
        engine.batch(OTHER)  # batches that did not touch Q do not make it lag
        assert hub.stats(Q).max_lag == 0
        engine.batch(Q)  # 5
        engine.batch(OTHER)
        engine.batch(Q)  # 7
        assert hub.stats(Q).max_lag == 3  # 5 is the oldest event it has not taken
        await take(subscription, 1)
        assert hub.stats(Q).max_lag == 1
        await take(subscription, 1)
        assert hub.stats(Q).max_lag == 0
        async with hub.subscribe(OTHER, after=0):
            assert hub.totals() == SubscriberStats(subscribers=2, max_lag=7)
    assert hub.totals() == SubscriberStats(subscribers=0, max_lag=0)


async def test_deletion_ends_iteration_at_once():
    _, hub, engine = make()
    async with hub.subscribe(Q, after=0) as subscription:
        assert await subscription.next(timeout=0) is None
        engine.batch(Q)
        deleter = threading.Thread(target=engine.delete, args=(Q,))
        deleter.start()
        deleter.join()
        assert await drain(subscription) == []  # the undelivered event went with the query
        assert subscription.ended is SubscriptionEnded.DELETED
    assert hub.stats(Q).subscribers == 0
    async with hub.subscribe(Q, after=0) as late:  # deleted before it subscribed
        assert await drain(late) == []
        assert late.ended is SubscriptionEnded.DELETED


async def test_deletion_wakes_a_waiting_subscriber():
    _, hub, _ = make()
    async with hub.subscribe(Q, after=0) as subscription, anyio.create_task_group() as tasks:
        got = []

        async def consume() -> None:
            got.extend(await drain(subscription))

        tasks.start_soon(consume)
        await anyio.wait_all_tasks_blocked()
        await anyio.to_thread.run_sync(hub.query_deleted, Q)
    assert got == [] and subscription.ended is SubscriptionEnded.DELETED


async def test_close_ends_every_subscription():
    _, hub, engine = make()
    engine.batch(Q)
    async with hub.subscribe(Q, 0) as first, hub.subscribe(OTHER, 0) as second:
        await take(first, 1)
        await hub.close()
        assert await drain(first) == [] and await drain(second) == []
        assert first.ended is second.ended is SubscriptionEnded.SHUTDOWN
    await hub.close()  # twice is fine
    engine.batch(Q)  # publishing after close is harmless
    async with hub.subscribe(Q, 0) as late:
        assert await drain(late) == []
        assert late.ended is SubscriptionEnded.SHUTDOWN


async def test_pruned_cursor_is_gone():
    store, hub, engine = make()
    for _ in range(6):
        engine.batch(Q)
    store.prune(Q, through=4)
    async with hub.subscribe(Q, after=2) as subscription:
        with pytest.raises(SubscriptionGone) as gone:
            await take(subscription, 1)
    assert gone.value.earliest == 4
    assert str(gone.value) == ("query 1: events after 2 were pruned; the earliest cursor still "
                               "served is 4")
    assert hub.stats(Q).subscribers == 0
    async with hub.subscribe(Q, after=4) as subscription:  # the earliest cursor is served
        assert await take(subscription, 2) == [5, 6]


async def test_subscriber_pruned_while_behind_is_gone():
    store, hub, engine = make(buffer=1)
    async with hub.subscribe(Q, after=0) as subscription:
        assert await subscription.next(timeout=0) is None
        for _ in range(5):
            engine.batch(Q)
        store.prune(Q, through=3)  # before it came back for the events it dropped
        with pytest.raises(SubscriptionGone) as gone:
            await take(subscription, 1)
    assert (gone.value.after, gone.value.earliest) == (0, 3)


async def test_timeout_loses_nothing():
    _, hub, engine = make()
    async with hub.subscribe(Q, after=0) as subscription:
        assert await subscription.next(timeout=0.001) is None
        assert subscription.ended is None
        engine.batch(Q)
        assert (await subscription.next(timeout=1)).seq == 1


async def test_closed_subscription_stops_and_unregisters():
    _, hub, engine = make()
    subscription = hub.subscribe(Q, after=0)
    assert hub.stats(Q).subscribers == 1
    subscription.close()
    subscription.close()
    assert hub.stats(Q).subscribers == 0
    engine.batch(Q)
    assert await drain(subscription) == [] and subscription.ended is None


async def test_bad_arguments():
    store = FakeStore()
    with pytest.raises(ValueError, match="buffer"):
        Hub(store, buffer=0)
    hub = Hub(store, buffer=1)
    with pytest.raises(ValueError, match="after must be >= 0"):
        hub.subscribe(Q, after=-1)
    with pytest.raises(ValueError, match="max_lag must be >= 1, got 0"):
        hub.subscribe(Q, after=0, max_lag=0)


async def test_subscriber_too_far_behind_is_cut_at_its_cursor():
    _, hub, engine = make(buffer=2, page_size=4)
    async with hub.subscribe(Q, after=0, max_lag=5) as subscription:
        engine.batch(Q)
        assert await take(subscription, 1) == [1]
        for _ in range(7):  # the third drops the buffer; 7 behind when it looks again
            engine.batch(Q)
        with anyio.fail_after(5), pytest.raises(SubscriptionLagging) as cut:
            await subscription.next()
        assert (cut.value.cursor, cut.value.behind, cut.value.max_lag) == (1, 7, 5)
        assert "7 batches behind (the limit is 5); resume after 1" in str(cut.value)
        assert hub.stats(Q).subscribers == 0  # released
    async with hub.subscribe(Q, after=cut.value.cursor) as resumed:
        assert await take(resumed, 7) == list(range(2, 9))


async def test_subscriber_behind_within_max_lag_catches_up_from_the_log():
    _, hub, engine = make(buffer=2, page_size=4)
    async with hub.subscribe(Q, after=0, max_lag=5) as subscription:
        assert await subscription.next(timeout=0) is None  # live
        for _ in range(5):  # the buffer overflows, but 5 behind is within the limit
            engine.batch(Q)
        assert await take(subscription, 5) == list(range(1, 6))


async def test_complete_through_counts_only_what_was_handed_out():
    store, hub, engine = make(buffer=8)
    for touched in [(Q,), (OTHER,), (Q,)]:
        engine.batch(*touched)  # 1, 2, 3
    async with hub.subscribe(Q, after=None) as subscription:
        assert subscription.complete_through() == -1  # the log is not read yet
        assert await take(subscription, 1) == [1]
        assert subscription.complete_through() == 1  # event 3 is read but not handed out
        assert await take(subscription, 1) == [3]
        assert await subscription.next(timeout=0.01) is None
        assert subscription.complete_through() == 3
        engine.batch(OTHER)  # 4, 5: untouched
        engine.batch(OTHER)
        assert subscription.complete_through() == 5
        engine.batch(Q)  # 6: buffered live, not handed out
        engine.batch(OTHER)  # 7
        assert subscription.complete_through() == 5
        assert await take(subscription, 1) == [6]
        assert subscription.complete_through() == 7


async def test_complete_through_never_passes_the_last_batch_published():
    store, hub, engine = make()
    engine.batch(Q)  # 1
    async with hub.subscribe(Q, after=40) as subscription:  # a cursor ahead of the log
        assert await subscription.next(timeout=0.01) is None
        assert subscription.complete_through() == 1
        store.commit((OTHER,))  # 2: committed, not yet published
        assert subscription.complete_through() == 1
