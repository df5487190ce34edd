"""The device graph's edge store: a packed memory array (GPMA) of sorted directed edge keys.

Every directed edge is one 64-bit key ``src << 32 | dst`` with a 32-bit value (its edge
label), kept in one sorted array with gaps (GAMMA §V-C after Sha et al., PVLDB 2017).
The array is cut into segments of `segment_size` slots; each segment holds its elements
packed at its front (`cnt` per segment) and fills its gaps with copies of the last real key
at or before it, so the whole key array stays non-decreasing: a binary search for a key
lands on its real slot (copies only follow their original), and ``row[u]`` (the first slot
of u's keys) is a plain lower bound.  A slot is real iff its offset in its segment is below
the segment's count, so a reader skips gaps without a flag.

A batch is applied bottom-up over the implicit tree of windows (2^L segments at level L):
each update is located in its leaf segment by binary search; a window whose updates keep
its density within the level's thresholds is rewritten (its elements and its updates
merged and spread evenly over its segments); one that would not passes its updates to its
parent.  The root rebuilds the array with a capacity for a fixed target density when even
it would overflow or underflow, so the average density stays between the root thresholds
(what bounds memory per edge).  Every step is a data-parallel array operation over the
slots of the windows being rewritten, so a batch costs what it touches, never the whole
array (except the rare rebuild, amortised over the batches that filled it).

The arrays live on whatever `xp` is given: CuPy on the device (the engine's device graph),
NumPy on the host (the same algorithm, checked by the CPU test suite).  On CuPy a batch runs
on the kernels of gpu/cuda/kernels/pma.cu (`_update_device`: per level, a plan of every window,
merges that skip the windows that do not fit, the parents of those; one synchronisation per
level), which must leave exactly the layout of the generic array path (`_update`, the
reference; `PMAConfig(kernels=False)` selects it on CuPy too).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

DEAD = np.int32(np.iinfo(np.int32).min)     # value of a slot deleted earlier in the batch
MAX_VERTEX = (1 << 31) - 1
_SHIFT = np.uint64(32)
# gpu/cuda/kernels/pma.cu's WINDOW_MAX (shared memory of one block) and LARGE_BLOCK (threads
# of a block of the large-window kernels, one per slot of a chunk).
BLOCK_WINDOW_MAX = 1024
MERGE_CHUNK_MAX = 256
PREFIX_COUNTS_ABOVE = 1024      # segments per window beyond which a level's totals take a
                                # prefix sum of all counts instead of a loop per window


class PMAUpdateError(ValueError):
    """A batch the PMA refuses (nothing changed): names the offending edge."""


@dataclass(frozen=True)
class PMAConfig:
    segment_size: int = 32          # slots per leaf segment (a power of two)
    leaf_upper: float = 1.0         # density thresholds at the leaves and at the root,
    root_upper: float = 0.85        # interpolated linearly over the levels between
    leaf_lower: float = 0.125
    root_lower: float = 0.5
    target: float = 0.67            # density a rebuild (growth or shrink) leaves
    min_segments: int = 1
    # Low bits of a key's destination word that name the vertex; the bits above them are
    # an ordering prefix the caller chose (gpu/cuda/device_graph.py puts the destination's
    # label there, so each source's keys are grouped by neighbour label).
    vertex_bits: int = 32
    # On CuPy, apply batches with the CUDA kernels of gpu/cuda/kernels/pma.cu instead of the
    # generic array path (off: the reference the kernels are tested against, and the
    # comparison in the benchmark).
    kernels: bool = True
    # With the kernels: windows of up to `block_window` slots merge in one block through
    # shared memory, larger ones over several blocks that compact `merge_chunk` slots
    # each.  Tests set both tiny so that small graphs take every path.
    block_window: int = 1024
    merge_chunk: int = 256

    def __post_init__(self) -> None:
        s = self.segment_size
        if s < 2 or s & (s - 1):
            raise ValueError(f"PMAConfig.segment_size must be a power of two >= 2, got {s}")
        if not 1 <= self.vertex_bits <= 32:
            raise ValueError(f"PMAConfig.vertex_bits must be 1..32, got {self.vertex_bits}")
        if not (0 <= self.leaf_lower < self.root_lower < self.target < self.root_upper
                <= self.leaf_upper <= 1.0):
            raise ValueError("PMAConfig thresholds must satisfy leaf_lower < root_lower < "
                             "target < root_upper <= leaf_upper <= 1")
        if self.min_segments < 1:
            raise ValueError("PMAConfig.min_segments must be positive")
        if not 0 <= self.block_window <= BLOCK_WINDOW_MAX:
            raise ValueError(f"PMAConfig.block_window must be 0..{BLOCK_WINDOW_MAX}, got "
                             f"{self.block_window}")
        if not 1 <= self.merge_chunk <= MERGE_CHUNK_MAX:
            raise ValueError(f"PMAConfig.merge_chunk must be 1..{MERGE_CHUNK_MAX}, got "
                             f"{self.merge_chunk}")


@dataclass
class PMAStats:
    """What the last batch did (the benchmark reports these)."""
    levels: int = 0                 # highest level rewritten (-1: nothing)
    windows: int = 0                # windows rewritten, all levels
    slots: int = 0                  # slots rewritten, all levels
    rebuilt: bool = False
    fixup: bool = False             # the whole-array gap repair ran (empty segments)
    per_level: list = field(default_factory=list)


def edge_keys(xp, src, dst):
    """Keys of the directed edges src -> dst (uint64)."""
    return (xp.asarray(src).astype(np.uint64) << _SHIFT) | xp.asarray(dst).astype(np.uint64)


def key_src(keys):
    return (keys >> _SHIFT).astype(np.int64)


def key_dst(keys):
    return (keys & np.uint64(0xFFFFFFFF)).astype(np.int64)


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
        self._bk = self._bv = self._dk = self._ipend = None     # the batch being applied
        self.profile = False        # time the phases of each batch (synchronising)
        self.phase_seconds: dict[str, float] = {}
        self._clock = 0.0
        self._allocate(self.config.min_segments)
        self.row = xp.zeros(1, dtype=np.int64)
        self.deg = xp.zeros(0, dtype=np.int32)
        self.ensure_vertices(num_vertices)

    # ---- structure -----------------------------------------------------
    def _allocate(self, nseg: int) -> None:
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

    def _thresholds(self, level: int) -> tuple[float, float]:
        c = self.config
        t = level / self.height if self.height else 1.0
        return (c.leaf_lower + (c.root_lower - c.leaf_lower) * t,
                c.leaf_upper + (c.root_upper - c.leaf_upper) * t)

    def _phase(self, name: str | None) -> None:
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
        slots, owner = _ranges(xp, lo, self.row[vertices + 1] - lo)
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
        xp = self.xp
        keys = xp.asarray(keys, dtype=np.uint64)
        pos = _search(xp, self.keys, keys)
        return xp.where(self._stored_at(pos, keys), pos, -1)

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
        self._rebuild(keys, vals)
        self._bk = self._bv = None

    # ---- batches -------------------------------------------------------
    def apply(self, insert_keys, insert_vals, delete_keys) -> PMAStats:
        """Insert absent edges and delete present ones, atomically: a refused batch
        (a duplicate, an insert already stored, a delete not stored, a key in both)
        raises PMAUpdateError and changes nothing."""
        xp = self.xp
        ik = xp.asarray(insert_keys, dtype=np.uint64).ravel()
        iv = xp.asarray(insert_vals, dtype=np.int32).ravel()
        dk = xp.asarray(delete_keys, dtype=np.uint64).ravel()
        if ik.shape != iv.shape:
            raise PMAUpdateError(f"{ik.size} insert keys but {iv.size} values")
        self._phase(None)
        order = xp.argsort(ik)
        ik, iv = ik[order], iv[order]
        dk = xp.sort(dk)
        ipos = _search(xp, self.keys, ik)
        dpos = _search(xp, self.keys, dk)
        self._refuse(self._new_problems(ik, iv) + self._batch_problems(ik, dk, ipos, dpos))
        self.stats = PMAStats(levels=-1)
        self._phase("sort and check")
        if ik.size == 0 and dk.size == 0:
            return self.stats
        self.vals[dpos] = DEAD
        iseg = xp.minimum(ipos // self.S, self.nseg - 1)
        dseg = dpos // self.S
        self._bk, self._bv, self._dk = ik, iv, dk
        try:
            self._update(iseg, dseg)
        finally:
            self._bk = self._bv = self._dk = None
        if not self.stats.rebuilt:      # a rebuild recounted both
            self.num_edges += int(ik.size) - int(dk.size)
            _scatter_add(xp, self.deg, key_src(ik), 1)
            _scatter_add(xp, self.deg, key_src(dk), -1)
        self._phase("degrees")
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

    def _update(self, iseg, dseg) -> None:
        """Apply the batch (its inserts in self._bk, deletes marked DEAD) bottom-up."""
        if self.config.kernels and self.xp is not np:
            self._update_device(iseg, dseg)
            return
        xp = self.xp
        self._ipend = xp.ones(iseg.size, dtype=bool)     # not yet written into a window
        dpend = xp.ones(dseg.size, dtype=bool)
        windows = _sorted_union(xp, iseg, dseg)
        rewritten = []      # (first slot, end slot, delete range) of every window rewritten
        for level in range(self.height + 1):
            s0 = windows << level
            s1 = xp.minimum((windows + 1) << level, self.nseg)
            ib, ie = _search(xp, iseg, s0), _search(xp, iseg, s1)
            db, de = _search(xp, dseg, s0), _search(xp, dseg, s1)
            slots = (s1 - s0) * self.S
            lower, upper = self._thresholds(level)
            total = (_range_sums(xp, self.cnt, s0, s1) - _pending(xp, dpend, db, de)
                     + _pending(xp, self._ipend, ib, ie))
            if level == self.height:
                if self._root_overflows(int(total[0]), lower, upper):
                    self._rebuild_with_pending()
                    self._phase("rebuild")
                    return
                fit = xp.ones(1, dtype=bool)
            else:
                fit = (total <= upper * slots) & ((de == db) | (total >= lower * slots))
            done = xp.flatnonzero(fit)
            if done.size:
                self._merge(s0[done], s1[done], ib[done], ie[done], total[done])
                gone, _ = _ranges(xp, db[done], de[done] - db[done])
                dpend[gone] = False
                rewritten.append((s0[done] * self.S, s1[done] * self.S, db[done], de[done]))
                self._count_level(level, int(done.size), int(slots[done].sum()))
            self._phase(_level_phase(level))
            up = xp.flatnonzero(~fit)
            if up.size == 0:
                break
            windows = xp.unique(windows[up] >> 1)
        self._repair(rewritten)
        self._phase("rows")

    def _root_overflows(self, total: int, lower: float, upper: float) -> bool:
        """Whether the root holding `total` elements must be rebuilt."""
        return total > upper * self.capacity or (total < lower * self.capacity
                                                 and self.nseg > self.config.min_segments)

    def _count_level(self, level: int, windows: int, slots: int) -> None:
        self.stats.levels = level
        self.stats.windows += windows
        self.stats.slots += slots
        self.stats.per_level.append((level, windows, slots))

    def _update_device(self, iseg, dseg) -> None:
        """_update through the kernels of gpu/cuda/kernels/pma.cu: each level's windows are
        planned (ranges, totals, fit flags), those that fit merged in place (leaves by
        the leaf kernel, windows of up to `block_window` slots one block each, larger ones
        several blocks each) and the parents of the others are the next level's windows.
        Merges skip the windows that do not fit, so a level synchronises once (to count
        the parents) and the batch once more for its record (stats, repairs, checks)."""
        from gpu.cuda import launchers as ck
        xp, S, config = self.xp, self.S, self.config
        self._ipend = xp.ones(iseg.size, dtype=bool)
        dpend = xp.ones(dseg.size, dtype=bool)
        record = xp.zeros(ck.RECORD_LEVELS + 2 * (self.height + 1), dtype=np.uint64)
        block_window = min(config.block_window, ck.WINDOW_MAX)
        windows = _sorted_union(xp, iseg, dseg)
        rewritten = []      # (plan, fit flags, window slots) of every level planned
        for level in range(self.height + 1):
            lower, upper = self._thresholds(level)
            root = level == self.height
            leaf = level == 0 and not root and S <= 32
            window_slots = min(S << level, self.capacity)
            large = not leaf and window_slots > block_window
            # Large windows total their pending updates from prefix sums (the merge needs
            # the inserts' anyway), and their counts too when a warp's loop is too long.
            prefixes = None
            if large:
                counts = (_prefix(xp, self.cnt) if (1 << level) > PREFIX_COUNTS_ABOVE
                          else None)
                prefixes = (counts, _prefix(xp, self._ipend), _prefix(xp, dpend))
            mode = ck.PLAN_RANGES if leaf else ck.PLAN_TOTALS if root else ck.PLAN_DECIDE
            plan, fit = ck.plan_windows(windows, level, S, iseg, dseg, self.cnt, self._ipend,
                                        dpend, prefixes, mode, lower, upper, record)
            if leaf:
                ck.merge_leaves(self.keys, self.vals, self.cnt, plan, fit, self._bk, self._bv,
                                self._ipend, dpend, S, math.floor(upper * S + 1e-9),
                                math.ceil(lower * S - 1e-9), record)
                done = xp.count_nonzero(fit)
                record[ck.RECORD_LEVELS] = done
                record[ck.RECORD_LEVELS + 1] = done * S
            else:
                if root:
                    if self._root_overflows(int(plan[ck.PLAN_TOTAL, 0]), lower, upper):
                        self._take_record(record)
                        self._rebuild_with_pending()
                        self._phase("rebuild")
                        return
                    fit[0] = True
                    record[ck.RECORD_LEVELS + 2 * level] = 1
                    record[ck.RECORD_LEVELS + 2 * level + 1] = self.capacity
                if large:
                    ck.merge_large(self.keys, self.vals, self.cnt, plan, fit, window_slots,
                                   self._bk, self._bv, self._ipend, prefixes[1], S,
                                   config.merge_chunk, record)
                else:
                    ck.merge_windows(self.keys, self.vals, self.cnt, plan, fit, window_slots,
                                     self._bk, self._bv, self._ipend, S, record)
            rewritten.append((plan, fit, window_slots))
            self._phase(_level_phase(level))
            if root:
                break
            parents = ck.parent_windows(windows, plan, fit, self.cnt, record)
            windows = parents[parents >= 0]
            if windows.size == 0:
                break
        self._take_record(record)
        if self.stats.fixup:
            self._fill_gaps()
        for plan, fit, window_slots in rewritten:
            ck.set_rows(self.keys, self.cnt, S, plan, fit, window_slots, self._dk,
                        self.num_vertices, self.row)
        self._phase("rows")

    def _take_record(self, record) -> None:
        """Fold the device record of a batch into its stats (one synchronisation)."""
        from gpu.cuda import launchers as ck
        values = [int(x) for x in record.tolist()]
        if values[ck.RECORD_MISCOUNTED]:
            raise RuntimeError(f"{values[ck.RECORD_MISCOUNTED]} PMA windows held another "
                               f"number of elements than their plan counted")
        if values[ck.RECORD_EMPTIED] or values[ck.RECORD_FOLLOWERS]:
            self.stats.fixup = True     # empty segments: their gaps need the repair
        for level in range(self.height + 1):
            windows, slots = values[ck.RECORD_LEVELS + 2 * level:][:2]
            if windows:
                self._count_level(level, windows, slots)

    def _merge(self, s0, s1, ib, ie, total, target=None) -> None:
        """Rewrite windows [s0, s1) (segments) with their live elements and the batch's
        inserts ib..ie, spread evenly; into `target` (keys, vals, cnt, d0, d1) if given."""
        xp, S = self.xp, self.S
        slot, owner = _ranges(xp, s0 * S, (s1 - s0) * S)
        seg = slot // S
        live = ((slot - seg * S) < self.cnt[seg]) & (self.vals[slot] != DEAD)
        at = slot[live]
        okeys, ovals = self.keys[at], self.vals[at]
        ins, _ = _ranges(xp, ib, ie - ib)
        ins = ins[self._ipend[ins]]
        self._ipend[ins] = False
        ikeys, ivals = self._bk[ins], self._bv[ins]
        merged_k = xp.empty(okeys.size + ikeys.size + 1, dtype=np.uint64)
        merged_v = xp.empty(okeys.size + ikeys.size + 1, dtype=np.int32)
        # Both lists are sorted and their windows ordered, so one global merge keeps each
        # window's elements together in order.
        r_old = xp.arange(okeys.size, dtype=np.int64) + _search(xp, ikeys, okeys)
        r_ins = xp.arange(ikeys.size, dtype=np.int64) + _search(xp, okeys, ikeys)
        merged_k[r_old], merged_v[r_old] = okeys, ovals
        merged_k[r_ins], merged_v[r_ins] = ikeys, ivals
        merged_k[-1], merged_v[-1] = 0, 0       # what a slot with nothing before it copies
        start = _exclusive_cumsum(xp, total)
        if target is None:
            keys, vals, cnt, d0, d1 = self.keys, self.vals, self.cnt, s0, s1
        else:
            keys, vals, cnt, d0, d1 = target
        slot, owner = _ranges(xp, d0 * S, (d1 - d0) * S)
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
            self.stats.fixup = True

    def _repair(self, rewritten) -> None:
        """Gap copies after empty segments, then row offsets of the vertices whose first
        slot may have moved."""
        xp = self.xp
        if not rewritten:
            return
        begin = xp.concatenate([r[0] for r in rewritten])
        end = xp.concatenate([r[1] for r in rewritten])
        db = xp.concatenate([r[2] for r in rewritten])
        de = xp.concatenate([r[3] for r in rewritten])
        following = end // self.S
        inside = following < self.nseg
        if self.stats.fixup or bool((self.cnt[following[inside]] == 0).any()):
            self.stats.fixup = True
            self._fill_gaps()
        # Vertices whose row can change: after the last source before the window, up to
        # the last source in it now or before the batch (a deleted edge's).
        lo = xp.where(begin > 0, key_src(self.keys[xp.maximum(begin - 1, 0)]), -1)
        hi = key_src(self.keys[end - 1])
        if self._dk is not None and self._dk.size:
            last_del = key_src(self._dk[xp.maximum(de - 1, 0)])
            hi = xp.where(de > db, xp.maximum(hi, last_del), hi)
        hi = xp.minimum(hi, self.num_vertices - 1)
        lo = xp.minimum(lo, hi)
        vertex, _ = _ranges(xp, lo + 1, hi - lo)
        if vertex.size:
            self.row[vertex] = xp.searchsorted(self.keys, vertex.astype(np.uint64) << _SHIFT)

    def _fill_gaps(self) -> None:
        """Every gap copies the last real key before it (0 before the first): whole array,
        needed only when segments are empty (a nearly empty graph)."""
        xp = self.xp
        real = self.real_mask()
        seen = xp.cumsum(real, dtype=np.int64)
        positions = xp.flatnonzero(real)
        gap = ~real
        before = seen[gap]
        fill = xp.zeros(before.shape, dtype=np.uint64)
        some = before > 0
        fill[some] = self.keys[positions[before[some] - 1]]
        self.keys[gap] = fill

    def _rebuild_with_pending(self) -> None:
        """The root overflowed or underflowed: live elements plus the pending inserts,
        laid out anew at the target density."""
        xp = self.xp
        slot = xp.arange(self.capacity, dtype=np.int64)
        live = ((slot % self.S) < self.cnt[slot // self.S]) & (self.vals != DEAD)
        ok, ov = self.keys[live], self.vals[live]
        ik, iv = self._bk[self._ipend], self._bv[self._ipend]
        keys = xp.concatenate([ok, ik])
        vals = xp.concatenate([ov, iv])
        order = xp.argsort(keys)
        self._rebuild(keys[order], vals[order])

    def _rebuild(self, keys, vals) -> None:
        """Lay out sorted keys at the target density, as one window."""
        xp = self.xp
        n = int(keys.size)
        nseg = max(self.config.min_segments,
                   math.ceil(n / (self.config.target * self.S)))
        self._allocate(nseg)
        self._bk, self._bv = keys, vals
        self._ipend = xp.ones(n, dtype=bool)
        zero = xp.zeros(1, dtype=np.int64)
        total = xp.asarray([n], dtype=np.int64)
        # An empty source window and every key as its inserts, spread over all segments.
        self._merge(zero, zero, zero, total, total,
                    target=(self.keys, self.vals, self.cnt, zero,
                            xp.asarray([nseg], dtype=np.int64)))
        self.num_edges = n
        if self.stats.fixup:
            self._fill_gaps()
        vertices = xp.arange(self.num_vertices + 1, dtype=np.int64)
        self.row[:self.num_vertices + 1] = xp.searchsorted(
            self.keys, vertices.astype(np.uint64) << _SHIFT)
        self.deg[:self.num_vertices] = _bincount(
            xp, key_src(keys), self.num_vertices)[:self.num_vertices].astype(np.int32)
        self.stats.rebuilt = True
        self.stats.levels = self.height
        self.stats.slots += self.capacity

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
        want_row = xp.searchsorted(keys, xp.arange(n + 1, dtype=np.uint64) << _SHIFT)
        assert bool((self.row[:n + 1] == want_row).all()), "row offsets"
        src = key_src(rk)
        assert bool((src < n).all() and (self._dst(rk) < n).all()), "vertex range"
        assert bool((self.deg[:n] == _bincount(xp, src, n)[:n]).all()), "degrees"
        if expected_keys is not None:
            ek = xp.asarray(expected_keys, dtype=np.uint64)
            order = xp.argsort(ek)
            assert rk.shape == ek.shape and bool((rk == ek[order]).all()), \
                "stored edges differ"
            if expected_vals is not None:
                ev = xp.asarray(expected_vals, dtype=np.int32)[order]
                assert bool((vals[real] == ev).all()), "values"


# ---- array helpers (NumPy and CuPy alike) -------------------------------------------
def _search(xp, sorted_values, wanted, side: str = "left"):
    """Lower (or upper) bounds of `wanted` in `sorted_values` (0 for an empty one), int64."""
    if sorted_values.size == 0 or wanted.size == 0:
        return xp.zeros(wanted.shape, dtype=np.int64)
    return xp.searchsorted(sorted_values, wanted, side=side).astype(np.int64)


def _bincount(xp, values, length: int):
    """bincount with at least `length` bins (an empty input gives zeros)."""
    if values.size == 0:
        return xp.zeros(length, dtype=np.int64)
    return xp.bincount(values, minlength=length)


def _prefix(xp, values):
    """Exclusive prefix sums of `values` and their total: one entry more (int64)."""
    out = xp.zeros(values.size + 1, dtype=np.int64)
    if values.size:
        out[1:] = xp.cumsum(values, dtype=np.int64)
    return out


def _sorted_union(xp, a, b):
    """The distinct values of two sorted arrays, in order (merged by rank, not sorted)."""
    merged = xp.empty(a.size + b.size, dtype=a.dtype)
    merged[xp.arange(a.size, dtype=np.int64) + _search(xp, b, a)] = a
    merged[xp.arange(b.size, dtype=np.int64) + _search(xp, a, b, side="right")] = b
    first = xp.ones(merged.size, dtype=bool)
    first[1:] = merged[1:] != merged[:-1]
    return merged[first]


def _level_phase(level: int) -> str:
    """The profile's name for the time of a level."""
    return f"level {min(level, 2)}{'+' if level >= 2 else ''}"


