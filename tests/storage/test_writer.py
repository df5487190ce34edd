"""The writer thread: one transaction per submission, in order, all-or-nothing."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from storage.errors import PersistFailed, StoreClosed
from storage.writer import Writer, atomic


@pytest.fixture
def db_path(tmp_path):
    path = tmp_path / "w.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.close()
    return path


@pytest.fixture
def writer(db_path):
    w = Writer(sqlite3.connect(db_path, isolation_level=None, check_same_thread=False))
    yield w
    w.close()


def rows(db_path) -> list[int]:
    conn = sqlite3.connect(db_path)
    try:
        return [x for (x,) in conn.execute("SELECT x FROM t ORDER BY rowid")]
    finally:
        conn.close()


def insert(*values):
    def fn(conn):
        for value in values:
            conn.execute("INSERT INTO t VALUES (?)", (value,))
        return values

    return fn


def test_writes_run_in_submission_order_on_one_thread(writer, db_path):
    threads = set()

    def fn(i):
        def write(conn):
            threads.add(threading.get_ident())
            assert conn.in_transaction
            conn.execute("INSERT INTO t VALUES (?)", (i,))
            return i

        return write

    futures = [writer.submit(fn(i)) for i in range(200)]
    assert [f.result() for f in futures] == list(range(200))
    assert rows(db_path) == list(range(200))
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_exception_rolls_back_everything_and_wraps_the_cause(writer, db_path):
    cause = ValueError("boom")

    def failing(conn):
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("INSERT INTO t VALUES (2)")
        raise cause

    future = writer.submit(failing)
    with pytest.raises(PersistFailed, match="ValueError: boom") as caught:
        future.result()
    assert caught.value.__cause__ is cause
    assert rows(db_path) == []
    # The writer survives a failed unit of work.
    assert writer.submit(insert(3)).result() == (3,)
    assert rows(db_path) == [3]


def test_sql_error_is_persist_failed(writer, db_path):
    with pytest.raises(PersistFailed) as caught:
        writer.submit(lambda conn: conn.execute("INSERT INTO missing VALUES (1)")).result()
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)


def test_nested_atomic_rolls_back_only_the_inner_savepoint(writer, db_path):
    def fn(conn):
        conn.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(RuntimeError), atomic(conn):
            conn.execute("INSERT INTO t VALUES (2)")
            with atomic(conn):
                conn.execute("INSERT INTO t VALUES (3)")
            raise RuntimeError("undo 2 and 3")
        with atomic(conn):
            conn.execute("INSERT INTO t VALUES (4)")
        conn.execute("INSERT INTO t VALUES (5)")

    writer.submit(fn).result()
    assert rows(db_path) == [1, 4, 5]


def test_outer_failure_undoes_released_savepoints(writer, db_path):
    def fn(conn):
        with atomic(conn):
            conn.execute("INSERT INTO t VALUES (1)")
        raise KeyError("late")

    with pytest.raises(PersistFailed):
        writer.submit(fn).result()
    assert rows(db_path) == []


def test_atomic_outside_a_transaction_begins_and_commits(db_path):
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        with atomic(conn):
            conn.execute("INSERT INTO t VALUES (1)")
            assert conn.in_transaction
        assert not conn.in_transaction
        with pytest.raises(LookupError), atomic(conn):
            conn.execute("INSERT INTO t VALUES (2)")
            raise LookupError("undo")
        assert not conn.in_transaction
    finally:
        conn.close()
    assert rows(db_path) == [1]


def test_close_drains_pending_work(db_path):
    gate = threading.Event()
    writer = Writer(sqlite3.connect(db_path, isolation_level=None, check_same_thread=False))
    first = writer.submit(lambda conn: gate.wait(5))
    rest = [writer.submit(insert(i)) for i in range(50)]
    threading.Timer(0.05, gate.set).start()
    writer.close()
    assert first.result(timeout=0) is True
    assert all(f.done() for f in rest)
    assert rows(db_path) == list(range(50))


def test_close_twice_and_submit_after_close(db_path):
    conn = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    writer = Writer(conn)
    writer.close()
    writer.close()
    with pytest.raises(StoreClosed):
        writer.submit(insert(1))
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")  # the writer closed the connection it owned
    assert rows(db_path) == []
