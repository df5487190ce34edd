"""Owns the store's write transactions: the SQL of every write, run by the writer.

Each function takes the writer's connection (inside the transaction the writer opened)
and picklable arguments, and uses the standard library only, so the writer can run them
in a child process (``storage.writer_process``) that imports neither NumPy nor the engine.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from storage.errors import StorageError
from storage.records import EventRecord, QueryRecord, SnapshotRecord

SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL"}
BUSY_TIMEOUT_MS = 5000

QUERY_COLUMNS = (
    "id, name, pattern, options, created_seq, created_at,"
    " batches_seen, total_positive, total_negative, last_seq"
)
SNAPSHOT_COLUMNS = "seq, path, vertices, edges, created_at"

# SQLite before 3.32 takes at most 999 parameters per statement.
_MAX_PARAMETERS = 999


class StoredBatch(NamedTuple):
    """What the writer stores of one applied batch (a BatchRecord, encoded).  It crosses
    to the writer as a plain tuple of these fields (Store._stored), the events as plain
    (query_id, seq, payload) tuples: that pickles several times faster."""

    seq: int
    updates: bytes  # storage.codec's encoding
    applied: str  # JSON text
    ignored: str  # JSON text
    created_at: str
    events: tuple[tuple[int, int, str], ...]  # (query_id, seq, payload)
    query_stats: dict[int, tuple[int, int]]
    idempotency: tuple[str, str, str] | None
    new_labels: dict[str, int]


class Retention(NamedTuple):
    """How much of the logs a batch group keeps (Store.open's settings; passed as a plain
    tuple, as StoredBatch is)."""

    result_retention: int
    idempotency_retention: int
    prune_every: int


def connect_writer(path: str | Path, synchronous: str) -> sqlite3.Connection:
    """The one write connection: WAL, ``synchronous`` ("full"/"normal"), autocommit mode."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        # journal_mode cannot change inside a transaction; autocommit mode has none open.
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode != "wal":
            raise StorageError(f"{path}: SQLite refused WAL journal mode (got {mode!r})")
        conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS[synchronous]}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    except BaseException:
        conn.close()
        raise
    return conn


def append_batches(
    conn: sqlite3.Connection, group: list[tuple], retention: tuple
) -> list[None]:
    """Write consecutive batches (StoredBatch and Retention fields as plain tuples), as
    if appended one by one, with one statement per table for the whole group.

    Few statements, not few rows, is what counts here: each sqlite3 call lets go of
    the GIL and takes it back, and where the writer shares a process with busy threads
    taking it back can mean waiting for them.
    """
    group = [StoredBatch._make(batch) for batch in group]
    retention = Retention._make(retention)
    last, next_query_id, registered = conn.execute(
        "SELECT (SELECT value FROM meta WHERE key = 'last_seq'),"
        " (SELECT value FROM meta WHERE key = 'next_query_id'),"
        " (SELECT group_concat(id) FROM queries)"
    ).fetchone()
    batch_rows, events, idempotency = [], [], []
    for batch in group:
        seq = int(batch.seq)
        if seq != last + 1:
            raise ValueError(f"batch seq {seq} does not follow the last stored seq {last}")
        last = seq
        for _, event_seq, _ in batch.events:
            if event_seq != seq:
                raise ValueError(f"batch {seq} carries an event for seq {event_seq}")
        batch_rows.append((seq, batch.updates, batch.applied, batch.ignored, batch.created_at))
        events.extend(batch.events)
        if batch.idempotency is not None:
            key, request_hash, response = batch.idempotency
            idempotency.append((key, seq, request_hash, response))
    live = _live_query_ids(
        {int(q) for q in registered.split(",")} if registered else set(), next_query_id,
        events, *(batch.query_stats for batch in group),
    )
    _insert_rows(conn, "INSERT INTO batches (seq, updates, applied, ignored, created_at)",
                 batch_rows)
    _insert_rows(conn, "INSERT INTO events (query_id, seq, payload)",
                 [event for event in events if event[0] in live])
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
    for batch in group:
        insert_labels(conn, batch.new_labels)
    _set_meta(conn, "last_seq", last)
    # The newest seq of the group that is a multiple of prune_every, if any: pruning
    # there covers every earlier multiple, and rows of later batches are never pruned.
    prune_at = last - last % retention.prune_every
    if prune_at >= int(group[0].seq):
        _prune(conn, prune_at, retention)
    return [None] * len(group)


def prune_retained(conn: sqlite3.Connection, retention: tuple) -> int:
    """Apply the retention as of the last stored batch now (the service's pruning timer,
    so a log that stops short of the next multiple of ``prune_every`` still shrinks);
    returns that batch's seq."""
    last = meta(conn, "last_seq")
    _prune(conn, last, Retention._make(retention))
    return last


