"""Event times of the data graph's edges, and the expiry index retention reads.

An edge's time is the largest time of the insert records that made or last refreshed it
(issue 23; tests/reference_time.py fixes the rules); untimed edges have none and never
expire.  Times are kept by edge key (``u << 32 | v`` of slots, u < v, or the arc u -> v).

The expiry index is a heap of sorted runs, one run per batch that gave edges times: a
batch that moves the watermark to T takes from the runs' fronts every entry with time
<= T - retention, so its cost follows the entries it takes (and log of the runs), not
the graph.  Entries go stale when their edge is deleted or refreshed; a taken entry
counts only while its edge still has that time (`EdgeTimes.current`).

The times themselves are a `TimeTable`: an open-addressing hash table of NumPy arrays
(linear probing, tombstones), read and written by compiled loops a batch at a time, so a
batch's cost follows its edges, and a compiled search can read an edge's time by its key
(gpu/cpu/windowed.py).  It keeps each timed edge's label beside its time, which the
windowed phases' subgraphs take from it.
"""
from __future__ import annotations

import heapq

import numba as nb
import numpy as np

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)
from gpu.io.records import NO_TIME

NO_KEYS = np.empty(0, dtype=np.int64)
EMPTY = -1      # a TimeTable slot never used (edge keys are >= 0)
NO_EDGE_LABEL = -1  # the label TimeTable.get_labeled gives a key it does not hold
GONE = -2       # a slot whose key was dropped: lookups go on past it, inserts reuse it


@nb.njit(cache=True, inline="always")
def _home(key, mask):
    """A key's first slot.  Keys are slot pairs u << 32 | v (u, v < 2^31), far from random
    in their low bits: both halves are mixed by multipliers below 2^30, so that nothing
    overflows (also when the kernels run as plain Python)."""
    u = key >> 32
    v = key & 0xFFFFFFFF
    h = v * 0x2C1B3C6D + u * 0x297A2D39
    h ^= h >> 29
    return h & mask


@nb.njit(cache=True)
def table_find(keys, key):
    """The slot of `key` in a TimeTable's keys, or -1."""
    mask = keys.shape[0] - 1
    i = _home(key, mask)
    while True:
        k = keys[i]
        if k == key:
            return i
        if k == EMPTY:
            return -1
        i = (i + 1) & mask


@nb.njit(cache=True)
def _get_many(keys, vals, wanted, out):
    for j in range(wanted.shape[0]):
        i = table_find(keys, wanted[j])
        out[j] = vals[i] if i >= 0 else NO_TIME


@nb.njit(cache=True)
def _get_labeled(keys, vals, labels, wanted, out, out_labels):
    for j in range(wanted.shape[0]):
        i = table_find(keys, wanted[j])
        if i >= 0:
            out[j] = vals[i]
            out_labels[j] = labels[i]
        else:
            out[j] = NO_TIME
            out_labels[j] = NO_EDGE_LABEL


@nb.njit(cache=True)
def _put_many(keys, vals, labels, new_keys, new_vals, new_labels):
    """Set each key's value and label (the last one given wins); returns (keys added,
    slots that were GONE and are used again)."""
    mask = keys.shape[0] - 1
    added = reused = 0
    for j in range(new_keys.shape[0]):
        key = new_keys[j]
        i = _home(key, mask)
        gone = -1
        while True:
            k = keys[i]
            if k == key:
                break
            if k == EMPTY:
                if gone >= 0:
                    i = gone
                    reused += 1
                added += 1
                keys[i] = key
                break
            if k == GONE and gone < 0:
                gone = i
            i = (i + 1) & mask
        vals[i] = new_vals[j]
        labels[i] = new_labels[j]
    return added, reused


@nb.njit(cache=True)
def _drop_many(keys, dropped):
    """Drop each key present; returns how many were."""
    removed = 0
    for j in range(dropped.shape[0]):
        i = table_find(keys, dropped[j])
        if i >= 0:
            keys[i] = GONE
            removed += 1
    return removed


class TimeTable:
    """Edge key -> event time and edge label (module docstring): at most half the slots
    used or GONE, so probes stay short; grown, or rebuilt without its tombstones, before
    a batch of inserts would pass that.  The label rides along so that the windowed
    phases build their subgraphs from the table alone (gpu/event_time.py), without a
    lookup of every edge in the graph."""

    def __init__(self, capacity: int = 64) -> None:
        self._alloc(capacity)

    def _alloc(self, capacity: int) -> None:
        self.keys = np.full(capacity, EMPTY, dtype=np.int64)
        self.vals = np.zeros(capacity, dtype=np.int64)
        self.labels = np.full(capacity, NO_EDGE_LABEL, dtype=np.int32)
        self.count = 0
        self.gone = 0

    def __len__(self) -> int:
        return self.count

    def get(self, keys: np.ndarray) -> np.ndarray:
        """Each key's time, NO_TIME where it has none."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        out = np.empty(len(keys), dtype=np.int64)
        _get_many(self.keys, self.vals, keys, out)
        return out

    def get_labeled(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each key's time and label: NO_TIME and NO_EDGE_LABEL where it has none."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        out = np.empty(len(keys), dtype=np.int64)
        out_labels = np.empty(len(keys), dtype=np.int32)
        _get_labeled(self.keys, self.vals, self.labels, keys, out, out_labels)
        return out, out_labels

    def set(self, keys: np.ndarray, times: np.ndarray, labels: np.ndarray | None = None
            ) -> None:
        """Give these keys these times and edge labels (none given: NO_EDGE_LABEL)."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        if len(keys) == 0:
            return
        if labels is None:
            labels = np.full(len(keys), NO_EDGE_LABEL, dtype=np.int32)
        if 2 * (self.count + self.gone + len(keys)) > len(self.keys):
            self._resize(self.count + len(keys))
        added, reused = _put_many(self.keys, self.vals, self.labels, keys,
                                  np.ascontiguousarray(times, dtype=np.int64),
                                  np.ascontiguousarray(labels, dtype=np.int32))
        self.count += added
        self.gone -= reused

    def drop(self, keys: np.ndarray) -> None:
        removed = _drop_many(self.keys, np.ascontiguousarray(keys, dtype=np.int64))
        self.count -= removed
        self.gone += removed

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, times) of every entry, in slot order."""
        live = self.keys >= 0
        return self.keys[live], self.vals[live]

    def labeled_items(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys, times, labels) of every entry, in slot order."""
        live = self.keys >= 0
        return self.keys[live], self.vals[live], self.labels[live]

    def _resize(self, needed: int) -> None:
        capacity = len(self.keys)
        while 2 * needed > capacity:
            capacity *= 2
        keys, vals, labels = self.labeled_items()
        self._alloc(capacity)
        self.count, _ = _put_many(self.keys, self.vals, self.labels, keys, vals, labels)


