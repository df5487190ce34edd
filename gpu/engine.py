"""The matching engine: a data graph, its standing queries, and exact per-batch deltas.

`Engine.apply` runs one batch in three steps (GAMMA §IV):
  1. negative matches on the graph before the batch, started from the
     deleted edges (ranked 1..k for the total-order rule);
  2. the graph, signatures and candidate bits are updated in place, for the
     touched vertices only;
  3. positive matches on the graph after the batch, started from the
     inserted edges.

Small batches that `start` (or `apply_stream`) takes one after another, each only
inserting or only deleting edges, share one lookup, one update and one search (a batch
group), and on CUDA a started batch's totals come back while the next one starts: see
gpu/pipeline.py.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numba
import numpy as np

from gpu import clock, event_time, pipeline
from gpu.cpu import interpreted
from gpu.plan import upkeep
from gpu.batch import BatchRejected, EffectiveBatch, normalize, pending_edges, stored_labels
from gpu.config import EngineConfig
from gpu.cuda.device import BACKENDS, resolve_backend
from gpu.cpu.executor import count_phase_cpu, count_small_cpu, execute_cpu, small_query
from gpu.cpu.windowed import WindowPlan, before_problem, window_plan
from gpu.io.records import NO_TIME, LabeledGraph, UpdateStream
from gpu.graph.lists import DynamicGraph
from gpu.graph.times import EdgeTimes, edge_keys
from gpu.pipeline import BatchGroup, Deferred, PendingBatch
from gpu.plan.leaf_counts import LeafCounts, UpdateIndex
from gpu.plan.planner import PlanStats, QueryPlan, TaskTypes, build_plan
from gpu.plan.query import QueryGraph
from gpu.results import BatchResult, MatchList, MatchSet
from gpu.plan.signatures import SignatureTable

__all__ = ["Engine", "EngineConfig", "BatchRejected", "UnknownQuery"]


_NO_VERTICES = np.empty(0, dtype=np.int32)


@functools.cache
def _no_rows(n: int) -> np.ndarray:
    """The rows of a counted query's MatchSet (none; shared, never written)."""
    rows = np.empty((0, n), dtype=np.int64)
    rows.flags.writeable = False
    return rows


class UnknownQuery(KeyError):
    """No standing query has this id."""

    def __str__(self) -> str:
        return f"query {self.args[0]} not found"


@dataclass
class _Standing:
    plan: QueryPlan
    leaves: LeafCounts


@dataclass
class _Windowed:
    """A windowed query (gpu/cpu/windowed.py): counted in its own phases of a timed batch
    (gpu/event_time.py), not in the standing queries' shared ones."""
    query: QueryGraph
    plan: WindowPlan
    window: int
    # No leaf counts: kept only so that the per-batch upkeep of candidate bits, whose
    # entries carry them, takes this query's with the standing ones'.
    leaves: LeafCounts
    # On CUDA: whether window.cu holds the query (gpu/cuda/windowed.py fits) and its plan
    # packed for it, both at its first phase.
    fits_device: bool | None = None
    packed_plan: object = None


def executor_for(backend: str) -> str:
    """The executor an Engine of `backend` ("auto", "cpu", "cuda") runs on."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    return resolve_backend(backend)


def device_config(config: EngineConfig, directed: bool) -> EngineConfig:
    """The config a CUDA engine runs: a directed graph on the packed memory array needs its
    read view (the kernel reads arcs from lists, gpu/cuda/device_graph.py): without it, on
    the lists' layout."""
    if directed and config.device_graph == "pma" and not config.pma_view:
        return dataclasses.replace(config, device_graph="lists")
    return config


