"""Owns the service's durable state: the SQLite database and the snapshot directory.

Writes go through one writer, a thread (:class:`~storage.writer.Writer`) or a
child process (:class:`~storage.writer_process.ProcessWriter`), running the
transactions of ``storage.transactions``: each public write one transaction,
except that batches queued while the writer is busy are committed together
(group commit: one fsync for all of them, each batch still its own rows).
Reads use per-thread read-only connections, and WAL gives each read a
consistent snapshot while the writer commits.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import orjson

from gpu.io.records import LabeledGraph, UpdateStream
from storage import snapshots, transactions
from storage.codec import decode_updates, encode_updates
from storage.errors import PersistFailed, ResultsPruned, StoreClosed
from storage.records import BatchRecord, EventRecord, QueryRecord, SnapshotRecord
from storage.schema import migrate
from storage.transactions import (
    BUSY_TIMEOUT_MS,
    SYNCHRONOUS,
    Retention,
    connect_writer,
)
from storage.writer import Writer, take_writer_lock
from storage.writer_process import Launched, ProcessWriter, launch

DB_NAME = "store.db"
SNAPSHOT_DIR = "snapshots"
# Batches are read back for replay in pages, so no statement stays open between yields.
REPLAY_PAGE = 64

_QUERY_COLUMNS = transactions.QUERY_COLUMNS
_SNAPSHOT_COLUMNS = transactions.SNAPSHOT_COLUMNS
_WEBHOOK_COLUMNS = "query_id, url, secret, delivered_through, created_at"
_KAFKA_COLUMNS = ("query_id, bootstrap_servers, topic, client_settings, partition,"
                  " delivered_through, delivered_offset, created_at")


class Store:
    """The façade the service uses; build it with :meth:`Store.open`."""

    def __init__(
        self,
        data_dir: Path,
        writer: Writer | ProcessWriter,
        *,
        result_retention: int,
        idempotency_retention: int,
        prune_every: int,
    ):
        self.data_dir = data_dir
        self._db_path = data_dir / DB_NAME
        self._snapshot_dir = data_dir / SNAPSHOT_DIR
        self._writer = writer
        self._retention = tuple(Retention(result_retention, idempotency_retention, prune_every))
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(
        cls,
        data_dir: str | Path,
        *,
        synchronous: str = "full",
        result_retention: int = 100_000,
        idempotency_retention: int = 100_000,
        prune_every: int = 1000,
        writer_process: bool = False,
        on_writer_lost: Callable[[], None] | None = None,
        launched_writer: Launched | None = None,
    ) -> Store:
        """Open (creating if needed) the store in ``data_dir`` and start its writer.

        ``synchronous="full"`` survives power loss; ``"normal"`` survives process
        crashes only, and commits faster.  ``writer_process`` runs the writes in a
        child process (storage.writer_process) instead of a thread; ``on_writer_lost``
        is called if that process dies while this one lives (see there), or when a
        commit's outcome is unknown (storage.errors.CommitUncertain), either writer.
        ``launched_writer`` (with ``writer_process``) is that child started beforehand by
        :meth:`launch_writer`.
        """
        if synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {sorted(SYNCHRONOUS)}, "
                             f"got {synchronous!r}")
        for name, value in (
            ("result_retention", result_retention),
            ("idempotency_retention", idempotency_retention),
            ("prune_every", prune_every),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        data_dir = Path(data_dir)
        (data_dir / SNAPSHOT_DIR).mkdir(parents=True, exist_ok=True)
        writer: Writer | ProcessWriter
        if launched_writer is not None and not writer_process:
            launched_writer.discard()
            raise ValueError("launched_writer is for writer_process=True")
        if writer_process:
            writer = ProcessWriter(data_dir / DB_NAME, synchronous, on_lost=on_writer_lost,
                                   launched=launched_writer)
        else:
            lock = take_writer_lock(data_dir / DB_NAME)
            try:
                conn = connect_writer(data_dir / DB_NAME, synchronous)
                try:
                    migrate(conn)
                except BaseException:
                    conn.close()
                    raise
            except BaseException:
                lock.close()
                raise
            writer = Writer(conn, lock=lock, on_lost=on_writer_lost)
        store = cls(
            data_dir,
            writer,
            result_retention=result_retention,
            idempotency_retention=idempotency_retention,
            prune_every=prune_every,
        )
        try:
            store._remove_unrecorded_snapshots()
        except BaseException:
            store.close()
            raise
        return store

    @staticmethod
    def launch_writer(data_dir: str | Path, synchronous: str = "full") -> Launched:
        """Start the writer process of the store in ``data_dir`` now, for a later
        ``open(data_dir, writer_process=True, launched_writer=...)`` with the same
        ``synchronous``: its start runs meanwhile instead of inside ``open``."""
        if synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {sorted(SYNCHRONOUS)}, "
                             f"got {synchronous!r}")
        return launch(Path(data_dir) / DB_NAME, synchronous)

    def close(self) -> None:
        """Finish queued writes and close every connection; safe to call twice."""
        with self._readers_lock:
            if self._closed:
                return
            self._closed = True
            readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()
        # The writer's connection closes last, so SQLite checkpoints and removes the WAL.
        self._writer.close()

    # ------------------------------------------------------------------ writes

    def append_batch_async(self, record: BatchRecord) -> Future[None]:
        """Queue one applied batch for persisting; the future is done once it is durable.

        Batches queued while the writer is busy are committed together, in one transaction
        (group commit): each keeps its own seq and rows, and if that transaction fails,
        every batch in it fails with PersistFailed.
        """
        return self.append_batches_async([record])[0]

    def append_batches_async(self, records: list[BatchRecord]) -> list[Future[None]]:
        """``append_batch_async`` for each of ``records`` (consecutive seqs), handed to the
        writer at once."""
        return self._writer.submit_grouped_many(
            transactions.append_batches, [_stored(record) for record in records],
            self._retention)

    def append_batch(self, record: BatchRecord) -> None:
        """Persist one applied batch and everything it changed, or raise PersistFailed."""
        self.append_batch_async(record).result()

    def register_query(
        self, record: QueryRecord, new_labels: dict[str, int], backfill: EventRecord | None
    ) -> None:
        self._writer.submit(
            transactions.register_query, _plain_query(record),
            {str(k): int(v) for k, v in new_labels.items()},
            None if backfill is None else _plain_event(backfill),
        ).result()

    def delete_query(self, query_id: int) -> None:
        """Remove a query, its events and its stats; an unknown id is a no-op."""
        self._writer.submit(transactions.delete_query, int(query_id)).result()

    def record_snapshot(self, seq: int, graph: LabeledGraph, keep: int = 2,
                        directed: bool | None = None) -> SnapshotRecord:
        """Write ``graph`` as the snapshot after batch ``seq`` and record it (with the
        graph's kind, ``directed``, when given: a bulk load).

        Then only the newest ``keep`` snapshots are kept, and the batch rows up
        to the oldest kept one are dropped: a replay never starts before it.
        """
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        last = self.last_seq()
        if not 0 <= seq <= last:
            raise PersistFailed.wrapping(
                ValueError(f"snapshot seq {seq} is outside the stored batches [0, {last}]")
            )
        path = self._snapshot_dir / snapshots.snapshot_name(seq)
        replaces_file = path.exists()
        try:
            snapshots.write_snapshot(self._snapshot_dir, seq, graph)
        except OSError as exc:
            raise PersistFailed.wrapping(exc) from exc
        record = SnapshotRecord(int(seq), path, int(graph.num_vertices), int(graph.num_edges),
                                _now())
        try:
            dropped = self._writer.submit(transactions.record_snapshot, record, keep,
                                          directed).result()
        except BaseException:
            if not replaces_file:
                snapshots.remove_snapshot(path)
            raise
        # Files go only once the rows that name them are gone for good.
        for name in dropped:
            snapshots.remove_snapshot(self._snapshot_dir / name)
        return record

    def prune(self) -> int:
        """Apply the result and idempotency retention as of the last stored batch now (a
        batch group prunes by itself only at multiples of ``prune_every``); returns that
        batch's seq.  Blocking: the writer runs it between batch groups."""
        return self._writer.submit(transactions.prune_retained, self._retention).result()

    def add_labels(self, new_labels: dict[str, int]) -> None:
        self._writer.submit(transactions.insert_labels,
                            {str(k): int(v) for k, v in new_labels.items()}).result()

    def set_webhook(self, query_id: int, url: str, secret: str,
                    delivered_through: int | None) -> int:
        """transactions.set_webhook; returns the webhook's cursor."""
        return self._writer.submit(transactions.set_webhook, int(query_id), url, secret,
                                   delivered_through, _now()).result()

    def delete_webhook(self, query_id: int) -> bool:
        return self._writer.submit(transactions.delete_webhook, int(query_id)).result()

    def webhook_delivered(self, query_id: int, seq: int,
                          dead_letter: tuple[str, int, str, str] | None = None) -> None:
        """transactions.webhook_delivered: the cursor on to ``seq``, maybe a dead letter."""
        self._writer.submit(transactions.webhook_delivered, int(query_id), int(seq),
                            dead_letter).result()

    def set_kafka_sink(self, query_id: int, bootstrap_servers: str, topic: str,
                       client_settings: str, partition: int, partition_end: int,
                       delivered_through: int | None) -> int:
        """transactions.set_kafka_sink; returns the sink's batch cursor."""
        return self._writer.submit(transactions.set_kafka_sink, int(query_id),
                                   bootstrap_servers, topic, client_settings, int(partition),
                                   int(partition_end), delivered_through, _now()).result()

    def delete_kafka_sink(self, query_id: int) -> bool:
        return self._writer.submit(transactions.delete_kafka_sink, int(query_id)).result()

    def kafka_delivered(self, query_id: int, seq: int, offset: int) -> None:
        """transactions.kafka_delivered: the cursor on to batch ``seq`` at ``offset``."""
        self._writer.submit(transactions.kafka_delivered, int(query_id), int(seq),
                            int(offset)).result()

    # ------------------------------------------------------------------ reads

    def last_seq(self) -> int:
        """The seq of the last stored batch; 0 before the first."""
        with self._read() as conn:
            return transactions.meta(conn, "last_seq")

    def next_query_id(self) -> int:
        with self._read() as conn:
            return transactions.meta(conn, "next_query_id")

    def directed(self) -> bool:
        """Whether the stored graph's edges are arcs u -> v."""
        with self._read() as conn:
            return bool(transactions.meta(conn, "directed"))

    def set_directed(self, directed: bool) -> None:
        """Set the graph's kind (the caller knows the store holds no graph yet)."""
        self._writer.submit(transactions.set_directed, bool(directed)).result()

    def retention(self) -> int | None:
        """How far behind the watermark a timed edge expires; None: never."""
        with self._read() as conn:
            value = transactions.meta(conn, "retention")
        return None if value < 0 else int(value)

    def set_retention(self, retention: int | None) -> None:
        """Set the graph's retention (the caller knows the store holds no graph yet)."""
        self._writer.submit(transactions.set_retention, retention).result()

    def queries(self) -> list[QueryRecord]:
        with self._read() as conn:
            rows = conn.execute(f"SELECT {_QUERY_COLUMNS} FROM queries ORDER BY id").fetchall()
        return [QueryRecord(*row) for row in rows]

    def query(self, query_id: int) -> QueryRecord | None:
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_QUERY_COLUMNS} FROM queries WHERE id = ?", (int(query_id),)
            ).fetchone()
        return None if row is None else QueryRecord(*row)

    def labels(self) -> dict[str, int]:
        with self._read() as conn:
            return dict(conn.execute("SELECT name, id FROM labels"))

    def events_after(self, query_id: int, after: int, limit: int) -> list[EventRecord]:
        """Up to ``limit`` events of a query with seq > ``after``, oldest first.

        Raises :class:`ResultsPruned` when retention removed any event the
        cursor has not seen.
        """
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        with self._read() as conn:
            row = conn.execute(
                "SELECT pruned_through FROM queries WHERE id = ?", (int(query_id),)
            ).fetchone()
            if row is not None and row[0] is not None and after < row[0]:
                raise ResultsPruned(query_id, after, earliest=row[0])
            rows = conn.execute(
                "SELECT query_id, seq, payload FROM events WHERE query_id = ? AND seq > ?"
                " ORDER BY seq LIMIT ?",
                (int(query_id), int(after), int(limit)),
            ).fetchall()
        return [EventRecord(*row) for row in rows]

    def webhooks(self) -> list[tuple[int, str, str, int, str]]:
        """Every webhook: (query_id, url, secret, delivered_through, created_at)."""
        with self._read() as conn:
            return conn.execute(f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks"
                                " ORDER BY query_id").fetchall()

    def webhook(self, query_id: int) -> tuple[int, str, str, int, str] | None:
        with self._read() as conn:
            return conn.execute(f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks WHERE query_id = ?",
                                (int(query_id),)).fetchone()

    def kafka_sinks(self) -> list[tuple]:
        """Every Kafka sink: (query_id, bootstrap_servers, topic, client_settings, partition,
        delivered_through, delivered_offset, created_at)."""
        with self._read() as conn:
            return conn.execute(f"SELECT {_KAFKA_COLUMNS} FROM kafka_sinks"
                                " ORDER BY query_id").fetchall()

    def kafka_sink(self, query_id: int) -> tuple | None:
        with self._read() as conn:
            return conn.execute(f"SELECT {_KAFKA_COLUMNS} FROM kafka_sinks WHERE query_id = ?",
                                (int(query_id),)).fetchone()

    def webhook_dead_letters(self, query_id: int, after: int, limit: int
                             ) -> list[tuple[int, str, int, str, str]]:
        """Up to ``limit`` dead letters of a query with seq > ``after``, oldest first:
        (seq, payload, attempts, error, failed_at)."""
        with self._read() as conn:
            return conn.execute(
                "SELECT seq, payload, attempts, error, failed_at FROM webhook_dead_letters"
                " WHERE query_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (int(query_id), int(after), int(limit))).fetchall()

    def batches_after(self, seq: int) -> Iterator[tuple[int, UpdateStream]]:
        """The stored batches with seq > ``seq``, ascending, for replay."""
        after = int(seq)
        while True:
            with self._read() as conn:
                rows = conn.execute(
                    "SELECT seq, updates FROM batches WHERE seq > ? ORDER BY seq LIMIT ?",
                    (after, REPLAY_PAGE),
                ).fetchall()
            for batch_seq, blob in rows:
                yield batch_seq, decode_updates(blob, f"{self._db_path}: batch {batch_seq}")
            if len(rows) < REPLAY_PAGE:
                return
            after = rows[-1][0]

    def snapshots(self) -> list[SnapshotRecord]:
        """Every recorded snapshot, newest first (older ones are fallbacks)."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_SNAPSHOT_COLUMNS} FROM snapshots ORDER BY seq DESC"
            ).fetchall()
        return [self._snapshot_record(*row) for row in rows]

    def latest_snapshot(self) -> SnapshotRecord | None:
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_SNAPSHOT_COLUMNS} FROM snapshots ORDER BY seq DESC LIMIT 1"
            ).fetchone()
        return None if row is None else self._snapshot_record(*row)

    def read_snapshot(self, record: SnapshotRecord) -> LabeledGraph:
        """The snapshot's graph; raises SnapshotCorrupt if the file fails its digest."""
        return snapshots.read_snapshot(record.path)

    def idempotent(self, key: str) -> tuple[int, str, str] | None:
        """(seq, request_hash, response_json) stored under ``key``, if still retained."""
        with self._read() as conn:
            return conn.execute(
                "SELECT seq, request_hash, response FROM idempotency WHERE key = ?", (key,)
            ).fetchone()

    def size_bytes(self) -> int:
        """Bytes on disk: database, its WAL, and the snapshot files."""
        files = [self._db_path, self._db_path.with_name(DB_NAME + "-wal")]
        files += self._snapshot_dir.iterdir()
        total = 0
        for path in files:
            try:
                total += path.stat().st_size
            except FileNotFoundError:
                pass  # no WAL right now, or a snapshot removed meanwhile
        return total

    # ------------------------------------------------------------------ helpers

    def _snapshot_record(
        self, seq: int, name: str, vertices: int, edges: int, created_at: str
    ) -> SnapshotRecord:
        return SnapshotRecord(seq, self._snapshot_dir / name, vertices, edges, created_at)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """This thread's read-only connection, inside one read transaction."""
        conn = self._reader()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and not self._closed:
            return conn
        with self._readers_lock:
            if self._closed:
                raise StoreClosed(f"{self.data_dir}: read after close()")
            # check_same_thread=False only so close() may close it from another thread.
            conn = sqlite3.connect(
                self._db_path.resolve().as_uri() + "?mode=ro",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._readers.append(conn)
        self._local.conn = conn
        return conn

    def _remove_unrecorded_snapshots(self) -> None:
        """Delete files a crash left behind: temporaries, and snapshots whose row
        was never committed or whose deletion was committed but not yet carried out."""
        recorded = {record.path.name for record in self.snapshots()}
        for path in self._snapshot_dir.iterdir():
            unrecorded = path.name.startswith("snapshot-") and path.name not in recorded
            if snapshots.is_temporary(path) or unrecorded:
                snapshots.remove_snapshot(path)


# ---------------------------------------------------------------------- helpers




def _stored(record: BatchRecord) -> tuple:
    """A batch record encoded, off the writer, to a plain tuple (a StoredBatch's fields)
    of plain values: the writer process unpickles it, and a tuple of built-in values
    pickles ~6x faster than the NamedTuple and dataclasses it stands for (both pickle
    through Python-level hooks, holding the GIL the event loop needs)."""
    return (
        int(record.seq),
        encode_updates(record.updates),
        _json_counts(record.applied),
        _json_counts(record.ignored),
        record.created_at,
        tuple((int(e.query_id), int(e.seq), e.payload) for e in record.events),
        {int(q): (int(p), int(n)) for q, (p, n) in record.query_stats.items()},
        record.idempotency,
        {str(k): int(v) for k, v in record.new_labels.items()},
    )


def _json_counts(counts: dict[str, int]) -> str:
    return orjson.dumps({str(k): int(v) for k, v in counts.items()},
                        option=orjson.OPT_SORT_KEYS).decode()


def _plain_event(event: EventRecord) -> EventRecord:
    """``event`` with Python ints (NumPy ones would not unpickle in the writer process)."""
    return EventRecord(int(event.query_id), int(event.seq), event.payload)


def _plain_query(record: QueryRecord) -> QueryRecord:
    return QueryRecord(
        id=int(record.id), name=record.name, pattern=record.pattern, options=record.options,
        created_seq=int(record.created_seq), created_at=record.created_at,
        batches_seen=int(record.batches_seen), total_positive=int(record.total_positive),
        total_negative=int(record.total_negative), last_seq=int(record.last_seq),
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()
