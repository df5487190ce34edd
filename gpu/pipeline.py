"""Batches `Engine.start` has started and not yet finished: results still on the device, and
batch groups.

`Engine.start` applies a batch and starts its matching; `PendingBatch.finish` gives its
result.  On CUDA the counted totals come back behind the kernels (`Deferred`), so
`stream` starts batch i+1 before it finishes batch i and the host work of one overlaps
the kernels of the other.  On either executor consecutive small batches that each only
insert, or only delete, edges wait in a `BatchGroup` and share one lookup, one graph
update and one search.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gpu import clock
from gpu.batch import EffectiveBatch, PendingEdges, stored_labels
from gpu.cpu.executor import count_phase_cpu, count_small_cpu
from gpu.results import BatchResult, MatchSet, QueryDelta

if TYPE_CHECKING:
    from gpu.engine import Engine
    from gpu.io.records import UpdateStream

_NO_VERTICES = np.empty(0, dtype=np.int32)
# count_small's task bound for a batch group: none (its tasks never go one query at a time).
_NO_TASK_BOUND = 1 << 62


class Deferred:
    """One query's result still on the device: its count (and listed rows) in queued
    shared launches (gpu.cuda.executor.PendingMatches), with the query's index there."""

    def __init__(self, pending, index: int) -> None:
        self.pending, self.index = pending, index

    def resolve(self) -> MatchSet:
        return self.pending.resolve()[self.index]


@dataclass
class PendingBatch:
    """A batch applied to the graph whose counted totals may still be on the device, or
    whose matching waits for the rest of its batch group.

    Its times are gpu.clock readings, which leave Numba's compiling out: `started` when
    the batch came, `host_done` when its host work ended (for a group member, when the
    group's search did)."""
    batch: EffectiveBatch       # a batch group member's PendingEdges until its group runs
    list_limit: Mapping[int, int]
    negative: dict
    positive: dict
    seconds: dict[int, float]
    started: float
    host_done: float
    timings: dict[str, float]
    group: BatchGroup | None = None
    # A batch group member's results, made by the group's run (positive, negative and
    # seconds stay empty).
    deltas: dict[int, QueryDelta] | None = None
    # Windowed queries of an engine without times, with their query vertices: none of
    # their matches is valid, so their deltas are empty (Engine._untimed).
    windowed: Mapping[int, int] = field(default_factory=dict)

    def finish(self) -> BatchResult:
        """The batch's result.  Its seconds run from the batch's start to its result being
        known: the end of its host work, or of the wait for its totals from the device.
        (A pipelined batch is finished once the next one has started, so that wait
        begins after the next batch's host work, which overlapped its kernels.)"""
        if self.group is not None:
            self.group.run()
        known = self.host_done
        if self.deltas is not None:
            deltas = self.deltas
        else:
            waited = self._resolve()
            if waited:
                known = clock.now()
                self.timings["match"] += sum(waited.values())
            deltas = self._deltas(waited)
        for qid, n in self.windowed.items():
            delta = deltas.setdefault(qid, QueryDelta(0, 0))
            if self.list_limit.get(qid, 0) > 0:
                delta.added = delta.removed = np.empty((0, n), dtype=np.int64)
        return BatchResult(applied=self.batch.applied, ignored=self.batch.ignored,
                           queries=deltas, seconds=known - self.started,
                           timings=self.timings)

    def _resolve(self) -> dict[int, float]:
        """Wait for every result still on the device; each query's share of the wait (a
        shared launch's wait split evenly among its queries), none when nothing waited."""
        sharing: dict[int, tuple[object, set[int]]] = {}
        for qid in self.seconds:
            for found in (self.positive[qid], self.negative[qid]):
                if isinstance(found, Deferred):
                    sharing.setdefault(id(found.pending), (found.pending, set()))[1].add(qid)
        waited: dict[int, float] = {}
        for pending, qids in sharing.values():
            t0 = clock.now()
            pending.resolve()
            share = (clock.now() - t0) / len(qids)
            for qid in qids:
                waited[qid] = waited.get(qid, 0.0) + share
        return waited

    def _deltas(self, waited: Mapping[int, float]) -> dict[int, QueryDelta]:
        deltas = {}
        for qid in self.seconds:
            pos, neg = (found.resolve() if isinstance(found, Deferred) else found
                        for found in (self.positive[qid], self.negative[qid]))
            delta = QueryDelta(positive=pos.count, negative=neg.count,
                               seconds=self.seconds[qid] + waited.get(qid, 0.0))
            if self.list_limit.get(qid, 0) > 0:
                delta.added = pos.rows
                delta.removed = neg.rows
                delta.truncated = pos.truncated or neg.truncated
            deltas[qid] = delta
        return deltas


