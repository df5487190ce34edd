"""The CUDA executor's boundary: the device's graph, signatures and plans (`DeviceMirror`),
and `execute_cuda` with the shared launches' entry points and their pending results.

`execute_cuda` takes what `gpu.cpu.executor.execute_cpu` takes (with the mirror in
place of the host graph and its candidate bits) and returns the same `MatchSet`;
this boundary is the only place that copies between host and device.  The data
graph on the device is a packed memory array updated from each batch's edge
changes, or the host's pools mirrored per touched vertex (gpu/cuda/device_graph.py);
signatures and candidate bits are updated there for the touched vertices
(gpu/cuda/signatures.py), and each launch makes its tasks there from the update
edges (gpu/cuda/shared_launch.py), so per-batch traffic is the batch itself.

Importing this module needs CuPy; `gpu.cuda.device` decides whether to.
"""
from __future__ import annotations

import cupy as cp
import cupyx
import numpy as np

from gpu.cuda import match_launchers
from gpu.cuda.device_graph import make_device_graph
from gpu.cuda.loader import keep_until_copied, upload_together
from gpu.cuda.shared_launch import MAX_PAIRS, SharedLaunch, run_sums
from gpu.cuda.signatures import DeviceSignatures
from gpu.cuda.small_phase import SmallPhase
from gpu.config import EngineConfig
from gpu.graph.sets import sorted_unique
from gpu.plan.planner import TaskTypes, device_leaf_root
from gpu.results import MatchSet

# Most (edge, task type) pairs a listing launch tests: its per-task counts and offsets are
# sized by the pairs, not by the tasks made (which stay on the device).
LIST_LAUNCH_PAIRS = 1 << 22


