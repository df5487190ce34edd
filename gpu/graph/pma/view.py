"""The packed memory array's read view: each vertex's neighbours as one gap-free list in
pooled arrays, refreshed for the vertices a batch touched.

The matcher reads a vertex's neighbours of one label as a contiguous run; in the array
they are 8-byte keys between gap slots, which made matching 1.22–1.26× slower than on
the host lists' layout (docs/benchmarks.md, 2026-11-22).  The view has that layout
(gpu/graph/lists.py): per vertex a `start`, a capacity and a length `deg` (the array's
degree as of the last refresh: the array's own may run ahead of the view, see
gpu/cuda/device_graph.py) in the pools `nbr` (neighbour id), `nlab` (its label index, as
in the keys), `elab` (edge label) and `rank` (a phase's total-order ranks, zero between
phases).

After a batch the touched vertices' lists are copied again from the array; one that
outgrew its capacity moves to fresh room at the pools' end with twice its degree.  When
the pools are full they are rebuilt for every vertex (each list with a quarter of its
degree to spare), which drops the room moves left behind.  Where lists go is decided on
the host from the host's degrees, so a batch uploads only its movers' starts and reads
nothing back.

The arrays live on the array's `xp`.  On CuPy the copy is the kernels of
gpu/cuda/kernels/view.cu (a warp per vertex, a block per long list); on NumPy it is
`_copy_lists` below, the same result, which the CPU tests check and the device tests
compare with the kernels.
"""
from __future__ import annotations

import numpy as np

from gpu.graph.pma import xp_ops

# Lists of at least this many entries are copied by blocks of threads, not a warp: one
# block per LONG_PIECE entries, so a hub's list is many blocks' work.
LONG_LIST = 1024
LONG_PIECE = 16384


