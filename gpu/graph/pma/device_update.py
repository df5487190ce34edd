"""The packed memory array's batch update on the CUDA kernels of gpu/cuda/kernels/pma.cu.

Per level: a plan of every window (ranges, totals, fit flags), merges that skip the
windows that do not fit (leaves by the leaf kernel, windows of up to `block_window`
slots one block each, larger ones several blocks each), and the parents of the others
as the next level's windows; one synchronisation per level (to count the parents) and
one per batch for its record (stats, repairs, checks).  It must leave exactly the layout
of the generic path (gpu/graph/pma/update.py), which rebuilds still take.

A small batch whose leaves all take it skips the levels: `update_small` does the
first level's work and the rows in one launch.

Runs only on CuPy arrays: the launchers (gpu/cuda/pma_launchers.py, which imports CuPy)
are imported when a batch runs, so this module imports anywhere.
"""
from __future__ import annotations

import math

import numpy as np

from gpu.graph.pma import update, xp_ops
from gpu.graph.pma.layout import PendingBatch

PREFIX_COUNTS_ABOVE = 1024      # segments per window beyond which a level's totals take a
                                # prefix sum of all counts instead of a loop per window
SMALL_BATCH = 1024              # most updates a batch starts in one launch (locate_small,
                                # one block of as many threads)


def locate_small(pma, ik, dk):
    """The start of a batch of at most SMALL_BATCH sorted inserts `ik` and deletes `dk`
    in one launch (pma.cu `locate_small`): each one's segment, the deletes marked DEAD,
    the degrees moved (before the update: it cannot be refused), and the distinct
    segments touched; returns (iseg, dseg, windows), one synchronisation."""
    from gpu.cuda import pma_launchers as ck
    return ck.locate_small(pma, ik, dk)


def locate(pma, ik, dk):
    """locate_small's work for sorted inserts `ik` and deletes `dk` (all stored) of any
    number, in one launch (pma.cu `locate_batch`): the deletes marked DEAD, the degrees
    moved (before the update: a validated batch cannot be refused); returns (iseg, dseg),
    queued, with no synchronisation."""
    from gpu.cuda import pma_launchers as ck
    return ck.locate_batch(pma, ik, dk)


def update_small(pma, ik, iv, dk) -> bool:
    """A small validated batch (sorted inserts `ik` with values `iv`, sorted deletes `dk`,
    at most SMALL_BATCH) merged into its leaves in one launch and one read-back
    (pma.cu `update_small`) when each leaf takes its share; returns whether it did.
    When not (a leaf overflows or underflows, or the array is one segment, or its
    segments are too large for a warp's merge), nothing has changed: the caller takes
    locate_small and update_on_device, whose first level would have given the same."""
    if pma.height == 0 or pma.S > 32:
        return False
    from gpu.cuda import pma_launchers as ck
    lower, upper = pma.thresholds(0)
    S = pma.S
    if pma.small_update is None:
        pma.small_update = ck.SmallUpdate()
    taken, leaves = pma.small_update(pma, ik, iv, dk, math.floor(upper * S + 1e-9),
                                     math.ceil(lower * S - 1e-9))
    if taken:
        update.count_level(pma, 0, leaves, leaves * S)
        pma.stats.one_launch = True
    return taken


