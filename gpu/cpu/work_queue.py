"""Owns the work queue of the CPU executor's work-sharing region: its layout, its
first records, and how a busy search gives part of its work to it.

The queue is three int64 arrays.  `records` holds one row per record: the piece of a
task it belongs to, the level it starts at, the first and end candidate positions it
takes at that level, and the vertices matched above it.  `ready` flags each record
written (a giver writes the row before the flag).  `state` holds the counters the
workers share, each on a cache line of its own.  Every access the workers share goes
through the atomics of gpu/cpu/atomics.py.  The region itself is gpu/cpu/phases.py
`share_tasks`; the search that gives is gpu/cpu/search.py `_search_from`.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)
from gpu.cpu.atomics import atomic_add, atomic_load, atomic_store

# Where the counters sit in `state` (apart, so that waiting workers reading one do not
# share a cache line with the others' updates), and the columns of a record: piece,
# level, first and end candidate position, then the matched vertices of the levels above.
HEAD, TAIL, PENDING, WAITING = 0, 16, 32, 48
STATE_SIZE = 64
REC_PIECE, REC_LEVEL, REC_FIRST, REC_END, REC_MATCHED = 0, 1, 2, 3, 4


@nb.njit(cache=True)
def new_queue(npieces, slots, width, max_deg):
    """A queue for share_tasks: (records, ready, state) with the pieces as its first
    records (a record's row is written before its ready flag is set)."""
    records = np.empty((slots, REC_MATCHED + width), dtype=np.int64)
    ready = np.zeros(slots, dtype=np.int64)
    state = np.zeros(STATE_SIZE, dtype=np.int64)
    for k in range(npieces):
        records[k, REC_PIECE], records[k, REC_LEVEL] = k, 2
        records[k, REC_FIRST], records[k, REC_END] = 0, max_deg + 1
        ready[k] = 1
    state[TAIL], state[PENDING] = npieces, npieces
    return records, ready, state


@nb.njit(cache=True, inline="always")
def short_of_work(state):
    """Whether more workers wait than there are records in the queue for them: only then
    does a search give (when every busy search gave as soon as one worker waited, 15 of
    them on the H100 host cut their work into ever smaller records for it)."""
    waiting = atomic_load(state, WAITING)
    return waiting > 0 and waiting > atomic_load(state, TAIL) - atomic_load(state, HEAD)


@nb.njit(cache=True)
def give(start, level, m, idx, share):
    """Hand share_tasks's queue the later half of the candidate positions left at the
    shallowest of levels start..level that has any (search._search_from's `share`): a record of
    the piece, the level, the positions and the vertices matched above it, which any
    worker can search by computing that level's candidates again.  Nothing when the queue
    is full."""
    records, ready, state, slot, stop = share[0], share[1], share[2], share[3], share[4]
    d = start
    while d <= level and stop[d] <= idx[d]:
        d += 1
    if d > level:
        return
    split = stop[d] - (stop[d] - idx[d] + 1) // 2
    atomic_add(state, PENDING, 1)           # before it is visible: the region ends at 0
    s = atomic_add(state, TAIL, 1)
    if s >= records.shape[0]:
        atomic_add(state, PENDING, -1)
        return
    records[s, REC_PIECE] = records[slot, REC_PIECE]
    records[s, REC_LEVEL] = d
    records[s, REC_FIRST] = split
    records[s, REC_END] = stop[d]
    for j in range(d):
        records[s, REC_MATCHED + j] = m[j]
    atomic_store(ready, s, 1)
    stop[d] = split


