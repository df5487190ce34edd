"""The packed memory array's batch update on any array module: the bottom-up window
rewrite, the gap repair and the rebuild.

This is the reference path: on NumPy (the CPU test suite) and with
`PMAConfig(kernels=False)` on CuPy it applies every batch; the kernels of
gpu/graph/pma/device_update.py must leave exactly its layout.  Rebuilds and bulk loads
take it on every array module.  Each step is a data-parallel array operation over the
slots of the windows being rewritten, so a batch costs what it touches.
"""
from __future__ import annotations

import math

import numpy as np

from gpu.graph.pma import xp_ops
from gpu.graph.pma.layout import DEAD, KEY_SHIFT, PendingBatch, key_src


def update(pma, batch: PendingBatch, iseg, dseg) -> None:
    """Apply `batch` (its deletes already marked DEAD; iseg, dseg: the sorted segment of
    each insert and delete) bottom-up over the implicit tree of windows."""
    xp = pma.xp
    dpend = xp.ones(dseg.size, dtype=bool)
    windows = xp_ops.sorted_union(xp, iseg, dseg)
    rewritten = []      # (first slot, end slot, delete range) of every window rewritten
    for level in range(pma.height + 1):
        s0 = windows << level
        s1 = xp.minimum((windows + 1) << level, pma.nseg)
        ib, ie = xp_ops.search(xp, iseg, s0), xp_ops.search(xp, iseg, s1)
        db, de = xp_ops.search(xp, dseg, s0), xp_ops.search(xp, dseg, s1)
        slots = (s1 - s0) * pma.S
        lower, upper = pma.thresholds(level)
        total = (xp_ops.range_sums(xp, pma.cnt, s0, s1)
                 - xp_ops.pending_counts(xp, dpend, db, de)
                 + xp_ops.pending_counts(xp, batch.pending, ib, ie))
        if level == pma.height:
            if root_overflows(pma, int(total[0]), lower, upper):
                rebuild_with_pending(pma, batch)
                pma.mark_phase("rebuild")
                return
            fit = xp.ones(1, dtype=bool)
        else:
            fit = (total <= upper * slots) & ((de == db) | (total >= lower * slots))
        done = xp.flatnonzero(fit)
        if done.size:
            merge(pma, batch, s0[done], s1[done], ib[done], ie[done], total[done])
            gone, _ = xp_ops.ranges(xp, db[done], de[done] - db[done])
            dpend[gone] = False
            rewritten.append((s0[done] * pma.S, s1[done] * pma.S, db[done], de[done]))
            count_level(pma, level, int(done.size), int(slots[done].sum()))
        pma.mark_phase(level_phase(level))
        up = xp.flatnonzero(~fit)
        if up.size == 0:
            break
        windows = xp.unique(windows[up] >> 1)
    _repair(pma, batch, rewritten)
    pma.mark_phase("rows")


def root_overflows(pma, total: int, lower: float, upper: float) -> bool:
    """Whether the root holding `total` elements must be rebuilt."""
    return total > upper * pma.capacity or (total < lower * pma.capacity
                                            and pma.nseg > pma.config.min_segments)


def count_level(pma, level: int, windows: int, slots: int) -> None:
    """Add a level's rewritten windows and slots to the batch's stats."""
    stats = pma.stats
    stats.levels = level
    stats.windows += windows
    stats.slots += slots
    stats.per_level.append((level, windows, slots))


def level_phase(level: int) -> str:
    """The profile's name for the time of a level."""
    return f"level {min(level, 2)}{'+' if level >= 2 else ''}"


