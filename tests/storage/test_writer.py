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


# ---------------------------------------------------------------------- group commit


def traced_writer(db_path, statements: list[str], **kwargs) -> Writer:
    conn = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    conn.set_trace_callback(statements.append)
    return Writer(conn, **kwargs)


def insert_group(calls: list[list[int]]):
    def run_group(conn, items):
        assert conn.in_transaction
        calls.append(list(items))
        conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in items])
        return [i * 10 for i in items]

    return run_group


def held(writer: Writer) -> threading.Event:
    """Keep the writer busy until the returned event is set, so submissions queue up."""
    gate, started = threading.Event(), threading.Event()
    writer.submit(lambda conn: (started.set(), gate.wait(5)))
    assert started.wait(5)
    return gate


def test_grouped_submissions_waiting_together_share_one_commit(db_path):
    statements: list[str] = []
    writer = traced_writer(db_path, statements)
    try:
        calls: list[list[int]] = []
        run_group = insert_group(calls)
        gate = held(writer)
        statements.clear()
        futures = [writer.submit_grouped(run_group, i) for i in range(5)]
        gate.set()
        assert [f.result() for f in futures] == [0, 10, 20, 30, 40]
    finally:
        writer.close()
    assert calls == [[0, 1, 2, 3, 4]]
    assert statements.count("COMMIT") == 2  # the held unit, then the whole group
    assert rows(db_path) == [0, 1, 2, 3, 4]


def test_groups_keep_submission_order_around_other_work(writer, db_path):
    calls: list[list[int]] = []
    run_group, other_group = insert_group(calls), insert_group(calls)
    gate = held(writer)
    futures = [writer.submit_grouped(run_group, 1), writer.submit_grouped(run_group, 2),
               writer.submit(insert(3)), writer.submit_grouped(run_group, 4),
               writer.submit_grouped(other_group, 5), writer.submit_grouped(run_group, 6)]
    gate.set()
    assert [f.result() for f in futures] == [10, 20, (3,), 40, 50, 60]
    # A plain submission or another group function ends a group.
    assert calls == [[1, 2], [4], [5], [6]]
    assert rows(db_path) == [1, 2, 3, 4, 5, 6]


def test_a_group_never_exceeds_max_group(db_path):
    writer = Writer(sqlite3.connect(db_path, isolation_level=None, check_same_thread=False),
                    max_group=2)
    try:
        calls: list[list[int]] = []
        run_group = insert_group(calls)
        gate = held(writer)
        futures = [writer.submit_grouped(run_group, i) for i in range(5)]
        gate.set()
        assert [f.result() for f in futures] == [0, 10, 20, 30, 40]
    finally:
        writer.close()
    assert calls == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="max_group"):
        Writer(sqlite3.connect(db_path, isolation_level=None), max_group=0)


def test_a_failing_group_fails_every_item_and_writes_nothing(writer, db_path):
    cause = ValueError("item 2 is bad")

    def run_group(conn, items):
        conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in items])
        if 2 in items:
            raise cause
        return items

    gate = held(writer)
    futures = [writer.submit_grouped(run_group, i) for i in (1, 2, 3)]
    gate.set()
    for future in futures:
        with pytest.raises(PersistFailed, match="item 2 is bad") as caught:
            future.result()
        assert caught.value.__cause__ is cause
    assert rows(db_path) == []
    # The writer survives, and the next group commits.
    assert writer.submit_grouped(run_group, 4).result() == 4
    assert rows(db_path) == [4]


def test_a_group_must_give_one_result_per_item(writer, db_path):
    def run_group(conn, items):
        conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in items])
        return items[:1]

    gate = held(writer)
    futures = [writer.submit_grouped(run_group, i) for i in (1, 2)]
    gate.set()
    for future in futures:
        with pytest.raises(PersistFailed, match="a group of 2 gave 1 results"):
            future.result()
    assert rows(db_path) == []


def test_a_cancelled_item_leaves_its_group(writer, db_path):
    calls: list[list[int]] = []
    run_group = insert_group(calls)
    gate = held(writer)
    futures = [writer.submit_grouped(run_group, i) for i in range(3)]
    assert futures[1].cancel()
    gate.set()
    assert futures[0].result() == 0 and futures[2].result() == 20
    assert calls == [[0, 2]]
    assert rows(db_path) == [0, 2]


def test_close_drains_grouped_work(db_path):
    writer = Writer(sqlite3.connect(db_path, isolation_level=None, check_same_thread=False))
    calls: list[list[int]] = []
    run_group = insert_group(calls)
    gate = held(writer)
    futures = [writer.submit_grouped(run_group, i) for i in range(4)]
    threading.Timer(0.05, gate.set).start()
    writer.close()
    assert [f.result(timeout=0) for f in futures] == [0, 10, 20, 30]
    assert rows(db_path) == [0, 1, 2, 3]


def test_one_writer_per_database(tmp_path):
    """A store's writer holds the writer lock until it is closed; another waits for it, and
    gives up with a clear error (two servers on one data directory)."""
    from storage import StorageError, Store
    from storage.store import DB_NAME
    from storage.writer import take_writer_lock

    store = Store.open(tmp_path / "data", synchronous="normal")
    try:
        with pytest.raises(StorageError, match="another writer holds the database"):
            take_writer_lock(tmp_path / "data" / DB_NAME, timeout=0.2)
    finally:
        store.close()
    take_writer_lock(tmp_path / "data" / DB_NAME, timeout=0.2).close()
