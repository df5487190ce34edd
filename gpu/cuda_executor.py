"""The CUDA executor: the device mirror of the data graph and candidate bits, and `execute_cuda`.

`execute_cuda` takes what `gpu.executor.execute_cpu` takes (with the mirror in
place of the host graph) and returns the same `MatchSet`; this boundary is the
only place that copies between host and device.  The mirror holds the host
graph's pools as they are (lists with gaps between them, sorted by (label,
id)) and follows each batch by copying only the lists of the vertices the
batch touched, so per-batch traffic follows the batch; a pool that the host
grew or compacted is copied whole, which is amortised like the growth itself.

Importing this module needs CuPy; `gpu.device` decides whether to.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from gpu import cuda_kernels
from gpu.plan import TaskTypes, make_tasks
from gpu.results import MatchSet

# Share of free device memory the per-warp candidate buffers may take.
BUFFER_SHARE = 0.25


class KernelClock:
    """Device time of the matching kernels, from CUDA events around each launch (off by
    default; benchmarks turn it on to report how busy the GPU was during a batch)."""

    def __init__(self) -> None:
        self.enabled = False
        self._events: list[tuple[cp.cuda.Event, cp.cuda.Event]] = []

    def reset(self) -> None:
        self._events.clear()

    def launch(self, kernel, *args, **kwargs) -> None:
        if not self.enabled:
            kernel(*args, **kwargs)
            return
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        kernel(*args, **kwargs)
        end.record()
        self._events.append((start, end))

    def seconds(self) -> float:
        """Kernel seconds since the last reset (waits for them)."""
        total = 0.0
        for start, end in self._events:
            end.synchronize()
            total += cp.cuda.get_elapsed_time(start, end) / 1000.0
        return total


KERNEL_CLOCK = KernelClock()


def _list_positions(start: np.ndarray, deg: np.ndarray, vertices: np.ndarray) -> np.ndarray:
    """Pool positions of the lists of `vertices`, concatenated."""
    s = start[vertices].astype(np.int64)
    d = deg[vertices].astype(np.int64)
    total = int(d.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    first = np.repeat(s - (np.cumsum(d) - d), d)
    return first + np.arange(total, dtype=np.int64)


class DeviceMirror:
    """Device copies of a DynamicGraph's arrays and of each query's candidate bits."""

    POOLS = ("nbr", "nlab", "elab", "rank")
    VERTEX = ("start", "deg", "label")

    def __init__(self) -> None:
        self.arrays: dict[str, cp.ndarray] = {}
        self._host: dict[str, np.ndarray] = {}     # the host array each copy was made from
        self.cand: dict[int, cp.ndarray] = {}
        self._host_cand: dict[int, np.ndarray] = {}
        self._plans: dict[int, dict[int, tuple[TaskTypes, tuple]]] = {}
        self._ranked: tuple | None = None       # (us, vs, ranks) on the device
        self.max_degree = 0

    # ---- graph ---------------------------------------------------------
    def sync(self, graph, touched: np.ndarray | None = None) -> None:
        """Bring the copies up to date after a batch that touched `touched` (None: all)."""
        self.max_degree = graph.max_degree
        for name in self.VERTEX + self.POOLS:
            host = getattr(graph, name)
            if touched is None or self._host.get(name) is not host:
                self.arrays[name] = cp.asarray(host)
                self._host[name] = host
        if touched is None or len(touched) == 0:
            return
        touched = np.asarray(touched, dtype=np.int64)
        dev_touched = cp.asarray(touched)
        for name in self.VERTEX:
            self.arrays[name][dev_touched] = cp.asarray(getattr(graph, name)[touched])
        positions = _list_positions(graph.start, graph.deg, touched)
        if len(positions):
            dev_positions = cp.asarray(positions)
            for name in self.POOLS:
                self.arrays[name][dev_positions] = cp.asarray(getattr(graph, name)[positions])

    def set_ranks(self, us: np.ndarray, vs: np.ndarray, ranks: np.ndarray) -> None:
        """DynamicGraph.set_ranks on the device copy (found there, by a kernel); the
        edges are kept for clear_ranks."""
        self._ranked = tuple(cp.asarray(np.ascontiguousarray(a, dtype=np.int32))
                             for a in (us, vs, ranks))
        self._rank_kernel(clear=False)

    def clear_ranks(self) -> None:
        """Zero the ranks set_ranks wrote."""
        if self._ranked is not None:
            self._rank_kernel(clear=True)
            self._ranked = None

    def _rank_kernel(self, clear: bool) -> None:
        a = self.arrays
        cuda_kernels.set_edge_ranks(a["start"], a["deg"], a["nbr"], a["nlab"], a["label"],
                                    a["rank"], *self._ranked, clear=clear)

    def check(self, graph, cands: dict[int, np.ndarray]) -> None:
        """Assert the device copies equal the host structures where they are read (tests)."""
        n = graph.num_slots
        for name in self.VERTEX:
            assert np.array_equal(self.arrays[name][:n].get(), getattr(graph, name)[:n]), name
        alive = np.flatnonzero(graph.alive[:n])
        positions = _list_positions(graph.start, graph.deg, alive)
        for name in self.POOLS:
            device = self.arrays[name][cp.asarray(positions)].get()
            assert np.array_equal(device, getattr(graph, name)[positions]), name
        assert set(self.cand) == set(cands), "device candidate tables differ in queries"
        for qid, host in cands.items():
            assert np.array_equal(self.cand[qid][:n].get(), host[:n]), f"cand of {qid}"

    # ---- candidate bits ------------------------------------------------
    def sync_cand(self, qid: int, host: np.ndarray, touched: np.ndarray | None = None) -> None:
        if touched is None or self._host_cand.get(qid) is not host:
            self.cand[qid] = cp.asarray(host)
            self._host_cand[qid] = host
        elif len(touched):
            touched = np.asarray(touched, dtype=np.int64)
            self.cand[qid][cp.asarray(touched)] = cp.asarray(host[touched])

    def drop_query(self, qid: int) -> None:
        self.cand.pop(qid, None)
        self._host_cand.pop(qid, None)
        self._plans.pop(qid, None)

    # ---- plans ---------------------------------------------------------
    def plan_arrays(self, qid: int, types: TaskTypes) -> tuple:
        """Device copies of a plan's task types (made once per plan)."""
        per_query = self._plans.setdefault(qid, {})
        cached = per_query.get(id(types))
        if cached is not None and cached[0] is types:
            return cached[1]
        level_of = np.argsort(types.orders, axis=1).astype(np.int32)
        host = (types.query_labels, types.orders, level_of, types.bw_count, types.bw_level,
                types.bw_label, types.tail_free.astype(np.uint8), types.perms,
                types.multiplicity)
        dev = tuple(cp.asarray(np.ascontiguousarray(a)) for a in host)
        per_query[id(types)] = (types, dev)
        return dev

    def graph_arrays(self, qid: int) -> tuple:
        a = self.arrays
        return (a["start"], a["deg"], a["nbr"], a["nlab"], a["elab"], a["rank"], self.cand[qid])