def update_on_device(pma, batch: PendingBatch, iseg, dseg, windows=None) -> None:
    """`update.update` through the kernels: apply `batch` (its deletes already marked
    DEAD; iseg, dseg: the sorted segment of each insert and delete; `windows`, when
    known, the distinct segments among them) bottom-up."""
    from gpu.cuda import pma_launchers as ck
    xp, S, config = pma.xp, pma.S, pma.config
    dpend = xp.ones(dseg.size, dtype=bool)
    record = xp.zeros(ck.RECORD_LEVELS + 2 * (pma.height + 1), dtype=np.uint64)
    block_window = min(config.block_window, ck.WINDOW_MAX)
    if windows is None:
        windows = xp_ops.sorted_union(xp, iseg, dseg)
    rewritten = []      # (plan, fit flags, window slots) of every level planned
    for level in range(pma.height + 1):
        lower, upper = pma.thresholds(level)
        root = level == pma.height
        leaf = level == 0 and not root and S <= 32
        window_slots = min(S << level, pma.capacity)
        large = not leaf and window_slots > block_window
        # Large windows total their pending updates from prefix sums (the merge needs
        # the inserts' anyway), and their counts too when a warp's loop is too long.
        prefixes = None
        if large:
            counts = (xp_ops.prefix(xp, pma.cnt) if (1 << level) > PREFIX_COUNTS_ABOVE
                      else None)
            prefixes = (counts, xp_ops.prefix(xp, batch.pending), xp_ops.prefix(xp, dpend))
        mode = ck.PLAN_RANGES if leaf else ck.PLAN_TOTALS if root else ck.PLAN_DECIDE
        plan, fit = ck.plan_windows(windows, level, S, iseg, dseg, pma.cnt, batch.pending,
                                    dpend, prefixes, mode, lower, upper, record)
        if leaf:
            # It counts the leaves it merged in the record itself.
            ck.merge_leaves(pma.keys, pma.vals, pma.cnt, plan, fit, batch.keys, batch.vals,
                            batch.pending, dpend, S, math.floor(upper * S + 1e-9),
                            math.ceil(lower * S - 1e-9), record)
        else:
            if root:
                if update.root_overflows(pma, int(plan[ck.PLAN_TOTAL, 0]), lower, upper):
                    _take_record(pma, record)
                    update.rebuild_with_pending(pma, batch)
                    pma.mark_phase("rebuild")
                    return
                # Copied from the host on the stream that wrote them, not set by scalar
                # (`fit[0] = True`, `record[i] = 1`): each of those built a CuPy fill
                # kernel inside a batch, no warm-up batch reaching this branch (found by
                # tests/gpu/test_warm_up.py on an H200, 2026-11-29).
                stream = xp.cuda.get_current_stream()
                fit[:1].set(np.ones(1, dtype=np.bool_), stream=stream)
                at = ck.RECORD_LEVELS + 2 * level
                record[at:at + 2].set(np.array([1, pma.capacity], dtype=np.uint64),
                                      stream=stream)
            if large:
                ck.merge_large(pma.keys, pma.vals, pma.cnt, plan, fit, window_slots,
                               batch.keys, batch.vals, batch.pending, prefixes[1], S,
                               config.merge_chunk, record)
            else:
                ck.merge_windows(pma.keys, pma.vals, pma.cnt, plan, fit, window_slots,
                                 batch.keys, batch.vals, batch.pending, S, record)
        rewritten.append((plan, fit, window_slots))
        pma.mark_phase(update.level_phase(level))
        if root:
            break
        parents = ck.parent_windows(windows, plan, fit, pma.cnt, record)
        windows = parents[parents >= 0]
        if windows.size == 0:
            break
    _take_record(pma, record)
    if pma.stats.fixup:
        update.fill_gaps(pma)
    for plan, fit, window_slots in rewritten:
        ck.set_rows(pma.keys, pma.cnt, S, plan, fit, window_slots, batch.deletes,
                    pma.num_vertices, pma.row)
    pma.mark_phase("rows")


def _take_record(pma, record) -> None:
    """Fold the device record of a batch into its stats (one synchronisation)."""
    from gpu.cuda import pma_launchers as ck
    values = [int(x) for x in record.tolist()]
    if values[ck.RECORD_MISCOUNTED]:
        raise RuntimeError(f"{values[ck.RECORD_MISCOUNTED]} PMA windows held another "
                           f"number of elements than their plan counted")
    if values[ck.RECORD_EMPTIED] or values[ck.RECORD_FOLLOWERS]:
        pma.stats.fixup = True     # empty segments: their gaps need the repair
    for level in range(pma.height + 1):
        windows, slots = values[ck.RECORD_LEVELS + 2 * level:][:2]
        if windows:
            update.count_level(pma, level, windows, slots)
