"""Owns the single write connection: a thread that runs submitted transactions in order.

Group commit: submissions made with :meth:`Writer.submit_grouped` that are waiting in the
queue together (one behind the other, same group function and arguments) run as one
transaction, so one commit (one fsync) makes all of them durable.  The writer never waits
for more work to arrive: a group is whatever queued up while the previous transaction was
committing.  ``storage.writer_process`` runs the same units of work in a child process.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import queue
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, NamedTuple, TypeVar

from storage.errors import CommitUncertain, PersistFailed, StorageError, StoreClosed

T = TypeVar("T")

log = logging.getLogger("motifstream.storage")

# The most grouped submissions one transaction takes.
MAX_GROUP = 256
# Sizes of the latest groups a writer committed (for tests and diagnostics).
GROUP_SIZES_KEPT = 1024

# How long a new writer waits for the one before it (the writer process of a server just
# killed finishes its transaction and exits; a second server on the same data gives up).
WRITER_LOCK_TIMEOUT_S = 30.0

_savepoint_ids = itertools.count(1)
# A COMMIT failing with these wrote the transaction (its commit record too) and then could
# not sync it: it is neither durable nor gone -- a crash may still find it in the WAL.  Other
# failures (SQLITE_FULL, a failed write) stop before the commit record is written.  Before
# Python 3.11 errors carry no SQLite code: every I/O error at COMMIT counts as one of these.
UNCERTAIN_COMMIT_ERRORS = frozenset({"SQLITE_IOERR_FSYNC", "SQLITE_IOERR_DIR_FSYNC"})
_STOP = object()


def writer_lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".writer-lock")


def take_writer_lock(db_path: Path, timeout: float = WRITER_LOCK_TIMEOUT_S) -> IO:
    """An exclusive lock that only the database's one writer holds: the open lock file,
    released when it is closed or its process exits."""
    lock = open(writer_lock_path(db_path), "a")  # noqa: SIM115 -- the caller holds it
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except BlockingIOError:
            if time.monotonic() >= deadline:
                lock.close()
                raise StorageError(f"{db_path}: another writer holds the database (waited "
                                   f"{timeout:.0f} s for {writer_lock_path(db_path).name})")
            time.sleep(0.01)


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
        except BaseException as exc:
            _rollback(conn)
            if _uncertain(exc):
                raise CommitUncertain(f"{type(exc).__name__}: {exc}") from exc
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


def _uncertain(exc: BaseException) -> bool:
    """Whether a COMMIT that raised ``exc`` may have reached the disk all the same."""
    if not isinstance(exc, sqlite3.Error):
        return False
    name = getattr(exc, "sqlite_errorname", None)
    if name is None:
        return "disk I/O error" in str(exc)
    return name in UNCERTAIN_COMMIT_ERRORS


def _rollback(conn: sqlite3.Connection) -> None:
    # SQLite may already have rolled back by itself (e.g. on SQLITE_FULL).
    if conn.in_transaction:
        conn.execute("ROLLBACK")


class Work(NamedTuple):
    """One submitted unit of work: ``fn(conn, *args)``, or when ``grouped``,
    ``fn(conn, items, *args)`` once for the ``item`` of every submission in its group."""

    fn: Callable
    args: tuple
    item: Any = None
    grouped: bool = False

    def takes(self, other: Work) -> bool:
        """Whether ``other``, queued right behind, joins this grouped work's transaction."""
        return self.grouped and other.grouped and other.fn == self.fn and other.args == self.args


def take_group(first: tuple, take_next: Callable[[], Any], max_group: int) -> tuple[list, Any]:
    """The entries that run in one transaction from ``first``, entries being ``(Work,
    handle)`` pairs: ``first`` and, if it is grouped, the entries ``take_next()`` gives
    while they join it (``None``: nothing more is waiting).  Returns them and the entry
    taken that did not join, if any (it runs next)."""
    group = [first]
    while first[0].grouped and len(group) < max_group:
        entry = take_next()
        if entry is None:
            break
        if not isinstance(entry, tuple) or not first[0].takes(entry[0]):
            return group, entry     # a stop, or work of another kind
        group.append(entry)
    return group, None