def _prune(conn: sqlite3.Connection, seq: int, retention: Retention) -> None:
    """Keep the events of the last ``result_retention`` batches, and the
    idempotency keys of the last ``idempotency_retention``."""
    cutoff = seq - retention.result_retention
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
        "DELETE FROM idempotency WHERE seq <= ?", (seq - retention.idempotency_retention,)
    )


def register_query(
    conn: sqlite3.Connection,
    record: QueryRecord,
    new_labels: dict[str, int],
    backfill: EventRecord | None,
) -> None:
    next_id = meta(conn, "next_query_id")
    if record.id < next_id:
        raise ValueError(f"query id {record.id} was already used (next free id: {next_id})")
    if backfill is not None and backfill.query_id != record.id:
        raise ValueError(
            f"backfill event is for query {backfill.query_id}, not query {record.id}"
        )
    conn.execute(
        f"INSERT INTO queries ({QUERY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            int(record.id), record.name, record.pattern, record.options,
            int(record.created_seq), record.created_at, int(record.batches_seen),
            int(record.total_positive), int(record.total_negative), int(record.last_seq),
        ),
    )
    insert_labels(conn, new_labels)
    if backfill is not None:
        _insert_rows(conn, "INSERT INTO events (query_id, seq, payload)",
                     [(int(backfill.query_id), int(backfill.seq), backfill.payload)])
    _set_meta(conn, "next_query_id", int(record.id) + 1)


def delete_query(conn: sqlite3.Connection, query_id: int) -> None:
    conn.execute("DELETE FROM events WHERE query_id = ?", (query_id,))
    conn.execute("DELETE FROM queries WHERE id = ?", (query_id,))


def record_snapshot(conn: sqlite3.Connection, record: SnapshotRecord, keep: int,
                    directed: bool | None = None) -> list[str]:
    """Record ``record``; drop all but the newest ``keep`` snapshots and the batch
    rows no kept snapshot needs.  Returns the file names of the dropped snapshots.
    ``directed``: the graph's kind, set with it (a bulk load)."""
    if directed is not None:
        _set_meta(conn, "directed", int(directed))
    conn.execute(
        f"INSERT OR REPLACE INTO snapshots ({SNAPSHOT_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
        (record.seq, record.path.name, record.vertices, record.edges, record.created_at),
    )
    rows = conn.execute("SELECT seq, path FROM snapshots ORDER BY seq DESC").fetchall()
    kept, dropped = rows[:keep], rows[keep:]
    conn.executemany("DELETE FROM snapshots WHERE seq = ?", [(seq,) for seq, _ in dropped])
    conn.execute("DELETE FROM batches WHERE seq <= ?", (kept[-1][0],))
    return [name for _, name in dropped]


def insert_labels(conn: sqlite3.Connection, labels: dict[str, int]) -> None:
    for name, label_id in labels.items():
        row = conn.execute("SELECT id FROM labels WHERE name = ?", (name,)).fetchone()
        if row is None:
            # labels.id is UNIQUE: an id already given to another name fails here.
            conn.execute("INSERT INTO labels (name, id) VALUES (?, ?)", (name, int(label_id)))
        elif row[0] != label_id:
            raise ValueError(f"label {name!r} is already mapped to {row[0]}, not {label_id}")


def _sink_cursor(conn: sqlite3.Connection, table: str, query_id: int,
                 delivered_through: int | None) -> int:
    """The batch cursor a push output (`table`: webhooks or kafka_sinks) of an existing
    query is set to: `delivered_through`, else the one it has, else the last stored batch
    (a new output starts with the next batch)."""
    if conn.execute("SELECT 1 FROM queries WHERE id = ?", (query_id,)).fetchone() is None:
        raise ValueError(f"query {query_id} not found")
    if delivered_through is not None:
        return delivered_through
    row = conn.execute(f"SELECT delivered_through FROM {table} WHERE query_id = ?",
                       (query_id,)).fetchone()
    return row[0] if row is not None else meta(conn, "last_seq")


def set_webhook(conn: sqlite3.Connection, query_id: int, url: str, secret: str,
                delivered_through: int | None, created_at: str) -> int:
    """Point the query's webhook at ``url`` (created, or its URL and secret replaced); its
    cursor becomes ``delivered_through``, or stays as it was when that is None (a new
    webhook then starts after the last stored batch).  Returns the cursor."""
    delivered_through = _sink_cursor(conn, "webhooks", query_id, delivered_through)
    conn.execute(
        "INSERT INTO webhooks (query_id, url, secret, delivered_through, created_at)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (query_id) DO UPDATE SET url = excluded.url,"
        " secret = excluded.secret, delivered_through = excluded.delivered_through",
        (query_id, url, secret, delivered_through, created_at))
    return delivered_through


