"""Owns the service's durable state: the SQLite database and the snapshot directory.

Writes go through one :class:`~storage.writer.Writer` thread, each public write
one transaction, except that batches queued while the writer is busy are
committed together (group commit: one fsync for all of them, each batch still
its own rows); reads use per-thread read-only connections, and WAL gives each
read a consistent snapshot while the writer commits.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from gpu.formats import LabeledGraph, UpdateStream
from storage import snapshots
from storage.codec import decode_updates, encode_updates
from storage.errors import PersistFailed, ResultsPruned, StorageError, StoreClosed
from storage.records import BatchRecord, EventRecord, QueryRecord, SnapshotRecord
from storage.schema import migrate
from storage.writer import Writer

DB_NAME = "store.db"
SNAPSHOT_DIR = "snapshots"
SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL"}
BUSY_TIMEOUT_MS = 5000
# Batches are read back for replay in pages, so no statement stays open between yields.
REPLAY_PAGE = 64

_QUERY_COLUMNS = (
    "id, name, pattern, options, created_seq, created_at,"
    " batches_seen, total_positive, total_negative, last_seq"
)
_SNAPSHOT_COLUMNS = "seq, path, vertices, edges, created_at"


class Store:
    """The façade the service uses; build it with :meth:`Store.open`."""

    def __init__(
        self,
        data_dir: Path,
        writer: Writer,
        *,
        result_retention: int,
        idempotency_retention: int,
        prune_every: int,
    ):
        self.data_dir = data_dir
        self._db_path = data_dir / DB_NAME
        self._snapshot_dir = data_dir / SNAPSHOT_DIR
        self._writer = writer
        self._result_retention = result_retention
        self._idempotency_retention = idempotency_retention
        self._prune_every = prune_every
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
    ) -> Store:
        """Open (creating if needed) the store in ``data_dir`` and start its writer.

        ``synchronous="full"`` survives power loss; ``"normal"`` survives process
        crashes only, and commits faster.
        """
        if synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {sorted(SYNCHRONOUS)}, got {synchronous!r}")
        for name, value in (
            ("result_retention", result_retention),
            ("idempotency_retention", idempotency_retention),
            ("prune_every", prune_every),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        data_dir = Path(data_dir)
        (data_dir / SNAPSHOT_DIR).mkdir(parents=True, exist_ok=True)
        conn = _connect_writer(data_dir / DB_NAME, SYNCHRONOUS[synchronous])
        try:
            migrate(conn)
        except BaseException:
            conn.close()
            raise
        store = cls(
            data_dir,
            Writer(conn),
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
        blob = encode_updates(record.updates)  # encoded here, off the writer thread
        return self._writer.submit_grouped(self._append_batches, (record, blob))

    def append_batch(self, record: BatchRecord) -> None:
        """Persist one applied batch and everything it changed, or raise PersistFailed."""
        self.append_batch_async(record).result()

    def register_query(
        self, record: QueryRecord, new_labels: dict[str, int], backfill: EventRecord | None
    ) -> None:
        self._writer.submit(
            lambda conn: _register_query(conn, record, new_labels, backfill)
        ).result()

    def delete_query(self, query_id: int) -> None:
        """Remove a query, its events and its stats; an unknown id is a no-op."""
        self._writer.submit(lambda conn: _delete_query(conn, int(query_id))).result()

    def record_snapshot(self, seq: int, graph: LabeledGraph, keep: int = 2) -> SnapshotRecord:
        """Write ``graph`` as the snapshot after batch ``seq`` and record it.

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
        record = SnapshotRecord(seq, path, graph.num_vertices, graph.num_edges, _now())
        try:
            dropped = self._writer.submit(
                lambda conn: _record_snapshot(conn, record, keep)
            ).result()
        except BaseException:
            if not replaces_file:
                snapshots.remove_snapshot(path)
            raise
        # Files go only once the rows that name them are gone for good.
        for name in dropped:
            snapshots.remove_snapshot(self._snapshot_dir / name)
        return record

    def add_labels(self, new_labels: dict[str, int]) -> None:
        self._writer.submit(lambda conn: _insert_labels(conn, new_labels)).result()

    def _append_batches(
        self, conn: sqlite3.Connection, group: list[tuple[BatchRecord, bytes]]
    ) -> list[None]:
        """Write consecutive batches, as if appended one by one, with one statement per
        table for the whole group.

        Few statements, not few rows, is what counts here: each sqlite3 call lets go of
        the GIL and takes it back, and in the server taking it back can mean waiting for
        the engine thread or the event loop.
        """
        last, next_query_id, registered = conn.execute(
            "SELECT (SELECT value FROM meta WHERE key = 'last_seq'),"
            " (SELECT value FROM meta WHERE key = 'next_query_id'),"
            " (SELECT group_concat(id) FROM queries)"
        ).fetchone()
        batch_rows, events, idempotency = [], [], []
        for record, blob in group:
            seq = int(record.seq)
            if seq != last + 1:
                raise ValueError(f"batch seq {seq} does not follow the last stored seq {last}")
            last = seq
            for event in record.events:
                if event.seq != seq:
                    raise ValueError(f"batch {seq} carries an event for seq {event.seq}")
            batch_rows.append((seq, blob, _json_counts(record.applied),
                               _json_counts(record.ignored), record.created_at))
            events.extend(record.events)
            if record.idempotency is not None:
                key, request_hash, response = record.idempotency
                idempotency.append((key, seq, request_hash, response))
        live = _live_query_ids(
            {int(q) for q in registered.split(",")} if registered else set(), next_query_id,
            events, *(record.query_stats for record, _ in group),
        )
        _insert_rows(conn, "INSERT INTO batches (seq, updates, applied, ignored, created_at)",
                     batch_rows)
        _insert_rows(conn, "INSERT INTO events (query_id, seq, payload)",
                     [(int(e.query_id), int(e.seq), e.payload) for e in events
                      if e.query_id in live])
        totals = _query_totals(group, live)
        if totals:
            values = ", ".join(["(?, ?, ?, ?, ?)"] * len(totals))
            conn.execute(
                f"WITH delta (id, seen, pos, neg, touched) AS (VALUES {values})"
                " UPDATE queries SET"
                " batches_seen = batches_seen"
                " + (SELECT seen FROM delta WHERE delta.id = queries.id),"
                " total_positive = total_positive"
                " + (SELECT pos FROM delta WHERE delta.id = queries.id),"
                " total_negative = total_negative"
                " + (SELECT neg FROM delta WHERE delta.id = queries.id),"
                " last_seq = coalesce((SELECT nullif(touched, 0) FROM delta"
                " WHERE delta.id = queries.id), last_seq)"
                " WHERE id IN (SELECT id FROM delta)",
                [value for row in totals for value in row],
            )
        _insert_rows(conn, "INSERT INTO idempotency (key, seq, request_hash, response)",
                     idempotency)
        for record, _ in group:
            _insert_labels(conn, record.new_labels)
        _set_meta(conn, "last_seq", last)
        first = int(group[0][0].seq)
        # The newest seq of the group that is a multiple of prune_every, if any: pruning
        # there covers every earlier multiple, and rows of later batches are never pruned.
        prune_at = last - last % self._prune_every
        if prune_at >= first:
            self._prune(conn, prune_at)
        return [None] * len(group)

    def _prune(self, conn: sqlite3.Connection, seq: int) -> None:
        """Keep the events of the last ``result_retention`` batches, and the
        idempotency keys of the last ``idempotency_retention``."""
        cutoff = seq - self._result_retention
        for (query_id,) in conn.execute("SELECT id FROM queries").fetchall():
            (newest_pruned,) = conn.execute(
                "SELECT max(seq) FROM events WHERE query_id = ? AND seq <= ?",
                (query_id, cutoff),
            ).fetchone()
            if newest_pruned is None:
                continue
            conn.execute("DELETE FROM events WHERE query_id = ? AND seq <= ?", (query_id, cutoff))
            conn.execute(
                "UPDATE queries SET pruned_through = max(coalesce(pruned_through, :seq), :seq)"
                " WHERE id = :id",
                {"seq": newest_pruned, "id": query_id},
            )
        conn.execute(
            "DELETE FROM idempotency WHERE seq <= ?", (seq - self._idempotency_retention,)
        )

    # ------------------------------------------------------------------ reads

    def last_seq(self) -> int:
        """The seq of the last stored batch; 0 before the first."""
        with self._read() as conn:
            return _meta(conn, "last_seq")

    def next_query_id(self) -> int:
        with self._read() as conn:
            return _meta(conn, "next_query_id")

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