class DeviceMirror:
    """The device graph (gpu/cuda/device_graph.py, in the configured layout), the signatures
    and candidate bits (gpu/cuda/signatures.py), and the device copies of the plans."""

    def __init__(self, config: EngineConfig | None = None, directed: bool = False) -> None:
        self.config = config or EngineConfig()
        self.graph = make_device_graph(self.config, directed)
        self.signatures = DeviceSignatures()
        self._plans: dict[int, dict[int, tuple[TaskTypes, match_launchers.DevicePlan]]] = {}
        self._stacked: dict[tuple, tuple] = {}  # stacked_plans, by (qid, plan) sequence
        self._small: dict[tuple, tuple] = {}    # small_phase, by (qid, plan) sequence
        # cand_table's device tables, by query ids: (addresses, table)
        self._cand_tables: dict[tuple, tuple] = {}
        self._host = None                       # the host graph synced last
        self._uploaded = None                   # the last batch's (PmaGraph.sync)
        # External id per vertex slot (int64), kept only once a listing needed it.
        self._ext: cp.ndarray | None = None
        # Per-vertex leaf totals that launches count as they need them (PhaseLeaves): each
        # launch its epoch, so none clears them.
        self._leaf_cache: cp.ndarray | None = None
        self._leaf_epoch = 0

    def leaf_cache(self, entries: int, most: int) -> tuple[cp.ndarray, int]:
        """The leaf totals' cache (uint64, at least `entries`, which is at most `most`) and a
        new launch's epoch; it grows by doubling up to `most`, and is cleared only when it
        grows or the epochs run out."""
        if entries > most:
            raise ValueError(f"a leaf cache of {entries} entries asked, at most {most}")
        self._leaf_epoch += 1
        cache = self._leaf_cache
        if cache is None or cache.shape[0] < entries or self._leaf_epoch >= 1 << 31:
            size = max(entries, 2 * (cache.shape[0] if cache is not None else 0), 1024)
            self._leaf_cache = None     # its memory back to the pool before the next
            self._leaf_cache = cp.zeros(max(entries, min(size, most)), dtype=np.uint64)
            self._leaf_epoch = 1
        return self._leaf_cache, self._leaf_epoch

    # ---- graph ---------------------------------------------------------
    @staticmethod
    def touched(batch) -> np.ndarray | None:
        """The distinct vertices an EffectiveBatch touches (ascending int32) on the host;
        None when its edge changes are on the device, where the device graph finds them
        after its update, with their degrees (PmaGraph._touched_after: a million-edge
        batch's four million endpoints are settled faster there)."""
        if batch.device is not None:
            return None
        return sorted_unique(np.concatenate([
            batch.delete_u, batch.delete_v, batch.insert_u, batch.insert_v,
            batch.delete_slots, batch.add_slots])).astype(np.int32)

    def sync(self, graph, touched: np.ndarray | None = None, batch=None) -> None:
        """Follow the host graph after a batch (None: copy it whole); `touched` are the
        vertices the batch touched (None for a batch whose changes are on the device: the
        device graph finds them), `batch` its EffectiveBatch.  The signatures and
        candidate bits follow on the device."""
        uploaded = self.graph.sync(graph, touched, batch)
        # Kept until the next batch's: the signature kernels below read it on the engine's
        # stream, and its memory, once free, goes back to the array stream's pool, whose
        # next batch waits for the engine's reads of the array (not for these kernels):
        # the batch after that does.
        self._uploaded = uploaded
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
            self.signatures.apply(graph, batch, touched, uploaded)

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
                  edges: match_launchers.UpdateEdges) -> None:
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
        self._small = {key: value for key, value in self._small.items()
                       if all(q != qid for q, _ in key[0])}
        self._cand_tables = {key: value for key, value in self._cand_tables.items()
                             if qid not in key}

    # ---- plans ---------------------------------------------------------
    def _host_plan(self, qid: int, types: TaskTypes) -> match_launchers.DevicePlan:
        """A plan's task types as DevicePlan's fields on the host (NumPy, the kernels'
        dtypes), made once per plan."""
        per_query = self._plans.setdefault(qid, {})
        cached = per_query.get(id(types))
        if cached is not None and cached[0] is types:
            return cached[1]
        level_of = np.argsort(types.orders, axis=1).astype(np.int32)
        # Labels per type (not per query), so types of several queries share a launch.
        labels = np.tile(self.graph.kernel_labels(types.query_labels), (types.count, 1))
        directed = types.directed
        if directed:
            # Arcs: each entry's key is the list's (2 label + direction, gpu/graph/lists.py),
            # its label as the kernel compares them (label indices on the array's view).
            if not getattr(self.graph, "takes_arcs", False):
                raise ValueError("directed plans run on the lists' device graph or the "
                                 "packed memory array's read view only")
            if int(types.bw_count.max(initial=0)) > 32:
                raise ValueError("a directed query with more than 32 arcs to the vertices "
                                 "before one of its vertices does not fit a warp's lanes")
            used = np.arange(types.bw_key.shape[2]) < types.bw_count[:, :, None]
            labels_of = np.where(used, types.bw_key >> 1, types.query_labels[0])
            keys = np.where(used, 2 * self.graph.kernel_labels(labels_of)
                            + (types.bw_key & 1), 0)
        else:
            # Every entry of a level reads the segment of its vertex's label, as the
            # kernel compares labels (label indices on the array).
            keys = np.repeat(np.take_along_axis(labels, types.orders, axis=1)[:, :, None],
                             types.bw_key.shape[2], axis=2)
        host = (labels, np.zeros(types.count, dtype=np.int32), types.orders, level_of,
                types.bw_count, types.bw_level, types.bw_label, keys,
                types.tail_free.astype(np.uint8), types.perms, types.multiplicity,
                types.roots, types.root_labels, *_leaf_columns(types, counted=not directed),
                device_leaf_root(types))
        plan = match_launchers.DevicePlan(*(np.ascontiguousarray(
            a, dtype=match_launchers.PLAN_DTYPES[name])
            for name, a in zip(match_launchers.DevicePlan._fields, host, strict=True)))
        per_query[id(types)] = (types, plan)
        return plan

    def stacked_plans(self, plans: list[tuple[int, TaskTypes]]
                      ) -> tuple[match_launchers.DevicePlan, int]:
        """The task types of several queries as one plan on the device (types renumbered
        in order, each type's candidate-table row set) and its orbit width; kept while the
        same queries stand with the same plans, so a batch does not stack them again.

        Stacked on the host and copied up: CuPy's pad, where and full would each compile
        a kernel the first time they meet a dtype, inside the first batch after the
        queries changed (0.7 s of NVRTC on a fresh device, the service's profile of
        2026-11-28)."""
        key = tuple((qid, id(types)) for qid, types in plans)
        cached = self._stacked.get(key)
        if cached is not None and all(a is b for a, (_, b) in zip(cached[0], plans,
                                                                  strict=True)):
            return cached[1], cached[2]
        parts = [self._host_plan(qid, types) for qid, types in plans]
        members = max(part.perms.shape[1] for part in parts)
        columns = {}
        for name in match_launchers.DevicePlan._fields:
            column = [getattr(part, name) for part in parts]
            if name == "perms":     # [T, members, n], padded to the widest orbit
                column = [np.pad(c, ((0, 0), (0, members - c.shape[1]), (0, 0)))
                          for c in column]
            if name in ("cand_row", "col_row"):
                column = [np.full(c.shape[0], row, dtype=np.int32)
                          for row, c in enumerate(column)]
            if name == "leaf_col":      # columns numbered across the stacked queries
                first = np.cumsum([0] + [part.col_q.shape[0] for part in parts])
                column = [np.where(c >= 0, c + np.int32(at), c).astype(np.int32)
                          for c, at in zip(column, first)]
            columns[name] = cp.asarray(np.ascontiguousarray(
                np.concatenate(column), dtype=match_launchers.PLAN_DTYPES[name]))
        plan = match_launchers.DevicePlan(**columns)
        if len(self._stacked) >= 8:     # sets of counted queries come and go: keep a few
            self._stacked.clear()
        self._stacked[key] = (tuple(types for _, types in plans), plan, members)
        return plan, members

    def small_phase(self, jobs, capacity: int, sharing: bool, share_capacity: int,
                    share_every: int) -> SmallPhase | None:
        """The prepared launches (gpu/cuda/small_phase.py) of phases of at most `capacity`
        update edges for these counted queries ([(qid, task types)]), kept while they
        stand with the same plans; None where the device graph has no read view."""
        if getattr(self.graph, "view", None) is None:
            return None
        key = (tuple((qid, id(types)) for qid, types in jobs), capacity, sharing,
               share_capacity, share_every)
        cached = self._small.get(key)
        if cached is not None and all(a is b for a, (_, b) in zip(cached[0], jobs,
                                                                  strict=True)):
            return cached[1]
        phase = SmallPhase(self, jobs, _by_size(jobs), capacity, sharing, share_capacity,
                           share_every)
        if len(self._small) >= 4:     # sets of counted queries come and go: keep a few
            self._small.clear()
        self._small[key] = (tuple(types for _, types in jobs), phase)
        return phase

    def cand_table(self, qids) -> cp.ndarray:
        """The address of each query's candidate bits, in order, on the device; kept per set
        of query ids (the general launches' and each small phase's query size), uploaded
        again only when an address changed (the tables grow with the vertex slots)."""
        key = tuple(qids)
        ptrs = tuple(self.signatures.cand[q].data.ptr for q in key)
        cached = self._cand_tables.get(key)
        if cached is None or cached[0] != ptrs:
            if cached is None and len(self._cand_tables) >= 16:    # sets come and go
                self._cand_tables.clear()
            cached = self._cand_tables[key] = (ptrs, cp.asarray(np.array(ptrs,
                                                                         dtype=np.uint64)))
        return cached[1]

    @staticmethod
    def upload_edges(us: np.ndarray, vs: np.ndarray, labels: np.ndarray,
                     ranks: np.ndarray, on_device: tuple | None = None
                     ) -> match_launchers.UpdateEdges:
        """A phase's update edges on the device, in one upload; `on_device`: the same
        (us, vs, labels) on the device already (an EffectiveBatch's), ranked 1..n as
        `ranks` are, so that nothing is uploaded."""
        count = len(us)
        if on_device is not None:
            assert np.array_equal(ranks[[0, -1]], [1, count]), "ranks other than 1..n"
            return match_launchers.UpdateEdges(*on_device,
                                               cp.arange(1, count + 1, dtype=np.int32))
        return match_launchers.UpdateEdges(*upload_together(
            *(np.asarray(a, dtype=np.int32) for a in (us, vs, labels, ranks))))


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
        keep_until_copied(event, host)
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


