"""A timed batch (issue 23): its records' event times, the refreshes, the watermark, the
edges retention expires with it, and how the engine runs it.

The rules are tests/reference_time.py's: an edge takes the largest time of the batch's
insert records of it, on insertion or as a refresh of an edge that stays (an insert that a
delete of the same edge cancels changes nothing); the watermark is the largest time of
every accepted timed insert record; with retention R, once the batch has moved the
watermark to T, every timed edge with time <= T - R is deleted in the same batch.

The engine runs the expiry as a batch of deletions before the batch itself, both inside
one `Engine.apply`: the first batch's negative matches are exactly the batch's negative
matches that use an expired edge (on the graph before it every such match is found from
its expired edges), the second's are the rest, and an edge the batch inserts with a time
already past the horizon is never inserted (it would be inserted and expired at once:
counted as both, matched by neither phase).  Nothing here changes anything until the
batch has been validated.  Executor-independent: expiry is deletions, which both
executors apply.

Windowed queries (Engine.add_query with a window) are counted in phases of their own
(gpu/cpu/windowed.py): on the expiry batch, from the expired edges; before the batch, from
its deleted edges and the refreshed ones whose time changes, with the times before; after
it and its times, from its inserted edges and those refreshed ones.  Each phase searches
the subgraph of the edges timed within the widest window of its update edges' times
(`WindowEdges`): on the CPU executor as a DynamicGraph on the host's cores, on CUDA laid
out and copied up for the kernel (gpu/cuda/windowed.py).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from gpu import clock
from gpu.batch import EffectiveBatch, normalize, stored_labels
from gpu.cpu.windowed import WindowEdges, count_windowed
from gpu.graph.lists import DynamicGraph
from gpu.graph.sets import sorted_union, sorted_unique
from gpu.graph.times import NO_KEYS, edge_keys
from gpu.io.records import DELETE_EDGE, INSERT_EDGE, NO_LABEL, NO_TIME, UpdateStream
from gpu.pipeline import PendingBatch
from gpu.results import BatchResult, MatchSet, QueryDelta

if TYPE_CHECKING:
    from gpu.engine import Engine

_NO_INT32 = np.empty(0, dtype=np.int32)


def _slots(graph, batch: EffectiveBatch, ids: np.ndarray) -> np.ndarray:
    """The slot of each external id after the batch's vertex adds (validated: all known)."""
    slots = graph.ids.lookup(ids).astype(np.int64)
    new = slots < 0
    if new.any():
        pos = np.searchsorted(batch.add_ids, ids[new])
        slots[new] = batch.add_slots[pos]
    return slots


