"""Maps external 64-bit vertex ids to dense internal slots (open addressing in Numba).

External ids are arbitrary non-negative int64s; the engine works on dense
int32 slots.  Lookups and inserts are vectorised over a batch, so the cost of
a batch follows the batch size, not the graph.  Linear probing with
tombstones; the table doubles (rehash) when live + dead entries pass half.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)

EMPTY = -1
TOMBSTONE = -2
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@nb.njit(cache=True, inline="always")
def _slot(key, mask):
    h = np.uint64(key) * _GOLDEN
    return np.int64((h ^ (h >> np.uint64(29))) & np.uint64(mask))


@nb.njit(cache=True, inline="always")
def find_slot(keys, vals, q):
    """The slot of id q in the table (keys, vals), or -1."""
    mask = keys.shape[0] - 1
    s = _slot(q, mask)
    while keys[s] != EMPTY:
        if keys[s] == q:
            return vals[s]
        s = (s + 1) & mask
    return np.int32(-1)


@nb.njit(cache=True)
def _lookup(keys, vals, query, out):
    for i in range(query.shape[0]):
        out[i] = find_slot(keys, vals, query[i])


@nb.njit(cache=True)
def _positions(keys, query, out):
    """The table position of each id of `query`, -1 where absent."""
    mask = keys.shape[0] - 1
    for i in range(query.shape[0]):
        q = query[i]
        s = _slot(q, mask)
        out[i] = -1
        while keys[s] != EMPTY:
            if keys[s] == q:
                out[i] = s
                break
            s = (s + 1) & mask


@nb.njit(cache=True)
def _insert(keys, vals, new_keys, new_vals):
    """Insert keys known to be absent; returns how many tombstones were reused."""
    mask = keys.shape[0] - 1
    reused = 0
    for i in range(new_keys.shape[0]):
        s = _slot(new_keys[i], mask)
        while keys[s] >= 0:
            s = (s + 1) & mask
        if keys[s] == TOMBSTONE:
            reused += 1
        keys[s] = new_keys[i]
        vals[s] = new_vals[i]
    return reused


@nb.njit(cache=True)
def _delete(keys, query):
    mask = keys.shape[0] - 1
    removed = 0
    for i in range(query.shape[0]):
        q = query[i]
        s = _slot(q, mask)
        while keys[s] != EMPTY:
            if keys[s] == q:
                keys[s] = TOMBSTONE
                removed += 1
                break
            s = (s + 1) & mask
    return removed


class IdMap:
    """int64 external id -> int32 internal slot."""

    def __init__(self, capacity: int = 1 << 12) -> None:
        size = 1
        while size < max(2, capacity):
            size <<= 1
        self._keys = np.full(size, EMPTY, dtype=np.int64)
        self._vals = np.full(size, -1, dtype=np.int32)
        self._live = 0
        self._dead = 0
        # Table positions written since the last take_changes (None: not recorded), and
        # how many times the table was replaced, for a copy kept elsewhere (the device's).
        self._changed: list[np.ndarray] | None = None
        self._changed_count = 0
        self.generation = 0

    def __len__(self) -> int:
        return self._live

    @property
    def table(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, vals) for find_slot in compiled code (replaced when the table grows)."""
        return self._keys, self._vals

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Internal slot per id, -1 where the id is unknown."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        out = np.empty(ids.shape[0], dtype=np.int32)
        _lookup(self._keys, self._vals, ids, out)
        return out

    def insert(self, ids: np.ndarray, slots: np.ndarray) -> None:
        """Add ids that are not present (the caller guarantees it)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        slots = np.ascontiguousarray(slots, dtype=np.int32)
        self._reserve(ids.shape[0])
        self._dead -= _insert(self._keys, self._vals, ids, slots)
        self._live += ids.shape[0]
        self._record(ids)

    def delete(self, ids: np.ndarray) -> None:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        self._record(ids)        # before: a deleted id is not found any more
        removed = _delete(self._keys, ids)
        self._live -= removed
        self._dead += removed

    def record_changes(self) -> None:
        """Record from now on which table positions change (take_changes)."""
        if self._changed is None:
            self._changed = []

    def take_changes(self) -> np.ndarray:
        """The table positions written since the last call (int64, may repeat); a copy of
        the table made at the same `generation` is the table again once these positions
        are copied."""
        changed, self._changed, self._changed_count = self._changed or [], [], 0
        return np.concatenate(changed) if changed else np.empty(0, dtype=np.int64)

    def _record(self, ids: np.ndarray) -> None:
        if self._changed is None or ids.shape[0] == 0:
            return
        out = np.empty(ids.shape[0], dtype=np.int64)
        _positions(self._keys, ids, out)
        self._changed.append(out[out >= 0])
        self._changed_count += ids.shape[0]
        if self._changed_count > self._keys.shape[0] // 4:
            # More positions than a copy of the whole table would be worth: copied whole.
            self._changed, self._changed_count = [], 0
            self.generation += 1

    def _reserve(self, extra: int) -> None:
        size = self._keys.shape[0]
        if 2 * (self._live + self._dead + extra) <= size:
            return
        while 2 * (self._live + extra) > size // 2:
            size <<= 1
        live = self._keys >= 0
        keys, vals = self._keys[live], self._vals[live]
        self._keys = np.full(size, EMPTY, dtype=np.int64)
        self._vals = np.full(size, -1, dtype=np.int32)
        self._dead = 0
        _insert(self._keys, self._vals, keys, vals)
        self.generation += 1
        if self._changed is not None:
            self._changed, self._changed_count = [], 0      # a new table: copied whole
