"""The Store façade: batches, query stats, events, retention, idempotency, labels, snapshots."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from storage import (
    EventRecord,
    PersistFailed,
    ResultsPruned,
    SnapshotCorrupt,
    Store,
    StoreClosed,
    transactions,
)
from storage.store import DB_NAME, REPLAY_PAGE
from storage.writer_process import ProcessWriter
from tests.storage.builders import (
    assert_same_graph,
    assert_same_stream,
    batch,
    delta,
    graph,
    payload,
    query,
    updates_for,
)


def append(store: Store, first: int, last: int, query_ids=(), **kwargs) -> None:
    for seq in range(first, last + 1):
        store.append_batch(batch(seq, query_ids, **kwargs))


def everything(store: Store, events_after: int = 0) -> dict:
    """Every read the service can make, for before/after comparisons."""
    return {
        "last_seq": store.last_seq(),
        "next_query_id": store.next_query_id(),
        "queries": store.queries(),
        "labels": store.labels(),
        "events": {q.id: store.events_after(q.id, events_after, 10**6)
                   for q in store.queries()},
        "batches": [(s, u.a.tolist(), u.kind.tolist()) for s, u in store.batches_after(0)],
        "snapshots": store.snapshots(),
    }


# ---------------------------------------------------------------------- a new store


def test_new_store_is_empty(store, data_dir):
    assert store.data_dir == data_dir
    assert (data_dir / "snapshots").is_dir()
    assert store.last_seq() == 0
    assert store.next_query_id() == 1
    assert store.queries() == [] and store.labels() == {}
    assert list(store.batches_after(0)) == []
    assert store.latest_snapshot() is None
    assert store.idempotent("nope") is None


# ---------------------------------------------------------------------- batches


def test_batches_read_back_exactly_in_order(store):
    append(store, 1, 3, n=50)
    assert store.last_seq() == 3
    replayed = list(store.batches_after(0))
    assert [seq for seq, _ in replayed] == [1, 2, 3]
    for seq, updates in replayed:
        assert_same_stream(updates, updates_for(seq, 50))
    assert [seq for seq, _ in store.batches_after(2)] == [3]
    assert list(store.batches_after(3)) == []


def test_replay_pages_through_many_batches(store):
    count = REPLAY_PAGE * 2 + 3
    futures = [store.append_batch_async(batch(seq, n=1)) for seq in range(1, count + 1)]
    assert [f.result() for f in futures] == [None] * count
    seqs = [seq for seq, _ in store.batches_after(5)]
    assert seqs == list(range(6, count + 1))


def test_batches_handed_over_at_once_commit_one_by_one(store):
    """append_batches_async: each record its own future, seq and rows; a record whose seq
    does not follow fails alone-or-with-its-group, and the records before it stay."""
    store.register_query(query(1), {}, None)
    futures = store.append_batches_async([batch(seq, (1,), n=2) for seq in range(1, 6)])
    assert [f.result() for f in futures] == [None] * 5
    assert [seq for seq, _ in store.batches_after(0)] == [1, 2, 3, 4, 5]
    for seq, updates in store.batches_after(0):
        assert_same_stream(updates, updates_for(seq, 2))
    futures = store.append_batches_async([batch(6, (1,)), batch(8, (1,))])
    with pytest.raises(PersistFailed, match="does not follow"):
        futures[1].result()
    futures[0].exception()          # settled: committed, or failed with its group
    assert store.last_seq() in (5, 6)
    assert store.append_batches_async([]) == []


def test_seq_gap_is_rejected_with_nothing_written(store):
    store.register_query(query(1), {}, None)
    append(store, 1, 2, (1,))
    before = everything(store)
    for bad_seq in (4, 2, 0):
        gap = batch(bad_seq, (1,), idempotency=("k", "h", "{}"), new_labels={"L": 5})
        with pytest.raises(PersistFailed, match="does not follow") as caught:
            store.append_batch(gap)
        assert isinstance(caught.value.__cause__, ValueError)
    assert everything(store) == before
    assert store.idempotent("k") is None


def test_event_for_another_seq_is_rejected(store):
    store.register_query(query(1), {}, None)
    record = batch(1, (1,))
    wrong = dataclasses.replace(record, events=(EventRecord(1, 7, "{}"),))
    with pytest.raises(PersistFailed, match="event for seq 7"):
        store.append_batch(wrong)
    assert store.last_seq() == 0


# ---------------------------------------------------------------------- group commit


@contextmanager
def writer_blocked(store: Store) -> Iterator[None]:
    """While the body runs, another connection holds the database's write lock: the writer
    waits (in BEGIN IMMEDIATE) on a first unit of work, which carries nothing, and what
    the body submits queues up behind it, in the writer's queue or the writer process's
    pipe."""
    other = sqlite3.connect(store.data_dir / DB_NAME, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        store._writer.submit(transactions.insert_labels, {})
        yield
        if isinstance(store._writer, ProcessWriter):
            # The child's drain thread moves what the body sent from the pipe into the
            # child's queue; a group is what is queued when the transaction ahead ends,
            # so give it time to have all of it there (it needs microseconds).
            time.sleep(0.2)
    finally:
        other.execute("COMMIT")
        other.close()


def group_sizes(store: Store) -> deque[int]:
    """The sizes of the groups of batches the store's writer commits from now on."""
    sizes = store._writer.group_sizes
    sizes.clear()
    return sizes