# ---------------------------------------------------------------------- transactions


def _connect_writer(path: Path, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        # journal_mode cannot change inside a transaction; autocommit mode has none open.
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode != "wal":
            raise StorageError(f"{path}: SQLite refused WAL journal mode (got {mode!r})")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    except BaseException:
        conn.close()
        raise
    return conn


def _meta(conn: sqlite3.Connection, key: str) -> int:
    return conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0]


def _set_meta(conn: sqlite3.Connection, key: str, value: int) -> None:
    conn.execute("UPDATE meta SET value = ? WHERE key = ?", (value, key))


# json.dumps with any non-default option builds a new encoder per call; this one is reused.
_SORTED_JSON = json.JSONEncoder(sort_keys=True)


def _json_counts(counts: dict[str, int]) -> str:
    return _SORTED_JSON.encode({str(k): int(v) for k, v in counts.items()})


def _live_query_ids(
    registered: set[int],
    next_query_id: int,
    events: Iterable[EventRecord],
    *query_stats: dict[int, tuple[int, int]],
) -> set[int]:
    """The registered ids among those a group of batches names.

    A batch may name a query deleted after the batch was computed (the service
    can queue a deletion before it); its results are dropped.  An id never
    registered at all is a bug, and fails the batch.
    """
    named = {int(e.query_id) for e in events}
    for stats in query_stats:
        named.update(int(q) for q in stats)
    never_registered = sorted(q for q in named - registered if q >= next_query_id)
    if never_registered:
        raise ValueError(f"batch names queries never registered: {never_registered}")
    return named & registered