def _exclusive_cumsum(xp, counts):
    out = xp.zeros(counts.size, dtype=np.int64)
    if counts.size > 1:
        out[1:] = xp.cumsum(counts[:-1])
    return out


def _ranges(xp, starts, lengths):
    """The concatenation of [starts[j], starts[j] + lengths[j]) and the j of each entry."""
    lengths = lengths.astype(np.int64)
    offsets = _exclusive_cumsum(xp, lengths)
    total = int(lengths.sum()) if lengths.size else 0
    if total == 0:
        return xp.zeros(0, dtype=np.int64), xp.zeros(0, dtype=np.int64)
    # Each range's start bumps the owner; empty ranges bump it at the same place.
    owner = xp.cumsum(_bincount(xp, offsets[1:], total + 1)[:total]).astype(np.int64)
    index = xp.arange(total, dtype=np.int64) - offsets[owner] + starts.astype(np.int64)[owner]
    return index, owner


def _pending(xp, flags, starts, ends):
    """How many of flags[starts[j]:ends[j]] are set, for each j."""
    running = xp.zeros(flags.size + 1, dtype=np.int64)
    running[1:] = xp.cumsum(flags, dtype=np.int64)
    return running[ends] - running[starts]


def _range_sums(xp, values, starts, ends):
    """sum(values[starts[j]:ends[j]]) for each j."""
    index, _ = _ranges(xp, starts, ends - starts)
    sums = xp.zeros(starts.size, dtype=np.int64)
    if index.size:
        running = xp.cumsum(values[index].astype(np.int64))
        last = _exclusive_cumsum(xp, ends - starts) + (ends - starts) - 1
        nonempty = ends > starts
        totals = running[last[nonempty]]
        prev = xp.concatenate([xp.zeros(1, dtype=np.int64), totals[:-1]])
        sums[nonempty] = totals - prev
    return sums


def _scatter_add(xp, target, index, value) -> None:
    if index.size:
        xp.add.at(target, index, xp.full(index.shape, value, dtype=target.dtype))