@pytest.mark.parametrize("writer_process", [False, True], ids=["thread", "process"])
def test_batches_queued_together_commit_as_if_one_by_one(data_dir, writer_process):
    """One group, one transaction, and the same rows as appending each batch alone: every
    batch its own seq, updates, events and idempotency key; query totals, labels and
    pruning as after the last of them."""
    options = {"synchronous": "normal", "result_retention": 4, "idempotency_retention": 3,
               "prune_every": 5}
    records = [batch(seq, (1, 2), idempotency=(f"key-{seq}", f"hash-{seq}", f"{{{seq}}}"),
                     new_labels={f"label-{seq}": seq} if seq % 4 == 0 else None)
               for seq in range(1, 13)]
    stores = {}
    for name in ("grouped", "alone"):
        stores[name] = Store.open(data_dir / name, writer_process=writer_process, **options)
        for query_id in (1, 2):
            stores[name].register_query(query(query_id), {}, None)
    try:
        grouped, alone = stores["grouped"], stores["alone"]
        sizes = group_sizes(grouped)
        grouped.append_batch(records[0])
        with writer_blocked(grouped):
            futures = [grouped.append_batch_async(record) for record in records[1:]]
        assert [f.result() for f in futures] == [None] * 11
        assert list(sizes) == [1, 11]  # crossing the prunes at seq 5 and 10
        for record in records:
            alone.append_batch(record)
        for query_id in (1, 2):
            horizons = []
            for store in (grouped, alone):
                with pytest.raises(ResultsPruned) as caught:
                    store.events_after(query_id, 0, 10)
                horizons.append(caught.value.earliest)
                assert store.events_after(query_id, 8, 10) == \
                    [EventRecord(query_id, s, payload(query_id, s)) for s in (10, 11)]
            assert horizons == [5, 5]  # pruned at seq 10: events <= 6 (6 has none)
        unpruned = {name: everything(store, events_after=8) for name, store in stores.items()}
        assert unpruned["grouped"] == unpruned["alone"]
        assert [grouped.idempotent(f"key-{s}") for s in range(1, 13)] == \
            [alone.idempotent(f"key-{s}") for s in range(1, 13)]
        assert grouped.idempotent("key-12") == (12, "hash-12", "{12}")
    finally:
        for store in stores.values():
            store.close()


