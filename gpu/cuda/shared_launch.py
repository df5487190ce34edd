"""One shared launch: the tasks of one or more queries of one size, made from a phase's
update edges and searched on the device, slice by slice, counted or listed.

`SharedLaunch` sizes the launch (warps that fit, candidate buffers within a share of free
device memory), cuts the update edges into slices of at most `max_pairs` (edge, task type)
pairs, makes each slice's tasks on the device (make_tasks) and runs match_tasks over them:
once to count, or twice to list (a counting pass, then the rows written at offsets from a
prefix sum).  A counting launch over enough edges first takes its leaf-rooted tasks that
share a parent vertex out into groups searched once each (gpu/cuda/group_launchers.py).
`KERNEL_CLOCK` times the matching kernels when a benchmark asks.

Importing this module needs CuPy; `gpu.cuda.device` decides whether to.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import cupy as cp
import numpy as np

from gpu.config import EngineConfig
from gpu.cuda import group_launchers, match_launchers
from gpu.plan.planner import TaskTypes, device_leaf_root, mostly_intersecting

if TYPE_CHECKING:
    from gpu.cuda.executor import DeviceMirror

# Share of free device memory the per-warp candidate buffers may take.
BUFFER_SHARE = 0.25
# Buffers up to this many bytes are taken without asking how much memory is free.
SMALL_BUFFERS = 64 << 20
# A listing of at most this many rows is queued whole (a device buffer of `limit` rows,
# its count and rows read back when the batch is finished); a larger limit reads each
# slice's count back first, to size its rows by what was found.
QUEUED_LIST_ROWS = 1 << 20
# Most (edge, task type) pairs one launch tests (its task buffer holds one int32 each); a
# larger phase runs as several launches over slices of its edges.
MAX_PAIRS = EngineConfig.launch_pairs
# Most (edge, task type) pairs whose per-edge sums a batch group's counting pass takes on
# the host (SharedLaunch.edge_totals): a copy of 128 KiB against a dozen launches.
HOST_SUMS_PAIRS = 1 << 14


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


def blocks_per_sm(config: EngineConfig, jobs) -> int:
    """The search's resident blocks per multiprocessor for `jobs` ((query id, TaskTypes)
    pairs): config.intersecting_blocks_per_sm when their levels mostly intersect, else 0,
    as many as fit (EngineConfig says why)."""
    if config.intersecting_blocks_per_sm and mostly_intersecting([t for _, t in jobs]):
        return config.intersecting_blocks_per_sm
    return 0


def _warps_and_width(mirror: DeviceMirror, n: int, num_tasks: int,
                     kernel: str, blocks: int = 0) -> tuple[int, int]:
    """Warps for a launch of `num_tasks` tasks (at most `blocks` blocks per multiprocessor
    when non-zero; no more than the candidate buffers' memory allows) and the buffers'
    width."""
    width = mirror.max_degree + 1
    per_warp = n * width * 4
    step = match_launchers.WARPS_PER_BLOCK
    warps = min(match_launchers.resident_warps(kernel, blocks),
                -(-num_tasks // step) * step)
    free = None
    if warps * per_warp > SMALL_BUFFERS:
        # Only large buffers ask the driver for the free memory (~5 us a call on the
        # H200's host, 2026-11-29: not worth a cached answer that another process's
        # allocations would make stale).
        free, _ = cp.cuda.runtime.memGetInfo()
        warps = min(warps, int(free * BUFFER_SHARE) // per_warp)
    warps -= warps % step
    if warps < match_launchers.WARPS_PER_BLOCK:
        raise MemoryError(f"candidate buffers of {per_warp} bytes per warp do not fit in "
                          f"{free} free bytes of device memory")
    return warps, width


def query_sums(xp, counts, edges: int, multiplicity, first_type):
    """Each query's matches per update edge (int64 [queries, edges], on `xp`) from a
    counting pass's per-pair counts (`counts`, edge-major [edges * types], before orbit
    multiplicity), each type's `multiplicity`, and `first_type`: each query's first type
    and the end of the last (a query's types are consecutive)."""
    types = multiplicity.shape[0]
    by_type = counts.reshape(edges, types) * multiplicity[None, :]
    prefix = xp.concatenate((xp.zeros((edges, 1), dtype=np.int64),
                             xp.cumsum(by_type, axis=1)), axis=1)
    return xp.ascontiguousarray((prefix[:, first_type[1:]] - prefix[:, first_type[:-1]]).T)


def run_sums(xp, per_edge, runs: np.ndarray):
    """Per-edge sums (int64 [rows, edges], on `xp`) summed per run of the edges (`runs`:
    the runs' lengths, in edge order): [rows, runs]."""
    at = xp.asarray(np.concatenate(([0], np.cumsum(runs))))
    prefix = xp.concatenate((xp.zeros((per_edge.shape[0], 1), dtype=np.int64),
                             xp.cumsum(per_edge, axis=1)), axis=1)
    return prefix[:, at[1:]] - prefix[:, at[:-1]]


class SharedLaunch:
    """The tasks of one or more queries (of one size) started from a phase's update
    edges: made on the device (make_tasks) and searched (match_tasks), in launches over
    slices of the edges of at most MAX_PAIRS pairs each."""

    def __init__(self, mirror: DeviceMirror, jobs: list[tuple[int, TaskTypes]],
                 edges: match_launchers.UpdateEdges, max_pairs: int = MAX_PAIRS) -> None:
        self.n = jobs[0][1].orders.shape[1]
        self.queries = len(jobs)
        # First task type of each query in the stacked plan, and the end of the last.
        self.first_type = np.cumsum([0] + [types.count for _, types in jobs])
        self.multiplicity = np.concatenate([types.multiplicity for _, types in jobs])
        self.plan, self.members = mirror.stacked_plans(jobs)
        self.types = self.plan.roots.shape[0]
        self.edges = edges
        self.step = max(1, max_pairs // self.types)
        self.pairs = min(len(edges.us), self.step) * self.types   # per launch, at most
        if self.pairs == 0:
            return
        self.graph = mirror.graph.arrays()
        self.cand_ptrs = mirror.cand_table([qid for qid, _ in jobs])
        # Leaf counts for the plans' counted tails, on the lists' layout (the read view),
        # unless no vertex has the neighbours a counted tail needs or their cache would
        # outgrow its bound.
        config = mirror.config
        lists = isinstance(self.graph, match_launchers.ListGraphArrays)
        cache_entries = self.graph.deg.shape[0] * self.plan.col_q.shape[0] if lists else 0
        counted = cache_entries > 0 and config.leaf_counts and \
            mirror.max_degree >= config.leaf_count_degree and \
            cache_entries * 8 <= config.leaf_cache_bytes
        self.kernel = (match_launchers.LEAF_KERNEL if counted else
                       match_launchers.GRAPH_LAYOUTS[type(self.graph)][0])
        self.warps, self.width = _warps_and_width(mirror, self.n, self.pairs, self.kernel,
                                                  blocks_per_sm(config, jobs))
        self.leaves = None
        if counted:
            cache, epoch = mirror.leaf_cache(cache_entries, config.leaf_cache_bytes // 8)
            self.leaves = match_launchers.PhaseLeaves(
                self.graph, self.plan, self.cand_ptrs, edges, cache, epoch,
                config.leaf_count_degree)
        # Grouped search of leaf-rooted tasks (gpu/cuda/group_launchers.py), when counting
        # launches over enough edges on the lists' layout; its buffers when first needed.
        self.group_min = max(2, config.leaf_group_min)
        self.slots = self.graph.deg.shape[0] if lists else 0
        self.grouped = lists and config.leaf_groups and any(
            (device_leaf_root(types) >= 0).any() for _, types in jobs) and \
            group_launchers.groupable(self.types, self.slots)
        self.group_edges = config.device_leaf_group_edges
        self._mirror, self._blocks = mirror, blocks_per_sm(config, jobs)
        self._group_bufs = None
        self.bufs = cp.empty(self.warps * self.n * self.width, dtype=np.int32)
        # Zeros: a listing reads the task type of every pair's slot, made or not (an
        # unmade slot's count is zero, its type only has to be a valid index).
        self.tasks = cp.zeros(self.pairs, dtype=np.int32)
        self.ctl = cp.zeros(match_launchers.CTL_WORDS, dtype=np.uint64)

    def slices(self):
        """The edges in slices of at most `step`; each slice's tasks made on the device."""
        count = len(self.edges.us)
        for lo in range(0, count, self.step):
            self.ctl[:] = 0
            part = match_launchers.UpdateEdges(*(a[lo:lo + self.step] for a in self.edges))
            match_launchers.make_tasks(self.cand_ptrs, self.plan, part, self.tasks, self.ctl)
            yield part

    def run(self, edges, counts, by_task: bool, offsets, out, row_end, listing: bool,
            sharing: bool, share_capacity: int, share_every: int, tasks=None) -> None:
        KERNEL_CLOCK.launch(match_launchers.match_tasks, self.graph, self.cand_ptrs, self.plan,
                            self.n, self.members,
                            self.tasks if tasks is None else tasks, edges, self.ctl, self.bufs,
                            self.width, self.warps, counts, by_task, offsets, out, row_end,
                            listing, sharing, share_capacity, share_every,
                            leaves=self.leaves)

    def totals(self, sharing: bool, share_capacity: int, share_every: int) -> cp.ndarray:
        """Each query's number of matches (int64 [queries], on the device, queued)."""
        if self.pairs == 0:
            return cp.zeros(self.queries, dtype=np.int64)
        # Per warp and query, and the launch's totals in the last row (match_tasks).
        counts = cp.zeros((self.warps + 1) * self.queries, dtype=np.int64)
        none = cp.zeros(0, dtype=np.int64)
        rows = cp.zeros((0, self.n), dtype=np.int32)
        grouped = None
        for part in self.slices():
            singles = None
            if self.grouped and len(part.us) >= self.group_edges:
                grouped, singles = self._search_groups(part, grouped, sharing, share_capacity,
                                                       share_every)
            self.run(part, counts, False, none, rows, none, False, sharing, share_capacity,
                     share_every, tasks=singles)
        totals = counts[self.warps * self.queries:]
        if grouped is not None:
            totals = totals + grouped[1][grouped[0] * self.queries:]
        return totals

    def _search_groups(self, part, grouped, sharing: bool, share_capacity: int,
                       share_every: int):
        """Group the leaf-rooted tasks make_tasks made for the slice `part` and search the
        groups (match_groups, counting into grouped's counts, made at the first call:
        (warps, counts)); returns them and the tasks left to search one by one."""
        if self._group_bufs is None:
            warps, _ = _warps_and_width(self._mirror, 2 * self.n, self.pairs, "match_groups",
                                        self._blocks)
            self._group_bufs = (warps,
                                cp.empty(warps * 2 * self.n * self.width, dtype=np.int32),
                                cp.empty(self.pairs, dtype=np.int32),
                                cp.zeros(match_launchers.CTL_WORDS, dtype=np.uint64))
        warps, bufs, singles, gctl = self._group_bufs
        if grouped is None:
            grouped = (warps, cp.zeros((warps + 1) * self.queries, dtype=np.int64))
        gctl[:] = 0
        groups = group_launchers.form_groups(self.tasks, self.ctl, self.plan, part, self.slots,
                                             self.group_min, singles, gctl)
        KERNEL_CLOCK.launch(group_launchers.match_groups, self.graph, self.cand_ptrs,
                            self.plan, self.n, groups, gctl, bufs, self.width, grouped[0],
                            grouped[1], sharing, share_capacity, share_every)
        return grouped, singles

    def edge_totals(self, sharing: bool, share_capacity: int, share_every: int
                    ) -> np.ndarray | cp.ndarray:
        """Each query's number of matches started from each update edge (int64
        [queries, edges]): the pairs' counts (a counting pass by task, as a listing's
        first), times their orbit multiplicity, summed over each query's task types
        (consecutive in the stacked plan).  Up to HOST_SUMS_PAIRS pairs the counts are
        read back in one copy and summed on the host (a small batch group's dozen array
        launches cost more than its copy); more stay on the device."""
        edges = len(self.edges.us)
        on_host = edges * self.types <= HOST_SUMS_PAIRS
        xp = np if on_host else cp
        if self.pairs == 0:
            return xp.zeros((self.queries, edges), dtype=np.int64)
        none = cp.zeros(0, dtype=np.int64)
        rows = cp.zeros((0, self.n), dtype=np.int32)
        counts = cp.zeros(edges * self.types, dtype=np.int64)
        lo = 0
        for part in self.slices():
            size = len(part.us) * self.types
            self.run(part, counts[lo:lo + size], True, none, rows, none, False, sharing,
                     share_capacity, share_every)
            lo += size
        if on_host:
            counts, multiplicity, first = counts.get(), self.multiplicity, self.first_type
        else:
            multiplicity, first = self.plan.multiplicity, cp.asarray(self.first_type)
        return query_sums(xp, counts, edges, multiplicity, first)

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
