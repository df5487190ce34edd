"""The CUDA executor: the device's graph, signatures and plans, and `execute_cuda`.

`execute_cuda` takes what `gpu.cpu.executor.execute_cpu` takes (with the mirror in
place of the host graph and its candidate bits) and returns the same `MatchSet`;
this boundary is the only place that copies between host and device.  The data
graph on the device is a packed memory array updated from each batch's edge
changes, or the host's pools mirrored per touched vertex (gpu/cuda/device_graph.py);
signatures and candidate bits are updated there for the touched vertices
(gpu/cuda/signatures.py), and each launch makes its tasks there from the update
edges, so per-batch traffic is the batch itself.

Importing this module needs CuPy; `gpu.cuda.device` decides whether to.
"""
from __future__ import annotations

import cupy as cp
import cupyx
import numpy as np

from gpu.cuda import launchers
from gpu.config import EngineConfig
from gpu.cuda.device_graph import make_device_graph
from gpu.cuda.signatures import DeviceSignatures
from gpu.plan.planner import TaskTypes
from gpu.graph.pma import PMAConfig
from gpu.results import MatchSet

# Share of free device memory the per-warp candidate buffers may take.
BUFFER_SHARE = 0.25
# A listing of at most this many rows is queued whole (a device buffer of `limit` rows,
# its count and rows read back when the batch is finished); a larger limit reads each
# slice's count back first, to size its rows by what was found.
QUEUED_LIST_ROWS = 1 << 20
# Most (edge, task type) pairs a listing launch tests: its per-task counts and offsets are
# sized by the pairs, not by the tasks made (which stay on the device).
LIST_LAUNCH_PAIRS = 1 << 22


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
    """The device graph (gpu/cuda/device_graph.py, in the configured layout), the signatures
    and candidate bits (gpu/cuda/signatures.py), and the device copies of the plans."""

    def __init__(self, layout: str = "pma", segment_size: int = PMAConfig.segment_size) -> None:
        self.graph = make_device_graph(layout, segment_size)
        self.signatures = DeviceSignatures()
        self._plans: dict[int, dict[int, tuple[TaskTypes, launchers.DevicePlan]]] = {}
        self._stacked: dict[tuple, tuple] = {}  # stacked_plans, by (qid, plan) sequence
        self._cand_ptrs: tuple | None = None    # (addresses, their device table)
        self._host = None                       # the host graph synced last
        # External id per vertex slot (int64), kept only once a listing needed it.
        self._ext: cp.ndarray | None = None

    # ---- graph ---------------------------------------------------------
    def sync(self, graph, touched: np.ndarray | None = None, batch=None) -> None:
        """Follow the host graph after a batch (None: copy it whole); `touched` are the
        vertices the batch touched, `batch` its EffectiveBatch.  The signatures and
        candidate bits follow on the device."""
        self.graph.sync(graph, touched, batch)
        self._host = graph
        if self._ext is not None:
            if batch is None or self._ext.shape[0] != graph.ext.shape[0]:
                self._ext = cp.asarray(graph.ext)   # grown: the host's doubles, amortised
            elif len(batch.add_slots):
                self._ext[cp.asarray(batch.add_slots)] = cp.asarray(graph.ext[batch.add_slots])
        if batch is None:
            self.signatures.load(graph)
            # A whole load's temporaries (sorts of every key) would stay in CuPy's pool.
            cp.get_default_memory_pool().free_all_blocks()
        else:
            self.signatures.apply(graph, batch, touched)

    def external(self, rows: cp.ndarray) -> cp.ndarray:
        """Rows of vertex slots as external ids (int64), queued on the device; -1 entries
        (past the matches found) map to some id, never read."""
        if self._ext is None:
            self._ext = cp.asarray(self._host.ext)
        return self._ext[rows]

    @property
    def max_degree(self) -> int:
        return self.graph.max_degree

    def set_ranks(self, us: np.ndarray, vs: np.ndarray,
                  edges: launchers.UpdateEdges) -> None:
        """Rank the phase's update edges us-vs for the total-order rule (`edges`: the same
        edges with their ranks, uploaded: upload_edges)."""
        self.graph.set_ranks(us, vs, edges)

    def clear_ranks(self) -> None:
        self.graph.clear_ranks()

    def admit(self, labels, slots: int) -> str | None:
        """Why the device graph cannot take these vertex labels and `slots` vertex slots
        (None when it can); nothing changes."""
        return self.graph.admit(labels, slots)

    def register_labels(self, labels) -> None:
        self.graph.register_labels(labels)

    def check(self, graph) -> None:
        """Assert the device graph, signatures and candidate bits equal the host graph's
        (tests)."""
        self.graph.check(graph)
        self.signatures.check(graph)

    def drop_query(self, qid: int) -> None:
        """Forget a removed query's plans (the engine removes it from the signatures)."""
        self._plans.pop(qid, None)
        self._stacked = {key: value for key, value in self._stacked.items()
                         if all(q != qid for q, _ in key)}

    # ---- plans ---------------------------------------------------------
    def plan_arrays(self, qid: int, types: TaskTypes) -> launchers.DevicePlan:
        """Device copies of a plan's task types (made once per plan)."""
        per_query = self._plans.setdefault(qid, {})
        cached = per_query.get(id(types))
        if cached is not None and cached[0] is types:
            return cached[1]
        level_of = np.argsort(types.orders, axis=1).astype(np.int32)
        # Labels per type (not per query), so types of several queries share a launch.
        labels = np.tile(self.graph.kernel_labels(types.query_labels), (types.count, 1))
        host = (labels, np.zeros(types.count, dtype=np.int32), types.orders, level_of,
                types.bw_count, types.bw_level, types.bw_label,
                types.tail_free.astype(np.uint8), types.perms, types.multiplicity,
                types.roots, types.root_labels)
        dev = launchers.DevicePlan(*(cp.asarray(np.ascontiguousarray(
            a, dtype=launchers.PLAN_DTYPES[name]))
            for name, a in zip(launchers.DevicePlan._fields, host, strict=True)))
        per_query[id(types)] = (types, dev)
        return dev

    def stacked_plans(self, plans: list[tuple[int, TaskTypes]]
                      ) -> tuple[launchers.DevicePlan, int]:
        """The task types of several queries as one plan (types renumbered in order, each
        type's candidate-table row set) and its orbit width; kept while the same queries
        stand with the same plans, so a batch does not stack them again."""
        key = tuple((qid, id(types)) for qid, types in plans)
        cached = self._stacked.get(key)
        if cached is not None and all(a is b for a, (_, b) in zip(cached[0], plans,
                                                                  strict=True)):
            return cached[1], cached[2]
        parts = [self.plan_arrays(qid, types) for qid, types in plans]
        members = max(part.perms.shape[1] for part in parts)
        columns = {}
        for name in launchers.DevicePlan._fields:
            column = [getattr(part, name) for part in parts]
            if name == "perms":     # [T, members, n], padded to the widest orbit
                column = [cp.pad(c, ((0, 0), (0, members - c.shape[1]), (0, 0)))
                          for c in column]
            if name == "cand_row":
                column = [cp.full(c.shape[0], row, dtype=np.int32)
                          for row, c in enumerate(column)]
            columns[name] = cp.concatenate(column)
        plan = launchers.DevicePlan(**columns)
        if len(self._stacked) >= 8:     # sets of counted queries come and go: keep a few
            self._stacked.clear()
        self._stacked[key] = (tuple(types for _, types in plans), plan, members)
        return plan, members

    def cand_table(self, qids) -> cp.ndarray:
        """The address of each query's candidate bits, in order, on the device (uploaded
        again only when an address changed)."""
        ptrs = tuple(self.signatures.cand[q].data.ptr for q in qids)
        if self._cand_ptrs is None or self._cand_ptrs[0] != ptrs:
            self._cand_ptrs = (ptrs, cp.asarray(np.array(ptrs, dtype=np.uint64)))
        return self._cand_ptrs[1]

    @staticmethod
    def upload_edges(us: np.ndarray, vs: np.ndarray, labels: np.ndarray,
                     ranks: np.ndarray) -> launchers.UpdateEdges:
        """A phase's update edges on the device, in one upload."""
        count = len(us)
        both = cp.asarray(np.concatenate([us, vs, labels, ranks]).astype(np.int32,
                                                                         copy=False))
        return launchers.UpdateEdges(*(both[i * count:(i + 1) * count] for i in range(4)))