@pytest.mark.parametrize("writer_process", [False, True], ids=["thread", "process"])
def test_a_group_larger_than_one_statement_takes(data_dir, writer_process):
    """A group whose rows pass SQLite's parameter limit is written in several statements."""
    store = Store.open(data_dir, synchronous="normal", prune_every=10**6,
                       writer_process=writer_process)
    try:
        for query_id in (1, 2, 3):
            store.register_query(query(query_id), {}, None)
        sizes = group_sizes(store)
        with writer_blocked(store):
            futures = [store.append_batch_async(batch(seq, (1, 2, 3), n=2,
                                                      idempotency=(f"k{seq}", "h", "{}")))
                       for seq in range(1, 251)]
        assert [f.result() for f in futures] == [None] * 250
        assert list(sizes) == [250]  # 250 batch rows, ~500 events: over 999 parameters
        assert [seq for seq, _ in store.batches_after(0)] == list(range(1, 251))
        touched = [s for s in range(1, 251) if s % 3]
        for query_id in (1, 2, 3):
            assert [e.seq for e in store.events_after(query_id, 0, 1000)] == touched
            record = store.query(query_id)
            assert (record.batches_seen, record.last_seq) == (250, touched[-1])
            assert record.total_positive == sum(delta(query_id, s)[0] for s in range(1, 251))
        assert store.idempotent("k250") == (250, "h", "{}")
    finally:
        store.close()


def test_a_failing_group_fails_every_batch_in_it(store):
    store.register_query(query(1), {}, None)
    append(store, 1, 2, (1,))
    before = everything(store)
    sizes = group_sizes(store)
    # Batch 6 does not follow 4: the whole group is rolled back, 3 and 4 with it.
    with writer_blocked(store):
        futures = [store.append_batch_async(batch(seq, (1,), idempotency=(f"k{seq}", "h", "{}")))
                   for seq in (3, 4, 6)]
    for future in futures:
        with pytest.raises(PersistFailed, match="batch seq 6 does not follow"):
            future.result()
    assert list(sizes) == []  # no group committed
    assert everything(store) == before
    assert store.idempotent("k3") is None
    append(store, 3, 4, (1,))
    assert store.last_seq() == 4 and store.query(1).batches_seen == 4


def test_other_writes_end_a_group_in_their_place(store):
    """Batch 1, then the deletion of query 2, then batches 2 and 3 computed before the
    deletion reached the writer: two groups around the deletion, and the deleted query's
    stats dropped from the second only."""
    for query_id in (1, 2):
        store.register_query(query(query_id), {}, None)
    sizes = group_sizes(store)
    with writer_blocked(store):
        futures = [store.append_batch_async(batch(1, (1, 2))),
                   store._writer.submit(transactions.delete_query, 2),
                   store.append_batch_async(batch(2, (1, 2))),
                   store.append_batch_async(batch(3, (1, 2)))]
    assert [f.result() for f in futures] == [None] * 4
    assert list(sizes) == [1, 2]
    assert [q.id for q in store.queries()] == [1]
    assert store.query(1).batches_seen == 3
    assert store.last_seq() == 3


# ---------------------------------------------------------------------- query stats


def test_every_standing_query_gets_its_stats(store):
    store.register_query(query(1), {}, None)
    store.register_query(query(2), {}, None)
    append(store, 1, 4, (1, 2))
    for query_id in (1, 2):
        record = store.query(query_id)
        assert record.batches_seen == 4
        assert record.total_positive == sum(delta(query_id, s)[0] for s in range(1, 5))
        assert record.total_positive > 3 * 10**13  # beyond 32 bits, exactly
        assert record.total_negative == sum(delta(query_id, s)[1] for s in range(1, 5))
        assert record.last_seq == 4
    append(store, 5, 6, (1, 2))  # delta(_, 6) is zero: last_seq stays at 5
    assert store.query(1).last_seq == 5
    assert store.query(1).batches_seen == 6