def stream(engine: Engine, streams: Iterable[UpdateStream],
           list_limit: int | Mapping[int, int]) -> Iterator[BatchResult]:
    """Engine.apply_stream: each batch started before the one before it is finished."""
    pending: deque[PendingBatch] = deque()
    for batch in streams:
        try:
            current = engine.start(batch, list_limit)
        except Exception:
            # The batches before were applied: their results first.
            while pending:
                yield pending.popleft().finish()
            raise
        pending.append(current)
        # The last batch stays (its kernels overlap the next one's host work), and so
        # do the members of the open group (the next batch may join it).
        while len(pending) > 1 and (pending[0].group is None
                                    or pending[0].group is not engine._group):
            yield pending.popleft().finish()
    while pending:
        yield pending.popleft().finish()


class BatchGroup:
    """Consecutive batches that each only insert, or each only delete, distinct edges
    between existing vertices, with every standing query counted: their updates and their
    matching wait (Engine.start returns at once) until one of them is finished or the
    engine is used otherwise, then run as one phase, one search for the whole group, on
    either executor.

    A member comes as PendingEdges (gpu/batch.py): which of its records apply is decided
    when the group runs, by one lookup of all the members' edges in the graph as it was
    before the group.  That is each member's own graph for its edges: no two members
    share an edge (`admits`), and a group changes no vertex.

    Exact per batch by the total-order rule (an update edge ranked below a task's own edge
    is off limits, so each match is found from its lowest-ranked update edge), with the
    batches' edges ranked so that each batch's tasks see the graph as it was after (when
    inserting) or before (when deleting) that batch alone:
      - deleted edges are ranked in batch order and searched in the graph before the
        group, so batch j's tasks do not see the edges batches 1..j-1 deleted;
      - inserted edges are ranked in reverse batch order and searched in the graph after
        the group, so batch j's tasks do not see the edges batches j+1.. inserted.
    Every task's count goes to its edge's batch.  The candidate bits and leaf counts are
    those of the whole group's graph: only a superset of each batch's candidates (a vertex
    gains candidacy by gaining edges), and candidacy is a necessary condition of a match,
    never a sufficient one, so the counts do not change.

    The group is the engine's own machinery: it updates the engine's graph and searches
    through the engine's private steps (_mutate, _leaf_edges, _shared_queries, _run_batch,
    _count_by_batch_on_device)."""

    def __init__(self, engine: Engine, inserting: bool) -> None:
        self.engine = engine
        self.inserting = inserting
        self.members: list[PendingBatch] = []
        self.keys: set[int] = set()
        self.edges = 0
        self.done = False
        self.error: BaseException | None = None

    def admits(self, edges: PendingEdges, limit: int) -> bool:
        """Whether `edges` can join: same kind, room left, and none of its edges in the
        group."""
        if edges.inserting != self.inserting or self.edges + len(edges) > limit:
            return False
        return self.keys.isdisjoint(edges.keys())

    def add(self, pending: PendingBatch) -> None:
        edges = pending.batch
        self.keys.update(edges.keys())
        self.edges += len(edges)
        self.members.append(pending)
        pending.group = self

    def run(self) -> None:
        """Apply the group's updates and search it (once; the engine's open group).  If
        that fails, every member's finish() fails."""
        if not self.done:
            try:
                self._apply_and_search()
            except BaseException as exc:
                self.error = exc
                raise
        elif self.error is not None:
            raise RuntimeError(f"the batch group of this batch failed: {self.error!r}") \
                from self.error

    def _resolve(self) -> None:
        """Each member's effective changes, from one lookup of every member's edges."""
        members = self.members
        us = np.concatenate([m.batch.u for m in members])
        vs = np.concatenate([m.batch.v for m in members])
        stored = stored_labels(self.engine.graph, us, vs)
        lo = 0
        for member in members:
            hi = lo + len(member.batch)
            member.batch = member.batch.resolve(stored[lo:hi])
            lo = hi

    def _apply_and_search(self) -> None:
        """The group's updates and one search for all of it; each member gets its own
        counts, and an even share of the time.  A group of one batch runs as any batch
        does."""
        engine = self.engine
        assert self is engine._group and not self.done
        engine._group = None
        self.done = True
        members = self.members
        n = len(members)
        t0 = clock.now()
        self._resolve()
        lookup = (clock.now() - t0) / n
        for member in members:
            member.timings["validate"] += lookup
        if n == 1:
            alone = members[0]
            ran = engine._run_batch(alone.batch, alone.list_limit, False, alone.started)
            ran.timings["validate"] = alone.timings["validate"]
            alone.positive, alone.negative, alone.seconds = ran.positive, ran.negative, \
                ran.seconds
            alone.timings, alone.host_done = ran.timings, ran.host_done
            return
        # Ranks follow the order of the edges: batch order when deleting, reversed when
        # inserting.
        order = range(n - 1, -1, -1) if self.inserting else range(n)
        parts = [_side(members[i].batch, self.inserting) for i in order]
        us, vs, labels = (np.concatenate([p[k] for p in parts]) for k in range(3))
        runs = np.array([len(p[0]) for p in parts], dtype=np.int64)
        none = _NO_VERTICES
        kind, other = ("insert", "delete") if self.inserting else ("delete", "insert")
        combined = EffectiveBatch(add_ids=np.empty(0, dtype=np.int64), add_labels=none,
                                  add_slots=none, delete_slots=none,
                                  **{f"{kind}_u": us, f"{kind}_v": vs, f"{kind}_labels": labels,
                                     f"{other}_u": none, f"{other}_v": none,
                                     f"{other}_labels": none})
        t0 = clock.now()
        if self.inserting:
            engine._mutate(combined)
        engine._leaf_edges(us, vs, labels, -1)
        t1 = clock.now()
        # Columns in edge order (the runs of `order`), then put in batch order.
        by_run = self._count(us, vs, labels, runs)
        totals = np.empty_like(by_run)
        totals[:, list(order)] = by_run
        t2 = clock.now()
        if self.inserting:
            engine._leaf_edges(us, vs, labels, +1)
        else:
            engine._mutate(combined)
        t3 = clock.now()
        qids = engine.query_ids()
        match, update = (t2 - t1) / n, ((t1 - t0) + (t3 - t2)) / n
        share = match / len(qids) if qids else 0.0
        # Once per batch and query, so plain ints and the results' own type, no more.
        for pending, counts in zip(members, totals.T.tolist(), strict=True):
            pending.deltas = {qid: QueryDelta(count, 0, seconds=share) for qid, count in
                              zip(qids, counts, strict=True)} if self.inserting else \
                {qid: QueryDelta(0, count, seconds=share) for qid, count in
                 zip(qids, counts, strict=True)}
            pending.timings["match"], pending.timings["update"] = match, update
            pending.host_done = t3

    def _count(self, us, vs, labels, runs: np.ndarray) -> np.ndarray:
        """Every query's counts per run of the group's edges (`runs`: the length of each
        run, one batch's edges each): shape (queries, runs)."""
        engine, nruns = self.engine, len(runs)
        qids = engine.query_ids()
        if not qids or len(us) == 0:
            return np.zeros((len(qids), nruns), dtype=np.int64)
        if engine._device is not None:
            return engine._count_by_batch_on_device(qids, us, vs, labels, runs)
        edge_batch = np.repeat(np.arange(nruns, dtype=np.int32), runs)
        queries = engine._shared_queries(qids)
        # Leaf groups off: a grouped search would mix the batches' tasks.
        if engine._region_phase(us, engine.config.group_region_edges):
            return count_phase_cpu(engine.graph, queries, engine._updates, us, vs, labels, 0,
                                   edge_batch, nruns)
        return count_small_cpu(engine.graph, queries, engine._updates, us, vs, labels, 0,
                               _NO_TASK_BOUND, edge_batch, nruns)