class ListView:
    """Gap-free neighbour lists of a PackedMemoryArray's vertices (module docstring)."""

    POOLS = ("nbr", "nlab", "elab", "rank")

    def __init__(self, xp, min_capacity: int = 4) -> None:
        self.xp = xp
        self.min_capacity = max(1, int(min_capacity))
        self.start = np.zeros(0, dtype=np.int64)        # host: where each list starts
        self.cap = np.zeros(0, dtype=np.int64)          # host: its capacity
        self.device_start = xp.zeros(0, dtype=np.int64)
        self.deg = xp.zeros(0, dtype=np.int32)         # device: each list's length
        self.top = 0                                    # first pool entry never handed out
        self.rebuilds = 0
        self._allocate(0)

    def _allocate(self, size: int) -> None:
        xp = self.xp
        for name in self.POOLS:
            setattr(self, name, xp.zeros(size, dtype=np.int32))

    @property
    def size(self) -> int:
        return int(self.nbr.shape[0])

    def memory_bytes(self) -> int:
        return int(sum(getattr(self, name).nbytes for name in self.POOLS)
                   + self.device_start.nbytes + self.deg.nbytes)

    def ensure_vertices(self, n: int) -> None:
        """Make vertex slots 0..n-1 valid (new ones have no list yet)."""
        if n <= self.start.shape[0]:
            return
        size = max(n, 2 * self.start.shape[0])
        start = np.zeros(size, dtype=np.int64)
        cap = np.zeros(size, dtype=np.int64)
        old = self.start.shape[0]
        start[:old], cap[:old] = self.start, self.cap
        self.start, self.cap = start, cap
        device = self.xp.zeros(size, dtype=np.int64)
        device[:old] = self.device_start
        self.device_start = device
        deg = self.xp.zeros(size, dtype=np.int32)
        deg[:old] = self.deg[:old]
        self.deg = deg

    # ---- following the array ---------------------------------------------
    def rebuild(self, pma, deg: np.ndarray) -> None:
        """Lay out every vertex's list afresh and copy all of them (a load, full pools);
        `deg` are the host's degrees of vertices 0..n-1, the array's own."""
        deg = np.asarray(deg, dtype=np.int64)
        n = deg.shape[0]
        self.ensure_vertices(n)
        cap = np.where(deg > 0, np.maximum(self.min_capacity, deg + deg // 4), 0)
        self.cap[:] = 0
        self.cap[:n] = cap
        self.start[:] = 0
        self.start[:n] = np.cumsum(cap) - cap
        self.top = int(cap.sum())
        # Room for moves: half as much again as the lists hold.
        self._allocate(self.top + self.top // 2 + self.min_capacity)
        self.device_start = self.xp.asarray(self.start)
        self.deg[:] = 0
        self.rebuilds += 1
        self._copy(pma, np.flatnonzero(deg > 0), deg)

    def refresh(self, pma, deg: np.ndarray, touched: np.ndarray, on_device=None) -> None:
        """Copy again the lists of `touched` vertices (host array; `on_device`: the same
        on the device, so not uploaded again) after a batch changed them in `pma`; `deg` as
        in rebuild (read at the touched vertices only: a batch's cost follows the
        batch)."""
        self.ensure_vertices(deg.shape[0])
        touched = np.asarray(touched, dtype=np.int64)
        if touched.size == 0:
            return
        grown = touched[deg[touched] > self.cap[touched]]
        if grown.size:
            cap = np.maximum(self.min_capacity, 2 * deg[grown].astype(np.int64))
            need = int(cap.sum())
            if self.top + need > self.size:
                self.rebuild(pma, deg)
                return
            start = self.top + np.cumsum(cap) - cap
            self.start[grown], self.cap[grown] = start, cap
            self.top += need
            xp = self.xp
            self.device_start[xp.asarray(grown)] = xp.asarray(start)
        # Those left without edges too: their length is 0.
        self._copy(pma, touched, deg, on_device)

    def _copy(self, pma, vertices: np.ndarray, deg: np.ndarray, on_device=None) -> None:
        """Copy the lists of `vertices` from the array (`on_device`: the same, there); on
        the device a warp each, and blocks for those of LONG_LIST entries or more (a hub's,
        which one warp would walk for milliseconds)."""
        if vertices.size == 0:
            return
        if self.xp is np:
            self._copy_lists(pma, vertices)
            return
        from gpu.cuda import pma_launchers
        xp = self.xp
        long_lists = deg[vertices] >= LONG_LIST
        short, long = vertices[~long_lists], vertices[long_lists]
        if short.size:
            if on_device is None:
                listed, long_from = xp.asarray(short, dtype=np.int64), 2**31 - 1
            else:
                # On the device already, they go whole (no mask to apply there, which
                # waits for the device): the kernel leaves the long ones to the blocks
                # below, by their degree in the array, which is the host's `deg`.
                listed, long_from = on_device.astype(np.int64, copy=False), LONG_LIST
            pma_launchers.refresh_lists(pma, listed, self.device_start, self.nbr,
                                        self.nlab, self.elab, self.deg, long_from)
        if long.size:
            pieces = -(-deg[long] // LONG_PIECE)
            pma_launchers.refresh_long_lists(pma, long, pieces, self.device_start, self.nbr,
                                             self.nlab, self.elab, self.deg)

    def _copy_lists(self, pma, vertices) -> None:
        """Each vertex's real slots in the array, in order, to its list (any xp)."""
        xp = pma.xp
        vertices = xp.asarray(vertices, dtype=np.int64)
        lo = pma.row[vertices]
        slots, owner = xp_ops.ranges(xp, lo, pma.row[vertices + 1] - lo)
        real = (slots % pma.S) < pma.cnt[slots // pma.S]
        slots, owner = slots[real], owner[real]
        self.deg[vertices] = pma.deg[vertices]
        first = xp_ops.exclusive_cumsum(xp, pma.deg[vertices].astype(np.int64))
        at = self.device_start[vertices][owner] + xp.arange(slots.size, dtype=np.int64) \
            - first[owner]
        keys = pma.keys[slots]
        low = keys & np.uint64(0xFFFFFFFF)
        self.nbr[at] = (keys & pma.vertex_mask).astype(np.int32)
        self.nlab[at] = (low >> np.uint64(pma.config.vertex_bits)).astype(np.int32)
        self.elab[at] = pma.vals[slots]

    # ---- tests --------------------------------------------------------------
    def check(self, pma, deg: np.ndarray) -> None:
        """Assert every list of vertices 0..n-1 holds exactly its array slots in order,
        within its own capacity, and no two lists overlap; the ranks are all zero."""
        deg = np.asarray(deg, dtype=np.int64)
        n = deg.shape[0]
        xp = self.xp
        assert self.start.shape[0] >= n, "vertex slots beyond the view"
        for name, array in (("array", pma.deg), ("view", self.deg)):
            assert np.array_equal(xp.asnumpy(array[:n]) if xp is not np else array[:n],
                                  deg), f"{name} degrees"
        assert bool((deg <= self.cap[:n]).all()), "a list past its capacity"
        live = np.flatnonzero(self.cap[:n] > 0)
        order = live[np.argsort(self.start[live], kind="stable")]
        ends = self.start[order] + self.cap[order]
        assert bool((ends[:-1] <= self.start[order][1:]).all()), "lists overlap"
        assert not live.size or int(ends.max()) <= self.top <= self.size, "past the top"
        device_start = self.device_start[:n]
        assert np.array_equal(device_start if xp is np else device_start.get(),
                              self.start[:n]), "device starts"
        expected = ListView(xp, self.min_capacity)
        expected.start, expected.cap = self.start.copy(), self.cap.copy()
        expected.device_start = self.device_start
        expected.deg = xp.zeros_like(self.deg)
        expected._allocate(self.size)
        expected._copy_lists(pma, np.flatnonzero(deg > 0))
        at = xp.asarray(xp_ops.ranges(np, self.start[:n], deg)[0])
        for name in ("nbr", "nlab", "elab"):
            assert bool((getattr(self, name)[at] == getattr(expected, name)[at]).all()), name
        assert not bool(self.rank.any()), "ranks left set"