def test_stats_for_a_deleted_query_are_dropped(store):
    store.register_query(query(1), {}, None)
    store.register_query(query(2), {}, None)
    store.delete_query(2)
    store.append_batch(batch(1, (1, 2)))  # computed before the deletion reached storage
    assert [q.id for q in store.queries()] == [1]
    assert store.query(1).batches_seen == 1
    assert store.events_after(2, 0, 10) == []


def test_a_never_registered_query_fails_the_batch(store):
    store.register_query(query(1), {}, None)
    with pytest.raises(PersistFailed, match=r"never registered: \[5\]"):
        store.append_batch(batch(1, (1, 5)))
    assert store.last_seq() == 0
    assert store.query(1).batches_seen == 0


# ---------------------------------------------------------------------- events


def test_events_after_pages_in_seq_order(store):
    store.register_query(query(1), {}, None)
    store.register_query(query(2), {}, None)
    append(store, 1, 10, (1, 2))
    expected = [s for s in range(1, 11) if s % 3]  # no event when the delta is zero
    served, after = [], 0
    while page := store.events_after(1, after, 3):
        assert len(page) <= 3
        served += page
        after = page[-1].seq
    assert [e.seq for e in served] == expected
    assert all(e.query_id == 1 and e.payload == payload(1, e.seq) for e in served)
    assert [e.seq for e in store.events_after(1, 5, 100)] == [s for s in expected if s > 5]
    assert store.events_after(1, 0, 0) == []
    assert store.events_after(99, 0, 10) == []
    with pytest.raises(ValueError, match="limit"):
        store.events_after(1, 0, -1)


def test_pruning_keeps_the_retained_window_and_reports_the_horizon(data_dir):
    store = Store.open(data_dir, synchronous="normal", result_retention=4, prune_every=5)
    try:
        store.register_query(query(1), {}, None)
        store.register_query(query(2), {}, None)
        append(store, 1, 9, (1, 2))
        # Pruned once so far, at seq 5: events with seq <= 1.
        with pytest.raises(ResultsPruned) as caught:
            store.events_after(1, 0, 10)
        assert caught.value.earliest == 1
        store.append_batch(batch(10, (1, 2)))  # prunes events with seq <= 6
        kept = [s for s in range(7, 11) if s % 3]
        for after in (4, 0):
            with pytest.raises(ResultsPruned) as caught:
                store.events_after(1, after, 10)
            assert caught.value.earliest == 5  # the newest pruned event (seq 6 had none)
            assert caught.value.query_id == 1
        assert [e.seq for e in store.events_after(1, 5, 10)] == kept
        assert [e.seq for e in store.events_after(1, 8, 10)] == [10]
    finally:
        store.close()


def test_a_pruned_backfill_at_seq_zero_is_reported(data_dir):
    store = Store.open(data_dir, synchronous="normal", result_retention=1, prune_every=1)
    try:
        store.register_query(query(1), {}, EventRecord(1, 0, '{"backfill": true}'))
        assert [e.seq for e in store.events_after(1, -1, 10)] == [0]
        store.append_batch(batch(1, (1,)))  # keeps only seq 1's events
        with pytest.raises(ResultsPruned) as caught:
            store.events_after(1, -1, 10)
        assert caught.value.earliest == 0
        assert [e.seq for e in store.events_after(1, 0, 10)] == [1]
    finally:
        store.close()


def test_a_query_that_lost_nothing_is_not_reported_pruned(data_dir):
    store = Store.open(data_dir, synchronous="normal", result_retention=2, prune_every=2)
    try:
        store.register_query(query(1), {}, None)
        store.register_query(query(2), {}, None)
        append(store, 1, 3, (1, 2))
        append(store, 4, 6, (1,))
        store.delete_query(2)
        store.register_query(query(3, created_seq=6), {}, None)
        append(store, 7, 8, (1, 3))
        assert [e.seq for e in store.events_after(3, 0, 10)] == [7, 8]
    finally:
        store.close()


