"""Owns the records the store reads and writes: queries, events, batches, snapshots."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # only for the annotation: the writer process imports no NumPy
    from gpu.io.records import UpdateStream


@dataclass(frozen=True)
class QueryRecord:
    """A standing query as registered, with its running totals."""

    id: int  # service-assigned, never reused
    name: str
    pattern: str  # JSON text of the normalized pattern (opaque to storage)
    options: str  # JSON text (deliver, max_matches_per_batch, backfill...) (opaque)
    created_seq: int  # last batch seq applied when it was registered
    created_at: str  # ISO-8601 UTC
    batches_seen: int = 0
    total_positive: int = 0
    total_negative: int = 0
    last_seq: int = 0  # last batch that touched it (nonzero delta), 0 if none


@dataclass(frozen=True)
class EventRecord:
    """One query's result for one batch, served verbatim to subscribers."""

    query_id: int
    seq: int  # the batch sequence (event id); backfill uses the registration seq
    payload: str  # JSON text (opaque)


@dataclass(frozen=True)
class BatchRecord:
    """Everything one applied batch changes, persisted in one transaction."""

    seq: int  # must be last_seq() + 1
    updates: UpdateStream
    applied: dict[str, int]
    ignored: dict[str, int]
    created_at: str
    events: tuple[EventRecord, ...]  # only queries whose delta is nonzero (or listed)
    query_stats: dict[int, tuple[int, int]]  # every standing query: (positive, negative)
    idempotency: tuple[str, str, str] | None  # (key, request_hash, response_json)
    new_labels: dict[str, int]  # string labels first seen in this batch


@dataclass(frozen=True)
class SnapshotRecord:
    """A graph snapshot file taken after batch ``seq`` (0: the bulk-loaded graph)."""

    seq: int
    path: Path
    vertices: int
    edges: int
    created_at: str