def groupable(engine: Engine, list_limit: Mapping[int, int]) -> bool:
    """Whether the engine's batches may form batch groups now: groups are on
    (`Engine.group_edges`) and every standing query is counted."""
    if engine.group_edges == 0:
        return False
    # Over the limits given (a few), not over every standing query, once per batch.
    standing = engine._queries
    return not any(limit > 0 and qid in standing for qid, limit in list_limit.items())


def join_group(engine: Engine, edges: PendingEdges, list_limit: Mapping[int, int],
               t0: float) -> PendingBatch:
    """Add a batch (PendingEdges, `groupable`) to the engine's open group, which must admit
    it, or open one; t0 is when the batch came."""
    group = engine._group
    if group is None:
        group = engine._group = BatchGroup(engine, inserting=edges.inserting)
    now = clock.now()
    pending = PendingBatch(edges, list_limit, {}, {}, {}, t0, now,
                           {"validate": now - t0, "match": 0.0, "update": 0.0,
                            "device_update": 0.0})
    group.add(pending)
    return pending


def _side(batch: EffectiveBatch, inserting: bool) -> tuple[np.ndarray, ...]:
    """A batch's inserted or deleted edges: (u, v, labels)."""
    return (batch.insert_u, batch.insert_v, batch.insert_labels) if inserting else \
        (batch.delete_u, batch.delete_v, batch.delete_labels)
