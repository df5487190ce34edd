"""A small batch's device work at launch speed: its edges' lookup (`SmallLookup`) and its
counted phases (`SmallPhase`).

A phase of few update edges whose queries are all counted (a one-edge batch, a small batch
group) ranks its edges, makes its tasks, searches them and reads back each (edge, task
type) pair's count through launches prepared once (`loader.Prepared`), with buffers kept
between batches, one upload and one read-back.

The general path (gpu/cuda/shared_launch.py and PendingMatches) does the same work with a
RawKernel call per launch, fresh buffers and every argument checked again, which cost a
one-edge batch about half a millisecond of host work around 0.1 ms of kernels
(docs/benchmarks.md).  Here the arguments are checked when the launches are prepared, and
only what moves between batches is set again: the read view's and candidate tables'
addresses, the buffer width, the edge count.

For the `pma` layout with its read view only: the ranks go to the view's rank pool (the
PmaGraph's set_ranks).  Importing this module needs CuPy; `gpu.cuda.device` decides whether
to.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import cupy as cp
import cupyx
import numpy as np

from gpu.cuda import match_launchers as ml
from gpu.cuda import pma_launchers
from gpu.cuda.loader import keep_until_copied
from gpu.cuda.shared_launch import (KERNEL_CLOCK, _warps_and_width, blocks_per_sm,
                                     query_sums, run_sums)
from gpu.results import MatchSet

if TYPE_CHECKING:
    from gpu.cuda.executor import DeviceMirror

# Stagings of the update edges used in turn (SmallPhase.launch).
STAGINGS = 4


def _candidate_buffers(size: int) -> cp.ndarray:
    """The per-warp candidate buffers of every small phase's search: one int32 buffer of at
    least `size` entries, grown when a launch needs more (launches run one after another
    on the engine's stream; a hub's list makes a 256-edge phase's hundreds of MiB, which
    one buffer holds once, not once per query size and set of queries)."""
    return ml.scratch("small_phase_bufs", size)


class _SizeLaunch:
    """The tasks and search of the queries of one size: make_tasks and match_tasks
    prepared over buffers for `capacity` edges (counts by pair)."""

    def __init__(self, mirror: DeviceMirror, jobs, edges: ml.UpdateEdges, capacity: int,
                 sharing: bool, share_capacity: int, share_every: int) -> None:
        self.mirror = mirror
        self.n = jobs[0][1].orders.shape[1]
        self.first_type = np.cumsum([0] + [types.count for _, types in jobs])
        self.multiplicity = np.concatenate([types.multiplicity for _, types in jobs])
        self.qids = [qid for qid, _ in jobs]
        plan, members = mirror.stacked_plans(jobs)
        self.types = plan.roots.shape[0]
        pairs = capacity * self.types
        self.tasks = cp.zeros(pairs, dtype=np.int32)
        self.ctl = cp.zeros(ml.CTL_WORDS, dtype=np.uint64)
        self.counts = cp.zeros(pairs, dtype=np.int64)
        cand = mirror.cand_table(self.qids)
        self.make = ml.make_tasks(cand, plan, edges, self.tasks, self.ctl, prepare=True)
        graph = mirror.graph.arrays()
        self.kernel_name = ml.GRAPH_LAYOUTS[type(graph)][0]
        self.blocks = blocks_per_sm(mirror.config, jobs)
        warps, width = _warps_and_width(mirror, self.n, self.types, self.kernel_name,
                                        self.blocks)
        bufs = _candidate_buffers(warps * self.n * width)
        none = cp.zeros(0, dtype=np.int64)
        self.search = ml.match_tasks(graph, cand, plan, self.n, members, self.tasks, edges,
                                     self.ctl, bufs, width, warps, self.counts,
                                     True, none, cp.zeros((0, self.n), dtype=np.int32),
                                     none, False, sharing, share_capacity, share_every,
                                     prepare=True)
        self.ready = self.search.array("ready")
        self.graph_fields = type(graph)._fields

    def queue(self, count: int) -> None:
        """Make and search the tasks of the first `count` staged edges (their ranks set),
        each pair's count into `counts`."""
        mirror, search = self.mirror, self.search
        graph = mirror.graph.arrays()
        for name, array in zip(self.graph_fields, graph, strict=True):
            search.set(name, array)     # the view's pools move when they grow
        cand = mirror.cand_table(self.qids)
        self.make.set("cand_ptrs", cand)
        search.set("cand_ptrs", cand)
        pairs = count * self.types
        warps, width = _warps_and_width(mirror, self.n, pairs, self.kernel_name, self.blocks)
        search.set("bufs", _candidate_buffers(warps * self.n * width))
        search.set("width", width)
        self.make.set("count", count)
        stream = cp.cuda.get_current_stream().ptr
        cp.cuda.runtime.memsetAsync(self.ctl.data.ptr, 0, self.ctl.nbytes, stream)
        cp.cuda.runtime.memsetAsync(self.counts.data.ptr, 0, pairs * 8, stream)
        cp.cuda.runtime.memsetAsync(self.ready.data.ptr, 0, self.ready.nbytes, stream)
        self.make.launch(ml.make_tasks_blocks(self.types, count), 256)
        KERNEL_CLOCK.launch(search.launch, warps // ml.WARPS_PER_BLOCK,
                            32 * ml.WARPS_PER_BLOCK)

    def by_query(self, counts: np.ndarray, count: int) -> np.ndarray:
        """Matches per query and edge (int64 [queries, count]) from the pairs' counts read
        back (before orbit multiplicity, as match_tasks leaves them by task)."""
        return query_sums(np, counts, count, self.multiplicity, self.first_type)


