"""Migrations: applied once each, recorded in the same transaction, newer databases refused."""

from __future__ import annotations

import sqlite3
from datetime import datetime

import numpy as np
import pytest

from gpu.io.records import LabeledGraph
from storage import SchemaTooNew, Store
from storage.schema import MIGRATIONS, Migration, migrate, split_statements


@pytest.fixture
def conn(tmp_path):
    connection = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    yield connection
    connection.close()


def recorded(conn) -> list[tuple[int, str]]:
    return conn.execute("SELECT version, name FROM migrations ORDER BY version").fetchall()


def tables(conn) -> set[str]:
    return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def test_fresh_database_gets_every_migration_recorded(conn):
    assert migrate(conn) == [m.version for m in MIGRATIONS]
    assert recorded(conn) == [(m.version, m.name) for m in MIGRATIONS]
    assert {"meta", "labels", "batches", "queries", "events", "idempotency", "snapshots"} <= tables(
        conn
    )
    for (applied_at,) in conn.execute("SELECT applied_at FROM migrations"):
        assert datetime.fromisoformat(applied_at).utcoffset().total_seconds() == 0
    assert dict(conn.execute("SELECT key, value FROM meta")) == {"next_query_id": 1, "last_seq": 0,
                                                                 "directed": 0, "retention": -1}


def test_reopening_applies_nothing(conn):
    migrate(conn)
    before = conn.execute("SELECT * FROM migrations").fetchall()
    assert migrate(conn) == []
    assert conn.execute("SELECT * FROM migrations").fetchall() == before


def test_only_missing_migrations_are_applied(conn):
    migrate(conn, MIGRATIONS)
    later = Migration(len(MIGRATIONS) + 1, "add_notes", "CREATE TABLE notes (text TEXT);")
    assert migrate(conn, MIGRATIONS + (later,)) == [later.version]
    assert "notes" in tables(conn)


def test_failed_migration_leaves_no_trace(conn):
    broken = Migration(
        2, "broken", "CREATE TABLE half (x INTEGER); INSERT INTO no_such_table VALUES (1);"
    )
    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        migrate(conn, MIGRATIONS[:1] + (broken,))
    assert recorded(conn) == [(1, "initial")]
    assert "half" not in tables(conn)
    assert not conn.in_transaction


def test_unknown_higher_version_is_refused(conn):
    migrate(conn)
    conn.execute("INSERT INTO migrations VALUES (999, 'from the future', '2030-01-01')")
    with pytest.raises(SchemaTooNew, match="999"):
        migrate(conn)


def test_store_refuses_a_newer_data_dir(data_dir):
    Store.open(data_dir).close()
    conn = sqlite3.connect(data_dir / "store.db", isolation_level=None)
    conn.execute("INSERT INTO migrations VALUES (999, 'from the future', '2030-01-01')")
    conn.close()
    with pytest.raises(SchemaTooNew):
        Store.open(data_dir)


def test_statements_split_on_semicolons_outside_literals():
    script = """
        CREATE TABLE a (x TEXT DEFAULT ';');  -- a comment; with a semicolon
        CREATE TRIGGER tr AFTER INSERT ON a BEGIN
            UPDATE a SET x = 'y;z';
        END;
    """
    statements = list(split_statements(script))
    assert len(statements) == 2
    assert statements[1].startswith("-- a comment; with a semicolon")
    assert statements[1].endswith("END;")


@pytest.mark.parametrize("tail", ["CREATE TABLE b (y", "CREATE TABLE b (y);  'open;"])
def test_unterminated_final_statement_is_an_error(tail):
    with pytest.raises(ValueError, match="does not end with"):
        list(split_statements("CREATE TABLE a (x); " + tail))


def test_a_store_keeps_the_graph_kind_set_with_its_bulk_load(data_dir):
    """Migration 4: stores start undirected; the kind set with snapshot 0 (a bulk load)
    is in the same transaction and survives a reopen."""
    graph = LabeledGraph(np.array([1, 2]), np.array([0, 0]), np.array([1]), np.array([2]),
                         np.array([0]))
    store = Store.open(data_dir, synchronous="normal")
    try:
        assert store.directed() is False
        store.record_snapshot(0, graph, directed=True)
        assert store.directed() is True
    finally:
        store.close()
    store = Store.open(data_dir, synchronous="normal")
    try:
        assert store.directed() is True
        store.set_directed(False)
        assert store.directed() is False
    finally:
        store.close()