# ---------------------------------------------------------------------- idempotency


def test_idempotency_keys_are_served_then_pruned(data_dir):
    store = Store.open(data_dir, synchronous="normal", idempotency_retention=3, prune_every=4)
    try:
        for seq in range(1, 9):
            store.append_batch(batch(seq, idempotency=(f"key-{seq}", f"hash-{seq}",
                                                       f'{{"seq": {seq}}}')))
            assert store.idempotent(f"key-{seq}") == (seq, f"hash-{seq}", f'{{"seq": {seq}}}')
        # Pruned at seq 4 (<= 1) and at seq 8 (<= 5).
        assert [s for s in range(1, 9) if store.idempotent(f"key-{s}")] == [6, 7, 8]
    finally:
        store.close()


def test_a_reused_idempotency_key_fails_the_batch(store):
    store.append_batch(batch(1, idempotency=("k", "h1", "{}")))
    with pytest.raises(PersistFailed, match="UNIQUE"):
        store.append_batch(batch(2, idempotency=("k", "h2", "{}")))
    assert store.last_seq() == 1
    assert store.idempotent("k") == (1, "h1", "{}")


# ---------------------------------------------------------------------- labels


def test_labels_accumulate_from_every_writer(store):
    store.add_labels({"Person": 0, "City": 1})
    store.append_batch(batch(1, new_labels={"Road": 2}))
    store.register_query(query(1), {"Bridge": 3, "City": 1}, None)
    assert store.labels() == {"Person": 0, "City": 1, "Road": 2, "Bridge": 3}


@pytest.mark.parametrize(
    "conflict", [{"Person": 7}, {"Other": 0}], ids=["name-remapped", "id-reused"]
)
def test_conflicting_labels_are_refused(store, conflict):
    store.add_labels({"Person": 0})
    with pytest.raises(PersistFailed):
        store.add_labels({"Fine": 5, **conflict})
    assert store.labels() == {"Person": 0}


# ---------------------------------------------------------------------- queries


def test_register_and_delete_queries(store):
    store.register_query(query(1), {"A": 0}, None)
    store.register_query(query(4, name="four"), {}, EventRecord(4, 0, '{"backfill": true}'))
    assert store.next_query_id() == 5
    assert [q.id for q in store.queries()] == [1, 4]
    assert store.query(4) == query(4, name="four")
    assert store.events_after(4, -1, 10) == [EventRecord(4, 0, '{"backfill": true}')]
    append(store, 1, 2, (1, 4))
    store.delete_query(4)
    store.delete_query(4)  # already gone: nothing to do
    assert store.query(4) is None
    assert [q.id for q in store.queries()] == [1]
    assert store.events_after(4, -1, 10) == []
    assert store.next_query_id() == 5


def test_query_ids_are_never_reused(store):
    store.register_query(query(3), {}, None)
    store.delete_query(3)
    for reused in (3, 2):
        with pytest.raises(PersistFailed, match="already used"):
            store.register_query(query(reused), {}, None)
    assert store.queries() == []


def test_failed_registration_writes_nothing(store):
    with pytest.raises(PersistFailed, match="backfill"):
        store.register_query(query(1), {"A": 0}, EventRecord(2, 0, "{}"))
    assert store.queries() == [] and store.labels() == {} and store.next_query_id() == 1


# ---------------------------------------------------------------------- snapshots


