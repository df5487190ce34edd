"""The CUDA executor: the device's graph, candidate bits and plans, and `execute_cuda`.

`execute_cuda` takes what `gpu.executor.execute_cpu` takes (with the mirror in
place of the host graph) and returns the same `MatchSet`; this boundary is the
only place that copies between host and device.  The data graph on the device
is a packed memory array updated from each batch's edge changes, or the host's
pools mirrored per touched vertex (gpu/device_graph.py); candidate bits follow
the touched vertices, so per-batch traffic follows the batch.

Importing this module needs CuPy; `gpu.device` decides whether to.
"""
from __future__ import annotations

import cupy as cp
import cupyx
import numpy as np

from gpu import cuda_kernels
from gpu.device_graph import make_device_graph
from gpu.plan import TaskTypes, make_tasks
from gpu.pma import PMAConfig
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


class DeviceMirror:
    """The device graph (gpu/device_graph.py, in the configured layout), each query's
    candidate bits, and the device copies of the plans."""

    def __init__(self, layout: str = "pma", segment_size: int = PMAConfig.segment_size) -> None:
        self.graph = make_device_graph(layout, segment_size)
        self.cand: dict[int, cp.ndarray] = {}
        self._host_cand: dict[int, np.ndarray] = {}
        self._plans: dict[int, dict[int, tuple[TaskTypes, tuple]]] = {}
        self._stacked: dict[tuple, tuple] = {}  # stacked_plans, by (qid, plan) sequence
        self._cand_ptrs: tuple | None = None    # (addresses, their device table)

    # ---- graph ---------------------------------------------------------
    def sync(self, graph, touched: np.ndarray | None = None, batch=None) -> None:
        """Follow the host graph after a batch (None: copy it whole); `touched` are the
        vertices the batch touched, `batch` its EffectiveBatch."""
        self.graph.sync(graph, touched, batch)
        if batch is None:
            # A whole load's temporaries (sorts of every key) would stay in CuPy's pool.
            cp.get_default_memory_pool().free_all_blocks()

    @property
    def max_degree(self) -> int:
        return self.graph.max_degree

    def set_ranks(self, us: np.ndarray, vs: np.ndarray, ranks: np.ndarray) -> None:
        """Rank the phase's update edges us-vs for the total-order rule."""
        self.graph.set_ranks(us, vs, ranks)

    def clear_ranks(self) -> None:
        self.graph.clear_ranks()

    def admit(self, labels, slots: int) -> str | None:
        """Why the device graph cannot take these vertex labels and `slots` vertex slots
        (None when it can); nothing changes."""
        return self.graph.admit(labels, slots)

    def register_labels(self, labels) -> None:
        self.graph.register_labels(labels)

    def check(self, graph, cands: dict[int, np.ndarray]) -> None:
        """Assert the device graph and candidate bits equal the host's (tests)."""
        self.graph.check(graph)
        n = graph.num_slots
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
        self._stacked = {key: value for key, value in self._stacked.items()
                         if all(q != qid for q, _ in key)}

    # ---- plans ---------------------------------------------------------
    def plan_arrays(self, qid: int, types: TaskTypes) -> tuple:
        """Device copies of a plan's task types (made once per plan)."""
        per_query = self._plans.setdefault(qid, {})
        cached = per_query.get(id(types))
        if cached is not None and cached[0] is types:
            return cached[1]
        level_of = np.argsort(types.orders, axis=1).astype(np.int32)
        # Labels per type (not per query), so types of several queries share a launch.
        labels = np.tile(self.graph.kernel_labels(types.query_labels), (types.count, 1))
        host = (labels, types.orders, level_of, types.bw_count, types.bw_level,
                types.bw_label, types.tail_free.astype(np.uint8), types.perms,
                types.multiplicity)
        dev = tuple(cp.asarray(np.ascontiguousarray(a)) for a in host)
        per_query[id(types)] = (types, dev)
        return dev

    def stacked_plans(self, plans: list[tuple[int, TaskTypes]]) -> tuple[tuple, int]:
        """The task types of several queries as one plan (types renumbered in order, the
        per-type candidate-table row added) and its orbit width; kept while the same
        queries stand with the same plans, so a batch does not stack them again."""
        key = tuple((qid, id(types)) for qid, types in plans)
        cached = self._stacked.get(key)
        if cached is not None and all(a is b for a, (_, b) in zip(cached[0], plans,
                                                                  strict=True)):
            return cached[1], cached[2]
        parts = [self.plan_arrays(qid, types) for qid, types in plans]
        members = max(plan[7].shape[1] for plan in parts)
        # perms [T, members, n] padded to the widest orbit (read only when listing, which
        # runs one query per launch).
        stacked = [cp.concatenate([cp.pad(part, ((0, 0), (0, members - part.shape[1]),
                                                 (0, 0))) for part in column])
                   if i == 7 else cp.concatenate(column)
                   for i, column in enumerate(zip(*parts))]
        rows = np.concatenate([np.full(types.count, row, dtype=np.int32)
                               for row, (_, types) in enumerate(plans)])
        plan = (stacked[0], cp.asarray(rows), *stacked[1:])
        if len(self._stacked) >= 8:     # sets of counted queries come and go: keep a few
            self._stacked.clear()
        self._stacked[key] = (tuple(types for _, types in plans), plan, members)
        return plan, members

    def cand_table(self, qids) -> cp.ndarray:
        """The address of each query's candidate bits, in order, on the device (uploaded
        again only when an address changed)."""
        ptrs = tuple(self.cand[q].data.ptr for q in qids)
        if self._cand_ptrs is None or self._cand_ptrs[0] != ptrs:
            self._cand_ptrs = (ptrs, cp.asarray(np.array(ptrs, dtype=np.uint64)))
        return self._cand_ptrs[1]