class SmallPhase:
    """Counting launches for phases of at most `capacity` update edges of a set of counted
    queries (`jobs`: [(qid, task types)]), per query size (`by_size`: {size: indices
    of jobs}), prepared once: `launch` stages the edges, sets their ranks, searches every
    size and queues the read-back."""

    def __init__(self, mirror: DeviceMirror, jobs, by_size: dict[int, list[int]],
                 capacity: int, sharing: bool, share_capacity: int, share_every: int
                 ) -> None:
        self.mirror = mirror
        self.capacity = capacity
        self.jobs = len(jobs)
        # us, vs, labels: staged in pinned memory, one copy up; the ranks 1..capacity
        # stay.  Several stagings in turn, so that the next batch need not wait for this
        # one's copy, queued behind the kernels before it.
        self.device_edges = cp.zeros(4 * capacity, dtype=np.int32)
        self.edges = ml.UpdateEdges(*(self.device_edges[i * capacity:(i + 1) * capacity]
                                      for i in range(4)))
        self.edges.ranks[:] = cp.arange(1, capacity + 1, dtype=np.int32)
        self._staging = [(cupyx.empty_pinned(3 * capacity, dtype=np.int32), None)
                         for _ in range(STAGINGS)]
        self._turn = 0
        self.sizes = [(members, _SizeLaunch(mirror, [jobs[i] for i in members], self.edges,
                                            capacity, sharing, share_capacity, share_every))
                      for members in by_size.values()]
        graph = mirror.graph
        view = graph.view
        self.ranks = {clear: ml.set_edge_ranks(view.device_start, view.deg, view.nbr,
                                               view.nlab, graph.slot_labels, view.rank,
                                               *self.edges[:2], self.edges.ranks, clear,
                                               prepare=True, directed=graph.directed)
                      for clear in (False, True)}

    def _set_ranks(self, count: int, clear: bool) -> None:
        graph = self.mirror.graph
        view, launch = graph.view, self.ranks[clear]
        for name, array in (("start", view.device_start), ("deg", view.deg),
                            ("nbr", view.nbr), ("nlab", view.nlab),
                            ("label", graph.slot_labels), ("rank", view.rank)):
            launch.set(name, array)
        launch.set("count", count)
        launch.launch(-(-2 * count // 256), 256)

    def launch(self, us: np.ndarray, vs: np.ndarray, labels: np.ndarray) -> PendingSmall:
        """Queue the phase of update edges us-vs (ranked 1..count in this order): the
        counts of every pair come back behind the kernels (PendingSmall)."""
        count, cap = len(us), self.capacity
        if not 0 < count <= cap:
            raise ValueError(f"a small phase takes 1..{cap} edges, got {count}")
        stream = cp.cuda.get_current_stream()
        staged, copied = self._staging[self._turn]
        if copied is not None:
            copied.synchronize()    # its copy of STAGINGS batches ago
        staged[:count], staged[cap:cap + count], staged[2 * cap:2 * cap + count] = \
            us, vs, labels
        # One copy of the whole staging (a few KiB) to us, vs, labels.
        self.device_edges.data.copy_from_host_async(staged.ctypes.data, staged.nbytes,
                                                    stream)
        copied = stream.record()
        self._staging[self._turn] = (staged, copied)
        keep_until_copied(copied, staged)   # even should this phase be dropped meanwhile
        self._turn = (self._turn + 1) % STAGINGS
        self._set_ranks(count, clear=False)
        for _, size in self.sizes:
            size.queue(count)
        self._set_ranks(count, clear=True)
        # The pairs' counts of every size, one after another, in one pinned block.
        parts, lo = [], 0
        host = cupyx.empty_pinned(sum(size.types for _, size in self.sizes) * count,
                                  dtype=np.int64)
        for members, size in self.sizes:
            hi = lo + size.types * count
            size.counts.data.copy_to_host_async(host[lo:hi].ctypes.data, (hi - lo) * 8,
                                                stream)
            parts.append((members, size, lo, hi))
            lo = hi
        done = stream.record()
        keep_until_copied(done, host)
        return PendingSmall(self.jobs, count, parts, host, done)


class PendingSmall:
    """A small phase's counts on their way back (PendingMatches' interface: `resolve`
    gives one MatchSet per job; `by_run` the counts per run of the edges)."""

    def __init__(self, jobs: int, count: int, parts, host: np.ndarray,
                 done: cp.cuda.Event) -> None:
        self._jobs, self._count, self._parts = jobs, count, parts
        self._host, self._done = host, done
        self._per_edge: np.ndarray | None = None
        self._results: list[MatchSet] | None = None

    def per_edge(self) -> np.ndarray:
        """Each job's matches started from each edge (int64 [jobs, edges]; waits)."""
        if self._per_edge is None:
            self._done.synchronize()
            out = np.zeros((self._jobs, self._count), dtype=np.int64)
            for members, size, lo, hi in self._parts:
                out[members] = size.by_query(self._host[lo:hi], self._count)
            self._per_edge = out
        return self._per_edge

    def by_run(self, runs: np.ndarray) -> np.ndarray:
        """Each job's matches per run of the edges (`runs`: their lengths, in edge order):
        int64 [jobs, runs]."""
        return run_sums(np, self.per_edge(), runs)

    def resolve(self) -> list[MatchSet]:
        if self._results is None:
            totals = self.per_edge().sum(axis=1).tolist()
            sizes = {}
            for members, size, _, _ in self._parts:
                for i in members:
                    sizes[i] = size.n
            self._results = [MatchSet(int(total), np.empty((0, sizes[i]), dtype=np.int32),
                                      False) for i, total in enumerate(totals)]
        return self._results


class SmallLookup:
    """The stored values of at most `capacity` keys of a packed memory array: find_keys
    prepared once, the keys staged in pinned memory, one copy up, one launch, the values
    copied back to pinned memory, one wait (on the current stream: the array's)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._staged = cupyx.empty_pinned(capacity, dtype=np.uint64)
        self._wanted = cp.zeros(capacity, dtype=np.uint64)
        self._out = cupyx.empty_pinned(capacity, dtype=np.int32)
        self._launch = None

    def values(self, pma, keys: np.ndarray) -> np.ndarray:
        """Each key's value (int32), -1 where it is not stored."""
        count = len(keys)
        if not 0 < count <= self.capacity:
            raise ValueError(f"a small lookup takes 1..{self.capacity} keys, got {count}")
        launch = self._launch
        if launch is None:
            launch = self._launch = pma_launchers.find_keys(pma, self._wanted, prepare=True)
        # The array's buffers move when it grows.
        launch.set("keys", pma.keys)
        launch.set("vals", pma.vals)
        launch.set("cnt", pma.cnt)
        launch.set("capacity", pma.capacity)
        launch.set("seg_shift", pma.S.bit_length() - 1)
        launch.set("count", count)
        stream = cp.cuda.get_current_stream()
        self._staged[:count] = keys
        self._wanted.data.copy_from_host_async(self._staged.ctypes.data, count * 8, stream)
        launch.launch(-(-count // 256), 256)
        launch.array("values").data.copy_to_host_async(self._out.ctypes.data, count * 4,
                                                       stream)
        stream.synchronize()    # (so the staging and the output are free again)
        return self._out[:count].copy()