class Engine:
    """Exact batch-dynamic subgraph matching for a set of standing queries."""

    def __init__(self, graph: LabeledGraph | None = None, backend: str = "auto",
                 config: EngineConfig | None = None, coalesce: bool = True,
                 directed: bool = False, retention: int | None = None) -> None:
        """`directed`: the graph's edges, and its queries', are arcs u -> v (fixed for the
        engine's life; on CUDA, on the packed memory array's read view or the lists' layout:
        device_config).  `retention`:
        a batch that moves the watermark (the largest event time accepted) to T deletes
        every edge whose time is <= T - retention with it (gpu/event_time.py; None: edges
        never expire)."""
        if retention is not None and (isinstance(retention, bool) or
                                      not isinstance(retention, (int, np.integer))
                                      or retention < 0):
            raise ValueError(f"retention must be an integer >= 0 or None, got {retention!r}")
        self.retention = None if retention is None else int(retention)
        # Event times (gpu/event_time.py): kept once a batch brings one, or with retention.
        self.times = EdgeTimes()
        self.watermark: int | None = None
        self._windowed: dict[int, _Windowed] = {}
        self._window_scratch = None     # the windowed phases' subgraph (event_time.py)
        self._timed = self.retention is not None
        self.config = config or EngineConfig()
        self.directed = bool(directed)
        self.backend = executor_for(backend)
        if self.backend == "cuda":
            self.config = device_config(self.config, self.directed)
        self.coalesce = coalesce
        if graph is None:
            graph = LabeledGraph(np.empty(0, np.int64), np.empty(0, np.int32),
                                 np.empty(0, np.int64), np.empty(0, np.int64),
                                 np.empty(0, np.int32))
        self._device = None
        if self.backend == "cuda":
            from gpu.cuda.executor import DeviceMirror
            self._device = DeviceMirror(self.config, self.directed)
        if self._device is not None and self.config.device_graph == "pma":
            # The edges live only in the device's packed memory array: no host lists.
            from gpu.cuda.device_graph import DeviceEdgeGraph
            self.graph = DeviceEdgeGraph.from_labeled(graph, self.config, self._device.graph)
        else:
            self.graph = DynamicGraph.from_labeled(graph, self.config, self.directed)
        if graph.edge_times is not None or graph.watermark is not None:
            self._restore_times(graph)
        self._queries: dict[int, _Standing] = {}
        self._updates = UpdateIndex(self.graph.label.shape[0])
        self._upkeep = upkeep.QueryArrays()
        self._small_queries = upkeep.QueryArrays()
        self._arrays_generation = 0     # bumped when a query comes or goes (QueryArrays key)
        self._next_id = 1
        self.batches_applied = 0
        self._device_seconds = 0.0      # the last batch's device graph and candidate sync
        self._group: BatchGroup | None = None      # open batch group
        # Large batches' edge records validated on the device (gpu/cuda/batch_prep.py).
        self._prep = None
        if self._device is not None and self.config.device_graph == "pma" and \
                self.config.pma_view:
            from gpu.cuda.batch_prep import DevicePrep
            self._prep = DevicePrep(self._device.graph, self.config.device_prep_records)
        if self._device is not None:
            self._device.sync(self.graph)
            # Signatures and candidate bits live on the device (gpu/cuda/signatures.py).
            self.signatures = self._device.signatures
        else:
            self.signatures = SignatureTable(self.directed)
            self.signatures.resize(self.graph)

    # ---- standing queries -------------------------------------------
    def add_query(self, query: QueryGraph, window: int | None = None,
                  before=()) -> int:
        """Register a standing query; returns its id.  With `window` W, a match counts
        only while its data edges are timed and their times lie within W of each other,
        and (`before`, pairs (i, j) of query edge indices, in `query.edges` order) edge
        i's time is below edge j's (issue 23; `before` only with a window; on cuda an
        undirected query's search runs in the device's kernel, over the subgraph of the
        edges in the window copied up per phase: gpu/cuda/windowed.py, a directed one's on
        the host's cores)."""
        if query.directed != self.directed:
            kinds = ("undirected", "directed")
            raise ValueError(f"query {query.name}: a {kinds[query.directed]} query on a "
                             f"{kinds[self.directed]} graph")
        if window is not None or len(before):
            return self._add_windowed(query, window, before)
        self.flush()
        if self._device is not None:
            problem = self._device.admit(query.labels, self.graph.num_slots)
            if problem is not None:
                raise ValueError(f"query {query.name}: {problem}")
            self._device.register_labels(query.labels)
        qid = self._next_id
        self._next_id += 1
        # Registration may replace every query's codes (a wider label set): the upkeep
        # lists are stale from here on, whether or not the rest succeeds.
        self._arrays_generation += 1
        self.signatures.add_query(qid, query, self.graph)
        try:
            cand = self.signatures.host_cand(qid)
            plan = build_plan(query, self._plan_stats(query, cand), coalesce=self.coalesce)
            leaves = LeafCounts(query, self.graph.label.shape[0], kept=self._device is None)
            leaves.rebuild(self.graph, cand)
        except BaseException:
            self.signatures.remove_query(qid)
            raise
        self._queries[qid] = _Standing(plan, leaves)
        return qid

    def window_problem(self, window, before=(), query: QueryGraph | None = None
                       ) -> str | None:
        """Why this engine cannot stand a query with this `window` and `before` pairs
        (checked against `query` when given; add_query), None when it can."""
        if window is None and len(before):
            return ("before takes a window: give one (a large one for no bound; untimed "
                    "edges are in no window)")
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 0:
            return f"window must be an integer >= 0, got {window!r}"
        if query is not None and len(before):
            problem = before_problem(query, before)
            if problem is not None:
                return problem
        return None

    def _add_windowed(self, query: QueryGraph, window, before) -> int:
        problem = self.window_problem(window, before, query)
        if problem is not None:
            raise ValueError(f"query {query.name}: {problem}")
        self.flush()
        plan = window_plan(query, before)
        qid = self._next_id
        self._next_id += 1
        # Its candidate bits prune its search as the standing queries' do, kept per batch
        # with theirs (registration may recode every query's, as add_query's may).  On
        # cuda they would live on the device: its search on the host goes without.
        self._arrays_generation += 1
        if self._device is None:
            self.signatures.add_query(qid, query, self.graph)
        leaves = LeafCounts(query, self.graph.label.shape[0], kept=False)
        self._windowed[qid] = _Windowed(query, plan, int(window), leaves)
        return qid

    def windowed_ids(self) -> list[int]:
        """The windowed queries (add_query with a window); query_ids() are the others."""
        return list(self._windowed)

    def _plan_stats(self, query: QueryGraph, cand: np.ndarray) -> PlanStats:
        """Candidate-set sizes and data edges between candidate sets (registration only)."""
        g = self.graph
        cand = cand[: g.num_slots]
        sizes = np.array([float(((cand >> np.uint32(q)) & np.uint32(1)).sum())
                          for q in range(query.num_vertices)])
        qa, qb = (np.ascontiguousarray(query.edges[:, k], dtype=np.int64) for k in (0, 1))
        counts = g.candidate_edge_counts(cand, qa, qb, np.ascontiguousarray(
            query.edge_labels, dtype=np.int32))
        edges = np.zeros((query.num_vertices, query.num_vertices))
        for a, b, count in zip(qa.tolist(), qb.tolist(), counts.tolist(), strict=True):
            edges[a, b] = edges[b, a] = float(count)
        return PlanStats(candidates=sizes, edges=edges)

    def remove_query(self, qid: int) -> None:
        if qid in self._windowed:
            self.flush()
            del self._windowed[qid]
            self._arrays_generation += 1
            if self._device is None:
                self.signatures.remove_query(qid)
            return
        self._standing(qid)
        self.flush()
        del self._queries[qid]
        self._arrays_generation += 1
        self.signatures.remove_query(qid)
        if self._device is not None:
            self._device.drop_query(qid)

    def query_ids(self) -> list[int]:
        return list(self._queries)

    def plan(self, qid: int) -> QueryPlan:
        return self._standing(qid).plan

    def _standing(self, qid: int) -> _Standing:
        try:
            return self._queries[qid]
        except KeyError:
            raise UnknownQuery(qid) from None

    # ---- static matching ------------------------------------------------
    def count(self, qid: int) -> int:
        """Number of embeddings of the query in the current graph (of a windowed query,
        those its window takes)."""
        if qid in self._windowed:
            return self._static_windowed(qid, 0).count
        return self._static(qid, 0).count

    def matches(self, qid: int, limit: int | None = None) -> MatchList:
        """Embeddings in the current graph as external ids (all, or the first `limit`)."""
        if qid in self._windowed:
            found = self._static_windowed(qid, limit if limit is not None else -1)
        else:
            found = self._static(qid, limit if limit is not None else -1)
        return MatchList(self._external(found.rows), found.truncated, found.count)

    def _static_windowed(self, qid: int, limit: int) -> MatchSet:
        """A windowed query's matches in the current graph: those from every timed edge
        (a valid match's edges are timed); `limit` as _static's."""
        self.flush()
        keys = np.sort(self.times.table.items()[0])
        if limit < 0:
            limit = event_time.windowed_phase(self, keys, None, None, [qid])[qid].count
        return event_time.windowed_phase(self, keys, None, None, [qid],
                                         list_limit={qid: limit})[qid]

    def _static(self, qid: int, limit: int) -> MatchSet:
        plan = self._standing(qid).plan
        self.flush()
        g = self.graph
        us, vs, labels = g.edges()
        ranks = np.zeros(len(us), dtype=np.int32)
        if limit < 0:   # everything: count first, then list exactly that many
            limit = self._run(qid, plan.static, us, vs, labels, ranks, 0).count
        return self._run(qid, plan.static, us, vs, labels, ranks, limit)

    def _run(self, qid: int, types: TaskTypes, us, vs, labels, ranks, limit: int,
             parallel: bool = False) -> MatchSet:
        """One query's matches of the tasks of edges us-vs; with `parallel` (a phase in
        parallel regions, _region_phase), in a region however few the tasks."""
        if self._device is not None:
            from gpu.cuda.executor import execute_cuda
            return execute_cuda(self._device, qid, types, us, vs, labels, ranks, limit,
                                self.config.work_sharing, self.config.share_capacity,
                                self.config.share_every, self.config.launch_pairs)
        group_min = self.config.leaf_group_min if self.config.leaf_groups else 0
        return execute_cpu(self.graph, self.signatures.cand[qid], self._queries[qid].leaves,
                           self._updates, types, us, vs, labels, ranks, limit,
                           self.config.task_chunk, group_min,
                           1 if parallel else self.config.serial_below_tasks)

    def _count_on_device(self, qids: list[int], edges):
        """Incremental counts of several standing queries in one CUDA launch per size,
        from the phase's uploaded update edges, queued (a PendingMatches: resolve() gives
        one MatchSet per query)."""
        from gpu.cuda.executor import launch_cuda_counts
        return launch_cuda_counts(self._device, self._jobs(qids), edges,
                                  self.config.work_sharing, self.config.share_capacity,
                                  self.config.share_every, self.config.launch_pairs)

    def _jobs(self, qids: list[int]) -> list[tuple[int, TaskTypes]]:
        """The device launches' jobs: each query's incremental task types."""
        return [(qid, self._queries[qid].plan.incremental) for qid in qids]

    def _list_on_device(self, qids: list[int], edges, list_limit: Mapping[int, int]):
        """Incremental matches of several standing queries, counted and listed (each up to
        its limit, as external ids) in one launch pair per size, from the phase's
        uploaded update edges, queued (a PendingMatches: resolve() gives one MatchSet per
        query)."""
        from gpu.cuda.executor import launch_cuda_lists
        jobs = [(qid, self._queries[qid].plan.incremental, list_limit[qid]) for qid in qids]
        return launch_cuda_lists(self._device, jobs, edges, True, self.config.work_sharing,
                                 self.config.share_capacity, self.config.share_every,
                                 self.config.launch_pairs)

    def _count_by_batch_on_device(self, qids: list[int], us, vs, labels, runs: np.ndarray
                                  ) -> np.ndarray:
        """A batch group's counts on the device: every query's matches started from each
        run of the update edges us-vs (`runs`: the runs' lengths, ranked in edge order),
        shape (queries, runs), read back in one copy."""
        from gpu.cuda.executor import count_cuda_runs
        small = self._small_phase(qids, us)
        if small is not None:
            return small.launch(us, vs, labels).by_run(runs)
        jobs = self._jobs(qids)
        ranks = np.arange(1, len(us) + 1, dtype=np.int32)
        edges = self._device.upload_edges(us, vs, labels, ranks)
        self._device.set_ranks(us, vs, edges)
        try:
            return count_cuda_runs(self._device, jobs, edges, runs, self.config.work_sharing,
                                   self.config.share_capacity, self.config.share_every,
                                   self.config.launch_pairs)
        finally:
            self._device.clear_ranks()

    def _small_phase(self, qids: list[int], us):
        """The CUDA executor's prepared launches for a phase of these counted queries
        from update edges `us` (gpu/cuda/small_phase.py), or None where it takes the
        general launches (more than `small_phase_edges` edges, no read view)."""
        if not qids or not 0 < len(us) <= self.config.small_phase_edges:
            return None
        return self._device.small_phase(self._jobs(qids), self.config.small_phase_edges,
                                        self.config.work_sharing, self.config.share_capacity,
                                        self.config.small_share_every)

    def _region_phase(self, us, minimum: int | None = None) -> bool:
        """Whether a CPU phase runs in parallel regions: with `shared_region_threads` Numba
        threads or more, when it has `minimum` (serial_below_tasks) edges or more.  A
        smaller one runs serially: waking the workers costs more than its search, even
        with a hub's edge (a one-edge batch on a 16-core host: mean 1.30 ms in the region
        against 0.90 ms serially, docs/benchmarks.md)."""
        threads = self.config.shared_region_threads
        if minimum is None:
            minimum = self.config.serial_below_tasks
        return 0 < threads <= numba.get_num_threads() and len(us) >= minimum

    def _count_shared(self, qids: list[int], us, vs, labels, region: bool
                     ) -> list[MatchSet | None]:
        """Incremental counts of several standing queries in one compiled CPU call that
        ranks the edges and fills the update index itself: with `region` (_region_phase),
        for a phase of any size, in one parallel region (count_phase); otherwise for a
        phase of fewer than `serial_below_tasks` edges, serially (count_small).  None where
        a query is handed back (it runs alone, through _run), or for all of them when the
        phase is too large for the serial call."""
        if not qids or not self.config.shared_call or \
                (not region and len(us) >= self.config.serial_below_tasks):
            return [None] * len(qids)
        queries = self._shared_queries(qids)
        group_min = self.config.leaf_group_min if self.config.leaf_groups else 0
        if region:
            totals = count_phase_cpu(self.graph, queries, self._updates, us, vs, labels,
                                     group_min)
        else:
            totals = count_small_cpu(self.graph, queries, self._updates, us, vs, labels,
                                     group_min, self.config.serial_below_tasks)
        return [MatchSet(total, _no_rows(self._queries[qid].plan.query.num_vertices), False)
                if total >= 0 else None
                for qid, total in zip(qids, totals.tolist(), strict=True)]

    def _shared_queries(self, qids: list[int]):
        """The typed list of `small_query` tuples the shared calls take."""
        return self._small_queries.get((self._arrays_key(), tuple(qids)), lambda: [
            small_query(self.signatures.cand[qid], self._queries[qid].leaves,
                        self._queries[qid].plan.incremental) for qid in qids])

    def _arrays_key(self) -> tuple[int, int, int]:
        """Names the state of the per-query arrays the QueryArrays lists hold: they are
        replaced only when a query comes or goes, or when the vertex capacity grows; and
        the kind of list the kernels take (a plain one while they are interpreted)."""
        return self._arrays_generation, self.graph.label.shape[0], interpreted.epoch()

    def _external(self, rows: np.ndarray) -> np.ndarray:
        if rows.shape[0] == 0:
            return np.empty(rows.shape, dtype=np.int64)
        return self.graph.ext[rows].astype(np.int64).reshape(rows.shape)

    # ---- batches --------------------------------------------------------
    def apply(self, stream: UpdateStream, list_limit: int | Mapping[int, int] = 0
              ) -> BatchResult:
        """Apply one batch atomically; report each query's positive/negative matches.

        `list_limit` is the most matches listed per query and sign: one number for every
        query, or a number per query id (queries left out are counted only, which keeps
        their faster count-only search).  Raises BatchRejected (nothing changed) when the
        batch is invalid.
        """
        return self._start(stream, list_limit, defer=False).finish()

    def start(self, stream: UpdateStream, list_limit: int | Mapping[int, int] = 0
              ) -> PendingBatch:
        """Apply one batch atomically (as `apply`) and start its matching: the batch is
        applied when this returns, and `finish()` of what it returns gives its BatchResult.
        On the CUDA executor counted queries' totals may still be on the device until
        then, so the caller can start the next batch first (as apply_stream does).  A batch
        that can be part of a batch group (BatchGroup) waits for the
        batches started after it: its updates and search run when any member of its group
        is finished, when a batch that cannot join is started, or at any other engine call
        that reads the graph or the queries (read `graph` itself only after one)."""
        return self._start(stream, list_limit, defer=True)

    def apply_stream(self, streams: Iterable[UpdateStream],
                     list_limit: int | Mapping[int, int] = 0) -> Iterator[BatchResult]:
        """Apply batches in order, yielding each one's result (as `apply` does).

        On the CUDA executor the host work of the next batch (validation, graph update,
        tasks) overlaps the kernels of the one before: counted queries' totals come back
        by asynchronous copies, and a batch's result is yielded once the next batch has
        been started.  On the CPU executor small batches of one kind share a search (a
        batch group), and a batch's result is yielded once its group is complete.  So
        iterate to the end (a batch is applied when it is started).  A rejected batch
        raises BatchRejected (any error, its own) after the results of the batches before
        it.
        """
        return pipeline.stream(self, streams, list_limit)

    @property
    def group_edges(self) -> int:
        """The most edges of a batch group on this engine's executor (0: no groups)."""
        return (self.config.batch_group_edges if self._device is None
                else self.config.device_batch_group_edges)

    def flush(self) -> None:
        """Apply and search the open batch group, if any (every other engine call that
        reads the graph or the queries does this first)."""
        if self._group is not None:
            self._group.run()

    def _start(self, stream: UpdateStream, list_limit, defer: bool) -> PendingBatch:
        """Apply a batch to the graph and start its matching; with `defer`, counted queries'
        totals may still be on the device when this returns."""
        if not isinstance(list_limit, Mapping):
            list_limit = dict.fromkeys([*self._queries, *self._windowed], list_limit)
        t0 = clock.now()
        if self._timed or stream.timed:
            # From the first timed batch on every batch keeps the times (a deletion drops
            # its edge's): no batch groups.
            self._timed = True
            return event_time.start_timed(self, stream, list_limit, t0)
        if pipeline.groupable(self, list_limit):
            limit = self.group_edges
            edges = pending_edges(stream, self.graph, limit)
            if edges is not None:
                if self._group is not None and not self._group.admits(edges, limit):
                    self.flush()
                self.batches_applied += 1
                return self._untimed(pipeline.join_group(self, edges, list_limit, t0))
        # Validated against the graph with every batch before it in.
        self.flush()
        batch = normalize(stream, self.graph, self._prep)
        self._admit(batch, stream)
        self.batches_applied += 1
        return self._untimed(self._run_batch(batch, list_limit, defer, t0))

    def _untimed(self, pending: PendingBatch) -> PendingBatch:
        """A batch of an engine without times: no windowed query has a valid match (every
        edge is untimed), before it or after."""
        pending.windowed = {qid: w.query.num_vertices for qid, w in self._windowed.items()}
        return pending

    def _admit(self, batch: EffectiveBatch, stream: UpdateStream) -> None:
        """Reject a validated batch the device graph cannot take (its new vertices' labels
        or slots), before anything changes."""
        if self._device is not None and len(batch.add_slots):
            slots = max(self.graph.num_slots, int(batch.add_slots.max()) + 1)
            problem = self._device.admit(batch.add_labels, slots)
            if problem is not None:
                raise BatchRejected(stream.source, 0, problem)

    def _run_batch(self, batch: EffectiveBatch, list_limit: Mapping[int, int], defer: bool,
                   t0: float) -> PendingBatch:
        """A validated batch's three steps (module docstring); t0 is when it came."""
        self._device_seconds = 0.0
        t1 = clock.now()
        # Leaf counts leave out each phase's update edges (see gpu/plan/leaf_counts.py).  The
        # deleted edges' contributions go for good: the edges leave the graph next.
        self._leaf_edges(batch.delete_u, batch.delete_v, batch.delete_labels, -1)
        dev = batch.device     # the edge changes on the device already, or None
        negative, neg_seconds = self._incremental(
            batch.delete_u, batch.delete_v, batch.delete_labels, list_limit, defer,
            dev and (dev.delete_u, dev.delete_v, dev.delete_labels))
        t2 = clock.now()
        self._mutate(batch)
        self._leaf_edges(batch.insert_u, batch.insert_v, batch.insert_labels, -1)
        t3 = clock.now()
        positive, pos_seconds = self._incremental(
            batch.insert_u, batch.insert_v, batch.insert_labels, list_limit, defer,
            dev and (dev.insert_u, dev.insert_v, dev.insert_labels))
        t4 = clock.now()
        self._leaf_edges(batch.insert_u, batch.insert_v, batch.insert_labels, +1)
        t5 = clock.now()
        seconds = {qid: pos_seconds[qid] + neg_seconds[qid] for qid in self._queries}
        timings = {"validate": t1 - t0, "match": (t2 - t1) + (t4 - t3),
                   "update": (t3 - t2) + (t5 - t4), "device_update": self._device_seconds}
        return PendingBatch(batch, list_limit, negative, positive, seconds, t0, t5, timings)

    def _leaf_edges(self, us, vs, labels, sign: int) -> None:
        # Without a leaf (the dense queries, and every query on CUDA: LeafCounts(kept=False))
        # there is nothing to count: no call, and no GIL hand-off (a released GIL may wait
        # for the event loop to give it back).
        if len(us) and any(s.leaves.active for s in self._queries.values()):
            upkeep.leaf_edges(self._query_arrays(), us, vs,
                              np.ascontiguousarray(labels, dtype=np.int32), np.int32(sign))

    def _query_arrays(self):
        """Every standing query's upkeep arrays as a typed list (gpu/plan/upkeep.py), or None."""
        return self._upkeep.get(self._arrays_key(), self._upkeep_parts)

    def _upkeep_parts(self) -> list[tuple]:
        sig = self.signatures
        every = [*self._queries.items(), *self._windowed.items()]
        return [(sig.cand[qid], s.leaves.nc, s.leaves.leaf_q, s.leaves.leaf_elab,
                 s.leaves.leaf_dir)
                + sig.query_side(qid) for qid, s in every]

    def _incremental(self, us, vs, labels, list_limit: Mapping[int, int], defer: bool = False,
                     on_device: tuple | None = None) -> tuple[dict, dict[int, float]]:
        """Matches using at least one of the edges us-vs, each once (total-order rule),
        and each query's matching seconds; with `defer`, counted queries on the device get
        a Deferred (their totals still on the way) instead of a MatchSet.  `on_device`:
        (us, vs, labels) on the device already (CUDA), read there instead of uploaded."""
        results, seconds = {}, {}
        if len(us) == 0:    # nothing can match: skip the per-query work
            for qid, standing in self._queries.items():
                n = standing.plan.query.num_vertices
                results[qid] = MatchSet(0, np.empty((0, n), dtype=np.int64), False)
                seconds[qid] = 0.0
            return results, seconds
        counted = [q for q in self._queries if list_limit.get(q, 0) <= 0]
        region = self._device is None and self._region_phase(us)
        if self._device is None:
            # The counted queries of a phase share one compiled call that ranks the edges
            # and fills the update index itself (and clears both); the queries it hands
            # back, and the listed ones, go one by one below.
            t0 = clock.now()
            found_shared = {qid: found for qid, found in
                           zip(counted, self._count_shared(counted, us, vs, labels, region),
                               strict=True)
                           if found is not None}
            results.update(found_shared)
            if found_shared:
                seconds.update(dict.fromkeys(found_shared,
                                             (clock.now() - t0) / len(found_shared)))
            if len(results) == len(self._queries):
                return results, seconds
            counted = []
        if self._device is not None and len(counted) == len(self._queries):
            small = self._small_phase(counted, us)
            if small is not None:
                t0 = clock.now()
                pending = small.launch(us, vs, labels)
                found = ([Deferred(pending, i) for i in range(len(counted))] if defer
                         else pending.resolve())
                results.update(zip(counted, found, strict=True))
                seconds.update(dict.fromkeys(counted, (clock.now() - t0) / len(counted)))
                return results, seconds
        ranks = np.arange(1, len(us) + 1, dtype=np.int32)
        ranked = len(us) > 0 and len(self._queries) > 0
        edges = None
        try:
            if ranked:
                # Each executor reads the ranks (and the CPU one the update index) of its
                # own copy of the graph only.
                if self._device is not None:
                    # Uploaded once: the ranks, the counted launches and the listings
                    # read the same copy.
                    edges = self._device.upload_edges(us, vs, labels, ranks, on_device)
                    self._device.set_ranks(us, vs, edges)
                else:
                    self.graph.set_ranks(us, vs, ranks)
                    self._updates.fill(self.graph.label.shape[0], us, vs, labels, ranks,
                                       self.directed)
            # On CUDA the counted queries share one launch per query size, and the listed
            # ones one launch pair per size (their rows mapped to external ids on the
            # device as they are found, and read back when the batch is finished); a
            # shared call's seconds are split evenly.  On the CPU the listed queries, and
            # those the small-batch call above hands back, go one by one.
            if self._device is not None:
                listed = [q for q in self._queries if q not in counted]
                list_them = functools.partial(self._list_on_device, list_limit=list_limit)
                launched = []
                for qids, launch in ((counted, self._count_on_device), (listed, list_them)):
                    if qids:
                        t0 = clock.now()
                        launched.append((qids, launch(qids, edges), clock.now() - t0))
                # Queued behind the searches on the engine's stream before any wait for
                # them, so that the clearing runs while the host waits, not after.
                self._device.clear_ranks()
                ranked = False
                for qids, pending, spent in launched:
                    t0 = clock.now()
                    found = ([Deferred(pending, i) for i in range(len(qids))] if defer
                             else pending.resolve())
                    results.update(zip(qids, found, strict=True))
                    seconds.update(dict.fromkeys(qids,
                                                 (spent + clock.now() - t0) / len(qids)))
            for qid, standing in self._queries.items():
                if qid in results:
                    continue
                t0 = clock.now()
                found = self._run(qid, standing.plan.incremental, us, vs, labels, ranks,
                                  list_limit.get(qid, 0), region)
                # Converted now: slots of deleted vertices may be reused later.
                results[qid] = MatchSet(found.count, self._external(found.rows),
                                        found.truncated)
                seconds[qid] = clock.now() - t0
        finally:
            if ranked:
                if self._device is not None:
                    self._device.clear_ranks()
                else:
                    self.graph.set_ranks(us, vs, np.zeros(len(us), dtype=np.int32))
                    self._updates.clear()
        return results, seconds

    def _mutate(self, batch: EffectiveBatch) -> None:
        g, sig = self.graph, self.signatures
        # New vertices first: normalize() gave them slots before this batch frees any.
        if len(batch.add_ids):
            slots = g.add_vertices(batch.add_ids, batch.add_labels)
            assert np.array_equal(slots, batch.add_slots)
        # A batch whose changes are on the device (EffectiveBatch.device) gets its host
        # degrees from the device's counts at the touched vertices (PmaGraph.sync), not by
        # counting its endpoints here (a million-edge batch: ~40 ms of scatter and gather).
        counted_here = batch.device is None
        if len(batch.delete_u) and counted_here:
            g.delete_edges(batch.delete_u, batch.delete_v)
        g.delete_vertices(batch.delete_slots)
        if len(batch.insert_u) and counted_here:
            g.insert_edges(batch.insert_u, batch.insert_v, batch.insert_labels)
        if self._device is not None:
            # The device graph, signatures and candidate bits follow on the device.
            touched = self._device.touched(batch)
            t0 = clock.now()
            self._device.sync(g, touched, batch)
            self._device_seconds = clock.now() - t0
            return
        if len(batch.add_ids):
            sig.vertices_added(g, batch.add_slots)
            for standing in [*self._queries.values(), *self._windowed.values()]:
                standing.leaves.resize(g.label.shape[0])
        # Signatures, then leaf counts of the new edges under the old candidate bits, then
        # the bit changes (SignatureTable.refresh and LeafCounts.candidates_changed), for
        # every query in one compiled call.
        vertices = (np.concatenate([batch.delete_slots, batch.add_slots]).astype(np.int32)
                    if len(batch.delete_slots) or len(batch.add_slots) else _NO_VERTICES)
        upkeep.batch_changes(self._query_arrays() if self._queries or self._windowed
                             else None, sig, g,
                             batch.delete_u, batch.delete_v, batch.insert_u, batch.insert_v,
                             batch.insert_labels, vertices)

    # ---- inspection -----------------------------------------------------
    def check(self) -> None:
        """Assert every incrementally maintained structure equals a rebuild (tests)."""
        self.flush()
        self.graph.check()
        lists = self.graph.host_lists()     # the graph itself, or made from the device's
        lists.check()
        self.signatures.check(lists)
        for qid, standing in self._queries.items():
            standing.leaves.check(lists, self.signatures.cand[qid])
        if self._device is None:
            self._upkeep.check(self._arrays_key(), self._upkeep_parts())
        else:
            self._device.check(lists)
        # Every timed edge is in the graph, with the label the times table keeps for it
        # (the windowed phases' subgraphs take the labels from the table).
        keys, _, labels = self.times.table.labeled_items()
        us, vs = (keys >> 32).astype(np.int32), (keys & 0xFFFFFFFF).astype(np.int32)
        assert np.array_equal(stored_labels(self.graph, us, vs), labels), \
            "a timed edge the graph does not hold, or with another label"

    def _restore_times(self, graph: LabeledGraph) -> None:
        """Take a timed graph's edge times and watermark (a snapshot's, to_labeled's)."""
        self._timed = True
        self.watermark = None if graph.watermark is None else int(graph.watermark)
        if graph.edge_times is None:
            return
        timed = np.flatnonzero(graph.edge_times != NO_TIME)
        su = self.graph.ids.lookup(graph.edge_src[timed])
        sv = self.graph.ids.lookup(graph.edge_dst[timed])
        if not self.directed:
            su, sv = np.minimum(su, sv), np.maximum(su, sv)
        # The labels as the graph holds them (once, at a restore; a graph read from input
        # may repeat an edge).
        self.times.set(edge_keys(su, sv), graph.edge_times[timed],
                       stored_labels(self.graph, su, sv))

    def edge_times(self) -> dict[tuple[int, int], int]:
        """Each timed edge's event time, by its endpoints' external ids (u < v as slots, or
        the arc u -> v); untimed edges are left out."""
        self.flush()
        ext = self.graph.ext
        return {(int(ext[key >> 32]), int(ext[key & 0xFFFFFFFF])): time
                for key, time in self.times.items()}

    def to_labeled(self) -> LabeledGraph:
        """The current graph with external ids (snapshots, tests)."""
        self.flush()
        g = self.graph
        alive = np.flatnonzero(g.alive[: g.num_slots])
        us, vs, labels = g.edges()
        times = None
        if self._timed:     # the edges' times (NO_TIME: untimed) and the watermark too
            times = self.times.get_many(edge_keys(us, vs))
        return LabeledGraph(vertex_ids=g.ext[alive].copy(), vertex_labels=g.label[alive].copy(),
                            edge_src=g.ext[us], edge_dst=g.ext[vs], edge_labels=labels,
                            edge_times=times, watermark=self.watermark)
