"""The device graph's edge store: a packed memory array (GPMA) of sorted directed edge keys.

Every directed edge is one 64-bit key ``src << 32 | dst`` with a 32-bit value (its edge
label), kept in one sorted array with gaps (GAMMA §V-C after Sha et al., PVLDB 2017).
The array is cut into segments of `segment_size` slots; each segment holds its elements
packed at its front (`cnt` per segment) and fills its gaps with copies of the last real key
at or before it, so the whole key array stays non-decreasing: a binary search for a key
lands on its real slot (copies only follow their original), and ``row[u]`` (the first slot
of u's keys) is a plain lower bound.  A slot is real iff its offset in its segment is below
the segment's count, so a reader skips gaps without a flag.

This module owns the structure: its arrays, reads, bulk load, the checks that refuse a
batch, and the invariants (`check`).  A batch is applied bottom-up over the implicit tree
of windows (2^L segments at level L): each update is located in its leaf segment by binary
search; a window whose updates keep its density within the level's thresholds is
rewritten (its elements and its updates merged and spread evenly over its segments); one
that would not passes its updates to its parent.  The root rebuilds the array with a
capacity for a fixed target density when even it would overflow or underflow, so the
average density stays between the root thresholds (what bounds memory per edge).

The arrays live on whatever `xp` is given: CuPy on the device (the engine's device graph),
NumPy on the host (the same algorithm, checked by the CPU test suite).  The generic batch
update (gpu/graph/pma/update.py) runs on either; on CuPy a batch runs on the kernels of
gpu/cuda/kernels/pma.cu instead (gpu/graph/pma/device_update.py), which must leave exactly
the generic path's layout (`PMAConfig(kernels=False)` selects the generic path on CuPy too).
"""
from __future__ import annotations

import math
import time

import numpy as np

from gpu.graph.pma import device_update, update, xp_ops
from gpu.graph.pma.layout import (DEAD, KEY_SHIFT, MAX_VERTEX, PendingBatch, PMAConfig,
                                  PMAStats, PMAUpdateError, key_src)