def edge_keys(us: np.ndarray, vs: np.ndarray) -> np.ndarray:
    """The key of each edge us-vs (slots as the graph stores them: u < v, or arcs)."""
    return (np.asarray(us, dtype=np.int64) << 32) | np.asarray(vs, dtype=np.int64)


class ExpiryIndex:
    """Timed edge keys by time, as a heap of sorted runs (module docstring)."""

    def __init__(self) -> None:
        # Live runs only, by id: (times, keys) sorted by time, and the first entry not taken.
        # A spent run is dropped, so a long stream keeps no trace of its old batches.
        self._runs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._cursor: dict[int, int] = {}
        # Each run's first and last time as Python ints: `between` tests every live run
        # (~150 at a retention of 150 batches), and a NumPy scalar's read and comparison
        # cost ~10 times a Python int's.
        self._span: dict[int, tuple[int, int]] = {}
        self._heap: list[tuple[int, int]] = []                   # (head time, run)
        self._next_run = 0

    def __len__(self) -> int:
        """Entries not yet taken (stale ones included)."""
        return sum(len(self._runs[run][0]) - c for run, c in self._cursor.items())

    def add(self, keys: np.ndarray, times: np.ndarray) -> None:
        """Index these edges at these times (one run)."""
        if len(keys) == 0:
            return
        order = np.argsort(times, kind="stable")
        run, self._next_run = self._next_run, self._next_run + 1
        self._runs[run] = (np.asarray(times, dtype=np.int64)[order],
                           np.asarray(keys, dtype=np.int64)[order])
        self._cursor[run] = 0
        self._span[run] = (int(self._runs[run][0][0]), int(self._runs[run][0][-1]))
        heapq.heappush(self._heap, (int(self._runs[run][0][0]), run))

    def between(self, lo: int, hi: int) -> np.ndarray:
        """Keys of the entries not yet taken with time in [lo, hi] (stale ones included):
        a binary search per run whose times reach into [lo, hi] (a stream in time order
        has few), so the cost follows those runs and the entries found."""
        found = [NO_KEYS]
        for run, (first, last) in self._span.items():
            if last < lo or first > hi:             # a run's times are sorted
                continue
            times, keys = self._runs[run]
            c = self._cursor[run]
            a = c + int(np.searchsorted(times[c:], lo, side="left"))
            b = c + int(np.searchsorted(times[c:], hi, side="right"))
            found.append(keys[a:b])
        return np.concatenate(found)

    def take_until(self, horizon: int) -> tuple[np.ndarray, np.ndarray]:
        """Remove and return (keys, times) of every entry with time <= horizon."""
        keys, times = [], []
        while self._heap and self._heap[0][0] <= horizon:
            _, run = heapq.heappop(self._heap)
            run_times, run_keys = self._runs[run]
            lo = self._cursor[run]
            hi = lo + int(np.searchsorted(run_times[lo:], horizon, side="right"))
            keys.append(run_keys[lo:hi])
            times.append(run_times[lo:hi])
            self._cursor[run] = hi
            if hi < len(run_times):
                heapq.heappush(self._heap, (int(run_times[hi]), run))
            else:       # spent: let it go
                del self._runs[run], self._cursor[run], self._span[run]
        if not keys:
            return NO_KEYS, NO_KEYS
        return np.concatenate(keys), np.concatenate(times)


class EdgeTimes:
    """Each timed edge's time and label by key (a TimeTable), and the expiry index over
    them."""

    def __init__(self) -> None:
        self.table = TimeTable()
        self.index = ExpiryIndex()

    def __len__(self) -> int:
        return len(self.table)

    def get(self, key: int) -> int | None:
        found = int(self.table.get(np.array([key], dtype=np.int64))[0])
        return None if found == NO_TIME else found

    def get_many(self, keys: np.ndarray) -> np.ndarray:
        """Each key's time, NO_TIME where it has none."""
        return self.table.get(keys)

    def current(self, keys: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Whether each edge key still has this time (an index entry not stale)."""
        return self.table.get(keys) == np.asarray(times, dtype=np.int64)

    def drop(self, keys: np.ndarray) -> None:
        """Forget the times of deleted edges (untimed ones have none)."""
        self.table.drop(keys)

    def set(self, keys: np.ndarray, times: np.ndarray, labels: np.ndarray) -> None:
        """Give these edges (new edges and refreshes, with their labels in the graph)
        these times, and index them."""
        self.table.set(keys, times, labels)
        self.index.add(keys, times)

    def items(self) -> list[tuple[int, int]]:
        keys, times = self.table.items()
        return list(zip(keys.tolist(), times.tolist(), strict=True))
