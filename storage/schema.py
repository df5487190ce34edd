"""Owns the database schema: the ordered migrations and the code that applies them."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import NamedTuple

from storage.errors import SchemaTooNew


class Migration(NamedTuple):
    version: int
    name: str
    script: str


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial", """
        CREATE TABLE meta (
            key TEXT PRIMARY KEY,
            value NOT NULL
        );
        INSERT INTO meta (key, value) VALUES ('next_query_id', 1), ('last_seq', 0);

        CREATE TABLE labels (
            name TEXT PRIMARY KEY,
            id INTEGER NOT NULL UNIQUE
        );

        -- One row per applied batch, kept until a snapshot makes it unnecessary.
        CREATE TABLE batches (
            seq INTEGER PRIMARY KEY,
            updates BLOB NOT NULL,
            applied TEXT NOT NULL,
            ignored TEXT NOT NULL,
            created_at TEXT NOT NULL
        );

        -- pruned_through: the highest event seq removed by retention (NULL: none), so
        -- a cursor below it is known to have missed events.
        CREATE TABLE queries (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            pattern TEXT NOT NULL,
            options TEXT NOT NULL,
            created_seq INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            batches_seen INTEGER NOT NULL DEFAULT 0,
            total_positive INTEGER NOT NULL DEFAULT 0,
            total_negative INTEGER NOT NULL DEFAULT 0,
            last_seq INTEGER NOT NULL DEFAULT 0,
            pruned_through INTEGER
        );

        CREATE TABLE events (
            query_id INTEGER NOT NULL REFERENCES queries (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            payload TEXT NOT NULL,
            PRIMARY KEY (query_id, seq)
        ) WITHOUT ROWID;

        CREATE TABLE idempotency (
            key TEXT PRIMARY KEY,
            seq INTEGER NOT NULL,
            request_hash TEXT NOT NULL,
            response TEXT NOT NULL
        );
        CREATE INDEX idempotency_by_seq ON idempotency (seq);

        -- path is relative to the snapshots directory, so a data directory can move.
        CREATE TABLE snapshots (
            seq INTEGER PRIMARY KEY,
            path TEXT NOT NULL,
            vertices INTEGER NOT NULL,
            edges INTEGER NOT NULL,
            created_at TEXT NOT NULL
        );
    """),
    # Webhooks (service/webhooks.py): where a query's events are pushed, how far they were
    # delivered (the durable cursor a restart resumes from) and the events given up on.
    Migration(2, "webhooks", """
        CREATE TABLE webhooks (
            query_id INTEGER PRIMARY KEY REFERENCES queries (id) ON DELETE CASCADE,
            url TEXT NOT NULL,
            secret TEXT NOT NULL,
            delivered_through INTEGER NOT NULL,
            created_at TEXT NOT NULL
        );

        CREATE TABLE webhook_dead_letters (
            query_id INTEGER NOT NULL REFERENCES queries (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            payload TEXT NOT NULL,
            attempts INTEGER NOT NULL,
            error TEXT NOT NULL,
            failed_at TEXT NOT NULL,
            PRIMARY KEY (query_id, seq)
        ) WITHOUT ROWID;
    """),
    # Kafka sinks (service/kafka.py): where a query's events are produced, the client's
    # settings, and the durable cursor: the last batch delivered and its message's offset in
    # the query's partition (a restart reads the partition back from there).
    Migration(3, "kafka_sinks", """
        CREATE TABLE kafka_sinks (
            query_id INTEGER PRIMARY KEY REFERENCES queries (id) ON DELETE CASCADE,
            bootstrap_servers TEXT NOT NULL,
            topic TEXT NOT NULL,
            client_settings TEXT NOT NULL,
            partition INTEGER NOT NULL,
            delivered_through INTEGER NOT NULL,
            delivered_offset INTEGER NOT NULL,
            created_at TEXT NOT NULL
        );
    """),
    # The graph's kind (issue 22): 1 when its edges are arcs u -> v.  Fixed while the store
    # holds a graph; existing stores are undirected.
    Migration(4, "graph_kind", """
        INSERT INTO meta (key, value) VALUES ('directed', 0);
    """),
    # Retention (issue 23): edges timed <= watermark - retention expire; -1 when edges never
    # expire.  Fixed while the store holds a graph, as its kind; existing stores keep theirs.
    Migration(5, "retention", """
        INSERT INTO meta (key, value) VALUES ('retention', -1);
    """),
)


def migrate(conn: sqlite3.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[int]:
    """Apply the migrations ``conn``'s database lacks; return their versions.

    ``conn`` must be in autocommit mode (``isolation_level=None``).  Each
    migration runs in its own transaction together with the row recording it,
    so a failed migration leaves no trace and is retried on the next open.
    """
    conn.execute(
        "CREATE TABLE IF NOT EXISTS migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    known = {m.version for m in migrations}
    present = set(applied_versions(conn))
    unknown = sorted(present - known)
    if unknown:
        raise SchemaTooNew(
            f"database has migration {unknown[-1]}; this version knows up to {max(known)}"
        )
    applied = []
    for migration in sorted(m for m in migrations if m.version not in present):
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-read inside the lock: another process may have migrated meanwhile.
            if migration.version not in applied_versions(conn):
                for statement in split_statements(migration.script):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, datetime.now(timezone.utc).isoformat()),
                )
                applied.append(migration.version)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return applied


def applied_versions(conn: sqlite3.Connection) -> list[int]:
    return [row[0] for row in conn.execute("SELECT version FROM migrations ORDER BY version")]


def split_statements(script: str) -> Iterator[str]:
    """The statements of ``script``, one at a time; each must end with ``;``.

    ``executescript`` would do this but commits any open transaction first,
    which would split a migration from the row that records it.
    """
    *terminated, rest = script.split(";")
    pending = ""
    for piece in terminated:
        pending += piece + ";"
        # A ';' inside a literal, comment or trigger body does not end the statement.
        if sqlite3.complete_statement(pending):
            if pending.strip(" \t\r\n;"):
                yield pending.strip()
            pending = ""
    if (pending + rest).strip():
        raise ValueError(f"SQL script does not end with ';': {(pending + rest).strip()!r}")
