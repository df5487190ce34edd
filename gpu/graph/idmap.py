"""Maps external 64-bit vertex ids to dense internal slots (open addressing in Numba).

External ids are arbitrary non-negative int64s; the engine works on dense
int32 slots.  Lookups and inserts are vectorised over a batch, so the cost of
a batch follows the batch size, not the graph.  Linear probing with
tombstones; the table doubles (rehash) when live + dead entries pass half.
"""
from __future__ import annotations

import numba as nb
import numpy as np

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

    def delete(self, ids: np.ndarray) -> None:
        removed = _delete(self._keys, np.ascontiguousarray(ids, dtype=np.int64))
        self._live -= removed
        self._dead += removed

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
