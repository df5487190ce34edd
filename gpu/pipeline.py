"""Batches `Engine.start` has started and not yet finished: results still on the device and
the CPU executor's batch groups.

`Engine.start` applies a batch and starts its matching; `PendingBatch.finish` gives its
result.  On CUDA the counted totals come back behind the kernels (`Deferred`), so
`stream` starts batch i+1 before it finishes batch i and the host work of one overlaps
the kernels of the other.  On the CPU executor consecutive small batches that each only
insert, or only delete, edges wait in a `BatchGroup` and share one search.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpu import clock
from gpu.batch import EffectiveBatch
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
    batch: EffectiveBatch
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
    engine is used otherwise, then run as one phase, one search for the whole group.

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
    through the engine's private steps (_mutate, _leaf_edges, _shared_queries, _run_batch)."""

    def __init__(self, engine: Engine, inserting: bool) -> None:
        self.engine = engine
        self.inserting = inserting
        self.members: list[PendingBatch] = []
        self.keys: set[int] = set()
        self.edges = 0
        self.done = False
        self.error: BaseException | None = None

    def admits(self, batch: EffectiveBatch, limit: int) -> bool:
        """Whether `batch` (normalized against the graph without this group's updates,
        `groupable`) can join: same kind, room left, and none of its edges in the
        group."""
        us, vs, _ = _side(batch, self.inserting)
        if len(us) == 0 or self.edges + len(us) > limit:
            return False
        keys = _edge_keys(us, vs)
        return self.keys.isdisjoint(keys)

    def add(self, pending: PendingBatch) -> None:
        us, vs, _ = _side(pending.batch, self.inserting)
        self.keys.update(_edge_keys(us, vs))
        self.edges += len(us)
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
        edge_batch = np.concatenate([np.full(len(p[0]), i, dtype=np.int32)
                                     for i, p in zip(order, parts, strict=True)])
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
        totals = self._count(us, vs, labels, edge_batch)
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

    def _count(self, us, vs, labels, edge_batch) -> np.ndarray:
        """Every query's counts per batch of the group's edges: shape (queries, batches)."""
        engine, nbatch = self.engine, len(self.members)
        qids = engine.query_ids()
        if not qids:
            return np.zeros((0, nbatch), dtype=np.int64)
        queries = engine._shared_queries(qids)
        # Leaf groups off: a grouped search would mix the batches' tasks.
        if engine._region_phase(us, engine.config.group_region_edges):
            return count_phase_cpu(engine.graph, queries, engine._updates, us, vs, labels, 0,
                                   edge_batch, nbatch)
        return count_small_cpu(engine.graph, queries, engine._updates, us, vs, labels, 0,
                               _NO_TASK_BOUND, edge_batch, nbatch)


def groupable(engine: Engine, batch: EffectiveBatch, list_limit: Mapping[int, int]) -> bool:
    """Whether `batch` can be part of a batch group: on the CPU executor, with every
    query counted, a batch that only inserts or only deletes at most
    `batch_group_edges` edges, with nothing ignored (an ignored record may be one the
    group's updates would apply) and no vertex added or deleted."""
    limit = engine.config.batch_group_edges
    if engine.backend != "cpu" or limit == 0 or len(batch.add_ids) or \
            len(batch.delete_slots) or any(batch.ignored.values()):
        return False
    inserts, deletes = len(batch.insert_u), len(batch.delete_u)
    if (inserts == 0) == (deletes == 0) or inserts + deletes > limit:
        return False
    return all(list_limit.get(qid, 0) <= 0 for qid in engine.query_ids())


def join_group(engine: Engine, batch: EffectiveBatch, list_limit: Mapping[int, int],
               t0: float) -> PendingBatch:
    """Add a `groupable` batch to the engine's open group (one that admits it), or open
    one; t0 is when the batch came."""
    group = engine._group
    if group is None:
        group = engine._group = BatchGroup(engine, inserting=len(batch.insert_u) > 0)
    now = clock.now()
    pending = PendingBatch(batch, list_limit, {}, {}, {}, t0, now,
                           {"validate": now - t0, "match": 0.0, "update": 0.0,
                            "device_update": 0.0})
    group.add(pending)
    return pending


def _side(batch: EffectiveBatch, inserting: bool) -> tuple[np.ndarray, ...]:
    """A batch's inserted or deleted edges: (u, v, labels)."""
    return (batch.insert_u, batch.insert_v, batch.insert_labels) if inserting else \
        (batch.delete_u, batch.delete_v, batch.delete_labels)


def _edge_keys(us: np.ndarray, vs: np.ndarray) -> list[int]:
    return ((us.astype(np.int64) << 32) | vs.astype(np.int64)).tolist()
