"""Slow, obviously-correct reference for timed graphs (issue 23): edges with event times,
a watermark, retention, and windowed standing queries.  It builds on RefGraph
(tests/reference.py) and, like it, imports nothing from ``gpu``.

Timed records are ``(kind, a, b, label, time)``: ``time`` is an integer event time on an
edge insert, or None (untimed input keeps working); it is ignored on other records.
The semantics, one rule at a time (the choices the issue leaves open are marked CHOICE):

* Structure: the batch is applied exactly as RefGraph.apply does (set semantics,
  cancellation, rejection), on the records without their times.
* Times: an edge inserted by the batch takes the largest time among the batch's insert
  records of it (None when all are untimed).  An edge that existed and is inserted again
  (a no-op in the structure) is *refreshed*: its time becomes that largest time
  (CHOICE: the record's time, even if older; an untimed record leaves it as it was).  An
  insert cancelled by a delete of the same edge changes nothing, time included.
* Watermark: the largest time of any timed insert record of an accepted batch so far
  (CHOICE: cancelled and refreshing records count too: they were accepted), None before
  the first.
* Retention ``R`` (None: off): once the batch has moved the watermark to ``T``, every
  timed edge with time ``<= T - R`` is deleted in the same batch (untimed edges never
  expire).
* Windowed query (``window`` W, None: any): a match counts only while every data edge it
  uses is timed (CHOICE: an untimed edge is outside every window) and the largest of
  their times minus the smallest is at most W.  ``before`` (pairs (i, j) of query edge
  indices, in ``RefQuery.edge_list()`` order): edge i's time is strictly less than edge
  j's (CHOICE: an untimed edge satisfies no ``before``).
* Deltas: a batch's positive matches are the valid matches after it that were not valid
  before (a new edge, or a refreshed time that brings a match into its window), its
  negative ones the reverse; a negative match that used an edge the retention deleted in
  this batch is *expired*.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tests.reference import (DEFAULT_EDGE_LABEL, DELETE_EDGE, INSERT_EDGE, NO_LABEL, RefGraph,
                             RefQuery, edge_key)


@dataclass
class TimedQuery:
    """A query with its time constraints (module docstring)."""
    query: RefQuery
    window: int | None = None
    before: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class TimedDelta:
    positive: set
    negative: set
    expired: set        # the negative matches that used an edge expired in this batch


class TimedRefGraph:
    """A RefGraph whose edges carry event times; see the module docstring."""

    def __init__(self, graph: RefGraph, times: dict | None = None,
                 retention: int | None = None) -> None:
        self.graph = graph
        self.times: dict = {key: None for key in graph.edges}
        self.times.update(times or {})
        self.retention = retention
        self.watermark: int | None = None

    # ------------------------------------------------------------------- batch
    def apply(self, records) -> tuple[dict, dict, set]:
        """Apply one timed batch: (applied, ignored, expired edge keys).  Rejected leaves
        everything as it was."""
        records = [tuple(r) for r in records]
        g = self.graph
        before = dict(g.edges)
        applied, ignored = g.apply([r[:4] for r in records])     # may raise Rejected
        inserted: dict = {}         # key -> the largest time of its insert records
        insert_label: dict = {}     # key -> its inserts' label (one: RefGraph rejects two)
        deletes: dict = {}          # key -> the labels its delete records name
        for kind, a, b, label, time in records:
            key = g.key(int(a), int(b))
            if kind == INSERT_EDGE:
                inserted.setdefault(key, None)
                insert_label[key] = DEFAULT_EDGE_LABEL if label == NO_LABEL else int(label)
                if time is not None:
                    inserted[key] = time if inserted[key] is None else max(inserted[key], time)
                    self.watermark = time if self.watermark is None else max(self.watermark,
                                                                            time)
            elif kind == DELETE_EDGE:
                deletes.setdefault(key, []).append(int(label))
        times = {key: t for key, t in self.times.items() if key in g.edges}
        for key, time in inserted.items():
            if key not in g.edges:
                continue
            # RefGraph's cancel rule: a delete naming no label or the insert's label.
            cancelled = any(lab in (NO_LABEL, insert_label[key]) for lab in deletes.get(key, ()))
            if key not in before:
                times[key] = time                 # new (an insert it cancelled is gone)
            elif not cancelled and time is not None:
                times[key] = time                 # a refresh
        self.times = times
        expired = set()
        if self.retention is not None and self.watermark is not None:
            horizon = self.watermark - self.retention
            expired = {key for key, t in self.times.items() if t is not None and t <= horizon}
            for key in expired:
                del g.edges[key], self.times[key]
            applied["edges_deleted"] += len(expired)
        return applied, ignored, expired

    # -------------------------------------------------------------- matching
    def valid(self, tq: TimedQuery) -> set[tuple[int, ...]]:
        """The matches of the query that its time constraints accept."""
        q, g = tq.query, self.graph
        arcs = [(a, b) for a, b, _ in q.edge_list()]
        out = set()
        for match in g.embeddings(q):
            times = [self.times[g.key(match[a], match[b])] for a, b in arcs]
            if tq.window is not None:
                if any(t is None for t in times) or max(times, default=0) - min(
                        times, default=0) > tq.window:
                    continue
            if any(times[i] is None or times[j] is None or not times[i] < times[j]
                   for i, j in tq.before):
                continue
            out.add(match)
        return out

    def delta(self, tq: TimedQuery, records) -> TimedDelta:
        """Apply `records` and give the query's exact delta (module docstring)."""
        was = self.valid(tq)
        _, _, expired = self.apply(records)
        now = self.valid(tq)
        negative = was - now
        q = tq.query
        arcs = [(a, b) for a, b, _ in q.edge_list()]
        gone = {m for m in negative
                if any(edge_key(m[a], m[b], self.graph.directed) in expired for a, b in arcs)}
        return TimedDelta(now - was, negative, gone)
