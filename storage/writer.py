"""Owns the single write connection: a thread that runs submitted transactions in order.

Group commit: submissions made with :meth:`Writer.submit_grouped` that are waiting in the
queue together (one behind the other, same group function) run as one transaction, so one
commit (one fsync) makes all of them durable.  The writer never waits for more work to
arrive: a group is whatever queued up while the previous transaction was committing.
"""

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
Item = TypeVar("Item")

# The most grouped submissions one transaction takes.
MAX_GROUP = 256

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
    """Runs ``fn(conn)`` for each submitted ``fn``, one transaction each, in order; grouped
    submissions waiting together share one transaction.

    Takes ownership of ``conn`` (opened with ``check_same_thread=False`` and
    ``isolation_level=None``) and closes it in :meth:`close`.
    """

    def __init__(self, conn: sqlite3.Connection, name: str = "storage-writer",
                 *, max_group: int = MAX_GROUP):
        if max_group < 1:
            raise ValueError(f"max_group must be >= 1, got {max_group}")
        self._conn = conn
        self._max_group = max_group
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        # Daemon: an interpreter exiting without close() must not hang on this thread;
        # work it never ran was never acknowledged.
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> Future[T]:
        """Queue ``fn``; the future gives its result, or :class:`PersistFailed`."""
        return self._put(fn, None)

    def submit_grouped(
        self, run_group: Callable[[sqlite3.Connection, list[Item]], list[T]], item: Item
    ) -> Future[T]:
        """Queue ``item`` for ``run_group(conn, items)``.

        The grouped submissions of one ``run_group`` (compared with ``==``) that wait in
        the queue one behind the other when the writer reaches the first of them run as
        one call, in one transaction, in submission order; ``run_group`` returns one result
        per item.  If it raises, the transaction is rolled back and every item of the group
        gets :class:`PersistFailed`.
        """
        return self._put(item, run_group)

    def _put(self, work: Any, run_group: Callable | None) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise StoreClosed("no writes are accepted after close()")
            self._queue.put((work, run_group, future))
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
        taken = None    # the entry that ended the last group, still to be run
        try:
            while True:
                entry = taken if taken is not None else self._queue.get()
                taken = None
                if entry is _STOP:
                    return
                work, run_group, future = entry
                if run_group is None:
                    if future.set_running_or_notify_cancel():
                        self._execute(work, future)
                    continue
                group = [(work, future)]
                while len(group) < self._max_group:
                    try:
                        entry = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if entry is _STOP or entry[1] != run_group:
                        taken = entry
                        break
                    group.append((entry[0], entry[2]))
                self._execute_group(run_group, group)
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

    def _execute_group(self, run_group: Callable, group: list[tuple[Any, Future]]) -> None:
        group = [(item, future) for item, future in group
                 if future.set_running_or_notify_cancel()]
        if not group:
            return
        try:
            with atomic(self._conn):
                results = run_group(self._conn, [item for item, _ in group])
                if len(results) != len(group):
                    raise RuntimeError(f"a group of {len(group)} gave {len(results)} results")
        except Exception as exc:  # noqa: BLE001
            for _, future in group:
                future.set_exception(PersistFailed.wrapping(exc))
        else:
            for (_, future), result in zip(group, results):
                future.set_result(result)
