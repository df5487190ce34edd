"""Owns the single write connection: a thread that runs submitted transactions in order."""

from __future__ import annotations

import itertools
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, TypeVar

from storage.errors import PersistFailed, StoreClosed

T = TypeVar("T")

_savepoint_ids = itertools.count(1)
_STOP = object()


@contextmanager
def atomic(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One unit of work: commit on success, roll back on any exception.

    The outermost level is a ``BEGIN IMMEDIATE`` transaction (the write lock is
    taken up front, so it cannot fail half-way on a lock upgrade); nested
    levels are savepoints, so an inner failure undoes only the inner work.
    ``conn`` must be in autocommit mode (``isolation_level=None``).
    """
    if not conn.in_transaction:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            _rollback(conn)
            raise
        try:
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return
    savepoint = f"atomic_{next(_savepoint_ids)}"
    conn.execute(f"SAVEPOINT {savepoint}")
    try:
        yield conn
    except BaseException:
        conn.execute(f"ROLLBACK TO {savepoint}")
        conn.execute(f"RELEASE {savepoint}")
        raise
    conn.execute(f"RELEASE {savepoint}")


def _rollback(conn: sqlite3.Connection) -> None:
    # SQLite may already have rolled back by itself (e.g. on SQLITE_FULL).
    if conn.in_transaction:
        conn.execute("ROLLBACK")


class Writer:
    """Runs ``fn(conn)`` for each submitted ``fn``, one transaction each, in order.

    Takes ownership of ``conn`` (opened with ``check_same_thread=False`` and
    ``isolation_level=None``) and closes it in :meth:`close`.
    """

    def __init__(self, conn: sqlite3.Connection, name: str = "storage-writer"):
        self._conn = conn
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        # Daemon: an interpreter exiting without close() must not hang on this thread;
        # work it never ran was never acknowledged.
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> Future[T]:
        """Queue ``fn``; the future gives its result, or :class:`PersistFailed`."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise StoreClosed("no writes are accepted after close()")
            self._queue.put((fn, future))
        return future

    def close(self) -> None:
        """Run what was submitted, stop the thread, close the connection."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        try:
            while (item := self._queue.get()) is not _STOP:
                fn, future = item
                if future.set_running_or_notify_cancel():
                    self._execute(fn, future)
        finally:
            self._conn.close()

    def _execute(self, fn: Callable[[sqlite3.Connection], Any], future: Future) -> None:
        try:
            with atomic(self._conn):
                result = fn(self._conn)
        # Whatever fn raised, the caller gets PersistFailed; the writer thread lives on.
        except Exception as exc:  # noqa: BLE001
            future.set_exception(PersistFailed.wrapping(exc))
        else:
            future.set_result(result)