class PackedMemoryArray:
    """Sorted directed edge keys with gaps, row offsets and degrees, on `xp`."""

    def __init__(self, xp=np, num_vertices: int = 0, config: PMAConfig | None = None):
        self.xp = xp
        self.config = config or PMAConfig()
        self.S = self.config.segment_size
        self.vertex_mask = np.uint64((1 << self.config.vertex_bits) - 1)
        self.num_vertices = 0
        self.num_edges = 0
        self.stats = PMAStats()
        self.profile = False        # time the phases of each batch (synchronising)
        self.phase_seconds: dict[str, float] = {}
        self._clock = 0.0
        # On CUDA, update_small's launch prepared once (gpu/cuda/pma_launchers.SmallUpdate),
        # made by the first small batch.
        self.small_update = None
        self.allocate(self.config.min_segments)
        self.row = xp.zeros(1, dtype=np.int64)
        self.deg = xp.zeros(0, dtype=np.int32)
        self.ensure_vertices(num_vertices)

    # ---- structure -----------------------------------------------------
    def allocate(self, nseg: int) -> None:
        """Fresh, empty arrays of `nseg` segments (a rebuild fills them)."""
        xp = self.xp
        self.nseg = nseg
        self.capacity = nseg * self.S
        self.keys = xp.zeros(self.capacity, dtype=np.uint64)
        self.vals = xp.zeros(self.capacity, dtype=np.int32)
        self.cnt = xp.zeros(nseg, dtype=np.int32)
        self.height = max(0, math.ceil(math.log2(nseg)))

    def ensure_vertices(self, n: int) -> None:
        """Make vertex ids 0..n-1 valid (new ones have no edges)."""
        if n <= self.num_vertices:
            return
        if n > MAX_VERTEX:
            raise PMAUpdateError(f"vertex id {n - 1} exceeds {MAX_VERTEX - 1}")
        xp = self.xp
        old = self.num_vertices
        if n + 1 > self.row.shape[0]:
            size = max(n + 1, 2 * self.row.shape[0])
            row = xp.full(size, self.capacity, dtype=np.int64)
            row[:old + 1] = self.row[:old + 1]
            deg = xp.zeros(size, dtype=np.int32)
            deg[:old] = self.deg[:old]
            self.row, self.deg = row, deg
        # No key has a source >= old (and gaps before any key copy 0), so the new
        # rows all point past the end.
        self.row[old + 1:n + 1] = self.capacity
        self.num_vertices = n

    def memory_bytes(self) -> int:
        """Device bytes the structure holds (keys, values, counts, rows, degrees)."""
        return int(self.keys.nbytes + self.vals.nbytes + self.cnt.nbytes
                   + self.row.nbytes + self.deg.nbytes)

    def density(self) -> float:
        return self.num_edges / self.capacity

    def thresholds(self, level: int) -> tuple[float, float]:
        """(lower, upper) density of a window at `level`, interpolated leaves to root."""
        c = self.config
        t = level / self.height if self.height else 1.0
        return (c.leaf_lower + (c.root_lower - c.leaf_lower) * t,
                c.leaf_upper + (c.root_upper - c.leaf_upper) * t)

    def mark_phase(self, name: str | None) -> None:
        """With `profile` on: charge the time since the last mark to `name`."""
        if not self.profile:
            return
        if self.xp is not np:
            self.xp.cuda.Device().synchronize()
        now = time.perf_counter()
        if name is not None:
            self.phase_seconds[name] = self.phase_seconds.get(name, 0.0) + now - self._clock
        self._clock = now

    # ---- reading -------------------------------------------------------
    def _dst(self, keys):
        """Destination vertices of keys (without the ordering prefix)."""
        return (keys & self.vertex_mask).astype(np.int64)

    def real_mask(self, lo: int = 0, hi: int | None = None):
        """Which slots in [lo, hi) hold an edge."""
        xp = self.xp
        hi = self.capacity if hi is None else hi
        slots = xp.arange(lo, hi, dtype=np.int64)
        return (slots % self.S) < self.cnt[slots // self.S]

    def edges(self):
        """(keys, values) of every stored edge, in key order."""
        real = self.real_mask()
        return self.keys[real], self.vals[real]

    def out_edges(self, vertices):
        """(sources, keys, values) of every stored out-edge of `vertices` (distinct),
        each vertex's in key order."""
        xp = self.xp
        vertices = xp.asarray(vertices, dtype=np.int64)
        lo = self.row[vertices]
        slots, owner = xp_ops.ranges(xp, lo, self.row[vertices + 1] - lo)
        real = (slots % self.S) < self.cnt[slots // self.S]
        slots, owner = slots[real], owner[real]
        return vertices[owner], self.keys[slots], self.vals[slots]

    def neighbours(self, u: int):
        """(dst, values) of u's out-edges, in order (tests, debugging)."""
        lo, hi = int(self.row[u]), int(self.row[u + 1])
        real = self.real_mask(lo, hi)
        return self._dst(self.keys[lo:hi][real]), self.vals[lo:hi][real]

    def find(self, keys):
        """Slot of each key, or -1 where it is not stored."""
        return self.lookup(keys)[0]

    def lookup(self, keys, values: bool = False):
        """(slot of each key or -1 where it is not stored, and with `values` each one's
        value or -1); on CuPy one kernel (gpu/cuda/kernels/view.cu:find_keys)."""
        xp = self.xp
        keys = xp.asarray(keys, dtype=np.uint64)
        if self.config.kernels and xp is not np:
            from gpu.cuda import pma_launchers
            return pma_launchers.find_keys(self, xp.ascontiguousarray(keys.ravel()), values)
        pos = xp_ops.search(xp, self.keys, keys)
        pos = xp.where(self._stored_at(pos, keys), pos, -1)
        if not values:
            return pos, None
        return pos, xp.where(pos >= 0, self.vals[xp.maximum(pos, 0)], -1).astype(np.int32)

    def _stored_at(self, pos, keys):
        """Whether each key is stored at its lower-bound slot pos."""
        inside = self.xp.minimum(pos, self.capacity - 1)
        return ((pos < self.capacity) & (self.keys[inside] == keys)
                & ((inside % self.S) < self.cnt[inside // self.S]))

    # ---- bulk load -----------------------------------------------------
    def load(self, keys, vals) -> None:
        """Replace the contents with these directed edges (any order, no duplicates)."""
        xp = self.xp
        keys = xp.asarray(keys, dtype=np.uint64)
        vals = xp.asarray(vals, dtype=np.int32)
        order = xp.argsort(keys)
        keys, vals = keys[order], vals[order]
        self._refuse(self._new_problems(keys, vals))
        if keys.size:
            self.ensure_vertices(max(int(key_src(keys[-1:])[0]),
                                     int(self._dst(keys).max())) + 1)
        self.stats = PMAStats()
        update.rebuild(self, keys, vals)

    # ---- batches -------------------------------------------------------
    def apply(self, insert_keys, insert_vals, delete_keys, check: bool = True,
              presorted: bool = False) -> PMAStats:
        """Insert absent edges and delete present ones, atomically: a refused batch
        (a duplicate, an insert already stored, a delete not stored, a key in both)
        raises PMAUpdateError and changes nothing.  `check=False` skips the checks (a
        dozen array operations and a synchronisation) for a caller that validated the
        batch against the same edges already (the engine's `normalize`); `presorted`
        says the inserts and the deletes come sorted by key."""
        xp = self.xp
        ik = xp.asarray(insert_keys, dtype=np.uint64).ravel()
        iv = xp.asarray(insert_vals, dtype=np.int32).ravel()
        dk = xp.asarray(delete_keys, dtype=np.uint64).ravel()
        if ik.shape != iv.shape:
            raise PMAUpdateError(f"{ik.size} insert keys but {iv.size} values")
        self.mark_phase(None)
        if not presorted:
            order = xp.argsort(ik)
            ik, iv = ik[order], iv[order]
            dk = xp.sort(dk)
        if not check and self.config.kernels and xp is not np and ik.size + dk.size:
            if ik.size + dk.size <= device_update.SMALL_BATCH:
                return self._apply_small(ik, iv, dk)
            return self._apply_located(ik, iv, dk)
        ipos = xp_ops.search(xp, self.keys, ik)
        dpos = xp_ops.search(xp, self.keys, dk)
        if check:
            self._refuse(self._new_problems(ik, iv) + self._batch_problems(ik, dk, ipos, dpos))
        self.stats = PMAStats(levels=-1)
        self.mark_phase("sort and check")
        if ik.size == 0 and dk.size == 0:
            return self.stats
        self.vals[dpos] = DEAD
        iseg = xp.minimum(ipos // self.S, self.nseg - 1)
        dseg = dpos // self.S
        batch = PendingBatch(ik, iv, xp.ones(ik.size, dtype=bool), dk)
        if self.config.kernels and xp is not np:
            device_update.update_on_device(self, batch, iseg, dseg)
        else:
            update.update(self, batch, iseg, dseg)
        if not self.stats.rebuilt:      # a rebuild recounted both
            self.num_edges += int(ik.size) - int(dk.size)
            xp_ops.scatter_add(xp, self.deg, key_src(ik), 1)
            xp_ops.scatter_add(xp, self.deg, key_src(dk), -1)
        self.mark_phase("degrees")
        return self.stats

    def _apply_small(self, ik, iv, dk) -> PMAStats:
        """A small checked-elsewhere batch on the kernels: merged into its leaves in one
        launch when they take it (device_update.update_small), else its start in one
        launch (device_update.locate_small, which moves the degrees too), then the
        level-by-level update."""
        self.stats = PMAStats(levels=-1)
        if device_update.update_small(self, ik, iv, dk):
            self.num_edges += int(ik.size) - int(dk.size)
            self.mark_phase("level 0")
            return self.stats
        return self._update_located(ik, iv, dk, *device_update.locate_small(self, ik, dk))

    def _apply_located(self, ik, iv, dk) -> PMAStats:
        """A larger checked-elsewhere batch on the kernels: its start in one launch
        (device_update.locate, which moves the degrees too, with no synchronisation), then
        the level-by-level update."""
        self.stats = PMAStats(levels=-1)
        return self._update_located(ik, iv, dk, *device_update.locate(self, ik, dk))

    def _update_located(self, ik, iv, dk, iseg, dseg, windows=None) -> PMAStats:
        """The level-by-level update of a located batch (its deletes marked DEAD, its
        degrees moved; `windows`, when known, the distinct segments of iseg and dseg)."""
        self.mark_phase("sort and check")
        batch = PendingBatch(ik, iv, self.xp.ones(ik.size, dtype=bool), dk)
        device_update.update_on_device(self, batch, iseg, dseg, windows)
        if not self.stats.rebuilt:      # a rebuild recounted both
            self.num_edges += int(ik.size) - int(dk.size)
        self.mark_phase("degrees")
        return self.stats

    # A problem is (where it occurs: a mask over `keys`, keys, what is wrong with them).
    @staticmethod
    def _duplicates(keys, what: str) -> tuple:
        return keys[1:] == keys[:-1], keys[1:], f"appears twice among the {what}s"

    def _new_problems(self, keys, vals) -> list:
        """What refuses sorted new edges: duplicates, loops, the reserved value."""
        return [self._duplicates(keys, "insert"),
                (key_src(keys) == self._dst(keys), keys, "is a loop"),
                (vals == DEAD, keys, f"has the reserved value {int(DEAD)}")]

    def _batch_problems(self, ik, dk, ipos, dpos) -> list:
        """What else refuses a batch (sorted inserts and deletes, their lower bounds)."""
        xp, n = self.xp, self.num_vertices
        both = xp.zeros(ik.shape, dtype=bool)
        if ik.size and dk.size:
            at = xp.searchsorted(dk, ik)
            both = (at < dk.size) & (dk[xp.minimum(at, dk.size - 1)] == ik)
        return [self._duplicates(dk, "delete"),
                ((key_src(ik) >= n) | (self._dst(ik) >= n), ik,
                 f"names a vertex beyond the {n} vertices (ensure_vertices first)"),
                (both, ik, "is both inserted and deleted"),
                (self._stored_at(ipos, ik), ik, "is already stored"),
                (~self._stored_at(dpos, dk), dk, "is not stored")]

    def _refuse(self, problems: list) -> None:
        """Raise PMAUpdateError naming the first edge of the first problem that occurs;
        one synchronisation on the device for all of them."""
        xp = self.xp
        found = xp.stack([where.any() for where, _, _ in problems]).tolist()
        for occurs, (where, keys, what) in zip(found, problems, strict=True):
            if occurs:
                raise PMAUpdateError(f"edge {self._name(keys[int(xp.argmax(where))])} {what}")

    @staticmethod
    def _name(key) -> str:
        key = int(key)
        return f"{key >> 32} -> {key & 0xFFFFFFFF}"

    # ---- checking ------------------------------------------------------
    def check(self, expected_keys=None, expected_vals=None) -> None:
        """Assert every invariant on `xp` (tests, benchmarks): non-decreasing keys with
        valid gap copies, counts, rows, degrees; and, if given, exactly these edges."""
        xp, S = self.xp, self.S
        keys, vals, cnt = self.keys, self.vals, self.cnt
        assert keys.shape == (self.capacity,) and cnt.shape == (self.nseg,)
        assert bool(((cnt >= 0) & (cnt <= S)).all()), "segment count out of range"
        real = self.real_mask()
        assert int(real.sum()) == self.num_edges, "edge count"
        assert bool((keys[1:] >= keys[:-1]).all()), "keys not non-decreasing"
        rk = keys[real]
        assert bool((rk[1:] > rk[:-1]).all()), "duplicate stored key"
        assert not bool((vals[real] == DEAD).any()), "dead slot left"
        # Gap copies: the last real key before the gap, or 0.
        seen = xp.cumsum(real, dtype=np.int64)[~real]
        want = xp.zeros(seen.shape, dtype=np.uint64)
        want[seen > 0] = rk[seen[seen > 0] - 1]
        assert bool((keys[~real] == want).all()), "stale gap copy"
        n = self.num_vertices
        want_row = xp.searchsorted(keys, xp.arange(n + 1, dtype=np.uint64) << KEY_SHIFT)
        assert bool((self.row[:n + 1] == want_row).all()), "row offsets"
        src = key_src(rk)
        assert bool((src < n).all() and (self._dst(rk) < n).all()), "vertex range"
        assert bool((self.deg[:n] == xp_ops.bincount(xp, src, n)[:n]).all()), "degrees"
        if expected_keys is not None:
            ek = xp.asarray(expected_keys, dtype=np.uint64)
            order = xp.argsort(ek)
            assert rk.shape == ek.shape and bool((rk == ek[order]).all()), \
                "stored edges differ"
            if expected_vals is not None:
                ev = xp.asarray(expected_vals, dtype=np.int32)[order]
                assert bool((vals[real] == ev).all()), "values"