def _warps_and_width(mirror: DeviceMirror, n: int, num_tasks: int,
                     kernel: str) -> tuple[int, int]:
    width = mirror.max_degree + 1
    per_warp = n * width * 4
    free, _ = cp.cuda.runtime.memGetInfo()
    budget = int(free * BUFFER_SHARE) // per_warp
    step = cuda_kernels.WARPS_PER_BLOCK
    warps = min(cuda_kernels.resident_warps(kernel), budget, -(-num_tasks // step) * step)
    warps -= warps % step
    if warps < cuda_kernels.WARPS_PER_BLOCK:
        raise MemoryError(f"candidate buffers of {per_warp} bytes per warp do not fit in "
                          f"{free} free bytes of device memory")
    return warps, width


class _Launch:
    """The tasks of one or more queries (of one size) as one kernel launch."""

    def __init__(self, mirror: DeviceMirror, jobs, us, vs, labels, ranks) -> None:
        n = jobs[0][2].orders.shape[1]
        host_tasks, self.bounds = [], [0]
        type_base = 0
        for qid, cand, types in jobs:
            tu, tv, tr, tt = make_tasks(types, cand, us, vs, labels, ranks)
            host_tasks.append((tu, tv, tr, tt + np.int32(type_base)))
            type_base += types.count
            self.bounds.append(self.bounds[-1] + len(tu))
        self.n = n
        self.num_tasks = self.bounds[-1]
        if self.num_tasks == 0:
            return
        self.tasks = tuple(cp.asarray(np.concatenate(column)) for column in zip(*host_tasks))
        self.plan, self.members = mirror.stacked_plans([(job[0], job[2]) for job in jobs])
        self.graph = mirror.graph.arrays()
        self.kernel = cuda_kernels.GRAPH_LAYOUTS[type(self.graph)][0]
        self.cand_ptrs = mirror.cand_table([job[0] for job in jobs])
        self.warps, self.width = _warps_and_width(mirror, n, self.num_tasks, self.kernel)
        self.bufs = cp.empty(self.warps * n * self.width, dtype=np.int32)

    def run(self, counts, offsets, out, limit: int, listing: bool, sharing: bool,
            share_capacity: int, share_every: int) -> None:
        KERNEL_CLOCK.launch(cuda_kernels.match_tasks, self.graph, self.cand_ptrs, self.plan,
                            self.n, self.members, self.tasks, self.bufs, self.width, self.warps,
                            counts, offsets, out, limit, listing, sharing, share_capacity,
                            share_every)

    def per_task(self, counts):
        """Matches per task: the searched count times the type's orbit size."""
        return counts * self.plan[-1][self.tasks[3]]


# Pinned buffers whose asynchronous copies may still be running, with the event after each:
# kept until the copy is done, whoever drops its PendingCounts (CuPy's pinned pool would
# hand a freed block to the next upload's staging while the copy still writes it).
_IN_FLIGHT: list[tuple[cp.cuda.Event, np.ndarray]] = []


def _keep_until_copied(event: cp.cuda.Event, host: np.ndarray) -> None:
    _IN_FLIGHT[:] = [(e, h) for e, h in _IN_FLIGHT if not e.done]
    _IN_FLIGHT.append((event, host))


class PendingCounts:
    """Totals of a shared launch on their way to the host: one asynchronous copy per query
    size into pinned memory, queued behind the kernels, and an event after it, so the host
    can go on (with the next batch) until it needs them."""

    def __init__(self, size: int) -> None:
        self._size = size
        # (indices of the jobs, query size, pinned totals or None when no task, event)
        self._parts: list[tuple[list[int], int, np.ndarray | None, cp.cuda.Event | None]] = []
        self._results: list[MatchSet] | None = None

    def add(self, members: list[int], n: int, totals: cp.ndarray | None) -> None:
        if totals is None:
            self._parts.append((members, n, None, None))
            return
        host = cupyx.empty_pinned(totals.shape, dtype=totals.dtype)
        cp.asnumpy(totals, out=host, blocking=False)
        event = cp.cuda.Event(block=False, disable_timing=True)
        event.record()
        _keep_until_copied(event, host)
        self._parts.append((members, n, host, event))

    def resolve(self) -> list[MatchSet]:
        """One MatchSet per job (waits for the copies only, not for later work)."""
        if self._results is not None:
            return self._results
        results: list[MatchSet | None] = [None] * self._size
        for members, n, host, event in self._parts:
            if event is not None:
                event.synchronize()
            totals = [0] * len(members) if host is None else host.tolist()
            for i, total in zip(members, totals, strict=True):
                results[i] = MatchSet(int(total), np.empty((0, n), dtype=np.int32), False)
        self._results = results
        return results


def launch_cuda_counts(mirror: DeviceMirror, jobs, us: np.ndarray, vs: np.ndarray,
                       labels: np.ndarray, ranks: np.ndarray, sharing: bool = True,
                       share_capacity: int = cuda_kernels.SHARE_CAPACITY,
                       share_every: int = cuda_kernels.SHARE_EVERY) -> PendingCounts:
    """Queue the counting of several queries' matches started from edges us-vs, one launch
    per query size: `jobs` is [(qid, host candidate bits, task types)]."""
    pending = PendingCounts(len(jobs))
    by_size: dict[int, list[int]] = {}
    for i, job in enumerate(jobs):
        by_size.setdefault(job[2].orders.shape[1], []).append(i)
    for n, members in by_size.items():
        launch = _Launch(mirror, [jobs[i] for i in members], us, vs, labels, ranks)
        if not launch.num_tasks:
            pending.add(members, n, None)
            continue
        counts = cp.zeros(launch.num_tasks, dtype=np.int64)
        launch.run(counts, cp.zeros(0, dtype=np.int64), cp.zeros((0, n), dtype=np.int32),
                   0, False, sharing, share_capacity, share_every)
        running = cp.cumsum(launch.per_task(counts))
        # A query with no task has its end before its start: its total is the diff, 0.
        ends = cp.asarray(np.asarray(launch.bounds[1:], dtype=np.int64) - 1)
        at_ends = cp.where(ends >= 0, running[cp.maximum(ends, 0)], 0)
        totals = at_ends.copy()
        totals[1:] -= at_ends[:-1]
        pending.add(members, n, totals)
    return pending


def execute_cuda_counts(mirror: DeviceMirror, jobs, us: np.ndarray, vs: np.ndarray,
                        labels: np.ndarray, ranks: np.ndarray, sharing: bool = True,
                        share_capacity: int = cuda_kernels.SHARE_CAPACITY,
                        share_every: int = cuda_kernels.SHARE_EVERY) -> list[MatchSet]:
    """Count the matches of several queries started from edges us-vs, in one launch per
    query size: `jobs` is [(qid, host candidate bits, task types)]; one MatchSet each."""
    return launch_cuda_counts(mirror, jobs, us, vs, labels, ranks, sharing, share_capacity,
                              share_every).resolve()


def execute_cuda(mirror: DeviceMirror, qid: int, cand: np.ndarray, types: TaskTypes,
                 us: np.ndarray, vs: np.ndarray, labels: np.ndarray, ranks: np.ndarray,
                 list_limit: int, sharing: bool = True,
                 share_capacity: int = cuda_kernels.SHARE_CAPACITY,
                 share_every: int = cuda_kernels.SHARE_EVERY) -> MatchSet:
    """Count (and list up to `list_limit`) the matches of `types` started from edges us-vs.

    `cand` is the host copy of the query's candidate bits (tasks are made on the host);
    `sharing` lets busy warps hand work to idle ones while counting."""
    if list_limit <= 0:
        return execute_cuda_counts(mirror, [(qid, cand, types)], us, vs, labels, ranks,
                                   sharing, share_capacity, share_every)[0]
    n = types.orders.shape[1]
    empty = np.empty((0, n), dtype=np.int32)
    launch = _Launch(mirror, [(qid, cand, types)], us, vs, labels, ranks)
    if launch.num_tasks == 0:
        return MatchSet(0, empty, False)
    counts = cp.zeros(launch.num_tasks, dtype=np.int64)
    launch.run(counts, cp.zeros(0, dtype=np.int64), cp.zeros((0, n), dtype=np.int32), 0,
               False, sharing, share_capacity, share_every)
    per_task = launch.per_task(counts)
    total = int(per_task.sum())
    if total == 0:
        return MatchSet(0, empty, False)
    offsets = cp.zeros(launch.num_tasks, dtype=np.int64)
    cp.cumsum(per_task[:-1], out=offsets[1:])
    rows = cp.full((min(total, list_limit), n), -1, dtype=np.int32)
    launch.run(cp.zeros(launch.num_tasks, dtype=np.int64), offsets, rows, rows.shape[0], True,
               False, share_capacity, share_every)
    return MatchSet(total, rows.get(), total > rows.shape[0])