def test_record_snapshot_keeps_the_newest_and_drops_unneeded_batches(store, data_dir):
    first = store.record_snapshot(0, graph(0))
    assert first.path == data_dir / "snapshots" / "snapshot-000000000000.npz"
    assert (first.vertices, first.edges) == (50, 200)
    append(store, 1, 5)
    store.record_snapshot(5, graph(5))
    assert [s for s, _ in store.batches_after(0)] == [1, 2, 3, 4, 5]  # 0 is still kept
    append(store, 6, 9)
    latest = store.record_snapshot(9, graph(9))
    assert store.latest_snapshot() == latest
    assert [s.seq for s in store.snapshots()] == [9, 5]
    assert sorted(p.name for p in (data_dir / "snapshots").iterdir()) == [
        "snapshot-000000000005.npz",
        "snapshot-000000000009.npz",
    ]
    assert [s for s, _ in store.batches_after(0)] == [6, 7, 8, 9]
    assert_same_graph(store.read_snapshot(latest), graph(9))
    assert store.last_seq() == 9


def test_keep_one_drops_every_batch_up_to_the_snapshot(store, data_dir):
    append(store, 1, 3)
    store.record_snapshot(2, graph(2), keep=1)
    store.record_snapshot(3, graph(3), keep=1)
    assert [s.seq for s in store.snapshots()] == [3]
    assert list(store.batches_after(0)) == []
    assert len(list((data_dir / "snapshots").iterdir())) == 1


def test_snapshot_beyond_the_last_batch_is_refused(store, data_dir):
    append(store, 1, 2)
    with pytest.raises(PersistFailed, match="outside"):
        store.record_snapshot(3, graph(3))
    assert store.latest_snapshot() is None
    assert list((data_dir / "snapshots").iterdir()) == []


def test_corrupt_snapshot_file_is_reported(store):
    record = store.record_snapshot(0, graph(0))
    record.path.write_bytes(record.path.read_bytes()[:100])
    with pytest.raises(SnapshotCorrupt, match=record.path.name):
        store.read_snapshot(record)


def test_open_removes_files_a_crash_left_behind(data_dir):
    store = Store.open(data_dir, synchronous="normal")
    kept = store.record_snapshot(0, graph(0))
    store.close()
    snapshot_dir = data_dir / "snapshots"
    (snapshot_dir / "snapshot-000000000001.npz").write_bytes(b"never recorded")
    (snapshot_dir / f".snapshot-000000000002.npz.{os.getpid()}.tmp").write_bytes(b"half")
    (snapshot_dir / "README").write_text("not ours")
    store = Store.open(data_dir, synchronous="normal")
    try:
        assert sorted(p.name for p in snapshot_dir.iterdir()) == ["README", kept.path.name]
        assert_same_graph(store.read_snapshot(store.latest_snapshot()), graph(0))
    finally:
        store.close()


def test_size_counts_database_and_snapshots(store):
    empty = store.size_bytes()
    assert empty > 0
    record = store.record_snapshot(0, graph(0, vertices=5000, edges=20000))
    assert store.size_bytes() >= empty + record.path.stat().st_size


# ---------------------------------------------------------------------- lifecycle


def test_reopen_after_close_keeps_everything(data_dir):
    store = Store.open(data_dir)
    store.add_labels({"A": 0})
    store.register_query(query(1), {"B": 1}, EventRecord(1, 0, "{}"))
    store.register_query(query(2), {}, None)
    append(store, 1, 4, (1, 2), idempotency=None)
    store.append_batch(batch(5, (1, 2), idempotency=("k", "h", "r")))
    store.record_snapshot(5, graph(5))
    store.delete_query(2)
    before = everything(store)
    store.close()
    store.close()
    reopened = Store.open(data_dir)
    try:
        assert everything(reopened) == before
        assert reopened.idempotent("k") == (5, "h", "r")
        assert before["last_seq"] == 5 and len(before["queries"]) == 1
    finally:
        reopened.close()


def test_use_after_close_raises_store_closed(data_dir):
    store = Store.open(data_dir)
    store.close()
    with pytest.raises(StoreClosed):
        store.append_batch(batch(1))
    with pytest.raises(StoreClosed):
        store.register_query(query(1), {}, None)
    with pytest.raises(StoreClosed):
        store.queries()
    with pytest.raises(StoreClosed):
        list(store.batches_after(0))
