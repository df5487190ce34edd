"""Event times of the data graph's edges, and the expiry index retention reads.

An edge's time is the largest time of the insert records that made or last refreshed it
(issue 23; tests/reference_time.py fixes the rules); untimed edges have none and never
expire.  Times are kept by edge key (``u << 32 | v`` of slots, u < v, or the arc u -> v).

The expiry index is a heap of sorted runs, one run per batch that gave edges times: a
batch that moves the watermark to T takes from the runs' fronts every entry with time
<= T - retention, so its cost follows the entries it takes (and log of the runs), not
the graph.  Entries go stale when their edge is deleted or refreshed; a taken entry
counts only while its edge still has that time (`EdgeTimes.current`).
"""
from __future__ import annotations

import heapq

import numpy as np

NO_KEYS = np.empty(0, dtype=np.int64)


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
        heapq.heappush(self._heap, (int(self._runs[run][0][0]), run))

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
                del self._runs[run], self._cursor[run]
        if not keys:
            return NO_KEYS, NO_KEYS
        return np.concatenate(keys), np.concatenate(times)


class EdgeTimes:
    """Each timed edge's time by key, and the expiry index over them."""

    def __init__(self) -> None:
        self._time: dict[int, int] = {}
        self.index = ExpiryIndex()

    def __len__(self) -> int:
        return len(self._time)

    def get(self, key: int) -> int | None:
        return self._time.get(int(key))

    def current(self, keys: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Whether each edge key still has this time (an index entry not stale)."""
        return np.fromiter((self._time.get(k) == t for k, t in
                            zip(keys.tolist(), times.tolist(), strict=True)),
                           dtype=bool, count=len(keys))

    def drop(self, keys: np.ndarray) -> None:
        """Forget the times of deleted edges (untimed ones have none)."""
        for key in keys.tolist():
            self._time.pop(key, None)

    def set(self, keys: np.ndarray, times: np.ndarray) -> None:
        """Give these edges these times (new edges and refreshes) and index them."""
        self._time.update(zip(keys.tolist(), times.tolist(), strict=True))
        self.index.add(keys, times)

    def items(self) -> list[tuple[int, int]]:
        return list(self._time.items())