def _warps_and_width(mirror: DeviceMirror, n: int, num_tasks: int,
                     kernel: str) -> tuple[int, int]:
    width = mirror.max_degree + 1
    per_warp = n * width * 4
    free, _ = cp.cuda.runtime.memGetInfo()
    budget = int(free * BUFFER_SHARE) // per_warp
    step = launchers.WARPS_PER_BLOCK
    warps = min(launchers.resident_warps(kernel), budget, -(-num_tasks // step) * step)
    warps -= warps % step
    if warps < launchers.WARPS_PER_BLOCK:
        raise MemoryError(f"candidate buffers of {per_warp} bytes per warp do not fit in "
                          f"{free} free bytes of device memory")
    return warps, width


# Most (edge, task type) pairs one launch tests (its task buffer holds one int32 each); a
# larger phase runs as several launches over slices of its edges.
MAX_PAIRS = EngineConfig.launch_pairs


class _Launch:
    """The tasks of one or more queries (of one size) started from a phase's update
    edges: made on the device (make_tasks) and searched (match_tasks), in launches over
    slices of the edges of at most MAX_PAIRS pairs each."""

    def __init__(self, mirror: DeviceMirror, jobs: list[tuple[int, TaskTypes]],
                 edges: launchers.UpdateEdges, max_pairs: int = MAX_PAIRS) -> None:
        self.n = jobs[0][1].orders.shape[1]
        self.queries = len(jobs)
        # First task type of each query in the stacked plan, and the end of the last.
        self.first_type = np.cumsum([0] + [types.count for _, types in jobs])
        self.plan, self.members = mirror.stacked_plans(jobs)
        self.types = self.plan.roots.shape[0]
        self.edges = edges
        self.step = max(1, max_pairs // self.types)
        self.pairs = min(len(edges.us), self.step) * self.types   # per launch, at most
        if self.pairs == 0:
            return
        self.graph = mirror.graph.arrays()
        self.kernel = launchers.GRAPH_LAYOUTS[type(self.graph)][0]
        self.cand_ptrs = mirror.cand_table([qid for qid, _ in jobs])
        self.warps, self.width = _warps_and_width(mirror, self.n, self.pairs, self.kernel)
        self.bufs = cp.empty(self.warps * self.n * self.width, dtype=np.int32)
        # Zeros: a listing reads the task type of every pair's slot, made or not (an
        # unmade slot's count is zero, its type only has to be a valid index).
        self.tasks = cp.zeros(self.pairs, dtype=np.int32)
        self.ctl = cp.zeros(launchers.CTL_WORDS, dtype=np.uint64)

    def slices(self):
        """The edges in slices of at most `step`; each slice's tasks made on the device."""
        count = len(self.edges.us)
        for lo in range(0, count, self.step):
            self.ctl[:] = 0
            part = launchers.UpdateEdges(*(a[lo:lo + self.step] for a in self.edges))
            launchers.make_tasks(self.cand_ptrs, self.plan, part, self.tasks, self.ctl)
            yield part

    def run(self, edges, counts, by_task: bool, offsets, out, row_end, listing: bool,
            sharing: bool, share_capacity: int, share_every: int) -> None:
        KERNEL_CLOCK.launch(launchers.match_tasks, self.graph, self.cand_ptrs, self.plan,
                            self.n, self.members, self.tasks, edges, self.ctl, self.bufs,
                            self.width, self.warps, counts, by_task, offsets, out, row_end,
                            listing, sharing, share_capacity, share_every)

    def totals(self, sharing: bool, share_capacity: int, share_every: int) -> cp.ndarray:
        """Each query's number of matches (int64 [queries], on the device, queued)."""
        if self.pairs == 0:
            return cp.zeros(self.queries, dtype=np.int64)
        # Per warp and query, and the launch's totals in the last row (match_tasks).
        counts = cp.zeros((self.warps + 1) * self.queries, dtype=np.int64)
        none = cp.zeros(0, dtype=np.int64)
        rows = cp.zeros((0, self.n), dtype=np.int32)
        for part in self.slices():
            self.run(part, counts, False, none, rows, none, False, sharing, share_capacity,
                     share_every)
        return counts[self.warps * self.queries:]

    def listing(self, limits: list[int], sharing: bool, share_capacity: int,
                share_every: int) -> tuple[cp.ndarray, cp.ndarray, list[tuple[int, int]]]:
        """Each query's number of matches (int64 [queries]) and its first limits[q] rows,
        on the device: (totals, rows, spans), query q's rows being rows[lo:hi] for (lo, hi)
        = spans[q], int32 [.., n], -1 past the matches found.

        Slice by slice, a counting pass counts each (edge, type) pair's matches, and a
        prefix sum over the pairs in type order (a query's types are consecutive) gives
        each pair its first row in its query's range, after the rows of the slices
        before; a listing pass then writes the rows there, each query up to its limit.
        With every limit at most QUEUED_LIST_ROWS everything is queued: each query has
        `limit` rows of one buffer.  Otherwise each slice's counts are read back and its
        rows sized by them."""
        totals = cp.zeros(self.queries, dtype=np.int64)
        if self.pairs == 0:
            return (totals, cp.zeros((0, self.n), dtype=np.int32),
                    [(0, 0)] * self.queries)
        queued = max(limits) <= QUEUED_LIST_ROWS
        if queued:
            lo = np.cumsum([0] + limits)
            rows = cp.full((int(lo[-1]), self.n), -1, dtype=np.int32)
            starts, row_end = cp.asarray(lo[:-1]), cp.asarray(lo[1:])
        else:
            pieces: list[list[cp.ndarray]] = [[] for _ in limits]
            seen = np.zeros(self.queries, dtype=np.int64)
        none = cp.zeros(0, dtype=np.int64)
        query_of_type = self.plan.cand_row
        first_type = cp.asarray(self.first_type)
        for part in self.slices():
            edges = len(part.us)
            counts = cp.zeros(edges * self.types, dtype=np.int64)
            self.run(part, counts, True, none, cp.zeros((0, self.n), dtype=np.int32), none,
                     False, sharing, share_capacity, share_every)
            # Type-major: the pairs of each query together, in order.
            by_type = (counts.reshape(edges, self.types)
                       * self.plan.multiplicity[None, :]).T.ravel()
            prefix = cp.concatenate((cp.zeros(1, dtype=np.int64), cp.cumsum(by_type)))
            bounds = prefix[first_type * edges]
            found = bounds[1:] - bounds[:-1]
            if queued:
                shift = starts + totals
                out = rows
            else:
                found_now = found.get()
                room = np.minimum(found_now, np.maximum(np.array(limits) - seen, 0))
                seen += found_now
                first = np.cumsum(np.concatenate(([0], room)))
                shift, row_end = cp.asarray(first[:-1]), cp.asarray(first[1:])
                out = cp.full((int(first[-1]), self.n), -1, dtype=np.int32)
                for q in range(self.queries):
                    pieces[q].append(out[first[q]:first[q + 1]])
            totals += found
            if out.shape[0] == 0:
                continue
            query = cp.repeat(query_of_type, edges)
            offsets = (prefix[:-1] - bounds[:-1][query] + shift[query]).reshape(
                self.types, edges).T.ravel()
            self.run(part, cp.zeros(edges * self.types, dtype=np.int64), True, offsets, out,
                     row_end, True, False, share_capacity, share_every)
        if queued:
            return totals, rows, [(int(a), int(b)) for a, b in zip(lo[:-1], lo[1:])]
        spans = np.cumsum([0] + [sum(p.shape[0] for p in ps) for ps in pieces])
        every = [p for ps in pieces for p in ps]
        rows = (cp.concatenate(every) if every else
                cp.zeros((0, self.n), dtype=np.int32))
        return totals, rows, [(int(a), int(b)) for a, b in zip(spans[:-1], spans[1:])]


# Pinned buffers whose asynchronous copies may still be running, with the event after each:
# kept until the copy is done, whoever drops its PendingCounts (CuPy's pinned pool would
# hand a freed block to the next upload's staging while the copy still writes it).
_IN_FLIGHT: list[tuple[cp.cuda.Event, np.ndarray]] = []


def _keep_until_copied(event: cp.cuda.Event, host: np.ndarray) -> None:
    _IN_FLIGHT[:] = [(e, h) for e, h in _IN_FLIGHT if not e.done]
    _IN_FLIGHT.append((event, host))


class PendingMatches:
    """Results of shared launches on their way to the host: per query size, the totals
    copied asynchronously into pinned memory behind the kernels, with an event after the
    copy, so the host can go on (with the next batch) until it needs them.  Listed rows
    are read when the results are, only as many as were found, on a stream of their own
    so that the read does not wait for the kernels queued since (the next batch's)."""

    def __init__(self, size: int) -> None:
        self._size = size
        # (indices of the jobs, query size, pinned totals or None when no task, event,
        #  listed rows and each job's span of them, or None when counted)
        self._parts: list[tuple] = []
        self._results: list[MatchSet] | None = None

    def add(self, members: list[int], n: int, totals: cp.ndarray | None,
            rows: cp.ndarray | None = None, spans: list[tuple[int, int]] | None = None
            ) -> None:
        if totals is None:
            self._parts.append((members, n, None, None, rows, spans))
            return
        host = cupyx.empty_pinned(totals.shape, dtype=totals.dtype)
        cp.asnumpy(totals, out=host, blocking=False)
        event = cp.cuda.Event(block=False, disable_timing=True)
        event.record()
        _keep_until_copied(event, host)
        self._parts.append((members, n, host, event, rows, spans))

    def resolve(self) -> list[MatchSet]:
        """One MatchSet per job (waits for the copies only, not for later work)."""
        if self._results is not None:
            return self._results
        results: list[MatchSet | None] = [None] * self._size
        for members, n, host, event, rows, spans in self._parts:
            if event is not None:
                event.synchronize()
            totals = [0] * len(members) if host is None else host.tolist()
            for k, (i, total) in enumerate(zip(members, totals, strict=True)):
                found, truncated = np.empty((0, n), dtype=np.int32), False
                if rows is not None:
                    lo, hi = spans[k]
                    if total:
                        with _reader_stream():
                            found = cp.asnumpy(rows[lo:lo + min(total, hi - lo)])
                    truncated = total > found.shape[0]
                results[i] = MatchSet(int(total), found, truncated)
        self._results = results
        self._parts = []        # the rows' device memory goes back to the pool
        return results


def _by_size(jobs) -> dict[int, list[int]]:
    """The indices of the jobs [(qid, task types, ...)] per query size, which share a
    launch."""
    by_size: dict[int, list[int]] = {}
    for i, job in enumerate(jobs):
        by_size.setdefault(job[1].orders.shape[1], []).append(i)
    return by_size


def launch_cuda_counts(mirror: DeviceMirror, jobs, edges: launchers.UpdateEdges,
                       sharing: bool = True,
                       share_capacity: int = launchers.SHARE_CAPACITY,
                       share_every: int = launchers.SHARE_EVERY,
                       max_pairs: int = MAX_PAIRS) -> PendingMatches:
    """Queue the counting of several queries' matches started from the uploaded update
    `edges`, one launch per query size (and slice of at most `max_pairs` pairs): `jobs` is
    [(qid, task types)]."""
    pending = PendingMatches(len(jobs))
    for n, members in _by_size(jobs).items():
        launch = _Launch(mirror, [jobs[i] for i in members], edges, max_pairs)
        if launch.pairs == 0:
            pending.add(members, n, None)
            continue
        pending.add(members, n, launch.totals(sharing, share_capacity, share_every))
    return pending


def execute_cuda_counts(mirror: DeviceMirror, jobs, us: np.ndarray, vs: np.ndarray,
                        labels: np.ndarray, ranks: np.ndarray, sharing: bool = True,
                        share_capacity: int = launchers.SHARE_CAPACITY,
                        share_every: int = launchers.SHARE_EVERY,
                        max_pairs: int = MAX_PAIRS) -> list[MatchSet]:
    """Count the matches of several queries started from edges us-vs, in one launch per
    query size: `jobs` is [(qid, task types)]; one MatchSet each."""
    return launch_cuda_counts(mirror, jobs, mirror.upload_edges(us, vs, labels, ranks),
                              sharing, share_capacity, share_every, max_pairs).resolve()


_READER: list[cp.cuda.Stream] = []


def _reader_stream() -> cp.cuda.Stream:
    """A non-blocking stream for reading back results that are already complete (so it
    needs no ordering with the engine's stream, the legacy default one)."""
    if not _READER:
        _READER.append(cp.cuda.Stream(non_blocking=True))
    return _READER[0]


def launch_cuda_lists(mirror: DeviceMirror, jobs, edges: launchers.UpdateEdges,
                      external: bool, sharing: bool = True,
                      share_capacity: int = launchers.SHARE_CAPACITY,
                      share_every: int = launchers.SHARE_EVERY,
                      max_pairs: int = MAX_PAIRS) -> PendingMatches:
    """Queue the counting and listing of several queries' matches started from the
    uploaded update `edges`, one launch pair per query size (and slice of at most
    `max_pairs` pairs, and LIST_LAUNCH_PAIRS): `jobs` is [(qid, task types, most rows
    listed)].  With `external` the rows are mapped to external vertex ids on the device,
    in stream order (a later batch may give a slot to another vertex before these rows
    are read)."""
    pending = PendingMatches(len(jobs))
    for n, members in _by_size(jobs).items():
        launch = _Launch(mirror, [jobs[i][:2] for i in members], edges,
                         min(max_pairs, LIST_LAUNCH_PAIRS))
        totals, rows, spans = launch.listing([jobs[i][2] for i in members], sharing,
                                             share_capacity, share_every)
        pending.add(members, n, totals, mirror.external(rows) if external else rows, spans)
    return pending


def execute_cuda(mirror: DeviceMirror, qid: int, types: TaskTypes,
                 us: np.ndarray, vs: np.ndarray, labels: np.ndarray, ranks: np.ndarray,
                 list_limit: int, sharing: bool = True,
                 share_capacity: int = launchers.SHARE_CAPACITY,
                 share_every: int = launchers.SHARE_EVERY,
                 max_pairs: int = MAX_PAIRS) -> MatchSet:
    """Count (and list up to `list_limit`) the matches of `types` started from edges us-vs.

    Tasks are made on the device from the query's candidate bits there; `sharing` lets
    busy warps hand work to idle ones while counting."""
    if list_limit <= 0:
        return execute_cuda_counts(mirror, [(qid, types)], us, vs, labels, ranks,
                                   sharing, share_capacity, share_every, max_pairs)[0]
    return launch_cuda_lists(mirror, [(qid, types, list_limit)],
                             mirror.upload_edges(us, vs, labels, ranks), False, sharing,
                             share_capacity, share_every, max_pairs).resolve()[0]
