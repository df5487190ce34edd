"""Test doubles for the service: an in-memory result log with Store's read methods, and an
engine stand-in that commits batches to it and publishes them to a hub, in that order."""
from __future__ import annotations

import json
import threading
from collections.abc import Callable

from storage import EventRecord, QueryRecord, ResultsPruned


def payload(seq: int, query_id: int) -> str:
    """A counts payload that names its batch and query, so tests can tell events apart."""
    return json.dumps({"batch": seq, "positive": query_id, "negative": 0})


class FakeStore:
    """Store's result-log reads (`events_after`, `query`, `last_seq`) over dicts.

    `commit`, `register`, `prune` and `delete_query` stand in for the engine's writes.
    `before_read`, when set, runs inside every `events_after` call (in the reader's thread)
    before the read, so a test can commit batches while a subscriber reads the log.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queries: dict[int, QueryRecord] = {}
        self._events: dict[int, list[EventRecord]] = {}
        self._pruned_through: dict[int, int] = {}
        self._last_seq = 0
        self.reads = 0  # events_after calls
        self.before_read: Callable[[], None] | None = None

    # ---- the Store methods the hub and the routes use ------------------------------
    def events_after(self, query_id: int, after: int, limit: int) -> list[EventRecord]:
        if self.before_read is not None:
            self.before_read()
        with self._lock:
            self.reads += 1
            pruned_through = self._pruned_through.get(query_id)  # None: nothing pruned yet
            if pruned_through is not None and after < pruned_through:
                raise ResultsPruned(query_id, after, earliest=pruned_through)
            return [e for e in self._events.get(query_id, []) if e.seq > after][:limit]

    def query(self, query_id: int) -> QueryRecord | None:
        with self._lock:
            return self._queries.get(query_id)

    def last_seq(self) -> int:
        with self._lock:
            return self._last_seq

    # ---- writes -------------------------------------------------------------------
    def register(self, query_id: int, backfill: bool = False) -> None:
        """A standing query registered now; its backfill event carries the current seq."""
        with self._lock:
            self._queries[query_id] = QueryRecord(
                id=query_id, name=f"q{query_id}", pattern="{}", options="{}",
                created_seq=self._last_seq, created_at="2025-01-01T00:00:00Z")
            self._events[query_id] = []
            if backfill:
                self._events[query_id].append(
                    EventRecord(query_id, self._last_seq, payload(self._last_seq, query_id)))

    def commit(self, query_ids: tuple[int, ...]) -> tuple[int, list[EventRecord]]:
        """Commit the next batch, touching `query_ids`; returns its seq and events."""
        with self._lock:
            seq = self._last_seq + 1
            events = [EventRecord(q, seq, payload(seq, q)) for q in query_ids]
            for event in events:
                self._events[event.query_id].append(event)
            self._last_seq = seq
            return seq, events

    def prune(self, query_id: int, through: int) -> None:
        """Drop the query's events with seq <= `through` (cursors below it are refused)."""
        with self._lock:
            self._events[query_id] = [e for e in self._events[query_id] if e.seq > through]
            self._pruned_through[query_id] = through

    def delete_query(self, query_id: int) -> None:
        with self._lock:
            del self._queries[query_id]
            del self._events[query_id]

    def events(self, query_id: int, after: int = 0) -> list[EventRecord]:
        """Every retained event of the query past `after` (what a subscriber must get)."""
        with self._lock:
            return [e for e in self._events[query_id] if e.seq > after]


class FakeEngine:
    """Commits a batch to the store and only then publishes it, as EngineService does."""

    def __init__(self, store: FakeStore, hub) -> None:
        self.store = store
        self.hub = hub

    def batch(self, *query_ids: int) -> int:
        """One batch touching `query_ids` (none: a batch no query saw); returns its seq."""
        seq, events = self.store.commit(query_ids)
        self.hub.publish(seq, events)
        return seq

    def delete(self, query_id: int) -> None:
        self.store.delete_query(query_id)
        self.hub.query_deleted(query_id)