def _leaf_columns(types: TaskTypes, counted: bool = True) -> tuple[np.ndarray, ...]:
    """A plan's counted leaf tails for match.cu (DevicePlan's leaf fields): each type's first
    counted leaf level (past a head level: the kernel enumerates heads), the column of each
    leaf query vertex, and per column its vertex and edge label (its one edge's) and row
    0 (stacked_plans sets the rows).  Not `counted` (directed plans: the kernel's leaf
    counts know no arc direction), no leaf is counted."""
    count, n = types.orders.shape
    first = np.where((types.leaf_from < n) & counted, types.leaf_from + types.tail_head, n
                     ).astype(np.int32)
    elab: dict[int, int] = {}
    for t in range(count):
        for level in range(int(first[t]), n):
            elab[int(types.orders[t, level])] = int(types.bw_label[t, level, 0])
    cols = sorted(elab)
    leaf_col = np.full((count, n), -1, dtype=np.int32)
    leaf_col[:, cols] = np.arange(len(cols), dtype=np.int32)
    return (first, leaf_col, np.array(cols, dtype=np.int32),
            np.array([elab[q] for q in cols], dtype=np.int32),
            np.zeros(len(cols), dtype=np.int32))


def _by_size(jobs) -> dict[int, list[int]]:
    """The indices of the jobs [(qid, task types, ...)] per query size, which share a
    launch."""
    by_size: dict[int, list[int]] = {}
    for i, job in enumerate(jobs):
        by_size.setdefault(job[1].orders.shape[1], []).append(i)
    return by_size


