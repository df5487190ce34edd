"""A commit whose fsync failed is neither durable nor gone: the writer says so
(CommitUncertain) and calls on_lost, the thread writer and the writer process alike,
instead of reporting the plain failure that means "nothing was written"."""
from __future__ import annotations

import sqlite3
import threading

import pytest

from storage import CommitUncertain, PersistFailed, Store
from storage.writer import Writer, atomic
from storage.writer_process import WriterLost
from tests.failing_fsync import failing_fsync_environment


class _FailingCommit:
    """A connection whose COMMIT fails with the given SQLite error (the rest succeeds)."""

    def __init__(self, errorname: str | None) -> None:
        self.errorname = errorname
        self.in_transaction = False
        self.statements: list[str] = []

    def execute(self, sql: str, *args):
        self.statements.append(sql)
        if sql == "BEGIN IMMEDIATE":
            self.in_transaction = True
        elif sql == "ROLLBACK":
            self.in_transaction = False
        elif sql == "COMMIT":
            error = sqlite3.OperationalError("disk I/O error" if "IOERR" in str(self.errorname)
                                             else "database or disk is full")
            error.sqlite_errorname = self.errorname
            raise error

    def close(self) -> None:
        pass


@pytest.mark.parametrize("errorname", ["SQLITE_IOERR_FSYNC", "SQLITE_IOERR_DIR_FSYNC"])
def test_a_commit_that_could_not_sync_is_uncertain(errorname):
    conn = _FailingCommit(errorname)
    with pytest.raises(CommitUncertain, match="durable is unknown"), atomic(conn):
        pass
    assert conn.statements[-1] == "ROLLBACK"


@pytest.mark.parametrize("errorname", ["SQLITE_FULL", "SQLITE_IOERR_WRITE"])
def test_a_commit_that_wrote_nothing_is_a_plain_failure(errorname):
    # A full disk or a failed write stops before the commit record: nothing is durable.
    with pytest.raises(sqlite3.OperationalError) as caught, atomic(_FailingCommit(errorname)):
        pass
    assert not isinstance(caught.value, CommitUncertain)


def test_the_thread_writer_calls_on_lost_for_an_uncertain_commit():
    lost = threading.Event()
    writer = Writer(_FailingCommit("SQLITE_IOERR_FSYNC"), on_lost=lost.set)
    try:
        future = writer.submit(lambda conn: None)
        with pytest.raises(PersistFailed) as caught:
            future.result(timeout=30)
        assert isinstance(caught.value.__cause__, CommitUncertain)
        assert lost.is_set()
    finally:
        writer.close()


def test_the_writer_process_exits_on_a_real_failed_fsync(tmp_path, monkeypatch):
    env, flag = failing_fsync_environment(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)     # the writer process starts with them
    lost = threading.Event()
    store = Store.open(tmp_path / "data", synchronous="full", writer_process=True,
                       on_writer_lost=lost.set)
    try:
        store.add_labels({"before": 1})
        flag.touch()
        with pytest.raises(WriterLost):
            store.add_labels({"during": 2})
        assert lost.is_set()
    finally:
        flag.unlink()
        store.close()
    # Reopened, the store holds the first labels; the second are there or not (their
    # transaction was written, its sync failed): nothing else.
    reopened = Store.open(tmp_path / "data", synchronous="full")
    try:
        assert reopened.labels() in ({"before": 1}, {"before": 1, "during": 2})
    finally:
        reopened.close()