def delete_webhook(conn: sqlite3.Connection, query_id: int) -> bool:
    """Remove the query's webhook (its dead letters stay with the query); False if none."""
    return conn.execute("DELETE FROM webhooks WHERE query_id = ?", (query_id,)).rowcount > 0


def webhook_delivered(conn: sqlite3.Connection, query_id: int, seq: int,
                      dead_letter: tuple[str, int, str, str] | None) -> None:
    """Move the webhook's cursor on to ``seq`` (never back), recording the event as a dead
    letter ``(payload, attempts, error, failed_at)`` when it was given up on."""
    if dead_letter is not None:
        conn.execute(
            "INSERT OR REPLACE INTO webhook_dead_letters"
            " (query_id, seq, payload, attempts, error, failed_at) VALUES (?, ?, ?, ?, ?, ?)",
            (query_id, seq, *dead_letter))
    conn.execute("UPDATE webhooks SET delivered_through = max(delivered_through, ?)"
                 " WHERE query_id = ?", (seq, query_id))


def set_kafka_sink(conn: sqlite3.Connection, query_id: int, bootstrap_servers: str, topic: str,
                   client_settings: str, partition: int, partition_end: int,
                   delivered_through: int | None, created_at: str) -> int:
    """Point the query's Kafka sink at ``topic``'s ``partition`` (created, or replaced): its
    offset cursor becomes ``partition_end`` (the offset before the sink's first message),
    its batch cursor ``delivered_through``, or stays as it was when that is None (a new sink
    then starts after the last stored batch).  Returns the batch cursor."""
    delivered_through = _sink_cursor(conn, "kafka_sinks", query_id, delivered_through)
    conn.execute(
        "INSERT OR REPLACE INTO kafka_sinks (query_id, bootstrap_servers, topic,"
        " client_settings, partition, delivered_through, delivered_offset, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, coalesce((SELECT created_at FROM kafka_sinks"
        " WHERE query_id = ?), ?))",
        (query_id, bootstrap_servers, topic, client_settings, partition, delivered_through,
         partition_end, query_id, created_at))
    return delivered_through


def delete_kafka_sink(conn: sqlite3.Connection, query_id: int) -> bool:
    """Remove the query's Kafka sink; False if it had none."""
    return conn.execute("DELETE FROM kafka_sinks WHERE query_id = ?",
                        (query_id,)).rowcount > 0


def kafka_delivered(conn: sqlite3.Connection, query_id: int, seq: int, offset: int) -> None:
    """Move the Kafka sink's cursor on to batch ``seq``, whose message the broker
    acknowledged at ``offset`` (neither ever goes back)."""
    conn.execute("UPDATE kafka_sinks SET delivered_through = max(delivered_through, ?),"
                 " delivered_offset = max(delivered_offset, ?) WHERE query_id = ?",
                 (seq, offset, query_id))


def pragma(conn: sqlite3.Connection, name: str) -> object:
    """The writer connection's setting ``name`` (for diagnostics and tests)."""
    if not name.isidentifier():
        raise ValueError(f"not a pragma name: {name!r}")
    return conn.execute(f"PRAGMA {name}").fetchone()[0]


def set_directed(conn: sqlite3.Connection, directed: bool) -> None:
    """The graph's kind (an empty store's: the caller checks)."""
    _set_meta(conn, "directed", int(directed))


def set_retention(conn: sqlite3.Connection, retention: int | None) -> None:
    """The graph's retention, None: edges never expire (an empty store's: the caller
    checks)."""
    _set_meta(conn, "retention", -1 if retention is None else int(retention))


def meta(conn: sqlite3.Connection, key: str) -> int:
    return conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0]


def _set_meta(conn: sqlite3.Connection, key: str, value: int) -> None:
    conn.execute("UPDATE meta SET value = ? WHERE key = ?", (value, key))


def _live_query_ids(
    registered: set[int],
    next_query_id: int,
    events: Iterable[tuple[int, int, str]],
    *query_stats: dict[int, tuple[int, int]],
) -> set[int]:
    """The registered ids among those a group of batches names.

    A batch may name a query deleted after the batch was computed (the service
    can queue a deletion before it); its results are dropped.  An id never
    registered at all is a bug, and fails the batch.
    """
    named = {int(query_id) for query_id, _, _ in events}
    for stats in query_stats:
        named.update(int(q) for q in stats)
    never_registered = sorted(q for q in named - registered if q >= next_query_id)
    if never_registered:
        raise ValueError(f"batch names queries never registered: {never_registered}")
    return named & registered


def _query_totals(group: list[StoredBatch], live: set[int]) -> list[tuple]:
    """Per live query, what a group of batches adds to its row: (id, batches seen,
    positive, negative, the last batch with a nonzero delta or 0 for none)."""
    totals: dict[int, list[int]] = {}
    for batch in group:
        seq = int(batch.seq)
        for query_id, (positive, negative) in batch.query_stats.items():
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