def run_group(conn: sqlite3.Connection, works: list[Work]) -> list:
    """Run ``works`` (a group from :func:`take_group`) in one transaction; one result each.
    Raises whatever the work raised, after rolling the transaction back."""
    first = works[0]
    with atomic(conn):
        if not first.grouped:
            return [first.fn(conn, *first.args)]
        results = first.fn(conn, [work.item for work in works], *first.args)
        if len(results) != len(works):
            raise RuntimeError(f"a group of {len(works)} gave {len(results)} results")
        return results


class Writer:
    """Runs each submitted unit of work in a transaction of its own, in submission order;
    grouped submissions waiting together share one transaction.

    Takes ownership of ``conn`` (opened with ``check_same_thread=False`` and
    ``isolation_level=None``) and of ``lock`` (take_writer_lock's), and closes them in
    :meth:`close`.  A commit whose outcome is unknown (:class:`CommitUncertain`) calls
    ``on_lost`` first, as the writer process's death does (the service ends its process
    there, so that a restart finds out what is durable), then fails its group.
    """

    def __init__(self, conn: sqlite3.Connection, name: str = "storage-writer",
                 *, max_group: int = MAX_GROUP, lock: IO | None = None,
                 on_lost: Callable[[], None] | None = None):
        if max_group < 1:
            raise ValueError(f"max_group must be >= 1, got {max_group}")
        self._conn = conn
        self._writer_lock = lock    # from take_writer_lock, released after the connection
        self._max_group = max_group
        self._on_lost = on_lost
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self.group_sizes: deque[int] = deque(maxlen=GROUP_SIZES_KEPT)
        # Daemon: an interpreter exiting without close() must not hang on this thread;
        # work it never ran was never acknowledged.
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``fn(conn, *args)``; the future gives its result, or
        :class:`PersistFailed`."""
        return self._put(Work(fn, args))

    def submit_grouped(self, run_group: Callable[..., list[T]], item: Any, *args: Any
                       ) -> Future[T]:
        """Queue ``item`` for ``run_group(conn, items, *args)``.

        The grouped submissions with an equal ``run_group`` and ``args`` that wait in the
        queue one behind the other when the writer reaches the first of them run as one
        call, in one transaction, in submission order; ``run_group`` returns one result
        per item.  If it raises, the transaction is rolled back and every item of the group
        gets :class:`PersistFailed`.
        """
        return self._put(Work(run_group, args, item, grouped=True))

    def submit_grouped_many(self, run_group: Callable[..., list[T]], items: list, *args: Any
                            ) -> list[Future[T]]:
        """``submit_grouped`` for each of ``items``, in order."""
        return [self.submit_grouped(run_group, item, *args) for item in items]

    def _put(self, work: Work) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise StoreClosed("no writes are accepted after close()")
            self._queue.put((work, future))
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
                if entry is _STOP:
                    return
                group, taken = take_group(entry, self._waiting, self._max_group)
                group = [(work, future) for work, future in group
                         if future.set_running_or_notify_cancel()]
                if group:
                    self._execute(group)
        finally:
            self._conn.close()
            if self._writer_lock is not None:
                self._writer_lock.close()

    def _waiting(self) -> Any:
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None

    def _execute(self, group: list[tuple[Work, Future]]) -> None:
        try:
            results = run_group(self._conn, [work for work, _ in group])
        # Whatever the work raised, the caller gets PersistFailed; the writer thread lives on.
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, CommitUncertain) and self._on_lost is not None:
                log.critical("%s", exc)
                self._on_lost()
            for _, future in group:
                future.set_exception(PersistFailed.wrapping(exc))
            return
        if group[0][0].grouped:
            self.group_sizes.append(len(group))
        for (_, future), result in zip(group, results):
            future.set_result(result)
