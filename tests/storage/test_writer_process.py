"""The writer process: the store's transactions in a child process, in order, grouped as the
thread writer groups them; one writer per database; a lost child is never mistaken for a
failed write."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time

import pytest

from storage import PersistFailed, SchemaTooNew, Store, StoreClosed, transactions
from storage.store import DB_NAME
from storage.writer import writer_lock_path
from storage.writer_process import ProcessWriter, WriterLost
from tests.storage.builders import batch, query


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / DB_NAME


@pytest.fixture
def writer(db_path):
    w = ProcessWriter(db_path, "normal")
    yield w
    w.close()


def test_the_transactions_run_in_a_child_process_in_order(writer, db_path):
    assert writer.pid != os.getpid()
    futures = [writer.submit(transactions.insert_labels, {f"label-{i}": i}) for i in range(50)]
    assert [f.result() for f in futures] == [None] * 50
    assert writer.submit(transactions.pragma, "journal_mode").result() == "wal"
    conn = sqlite3.connect(db_path)
    try:
        assert dict(conn.execute("SELECT name, id FROM labels")) == \
            {f"label-{i}": i for i in range(50)}
    finally:
        conn.close()


def test_only_the_store_transactions_are_accepted(writer):
    with pytest.raises(TypeError, match="storage.transactions"):
        writer.submit(lambda conn: None)
    # A stand-in with the same name is not the function itself.
    def insert_labels(conn, labels):
        return None

    with pytest.raises(TypeError):
        writer.submit(insert_labels, {})


def test_a_failed_transaction_is_persist_failed_with_its_cause(writer):
    assert writer.submit(transactions.insert_labels, {"a": 1}).result() is None
    with pytest.raises(PersistFailed, match="already mapped") as caught:
        writer.submit(transactions.insert_labels, {"b": 2, "a": 3}).result()
    assert isinstance(caught.value.__cause__, ValueError)
    with pytest.raises(PersistFailed) as caught:
        writer.submit(transactions.insert_labels, {"c": 1}).result()   # labels.id is UNIQUE
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    # Rolled back whole ("b" went with "a"), and the writer goes on.
    assert writer.submit(transactions.insert_labels, {"b": 2}).result() is None


def test_start_up_errors_are_raised_by_the_constructor(db_path):
    Store.open(db_path.parent).close()
    conn = sqlite3.connect(db_path)
    conn.execute("INSERT INTO migrations VALUES (99, 'from the future', 'later')")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNew, match="migration 99"):
        ProcessWriter(db_path, "normal")


def test_close_finishes_the_work_and_removes_the_wal(writer, db_path):
    futures = [writer.submit(transactions.insert_labels, {f"l{i}": i}) for i in range(20)]
    writer.close()
    writer.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert not db_path.with_name(DB_NAME + "-wal").exists()
    with pytest.raises(StoreClosed):
        writer.submit(transactions.insert_labels, {})


def test_a_second_writer_waits_for_the_first_to_be_gone(db_path):
    first = ProcessWriter(db_path, "normal")
    second: list[ProcessWriter] = []
    starting = threading.Thread(target=lambda: second.append(ProcessWriter(db_path, "normal")))
    starting.start()
    try:
        time.sleep(0.5)
        assert not second, "the second writer started beside the first"
        assert writer_lock_path(db_path).exists()
        first.submit(transactions.insert_labels, {"before": 1}).result()
    finally:
        first.close()
    starting.join(30)
    assert second
    try:
        second[0].submit(transactions.insert_labels, {"after": 2}).result()
    finally:
        second[0].close()


def test_a_lost_child_calls_on_lost_before_failing_the_writes_in_flight(db_path):
    calls = []
    writer = ProcessWriter(db_path, "normal", on_lost=lambda: calls.append("lost"))
    try:
        # Hold the database's write lock, so the child is inside a transaction when it dies.
        other = sqlite3.connect(db_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        pending = writer.submit(transactions.insert_labels, {"x": 1})
        time.sleep(0.2)
        os.kill(writer.pid, signal.SIGKILL)
        with pytest.raises(WriterLost, match="in flight"):
            pending.result(timeout=30)
        assert calls == ["lost"]
        other.execute("ROLLBACK")
        other.close()
        with pytest.raises(WriterLost):
            writer.submit(transactions.insert_labels, {"y": 2})
    finally:
        writer.close()


def test_a_store_with_a_writer_process_serves_everything(tmp_path):
    store = Store.open(tmp_path / "data", synchronous="normal", writer_process=True)
    try:
        store.register_query(query(1), {"red": 7}, None)
        store.append_batch(batch(1, (1,), idempotency=("k", "h", "{}")))
        assert store.last_seq() == 1 and store.labels() == {"red": 7}
        assert store.idempotent("k") == (1, "h", "{}")
        store.delete_query(1)
        assert store.queries() == []
    finally:
        store.close()


def test_a_writer_launched_beforehand_is_taken_over_by_open(tmp_path):
    launched = Store.launch_writer(tmp_path / "data", "normal")     # makes the folder
    store = Store.open(tmp_path / "data", synchronous="normal", writer_process=True,
                       launched_writer=launched)
    try:
        assert launched.taken and store._writer.pid == launched.child.pid
        store.register_query(query(1), {"red": 7}, None)
        store.append_batch(batch(1, (1,)))
        assert store.last_seq() == 1 and store.labels() == {"red": 7}
        launched.discard()          # taken over: leaves the child alone
        assert launched.child.poll() is None
    finally:
        store.close()
    assert launched.child.poll() == 0


def test_a_launched_writer_for_other_settings_is_ended_and_refused(tmp_path):
    launched = Store.launch_writer(tmp_path / "data", "full")
    with pytest.raises(ValueError, match="not the one wanted"):
        Store.open(tmp_path / "data", synchronous="normal", writer_process=True,
                   launched_writer=launched)
    assert launched.child.poll() is not None
    # Discarded: the writer lock is free for the next one.
    Store.open(tmp_path / "data", synchronous="normal", writer_process=True).close()


def test_a_launched_writer_never_taken_over_is_ended_by_discard(tmp_path):
    launched = Store.launch_writer(tmp_path / "data", "normal")
    launched.discard()
    assert launched.child.poll() is not None
    Store.open(tmp_path / "data", synchronous="normal", writer_process=True).close()
