"""Connection settings: WAL, the synchronous level asked for, read-only per-thread readers."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from storage import Store, StoreClosed, transactions
from tests.storage.builders import batch


def writer_pragma(store: Store, name: str):
    return store._writer.submit(transactions.pragma, name).result()


def test_journal_mode_is_wal(store, data_dir):
    store.append_batch(batch(1))
    assert writer_pragma(store, "journal_mode") == "wal"
    assert (data_dir / "store.db-wal").exists()
    # WAL is a property of the file: a plain new connection sees it too.
    conn = sqlite3.connect(data_dir / "store.db")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


@pytest.mark.parametrize("writer_process", [False, True], ids=["thread", "process"])
@pytest.mark.parametrize(("asked", "level"), [("full", 2), ("normal", 1)])
def test_synchronous_setting_is_honoured(data_dir, asked, level, writer_process):
    store = Store.open(data_dir, synchronous=asked, writer_process=writer_process)
    try:
        assert writer_pragma(store, "synchronous") == level
    finally:
        store.close()


def test_default_synchronous_is_full(data_dir):
    store = Store.open(data_dir)
    try:
        assert writer_pragma(store, "synchronous") == 2
    finally:
        store.close()


def test_writer_enforces_foreign_keys_and_waits_on_locks(store):
    assert writer_pragma(store, "foreign_keys") == 1
    assert writer_pragma(store, "busy_timeout") == 5000


def test_unknown_synchronous_level_is_refused(data_dir):
    with pytest.raises(ValueError, match="synchronous"):
        Store.open(data_dir, synchronous="off")
    assert not data_dir.exists()


def test_readers_are_read_only(store):
    with store._read() as conn, pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("UPDATE meta SET value = 99 WHERE key = 'last_seq'")
    assert store.last_seq() == 0


def test_a_read_sees_one_snapshot_while_the_writer_commits(store):
    store.append_batch(batch(1))
    with store._read() as conn:
        assert conn.execute("SELECT count(*) FROM batches").fetchone()[0] == 1
        store.append_batch(batch(2))  # commits on the writer thread meanwhile
        assert conn.execute("SELECT count(*) FROM batches").fetchone()[0] == 1
    assert store.last_seq() == 2


def test_each_thread_reads_on_its_own_connection_closed_with_the_store(data_dir):
    store = Store.open(data_dir, synchronous="normal")
    connections = []

    def read():
        store.last_seq()
        connections.append(store._reader())

    threads = [threading.Thread(target=read) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    read()
    assert len({id(conn) for conn in connections}) == 4
    store.close()
    for conn in connections:
        with pytest.raises(sqlite3.ProgrammingError):
            conn.execute("SELECT 1")
    with pytest.raises(StoreClosed):
        store.last_seq()
