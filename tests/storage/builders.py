"""Deterministic records for the storage tests (also used by the crash worker)."""

from __future__ import annotations

import numpy as np

from gpu.io.records import DELETE_EDGE, DELETE_VERTEX, LabeledGraph, UpdateStream
from storage import BatchRecord, EventRecord, QueryRecord

CREATED_AT = "2026-01-01T00:00:00+00:00"


def updates_for(seq: int, n: int = 6) -> UpdateStream:
    """``n`` records that depend only on ``seq``, including the extreme values."""
    rng = np.random.default_rng(seq)
    kind = rng.integers(0, 4, n).astype(np.int8)
    a = rng.integers(0, 2**63 - 1, n, dtype=np.int64)
    b = np.where(kind >= 2, rng.integers(0, 2**63 - 1, n, dtype=np.int64), 0)
    label = rng.integers(0, 2**31 - 1, n).astype(np.int32)
    label[(kind == DELETE_VERTEX) | (kind == DELETE_EDGE)] = -1
    if n:
        a[0], label[-1] = 2**63 - 1, 2**31 - 1
    return UpdateStream(kind, a, b, label, np.arange(1, n + 1), f"batch {seq}")


def query(query_id: int, created_seq: int = 0, name: str | None = None) -> QueryRecord:
    return QueryRecord(
        id=query_id,
        name=name or f"q{query_id}",
        pattern=f'{{"edges": [[0, {query_id}]]}}',
        options='{"deliver": "events"}',
        created_seq=created_seq,
        created_at=CREATED_AT,
    )


def payload(query_id: int, seq: int) -> str:
    return f'{{"query": {query_id}, "seq": {seq}, "positive": {delta(query_id, seq)[0]}}}'


def delta(query_id: int, seq: int) -> tuple[int, int]:
    """A query's (positive, negative) for a batch: zero on every third batch."""
    if seq % 3 == 0:
        return 0, 0
    return 10**13 + query_id * seq, seq


def batch(
    seq: int,
    query_ids: tuple[int, ...] = (),
    *,
    n: int = 6,
    idempotency: tuple[str, str, str] | None = None,
    new_labels: dict[str, int] | None = None,
) -> BatchRecord:
    """Batch ``seq`` over ``query_ids``: stats for each, an event iff its delta is nonzero."""
    stats = {q: delta(q, seq) for q in query_ids}
    return BatchRecord(
        seq=seq,
        updates=updates_for(seq, n),
        applied={"insert_edge": seq, "add_vertex": 1},
        ignored={"duplicate": 0},
        created_at=CREATED_AT,
        events=tuple(EventRecord(q, seq, payload(q, seq)) for q in query_ids if any(stats[q])),
        query_stats=stats,
        idempotency=idempotency,
        new_labels=new_labels or {},
    )


def graph(seed: int, vertices: int = 50, edges: int = 200) -> LabeledGraph:
    rng = np.random.default_rng(seed)
    return LabeledGraph(
        vertex_ids=rng.integers(0, 2**62, vertices),
        vertex_labels=rng.integers(0, 5, vertices),
        edge_src=rng.integers(0, 2**62, edges),
        edge_dst=rng.integers(0, 2**62, edges),
        edge_labels=rng.integers(0, 3, edges),
    )


def assert_same_stream(actual: UpdateStream, expected: UpdateStream) -> None:
    for field in ("kind", "a", "b", "label"):
        got, want = getattr(actual, field), getattr(expected, field)
        assert got.dtype == want.dtype, field
        np.testing.assert_array_equal(got, want, err_msg=field)
    np.testing.assert_array_equal(actual.line, np.arange(1, len(expected) + 1))
    assert (actual.time is None) == (expected.time is None), "time"
    if expected.time is not None:
        np.testing.assert_array_equal(actual.time, expected.time, err_msg="time")


def assert_same_graph(actual: LabeledGraph, expected: LabeledGraph) -> None:
    for field in ("vertex_ids", "vertex_labels", "edge_src", "edge_dst", "edge_labels"):
        got, want = getattr(actual, field), getattr(expected, field)
        assert got.dtype == want.dtype, field
        np.testing.assert_array_equal(got, want, err_msg=field)
    assert (actual.edge_times is None) == (expected.edge_times is None), "edge_times"
    if expected.edge_times is not None:
        np.testing.assert_array_equal(actual.edge_times, expected.edge_times)
    assert actual.watermark == expected.watermark, "watermark"