def _keys(graph, batch: EffectiveBatch, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    su, sv = _slots(graph, batch, a), _slots(graph, batch, b)
    if not graph.directed:
        su, sv = np.minimum(su, sv), np.maximum(su, sv)
    return edge_keys(su, sv)


def _split(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (keys >> 32).astype(np.int32), (keys & 0xFFFFFFFF).astype(np.int32)


@dataclasses.dataclass
class TimedEffect:
    """What a validated batch does to times: the watermark after it, the new edges' and
    the refreshed edges' times, the edges retention expires (existing ones, deleted
    first; and new ones, never inserted), by key."""
    watermark: int | None
    new_keys: np.ndarray
    new_times: np.ndarray
    refreshed_keys: np.ndarray
    refreshed_times: np.ndarray
    expired: np.ndarray             # existing edges' keys
    expired_new: np.ndarray         # the batch's new edges already past the horizon
    deleted: np.ndarray             # the batch's own deletions' keys
    new_labels: np.ndarray = dataclasses.field(default_factory=lambda: _NO_INT32)
    refreshed_labels: np.ndarray = dataclasses.field(default_factory=lambda: _NO_INT32)
    # Current entries the expiry index gave up in this batch (expired, refreshed or
    # deleted by it): the windowed phases' subgraphs find these edges here, not there.
    taken: np.ndarray = dataclasses.field(default_factory=lambda: NO_KEYS)


def timed_effect(engine: Engine, stream: UpdateStream, batch: EffectiveBatch) -> TimedEffect:
    """The batch's effect on times (module docstring); takes the expiring entries from the
    expiry index, so only once the batch is accepted."""
    g = engine.graph
    kind = stream.kind
    time = stream.time if stream.time is not None else np.full(len(kind), NO_TIME)
    timed = np.flatnonzero((kind == INSERT_EDGE) & (time != NO_TIME))
    watermark = engine.watermark
    if len(timed):
        latest = int(time[timed].max())
        watermark = latest if watermark is None else max(watermark, latest)
    new_all = edge_keys(batch.insert_u, batch.insert_v)
    deleted = edge_keys(batch.delete_u, batch.delete_v)
    keys = _keys(g, batch, stream.a[timed], stream.b[timed])
    order = np.argsort(keys, kind="stable")
    keys, times, labels = keys[order], time[timed][order], stream.label[timed][order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else NO_KEYS
    uniq = keys[starts]
    latest_of = np.maximum.reduceat(times, starts) if len(keys) else NO_KEYS
    insert_label = labels[starts]
    # Cancelled: a delete record of the edge naming no label or the insert's label.
    cancelled = np.zeros(len(uniq), dtype=bool)
    dels = np.flatnonzero(kind == DELETE_EDGE)
    if len(dels) and len(uniq):
        dkeys = _keys(g, batch, stream.a[dels], stream.b[dels])
        pos = np.minimum(np.searchsorted(uniq, dkeys), len(uniq) - 1)
        hit = uniq[pos] == dkeys
        names = (stream.label[dels] == NO_LABEL) | (stream.label[dels] == insert_label[pos])
        cancelled[pos[hit & names]] = True
    is_new = np.isin(uniq, new_all)
    stays = ~is_new & ~cancelled & ~np.isin(uniq, deleted)
    stays_labels = _NO_INT32
    if stays.any():
        u, v = _split(uniq[stays])
        stays_labels = stored_labels(g, u, v)
        exists = stays_labels >= 0
        stays[np.flatnonzero(stays)[~exists]] = False
        stays_labels = stays_labels[exists]
    # The new edges' labels, as the batch inserts them (the times table keeps them).
    new_keys = uniq[is_new]
    by_key = np.argsort(new_all, kind="stable")
    at = by_key[np.searchsorted(new_all, new_keys, sorter=by_key)] if len(new_keys) else \
        NO_KEYS
    effect = TimedEffect(watermark, new_keys, latest_of[is_new], uniq[stays],
                         latest_of[stays], NO_KEYS, NO_KEYS, deleted,
                         new_labels=np.asarray(batch.insert_labels, dtype=np.int32)[at],
                         refreshed_labels=stays_labels)
    if engine.retention is None or watermark is None:
        return effect
    horizon = watermark - engine.retention
    taken, at = engine.times.index.take_until(horizon)
    live = sorted_unique(taken[engine.times.current(taken, at)])
    effect.taken = live
    # Refreshed edges go by their new time, the batch's deletions by the batch.
    live = live[~np.isin(live, effect.refreshed_keys) & ~np.isin(live, deleted)]
    effect.expired = sorted_union(live, effect.refreshed_keys[effect.refreshed_times <= horizon])
    effect.expired_new = effect.new_keys[effect.new_times <= horizon]
    return effect


def _deletions(graph, keys: np.ndarray) -> EffectiveBatch:
    """A batch that deletes the existing edges `keys` (sorted), with their stored labels."""
    u, v = _split(keys)
    batch = EffectiveBatch(
        add_ids=np.empty(0, dtype=np.int64), add_labels=_NO_INT32, add_slots=_NO_INT32,
        delete_slots=_NO_INT32, delete_u=u, delete_v=v,
        delete_labels=stored_labels(graph, u, v), insert_u=_NO_INT32, insert_v=_NO_INT32,
        insert_labels=_NO_INT32)
    batch.applied["edges_deleted"] = len(keys)
    return batch


def _without_inserts(batch: EffectiveBatch, keys: np.ndarray) -> EffectiveBatch:
    """The batch less its inserts of edges `keys` (counted as inserted and deleted)."""
    if len(keys) == 0:
        return batch
    keep = ~np.isin(edge_keys(batch.insert_u, batch.insert_v), keys)
    applied = dict(batch.applied)
    applied["edges_deleted"] += len(keys)
    return dataclasses.replace(batch, insert_u=batch.insert_u[keep],
                               insert_v=batch.insert_v[keep],
                               insert_labels=batch.insert_labels[keep], applied=applied,
                               device=None)


def _merged(expired: BatchResult | None, main: BatchResult,
            list_limit: Mapping[int, int]) -> dict[int, QueryDelta]:
    """Each query's delta of the whole batch: the expiry's negatives (marked expired, listed
    first) with the batch's own."""
    deltas = {}
    for qid, own in main.queries.items():
        gone = expired.queries[qid] if expired is not None else None
        delta = QueryDelta(positive=own.positive,
                           negative=own.negative + (gone.negative if gone else 0),
                           seconds=own.seconds + (gone.seconds if gone else 0.0),
                           expired=gone.negative if gone else 0)
        limit = list_limit.get(qid, 0)
        if limit > 0:
            _list_delta(delta, MatchSet(own.positive, own.added, own.truncated),
                        None if gone is None else MatchSet(gone.negative, gone.removed,
                                                           gone.truncated),
                        MatchSet(own.negative, own.removed, own.truncated), limit)
        deltas[qid] = delta
    return deltas


def _list_delta(delta: QueryDelta, added: MatchSet, expired: MatchSet | None,
                removed: MatchSet, limit: int) -> None:
    """A listed delta's rows: the added ones, and at most `limit` removed ones, those that
    used an expired edge first (marked in removed_expired)."""
    first = expired.rows if expired is not None else removed.rows[:0]
    rows = np.concatenate([first, removed.rows])
    marks = np.r_[np.ones(len(first), dtype=bool), np.zeros(len(removed.rows), dtype=bool)]
    delta.added, delta.removed = added.rows[:limit], rows[:limit]
    delta.removed_expired = marks[:limit]
    delta.truncated = added.truncated or removed.truncated or \
        (expired is not None and expired.truncated) or len(rows) > limit


def windowed_phase(engine: Engine, keys: np.ndarray, other, structural,
                   qids=None, taken: np.ndarray = NO_KEYS,
                   list_limit: Mapping[int, int] | None = None,
                   absent: np.ndarray = NO_KEYS) -> dict[int, MatchSet]:
    """Each windowed query's (of `qids`, default all) valid matches using at least one of
    the existing edges `keys` (sorted), found from the lowest-ranked one, the first
    `list_limit[qid]` (default none) listed as slots; `other` and `structural` as
    count_windowed takes them (None: every match found counts); `taken`: the batch's
    TimedEffect.taken; `absent`: timed edges the graph no longer holds (_window_subgraph).

    Every edge of a valid match is timed within the widest window W of an update edge's
    time, so the search runs on the subgraph of the edges timed within W of the update
    edges' times (found by time in the expiry index's runs), not on the whole graph: its
    cost follows the edges inside the window, however long the retention."""
    qids = list(engine._windowed) if qids is None else qids
    list_limit = list_limit or {}
    found = {qid: _no_matches(engine, qid) for qid in qids}
    if not qids or len(keys) == 0:
        return found
    table = engine.times.table
    at = table.get(keys)
    timed = at != NO_TIME               # an untimed edge is in no valid match
    keys, at = keys[timed], at[timed]
    if len(keys) == 0:
        return found
    widest = max(engine._windowed[qid].window for qid in qids)
    edges = _window_edges(engine, sorted_union(keys, taken), int(at.min()) - widest,
                          int(at.max()) + widest, absent)
    on_device = [qid for qid in qids if _searched_on_device(engine, qid)]
    if on_device:
        found.update(zip(on_device, _count_on_device(engine, edges, keys, at, on_device,
                                                     other, structural, list_limit)))
    on_host = [qid for qid in qids if qid not in on_device]
    if not on_host:
        return found
    graph = _window_subgraph(engine, edges)
    us, vs = _split(keys)
    graph.set_ranks(us, vs, np.arange(1, len(keys) + 1, dtype=np.int32))
    host_bits = engine._device is None      # cuda: no candidate bits (a filter only)
    for qid in on_host:
        w = engine._windowed[qid]
        found[qid] = count_windowed(graph, w.plan, w.window, us, vs, table, other,
                                    structural,
                                    engine.signatures.host_cand(qid) if host_bits else None,
                                    list_limit.get(qid, 0), engine.config.serial_below_tasks,
                                    engine.config.task_chunk)
    return found


def _searched_on_device(engine: Engine, qid: int) -> bool:
    """Whether a windowed query's phases run in the CUDA kernel (gpu/cuda/windowed.py):
    on a CUDA engine with EngineConfig.device_windows, the query small enough for it."""
    if engine._device is None or not engine.config.device_windows:
        return False
    w = engine._windowed[qid]
    if w.fits_device is None:           # once: a phase asks for every query
        from gpu.cuda.windowed import fits
        w.fits_device = fits(w.plan)
    return w.fits_device


def _count_on_device(engine: Engine, edges: WindowEdges, keys: np.ndarray, at: np.ndarray,
                     qids: list[int], other, structural,
                     list_limit: Mapping[int, int]) -> list[MatchSet]:
    """The windowed queries `qids` of a phase searched in the CUDA kernel, together (one
    copy up, one launch, one read-back); each query's plan packed at its first."""
    from gpu.cuda.windowed import WindowedSearch, count_windowed_device, pack
    searches = []
    for qid in qids:
        w = engine._windowed[qid]
        if w.packed_plan is None:
            w.packed_plan = pack(w.plan)
        searches.append(WindowedSearch(w.packed_plan, w.window,
                                       list_limit.get(qid, 0)))
    return count_windowed_device(edges, engine.graph.label, keys, at, searches, other,
                                 structural)


def _no_matches(engine: Engine, qid: int) -> MatchSet:
    n = engine._windowed[qid].query.num_vertices
    return MatchSet(0, np.empty((0, n), dtype=np.int32), False)


def _window_edges(engine: Engine, updates: np.ndarray, lo: int, hi: int,
                  absent: np.ndarray = NO_KEYS) -> WindowEdges:
    """The engine graph's edges timed in [lo, hi], with their times and labels: those the
    expiry index holds, and `updates` (the phase's update edges and the entries the index
    gave up in this batch: timed_effect took them before any phase ran).  Every edge the
    times table holds is in the graph, with the label the table keeps (Engine.check), but
    for `absent` (sorted): the expired edges between the expiry's deletion and the
    batch's own, still timed then."""
    table = engine.times.table
    keys = sorted_union(engine.times.index.between(lo, hi), updates)
    at, labels = table.get_labeled(keys)
    keep = (at >= lo) & (at <= hi)          # the index's stale entries out
    if len(absent):
        keep &= ~np.isin(keys, absent, assume_unique=True)
    return WindowEdges(keys[keep], at[keep], labels[keep])


def _window_subgraph(engine: Engine, edges: WindowEdges) -> DynamicGraph:
    """The window's edges as a DynamicGraph on the engine graph's slots and labels (the
    host search's)."""
    g = engine.graph
    u, v = _split(edges.keys)
    # One scratch graph per engine, emptied and filled per phase (its vertex table is
    # copied: memory speed, but O(slots); a subgraph kept between batches would not be).
    if engine._window_scratch is None:
        engine._window_scratch = DynamicGraph.on_slots_of(g, engine.config)
    sub = engine._window_scratch.emptied_onto(g)
    sub.insert_edges(u, v, edges.labels)
    return sub


class _WindowedPhases:
    """The windowed queries' phases of one timed batch (module docstring), and their time
    (the batch's matching time, as the standing queries' searches are)."""

    def __init__(self, engine: Engine, effect: TimedEffect) -> None:
        t0 = clock.now()
        self.engine, self.taken = engine, effect.taken
        # Expired edges out of the graph but still timed (start_timed sets and clears it).
        self.absent = NO_KEYS
        # The refreshed edges that stay and whose time changes, with both times.
        self.refreshed = self.old = self.new = NO_KEYS
        if len(effect.refreshed_keys) == 0:
            self.seconds = clock.now() - t0
            return
        stays = ~np.isin(effect.refreshed_keys, effect.expired)
        keys, new = effect.refreshed_keys[stays], effect.refreshed_times[stays]
        old = engine.times.get_many(keys)
        changed = old != new
        self.refreshed, self.old, self.new = keys[changed], old[changed], new[changed]
        self.seconds = clock.now() - t0

    def phase(self, structural: np.ndarray, other_times: np.ndarray | None,
              list_limit: Mapping[int, int]) -> dict[int, MatchSet]:
        """Each windowed query's matches from the edges `structural` (sorted) and the
        refreshed ones, `other_times` the refreshed edges' times on the other side of the
        batch; None: the expiry, from the expired edges alone, every match found gone.
        Listed (as external ids) up to `list_limit`: on the graph of the phase, whose
        vertices a later phase of the batch may delete."""
        t0 = clock.now()
        if other_times is None:
            found = windowed_phase(self.engine, structural, None, None, taken=self.taken,
                                   list_limit=list_limit, absent=self.absent)
        else:
            found = windowed_phase(self.engine, sorted_union(structural, self.refreshed),
                                   (self.refreshed, other_times), structural,
                                   taken=self.taken, list_limit=list_limit,
                                   absent=self.absent)
        for matches in found.values():
            matches.rows = self.engine._external(matches.rows)
        self.seconds += clock.now() - t0
        return found

    def deltas(self, gone, negative, positive,
               list_limit: Mapping[int, int]) -> dict[int, QueryDelta]:
        """Each windowed query's delta from its three phases' matches: the expiry's
        negatives (marked expired, listed first) with the batch's own."""
        share = self.seconds / len(gone)
        deltas = {}
        for qid in gone:
            old, lost, new = gone[qid], negative[qid], positive[qid]
            delta = QueryDelta(positive=new.count, negative=lost.count + old.count,
                               seconds=share, expired=old.count)
            limit = list_limit.get(qid, 0)
            if limit > 0:
                _list_delta(delta, new, old, lost, limit)
            deltas[qid] = delta
        return deltas


def start_timed(engine: Engine, stream: UpdateStream, list_limit: Mapping[int, int],
                t0: float) -> PendingBatch:
    """Engine.start of a batch on an engine that keeps times: validated, then its expiry
    and itself applied and matched (module docstring); finished when this returns."""
    engine.flush()
    batch = normalize(stream, engine.graph, engine._prep)
    engine._admit(batch, stream)
    effect = timed_effect(engine, stream, batch)
    # Accepted: nothing below refuses the batch.
    engine.watermark = effect.watermark
    engine.batches_applied += 1
    expiry = None
    phases = _WindowedPhases(engine, effect) if engine._windowed else None
    if phases:
        gone = phases.phase(effect.expired, None, list_limit)
    if len(effect.expired):
        expiry = engine._run_batch(_deletions(engine.graph, effect.expired), list_limit,
                                   False, t0).finish()
    main_batch = _without_inserts(batch, effect.expired_new)
    if phases:
        phases.absent = effect.expired      # deleted from the graph, dropped below
        negative = phases.phase(np.sort(edge_keys(main_batch.delete_u, main_batch.delete_v)),
                                phases.new, list_limit)
    main = engine._run_batch(main_batch, list_limit, False, t0).finish()
    times = engine.times
    times.drop(np.concatenate([effect.deleted, effect.expired]))
    fresh = ~np.isin(effect.new_keys, effect.expired_new)
    times.set(effect.new_keys[fresh], effect.new_times[fresh], effect.new_labels[fresh])
    kept = ~np.isin(effect.refreshed_keys, effect.expired)
    times.set(effect.refreshed_keys[kept], effect.refreshed_times[kept],
              effect.refreshed_labels[kept])
    if phases:
        phases.absent = NO_KEYS
    deltas = _merged(expiry, main, list_limit)
    if phases:
        positive = phases.phase(np.sort(edge_keys(main_batch.insert_u, main_batch.insert_v)),
                                phases.old, list_limit)
        deltas.update(phases.deltas(gone, negative, positive, list_limit))
    applied = dict(main_batch.applied)
    applied["edges_deleted"] += len(effect.expired)
    timings = dict(main.timings)
    if expiry is not None:
        for name, seconds in expiry.timings.items():
            timings[name] = timings.get(name, 0.0) + seconds
    if phases:
        timings["match"] = timings.get("match", 0.0) + phases.seconds
    done = clock.now()
    return PendingBatch(dataclasses.replace(main_batch, applied=applied), list_limit, {}, {},
                        {}, t0, done, timings, deltas=deltas)