def launch_cuda_counts(mirror: DeviceMirror, jobs, edges: match_launchers.UpdateEdges,
                       sharing: bool = True,
                       share_capacity: int = match_launchers.SHARE_CAPACITY,
                       share_every: int = match_launchers.SHARE_EVERY,
                       max_pairs: int = MAX_PAIRS) -> PendingMatches:
    """Queue the counting of several queries' matches started from the uploaded update
    `edges`, one launch per query size (and slice of at most `max_pairs` pairs): `jobs` is
    [(qid, task types)]."""
    pending = PendingMatches(len(jobs))
    for n, members in _by_size(jobs).items():
        launch = SharedLaunch(mirror, [jobs[i] for i in members], edges, max_pairs)
        if launch.pairs == 0:
            pending.add(members, n, None)
            continue
        pending.add(members, n, launch.totals(sharing, share_capacity, share_every))
    return pending


def execute_cuda_counts(mirror: DeviceMirror, jobs, us: np.ndarray, vs: np.ndarray,
                        labels: np.ndarray, ranks: np.ndarray, sharing: bool = True,
                        share_capacity: int = match_launchers.SHARE_CAPACITY,
                        share_every: int = match_launchers.SHARE_EVERY,
                        max_pairs: int = MAX_PAIRS) -> list[MatchSet]:
    """Count the matches of several queries started from edges us-vs, in one launch per
    query size: `jobs` is [(qid, task types)]; one MatchSet each."""
    return launch_cuda_counts(mirror, jobs, mirror.upload_edges(us, vs, labels, ranks),
                              sharing, share_capacity, share_every, max_pairs).resolve()


def count_cuda_runs(mirror: DeviceMirror, jobs, edges: match_launchers.UpdateEdges,
                    runs: np.ndarray, sharing: bool = True,
                    share_capacity: int = match_launchers.SHARE_CAPACITY,
                    share_every: int = match_launchers.SHARE_EVERY,
                    max_pairs: int = MAX_PAIRS) -> np.ndarray:
    """Count several queries' matches started from the uploaded update `edges` per run of
    them (`runs`: the runs' lengths, in edge order: a batch group's batches), one launch
    per query size: `jobs` is [(qid, task types)]; int64 (jobs, runs) on the host, summed
    where SharedLaunch.edge_totals left the per-edge counts, one read-back per size."""
    out = np.zeros((len(jobs), len(runs)), dtype=np.int64)
    for n, members in _by_size(jobs).items():
        launch = SharedLaunch(mirror, [jobs[i] for i in members], edges, max_pairs)
        if launch.pairs == 0:
            continue
        per_edge = launch.edge_totals(sharing, share_capacity, share_every)
        xp = cp.get_array_module(per_edge)
        sums = run_sums(xp, per_edge, runs)
        out[members] = sums if xp is np else sums.get()
    return out


_READER: list[cp.cuda.Stream] = []


def _reader_stream() -> cp.cuda.Stream:
    """A non-blocking stream for reading back results that are already complete (so it
    needs no ordering with the engine's stream, the legacy default one)."""
    if not _READER:
        _READER.append(cp.cuda.Stream(non_blocking=True))
    return _READER[0]


def launch_cuda_lists(mirror: DeviceMirror, jobs, edges: match_launchers.UpdateEdges,
                      external: bool, sharing: bool = True,
                      share_capacity: int = match_launchers.SHARE_CAPACITY,
                      share_every: int = match_launchers.SHARE_EVERY,
                      max_pairs: int = MAX_PAIRS) -> PendingMatches:
    """Queue the counting and listing of several queries' matches started from the
    uploaded update `edges`, one launch pair per query size (and slice of at most
    `max_pairs` pairs, and LIST_LAUNCH_PAIRS): `jobs` is [(qid, task types, most rows
    listed)].  With `external` the rows are mapped to external vertex ids on the device,
    in stream order (a later batch may give a slot to another vertex before these rows
    are read)."""
    pending = PendingMatches(len(jobs))
    for n, members in _by_size(jobs).items():
        launch = SharedLaunch(mirror, [jobs[i][:2] for i in members], edges,
                              min(max_pairs, LIST_LAUNCH_PAIRS))
        totals, rows, spans = launch.listing([jobs[i][2] for i in members], sharing,
                                             share_capacity, share_every)
        pending.add(members, n, totals, mirror.external(rows) if external else rows, spans)
    return pending


def execute_cuda(mirror: DeviceMirror, qid: int, types: TaskTypes,
                 us: np.ndarray, vs: np.ndarray, labels: np.ndarray, ranks: np.ndarray,
                 list_limit: int, sharing: bool = True,
                 share_capacity: int = match_launchers.SHARE_CAPACITY,
                 share_every: int = match_launchers.SHARE_EVERY,
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