def _warps_and_width(mirror: DeviceMirror, n: int, num_tasks: int) -> tuple[int, int]:
    width = mirror.max_degree + 1
    per_warp = n * width * 4
    free, _ = cp.cuda.runtime.memGetInfo()
    budget = int(free * BUFFER_SHARE) // per_warp
    step = cuda_kernels.WARPS_PER_BLOCK
    warps = min(cuda_kernels.resident_warps(), budget, -(-num_tasks // step) * step)
    warps -= warps % step
    if warps < cuda_kernels.WARPS_PER_BLOCK:
        raise MemoryError(f"candidate buffers of {per_warp} bytes per warp do not fit in "
                          f"{free} free bytes of device memory")
    return warps, width


def execute_cuda(mirror: DeviceMirror, qid: int, cand: np.ndarray, types: TaskTypes,
                 us: np.ndarray, vs: np.ndarray, labels: np.ndarray, ranks: np.ndarray,
                 list_limit: int, sharing: bool = True,
                 share_capacity: int = cuda_kernels.SHARE_CAPACITY,
                 share_every: int = cuda_kernels.SHARE_EVERY) -> MatchSet:
    """Count (and list up to `list_limit`) the matches of `types` started from edges us-vs.

    `cand` is the host copy of the query's candidate bits (tasks are made on the host);
    `sharing` lets busy warps hand work to idle ones while counting."""
    n = types.orders.shape[1]
    empty = np.empty((0, n), dtype=np.int32)
    tu, tv, tr, tt = make_tasks(types, cand, us, vs, labels, ranks)
    if len(tu) == 0:
        return MatchSet(0, empty, False)
    tasks = tuple(cp.asarray(a) for a in (tu, tv, tr, tt))
    plan = mirror.plan_arrays(qid, types)
    graph = mirror.graph_arrays(qid)
    warps, width = _warps_and_width(mirror, n, len(tu))
    bufs = cp.empty(warps * n * width, dtype=np.int32)
    counts = cp.zeros(len(tu), dtype=np.int64)
    no_offsets = cp.zeros(0, dtype=np.int64)
    no_out = cp.zeros((0, n), dtype=np.int32)
    members = types.perms.shape[1]
    KERNEL_CLOCK.launch(cuda_kernels.match_tasks, graph, plan, n, members, tasks, bufs,
                        width, warps, counts, no_offsets, no_out, 0, False, sharing,
                        share_capacity, share_every)
    per_task = counts * plan[-1][tasks[3]]
    total = int(per_task.sum())
    if list_limit <= 0 or total == 0:
        return MatchSet(total, empty, False)
    offsets = cp.zeros(len(tu), dtype=np.int64)
    cp.cumsum(per_task[:-1], out=offsets[1:])
    rows = cp.full((min(total, list_limit), n), -1, dtype=np.int32)
    KERNEL_CLOCK.launch(cuda_kernels.match_tasks, graph, plan, n, members, tasks, bufs,
                        width, warps, cp.zeros(len(tu), dtype=np.int64), offsets, rows,
                        rows.shape[0], True)
    return MatchSet(total, rows.get(), total > rows.shape[0])
