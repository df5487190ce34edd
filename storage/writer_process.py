"""Owns the writer process: the store's write transactions run in a child process, so
their CPU time and their many small GIL hand-offs leave the server's process.

:class:`ProcessWriter` has the thread :class:`~storage.writer.Writer`'s interface, for
the functions of ``storage.transactions`` (the child looks them up by name) with
picklable arguments.  The child (``python -m storage.writer_process``, standard library
only) owns the one write connection and runs the units of work in submission order,
grouping them exactly as the thread writer does; the parent writes each unit of work to
a pipe, and a thread reads the outcomes from another and settles the futures.

Crashes: the child holds the writer lock (``<database>.writer-lock``) while it lives, and
every writer, thread or process, takes it before it opens the database, so a restarted
server never writes beside the child of the process it replaces.  When the parent dies
(``kill -9``), the child reads end-of-file, finishes what it had received, and exits; what
it commits then was never acknowledged, as with a crash between commit and reply.  The
child exits by itself, answering nothing, when a commit's outcome is unknown (an fsync
failed after the transaction was written: storage.errors.CommitUncertain), which the
parent sees as below.
When the child dies while the parent lives, the outcome of the work in flight is unknown:
``on_lost`` runs (the service ends its process there, as a crash would), then every pending
future gets :class:`WriterLost`.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from storage import transactions
from storage.errors import CommitUncertain, PersistFailed, StorageError, StoreClosed
from storage.schema import migrate
from storage.writer import (
    GROUP_SIZES_KEPT,
    MAX_GROUP,
    WRITER_LOCK_TIMEOUT_S,
    Work,
    run_group,
    take_group,
    take_writer_lock,
)

T = TypeVar("T")

log = logging.getLogger("motifstream.storage")

# Start-up: waiting for the writer lock, then migrating.
START_TIMEOUT_S = WRITER_LOCK_TIMEOUT_S + 90.0
_HEADER = struct.Struct("<I")
_STOP = "stop"
EXIT_COMMIT_UNCERTAIN = 3      # the child's status after a commit of unknown outcome
_EOF = "end of file"


class WriterLost(StorageError):
    """The writer process exited; whether the writes in flight were committed is unknown."""


@dataclass
class Launched:
    """A writer child started ahead of its :class:`ProcessWriter` (:func:`launch`), which
    takes it over: the child's interpreter start and the database's opening run beside
    what the parent does meanwhile (the server: its imports) instead of being waited for.
    One never taken over is ended by :meth:`discard`, or reads end-of-file and exits when
    the parent does."""

    db_path: Path
    synchronous: str
    max_group: int
    child: subprocess.Popen
    requests: int       # the pipe end the parent writes requests to
    replies: int        # the one it reads replies from
    taken: bool = False

    def discard(self) -> None:
        """End the child, unless a ProcessWriter took it over."""
        if self.taken:
            return
        self.taken = True
        for fd in (self.requests, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass
        self.child.wait()


def launch(db_path: str | Path, synchronous: str, max_group: int = MAX_GROUP) -> Launched:
    """Start a writer child for ``db_path`` (its folder made if missing) without waiting
    for it; the :class:`ProcessWriter` given it waits until it is ready."""
    if max_group < 1:
        raise ValueError(f"max_group must be >= 1, got {max_group}")
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    env = dict(os.environ)
    # The child imports this very `storage` package, wherever it was imported from.
    package_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_root, env.get("PYTHONPATH")) if p)
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "storage.writer_process", str(db_path), synchronous,
             str(requests_r), str(replies_w), str(max_group)],
            pass_fds=(requests_r, replies_w), stdin=subprocess.DEVNULL, env=env)
    except BaseException:
        for fd in (requests_r, requests_w, replies_r, replies_w):
            os.close(fd)
        raise
    os.close(requests_r)
    os.close(replies_w)
    return Launched(db_path, synchronous, max_group, child, requests_w, replies_r)


class ProcessWriter:
    """Runs submitted ``storage.transactions`` functions in a child process, one transaction
    each, in order; grouped submissions waiting together share one transaction.

    Starts the child (or takes over the `launched` one) and waits until it holds the writer
    lock and has migrated the schema (errors there, such as SchemaTooNew, are raised here).
    """

    def __init__(self, db_path: str | Path, synchronous: str, *, max_group: int = MAX_GROUP,
                 on_lost: Callable[[], None] | None = None,
                 start_timeout: float = START_TIMEOUT_S, launched: Launched | None = None):
        db_path = Path(db_path)
        if launched is None:
            launched = launch(db_path, synchronous, max_group)
        elif launched.taken:
            raise ValueError("that writer process was taken over or discarded already")
        elif (launched.db_path, launched.synchronous, launched.max_group) != \
                (db_path, synchronous, max_group):
            launched.discard()
            raise ValueError(f"the writer process launched for {launched.db_path} "
                             f"({launched.synchronous}, groups of {launched.max_group}) is "
                             f"not the one wanted for {db_path} ({synchronous}, groups of "
                             f"{max_group})")
        launched.taken = True
        self._child = launched.child
        self._requests = launched.requests
        self._replies = _Receiver(launched.replies)
        self._on_lost = on_lost
        # _send_lock orders the requests (it is held while a full pipe blocks); _lock guards
        # the rest and is never held across I/O, so replies can always be read meanwhile.
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._tokens = itertools.count(1)
        self._pending: dict[int, Future] = {}
        self._closed = False
        self._lost = False
        self.group_sizes: deque[int] = deque(maxlen=GROUP_SIZES_KEPT)
        try:
            started = self._replies.receive(timeout=start_timeout)
            if started is None or started[0] != "ready":
                cause = started[2] if started is not None else None
                if isinstance(cause, BaseException):
                    raise cause
                raise StorageError(f"{db_path}: the writer process did not start "
                                   f"(exit status {self._child.poll()})")
        except BaseException:
            self._shut_down_child()
            raise
        self._thread = threading.Thread(target=self._settle, name="storage-writer-replies",
                                        daemon=True)
        self._thread.start()

    @property
    def pid(self) -> int:
        return self._child.pid

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``fn(conn, *args)`` (``fn`` from storage.transactions); the future gives
        its result, or :class:`PersistFailed`."""
        return self._put(fn, args, [None], grouped=False)[0]

    def submit_grouped(self, run_group: Callable[..., list[T]], item: Any, *args: Any
                       ) -> Future[T]:
        """As :meth:`storage.writer.Writer.submit_grouped`."""
        return self._put(run_group, args, [item], grouped=True)[0]

    def submit_grouped_many(self, run_group: Callable[..., list[T]], items: list, *args: Any
                            ) -> list[Future[T]]:
        """``submit_grouped`` for each of ``items``, in order, in one write to the pipe
        (each write lets the other threads take the GIL, and waits to get it back)."""
        return self._put(run_group, args, items, grouped=True)

    def _put(self, fn: Callable, args: tuple, items: list, grouped: bool) -> list[Future]:
        """Send one unit of work per item (None: `fn(conn, *args)` ungrouped)."""
        name = fn.__name__
        if getattr(transactions, name, None) is not fn:
            raise TypeError(f"the writer process runs storage.transactions functions, "
                            f"not {fn!r}")
        futures: list[Future] = []
        with self._send_lock:
            with self._lock:
                if self._lost:
                    raise WriterLost("no writes are accepted after the writer process exited")
                if self._closed:
                    raise StoreClosed("no writes are accepted after close()")
                messages = []
                for item in items:
                    token = next(self._tokens)
                    messages.append(_framed(pickle.dumps((token, name, args, item, grouped),
                                                         pickle.HIGHEST_PROTOCOL)))
                    future: Future = Future()
                    future.set_running_or_notify_cancel()   # once sent it will run
                    self._pending[token] = future
                    futures.append(future)
            try:
                _write_all(self._requests, b"".join(messages))
            except OSError as exc:      # the child is gone: the reply thread settles them
                log.error("could not hand a write to the writer process: %s", exc)
        return futures

    def close(self) -> None:
        """Run what was submitted, stop the child (it closes the database last), join."""
        with self._send_lock:
            with self._lock:
                if self._closed:
                    return
                self._closed = True
            try:
                _send_bytes(self._requests, pickle.dumps(_STOP))
            except OSError:     # the child is gone; the reply thread saw it
                pass
        if threading.current_thread() is not self._thread:
            self._thread.join()
        self._shut_down_child()

    def _shut_down_child(self) -> None:
        try:
            os.close(self._requests)
        except OSError:
            pass
        self._child.wait()
        self._replies.close()

    def _settle(self) -> None:
        """Reply thread: settle each unit of work's future as its outcome arrives."""
        while True:
            try:
                reply = self._replies.receive()
            except OSError:
                reply = None
            if reply is None:
                self._child_lost()
                return
            kind, tokens, outcome = reply
            if kind == "stopped":
                return
            with self._lock:
                futures = [self._pending.pop(token) for token in tokens]
            if kind == "done":
                results, grouped = outcome
                if grouped:
                    self.group_sizes.append(len(futures))
                for future, result in zip(futures, results):
                    future.set_result(result)
            else:
                for future in futures:
                    future.set_exception(PersistFailed.wrapping(outcome))

    def _child_lost(self) -> None:
        with self._lock:
            self._lost = True
            expected = self._closed
            pending, self._pending = self._pending, {}
        if expected and not pending:
            return
        log.critical("the storage writer process exited (status %s) with %d writes in "
                     "flight", self._child.poll(), len(pending))
        if self._on_lost is not None:
            self._on_lost()
        for future in pending.values():
            future.set_exception(WriterLost(f"{len(pending)} writes were in flight"))