def merge(pma, batch: PendingBatch, s0, s1, ib, ie, total, target=None) -> None:
    """Rewrite windows [s0, s1) (segments) with their live elements and the batch's
    inserts ib..ie, spread evenly; into `target` (keys, vals, cnt, d0, d1) if given."""
    xp, S = pma.xp, pma.S
    slot, owner = xp_ops.ranges(xp, s0 * S, (s1 - s0) * S)
    seg = slot // S
    live = ((slot - seg * S) < pma.cnt[seg]) & (pma.vals[slot] != DEAD)
    at = slot[live]
    okeys, ovals = pma.keys[at], pma.vals[at]
    ins, _ = xp_ops.ranges(xp, ib, ie - ib)
    ins = ins[batch.pending[ins]]
    batch.pending[ins] = False
    ikeys, ivals = batch.keys[ins], batch.vals[ins]
    merged_k = xp.empty(okeys.size + ikeys.size + 1, dtype=np.uint64)
    merged_v = xp.empty(okeys.size + ikeys.size + 1, dtype=np.int32)
    # Both lists are sorted and their windows ordered, so one global merge keeps each
    # window's elements together in order.
    r_old = xp.arange(okeys.size, dtype=np.int64) + xp_ops.search(xp, ikeys, okeys)
    r_ins = xp.arange(ikeys.size, dtype=np.int64) + xp_ops.search(xp, okeys, ikeys)
    merged_k[r_old], merged_v[r_old] = okeys, ovals
    merged_k[r_ins], merged_v[r_ins] = ikeys, ivals
    merged_k[-1], merged_v[-1] = 0, 0       # what a slot with nothing before it copies
    start = xp_ops.exclusive_cumsum(xp, total)
    if target is None:
        keys, vals, cnt, d0, d1 = pma.keys, pma.vals, pma.cnt, s0, s1
    else:
        keys, vals, cnt, d0, d1 = target
    slot, owner = xp_ops.ranges(xp, d0 * S, (d1 - d0) * S)
    offset = slot - (d0 * S)[owner]
    k, off = offset // S, offset % S
    m = (d1 - d0)[owner]
    t = total[owner]
    base, extra = t // m, t % m
    count = base + (k < extra)
    first = k * base + xp.minimum(k, extra)
    rank = xp.where(off < count, first + off, first + count - 1)
    source = xp.where(rank >= 0, start[owner] + rank, merged_k.size - 1)
    keys[slot] = merged_k[source]
    vals[slot] = merged_v[source]
    heads = off == 0
    cnt[slot[heads] // S] = count[heads].astype(np.int32)
    if bool((rank < 0).any()):
        pma.stats.fixup = True


def _repair(pma, batch: PendingBatch, rewritten) -> None:
    """Gap copies after empty segments, then row offsets of the vertices whose first
    slot may have moved."""
    xp = pma.xp
    if not rewritten:
        return
    begin = xp.concatenate([r[0] for r in rewritten])
    end = xp.concatenate([r[1] for r in rewritten])
    db = xp.concatenate([r[2] for r in rewritten])
    de = xp.concatenate([r[3] for r in rewritten])
    following = end // pma.S
    inside = following < pma.nseg
    if pma.stats.fixup or bool((pma.cnt[following[inside]] == 0).any()):
        pma.stats.fixup = True
        fill_gaps(pma)
    # Vertices whose row can change: after the last source before the window, up to
    # the last source in it now or before the batch (a deleted edge's).
    lo = xp.where(begin > 0, key_src(pma.keys[xp.maximum(begin - 1, 0)]), -1)
    hi = key_src(pma.keys[end - 1])
    deletes = batch.deletes
    if deletes is not None and deletes.size:
        last_del = key_src(deletes[xp.maximum(de - 1, 0)])
        hi = xp.where(de > db, xp.maximum(hi, last_del), hi)
    hi = xp.minimum(hi, pma.num_vertices - 1)
    lo = xp.minimum(lo, hi)
    vertex, _ = xp_ops.ranges(xp, lo + 1, hi - lo)
    if vertex.size:
        pma.row[vertex] = xp.searchsorted(pma.keys, vertex.astype(np.uint64) << KEY_SHIFT)


def fill_gaps(pma) -> None:
    """Every gap copies the last real key before it (0 before the first): whole array,
    needed only when segments are empty (a nearly empty graph)."""
    xp = pma.xp
    real = pma.real_mask()
    seen = xp.cumsum(real, dtype=np.int64)
    positions = xp.flatnonzero(real)
    gap = ~real
    before = seen[gap]
    fill = xp.zeros(before.shape, dtype=np.uint64)
    some = before > 0
    fill[some] = pma.keys[positions[before[some] - 1]]
    pma.keys[gap] = fill


def rebuild_with_pending(pma, batch: PendingBatch) -> None:
    """The root overflowed or underflowed: live elements plus the pending inserts,
    laid out anew at the target density."""
    xp = pma.xp
    slot = xp.arange(pma.capacity, dtype=np.int64)
    live = ((slot % pma.S) < pma.cnt[slot // pma.S]) & (pma.vals != DEAD)
    ok, ov = pma.keys[live], pma.vals[live]
    ik, iv = batch.keys[batch.pending], batch.vals[batch.pending]
    keys = xp.concatenate([ok, ik])
    vals = xp.concatenate([ov, iv])
    order = xp.argsort(keys)
    rebuild(pma, keys[order], vals[order])


def rebuild(pma, keys, vals) -> None:
    """Lay out sorted keys at the target density, as one window."""
    xp = pma.xp
    n = int(keys.size)
    nseg = max(pma.config.min_segments,
               math.ceil(n / (pma.config.target * pma.S)))
    pma.allocate(nseg)
    zero = xp.zeros(1, dtype=np.int64)
    total = xp.asarray([n], dtype=np.int64)
    # An empty source window and every key as its inserts, spread over all segments.
    merge(pma, PendingBatch(keys, vals, xp.ones(n, dtype=bool)), zero, zero, zero, total,
          total, target=(pma.keys, pma.vals, pma.cnt, zero,
                         xp.asarray([nseg], dtype=np.int64)))
    pma.num_edges = n
    if pma.stats.fixup:
        fill_gaps(pma)
    vertices = xp.arange(pma.num_vertices + 1, dtype=np.int64)
    pma.row[:pma.num_vertices + 1] = xp.searchsorted(
        pma.keys, vertices.astype(np.uint64) << KEY_SHIFT)
    pma.deg[:pma.num_vertices] = xp_ops.bincount(
        xp, key_src(keys), pma.num_vertices)[:pma.num_vertices].astype(np.int32)
    pma.stats.rebuilt = True
    pma.stats.levels = pma.height
    pma.stats.slots += pma.capacity
