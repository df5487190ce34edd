"""A standing query as the engine thread tracks it: its options, running totals and
latencies, how it is stored and restored, and the events each batch makes it emit.

Only the engine thread (service/engine_service.py) touches a `Standing`.
"""
from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import orjson

from gpu.plan.query import MAX_QUERY_VERTICES, QueryGraph
from service.labels import LabelDictionary
from service.patterns import to_query
from service.schemas import Pattern, QueryPublic, QueryStats
from storage import EventRecord, QueryRecord

# Per-query latencies kept for the p99 (since the server started).
LATENCY_WINDOW = 1024


@dataclass
class Standing:
    """A registered query as the engine thread tracks it."""
    id: int
    name: str
    pattern: Pattern
    deliver: str
    max_matches: int | None
    backfill: bool
    created_seq: int
    created_at: str
    engine_qid: int
    query: QueryGraph
    window: int | None = None
    before: list[list[int]] | None = None
    batches_seen: int = 0
    total_positive: int = 0
    total_negative: int = 0
    last_seq: int = 0
    latencies: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))

    @classmethod
    def restore(cls, engine, labels: LabelDictionary, record: QueryRecord) -> Standing:
        """A stored query registered again with `engine` (recovery)."""
        pattern = Pattern.model_validate_json(record.pattern)
        options = json.loads(record.options)
        query = to_query(pattern, record.name, labels.stage(), MAX_QUERY_VERTICES,
                         engine.directed)
        standing = cls(id=record.id, name=record.name, pattern=pattern,
                       deliver=options["deliver"], max_matches=options["max_matches_per_batch"],
                       backfill=options["backfill"], created_seq=record.created_seq,
                       created_at=record.created_at, engine_qid=-1, query=query,
                       window=options.get("window"), before=options.get("before"),
                       batches_seen=record.batches_seen,
                       total_positive=record.total_positive,
                       total_negative=record.total_negative, last_seq=record.last_seq)
        standing.attach(engine)
        return standing

    def attach(self, engine) -> None:
        """Register it with `engine` (a new one: registration, recovery, a bulk load)."""
        self.engine_qid = engine.add_query(self.query, window=self.window,
                                           before=self.before or ())

    def options_json(self) -> str:
        # (Stores from before windows have no "window" nor "before": restore reads None.)
        return json.dumps({"deliver": self.deliver, "max_matches_per_batch": self.max_matches,
                           "backfill": self.backfill, "window": self.window,
                           "before": self.before})

    def public(self, stats: QueryStats | None = None) -> QueryPublic:
        return QueryPublic(id=self.id, name=self.name, pattern=self.pattern,
                           deliver=self.deliver, max_matches_per_batch=self.max_matches,
                           backfill=self.backfill, window=self.window, before=self.before,
                           created_batch=self.created_seq,
                           created_at=self.created_at, vertices=self.query.num_vertices,
                           edges=self.query.num_edges, stats=stats)

    def stats(self, hub) -> QueryStats:
        """Its statistics: totals, latencies (ms) and its subscribers in `hub`."""
        latencies = np.array(self.latencies) * 1e3
        subscribers = hub.stats(self.id)
        return QueryStats(batches_seen=self.batches_seen, total_positive=self.total_positive,
                          total_negative=self.total_negative, last_batch=self.last_seq,
                          last_latency_ms=float(latencies[-1]) if len(latencies) else None,
                          p99_latency_ms=float(np.percentile(latencies, 99))
                          if len(latencies) else None,
                          subscribers=subscribers.subscribers, max_lag=subscribers.max_lag)

    def count_batch(self, seq: int, delta, time: str) -> EventRecord | None:
        """Add batch `seq`'s delta (a gpu.results.QueryDelta) to the totals; the event it
        emits, or None when the batch changed none of its matches.  `time` is the batch's
        (its record's created_at)."""
        self.batches_seen += 1
        self.total_positive += delta.positive
        self.total_negative += delta.negative
        if not (delta.positive or delta.negative):
            return None
        self.last_seq = seq
        return EventRecord(self.id, seq, self._event_json(seq, delta, time))

    def _event_json(self, seq: int, delta, time: str) -> str:
        event = {"batch": seq, "time": time, "positive": delta.positive,
                 "negative": delta.negative}
        if delta.expired is not None:       # a graph that keeps event times
            event["expired"] = delta.expired
        if self.deliver == "matches":
            limit = self.max_matches
            added, removed = delta.added[:limit], delta.removed[:limit]
            event["added"] = added.tolist()
            event["removed"] = removed.tolist()
            if delta.removed_expired is not None:
                event["removed_expired"] = delta.removed_expired[:limit].tolist()
            event["truncated"] = len(added) < delta.positive or len(removed) < delta.negative
        return orjson.dumps(event).decode()

    def backfill_event(self, engine, seq: int) -> EventRecord:
        """The event of its matches already in `engine`'s graph at batch `seq`, stamped with
        the query's registration time."""
        event = {"batch": seq, "time": self.created_at, "backfill": True}
        if self.deliver == "matches":
            found = engine.matches(self.engine_qid, limit=self.max_matches)
            event.update(positive=found.count, negative=0, added=found.rows.tolist(),
                         removed=[], truncated=found.truncated)
        else:
            event.update(positive=engine.count(self.engine_qid), negative=0)
        return EventRecord(self.id, seq, orjson.dumps(event).decode())