def _framed(data: bytes) -> bytes:
    """One message as the pipe carries it: its length, then its bytes."""
    return _HEADER.pack(len(data)) + data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _send_bytes(fd: int, data: bytes) -> None:
    _write_all(fd, _framed(data))


class _Receiver:
    """Length-prefixed pickles from a pipe."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buffer = bytearray()

    def receive(self, timeout: float | None = None) -> Any:
        """The next message, blocking (at most ``timeout`` seconds for the first bytes);
        None at end of file or on time-out."""
        while (message := self._buffered()) is None:
            if timeout is not None and not select.select([self.fd], [], [], timeout)[0]:
                return None
            data = os.read(self.fd, 1 << 20)
            if not data:
                return None
            self.buffer += data
        return message

    def _buffered(self) -> Any:
        if len(self.buffer) < _HEADER.size:
            return None
        (size,) = _HEADER.unpack_from(self.buffer)
        end = _HEADER.size + size
        if len(self.buffer) < end:
            return None
        message = pickle.loads(self.buffer[_HEADER.size:end])
        del self.buffer[:end]
        return message

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


# ---------------------------------------------------------------------- the child


def _serve(db_path: Path, synchronous: str, requests: int, replies: int,
           max_group: int) -> int:
    # Ctrl-C reaches the whole process group; the parent decides when the child stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        # Held until this process exits: the writer of a dead parent may still be finishing.
        lock = take_writer_lock(db_path)  # noqa: F841
        conn = transactions.connect_writer(db_path, synchronous)
        try:
            migrate(conn)
        except BaseException:
            conn.close()
            raise
    except Exception as exc:  # noqa: BLE001 -- handed to the parent, which raises it
        _reply(replies, ("failed", (), _picklable(exc)))
        return 1
    _reply(replies, ("ready", (), None))
    # A thread drains the pipe into a queue, so the parent never waits on a full pipe while
    # a transaction runs, and a group takes everything sent meanwhile.
    requests_queue: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_drain, args=(_Receiver(requests), requests_queue),
                     daemon=True).start()

    def waiting() -> Any:
        try:
            return requests_queue.get_nowait()
        except queue.Empty:
            return None

    try:
        taken = None
        while True:
            entry = taken if taken is not None else requests_queue.get()
            if entry is _EOF:           # the parent is gone
                return 0
            if entry == _STOP:
                conn.close()            # last, so SQLite checkpoints and removes the WAL
                _reply(replies, ("stopped", (), None))
                return 0
            group, taken = take_group(entry, waiting, max_group)
            tokens = [token for _, token in group]
            try:
                results = run_group(conn, [work for work, _ in group])
            except CommitUncertain as exc:
                # Neither durable nor gone: no answer is true, so none is given.  The parent
                # sees its writer die (on_lost), as when it is killed mid-commit.
                print(f"motifstream storage writer: {exc}; exiting", file=sys.stderr,
                      flush=True)
                os._exit(EXIT_COMMIT_UNCERTAIN)
            except Exception as exc:  # noqa: BLE001 -- each unit of work's own outcome
                _reply(replies, ("failed", tokens, _picklable(exc)))
            else:
                _reply(replies, ("done", tokens, (results, group[0][0].grouped)))
    finally:
        conn.close()


def _drain(receiver: _Receiver, into: queue.SimpleQueue) -> None:
    while (message := receiver.receive()) is not None:
        into.put(_entry(message))
    into.put(_EOF)


def _entry(message: Any) -> Any:
    """A request as take_group's (Work, token) pair; the stop message as it is."""
    if message == _STOP:
        return message
    token, name, args, item, grouped = message
    return Work(getattr(transactions, name), args, item, grouped), token


def _reply(fd: int, message: tuple) -> None:
    _send_bytes(fd, pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


def _picklable(exc: BaseException) -> BaseException:
    """``exc``, or a stand-in with its type and message when it does not pickle."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    db, sync, requests_fd, replies_fd, group_max = sys.argv[1:]
    sys.exit(_serve(Path(db), sync, int(requests_fd), int(replies_fd), int(group_max)))