def _query_totals(group: list[tuple[BatchRecord, bytes]], live: set[int]) -> list[tuple]:
    """Per live query, what a group of batches adds to its row: (id, batches seen,
    positive, negative, the last batch with a nonzero delta or 0 for none)."""
    totals: dict[int, list[int]] = {}
    for record, _ in group:
        seq = int(record.seq)
        for query_id, (positive, negative) in record.query_stats.items():
            query_id = int(query_id)
            if query_id not in live:
                continue
            row = totals.setdefault(query_id, [0, 0, 0, 0])
            row[0] += 1
            row[1] += int(positive)
            row[2] += int(negative)
            if positive or negative:
                row[3] = seq
    return [(query_id, *row) for query_id, row in totals.items()]


# SQLite before 3.32 takes at most 999 parameters per statement.
_MAX_PARAMETERS = 999


def _insert_rows(conn: sqlite3.Connection, insert: str, rows: list[tuple]) -> None:
    """``insert`` (``INSERT INTO t (columns)``) of every row, in as few statements as the
    parameter limit allows."""
    if not rows:
        return
    width = len(rows[0])
    row = "(" + ", ".join(["?"] * width) + ")"
    per_statement = _MAX_PARAMETERS // width
    for start in range(0, len(rows), per_statement):
        chunk = rows[start:start + per_statement]
        conn.execute(f"{insert} VALUES {', '.join([row] * len(chunk))}",
                     [value for values in chunk for value in values])


def _insert_events(conn: sqlite3.Connection, events: Iterable[EventRecord]) -> None:
    conn.executemany(
        "INSERT INTO events (query_id, seq, payload) VALUES (?, ?, ?)",
        ((int(e.query_id), int(e.seq), e.payload) for e in events),
    )


def _insert_labels(conn: sqlite3.Connection, labels: dict[str, int]) -> None:
    for name, label_id in labels.items():
        row = conn.execute("SELECT id FROM labels WHERE name = ?", (name,)).fetchone()
        if row is None:
            # labels.id is UNIQUE: an id already given to another name fails here.
            conn.execute("INSERT INTO labels (name, id) VALUES (?, ?)", (name, int(label_id)))
        elif row[0] != label_id:
            raise ValueError(f"label {name!r} is already mapped to {row[0]}, not {label_id}")


def _register_query(
    conn: sqlite3.Connection,
    record: QueryRecord,
    new_labels: dict[str, int],
    backfill: EventRecord | None,
) -> None:
    next_id = _meta(conn, "next_query_id")
    if record.id < next_id:
        raise ValueError(f"query id {record.id} was already used (next free id: {next_id})")
    if backfill is not None and backfill.query_id != record.id:
        raise ValueError(
            f"backfill event is for query {backfill.query_id}, not query {record.id}"
        )
    conn.execute(
        f"INSERT INTO queries ({_QUERY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            int(record.id), record.name, record.pattern, record.options,
            int(record.created_seq), record.created_at, int(record.batches_seen),
            int(record.total_positive), int(record.total_negative), int(record.last_seq),
        ),
    )
    _insert_labels(conn, new_labels)
    if backfill is not None:
        _insert_events(conn, [backfill])
    _set_meta(conn, "next_query_id", int(record.id) + 1)


def _delete_query(conn: sqlite3.Connection, query_id: int) -> None:
    conn.execute("DELETE FROM events WHERE query_id = ?", (query_id,))
    conn.execute("DELETE FROM queries WHERE id = ?", (query_id,))


def _record_snapshot(conn: sqlite3.Connection, record: SnapshotRecord, keep: int) -> list[str]:
    """Record ``record``; drop all but the newest ``keep`` snapshots and the batch
    rows no kept snapshot needs.  Returns the file names of the dropped snapshots."""
    conn.execute(
        f"INSERT OR REPLACE INTO snapshots ({_SNAPSHOT_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
        (record.seq, record.path.name, record.vertices, record.edges, record.created_at),
    )
    rows = conn.execute("SELECT seq, path FROM snapshots ORDER BY seq DESC").fetchall()
    kept, dropped = rows[:keep], rows[keep:]
    conn.executemany("DELETE FROM snapshots WHERE seq = ?", [(seq,) for seq, _ in dropped])
    conn.execute("DELETE FROM batches WHERE seq <= ?", (kept[-1][0],))
    return [name for _, name in dropped]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()
