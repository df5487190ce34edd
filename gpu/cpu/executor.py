"""The executor boundary: runs a plan's tasks on the CPU (Numba) and returns a MatchSet.

Both executors take the same arguments and return the same `MatchSet`; only
this boundary would copy between host and device.
"""
from __future__ import annotations

import weakref

import numba
import numpy as np

from gpu.cpu import leaf_groups, phases, search
from gpu.cpu.interpreted import kernel_list
from gpu.plan.leaf_counts import LeafCounts, UpdateIndex
from gpu.plan.planner import LeafGroups, TaskTypes, group_leaf_tasks, make_tasks
from gpu.results import MatchSet


def execute_cpu(graph, cand: np.ndarray, leaves: LeafCounts, updates: UpdateIndex,
                types: TaskTypes, us: np.ndarray, vs: np.ndarray, labels: np.ndarray,
                ranks: np.ndarray, list_limit: int, chunk: int, group_min: int = 0,
                serial_below: int = 0) -> MatchSet:
    """Count (and list up to `list_limit`) the matches of `types` started from edges us-vs.

    `leaves` must hold counts without the edges in `updates` (the running phase's).
    With `group_min` > 0 and nothing to list, leaf-rooted tasks sharing their parent
    vertex are searched in groups of at least that many (gpu/cpu/leaf_groups.py).  Fewer
    than `serial_below` tasks run on the calling thread alone.  Small counted batches
    of several queries go through `count_small_cpu` first."""
    n = types.orders.shape[1]
    tu, tv, tr, tt = make_tasks(types, cand, us, vs, labels, ranks)
    if len(tu) == 0:
        return MatchSet(0, np.empty((0, n), dtype=np.int32), False)
    threads = numba.get_num_threads()
    if len(tu) >= serial_below or threads == 1:
        return _execute(graph, cand, leaves, updates, types, tu, tv, tr, tt, list_limit, chunk,
                        group_min)
    # A parallel region wakes every worker and ends at a barrier: for a handful of tasks
    # that costs more than the work, and on a busy host (the service's event loop, writer
    # and clients share the cores) one late worker stalls the whole region.
    numba.set_num_threads(1)
    try:
        return _execute(graph, cand, leaves, updates, types, tu, tv, tr, tt, list_limit, chunk,
                        group_min)
    finally:
        numba.set_num_threads(threads)


def small_query(cand: np.ndarray, leaves: LeafCounts, types: TaskTypes) -> tuple:
    """One query's entry in the typed list `count_small_cpu` takes (upkeep.QueryArrays)."""
    return (types.roots, types.root_labels, cand, _plan_arrays(types, leaves), leaves.column,
            leaves.nc)


def count_small_cpu(graph, queries, updates: UpdateIndex, us: np.ndarray, vs: np.ndarray,
                    labels: np.ndarray, group_min: int, serial_below: int,
                    edge_batch: np.ndarray | None = None, nbatch: int = 1) -> np.ndarray:
    """The counts `execute_cpu` (nothing listed) gives each of several queries for a phase
    of fewer than `serial_below` edges, in one compiled call that ranks the edges 1..k and
    fills `updates` itself, and clears both before it returns: the same tasks, searched one
    by one on this thread.  `queries` is a typed list of `small_query` tuples; us-vs are
    int32 and in the graph.  A negative count hands that query back: `execute_cpu` would
    form a leaf group or a parallel region, and must run it (after the caller has set the
    ranks and filled `updates` the general way).

    With `edge_batch` (int32, the batch 0..nbatch-1 of each edge: a phase of several
    batches, Engine's batch groups), the counts come per query and batch, shape (queries,
    nbatch), each batch's the sum over the tasks of its edges."""
    assert len(us) < serial_below
    updates.reserve(graph.label.shape[0])
    totals = phases.count_small(queries, us, vs, labels, _batch_of_edges(edge_batch, us),
                                np.int64(nbatch),
                                serial_below, max(2, group_min) if group_min > 0 else 0,
                                _graph_arrays(graph), updates.start, updates.count,
                                graph.directed, graph.max_degree)
    return totals if edge_batch is not None else totals[:, 0]


def _batch_of_edges(edge_batch: np.ndarray | None, us: np.ndarray) -> np.ndarray:
    """The shared calls' per-edge batch index: all 0 (one batch) when not given."""
    return np.zeros(len(us), dtype=np.int32) if edge_batch is None else edge_batch


def count_phase_cpu(graph, queries, updates: UpdateIndex, us: np.ndarray, vs: np.ndarray,
                    labels: np.ndarray, group_min: int, edge_batch: np.ndarray | None = None,
                    nbatch: int = 1) -> np.ndarray:
    """What `count_small_cpu` gives, for a phase of any size, in one parallel region over
    the tasks of every query: heavy tasks (HEAVY_TASK_WEIGHT) start as one to
    PIECES_PER_THREAD pieces per worker, and busy workers hand waiting ones half of their
    unexplored candidates (SHARE_EVERY, SHARE_ROOM), so that no hub keeps one worker busy
    while the others wait at the region's end.  A negative count hands a query back (a
    leaf group forms).  `edge_batch` and `nbatch` as in count_small_cpu."""
    updates.reserve(graph.label.shape[0])
    threads = numba.get_num_threads()
    with numba.parallel_chunksize(1):
        totals = phases.count_phase(queries, us, vs, labels,
                                    _batch_of_edges(edge_batch, us), np.int64(nbatch),
                                    max(2, group_min) if group_min > 0 else 0,
                                    _graph_arrays(graph), updates.start,
                                    updates.count, graph.directed, graph.max_degree,
                                    *_sharing(threads))
    return totals if edge_batch is not None else totals[:, 0]


# count_phase's trace argument when nothing is traced (benchmarks.region_trace passes one).
_NO_TRACE = np.empty((0, 6), dtype=np.int64)


def _sharing(threads: int) -> tuple:
    """share_tasks's last arguments (heavy weight, pieces, workers, queue room, giving,
    trace) for `threads` workers, from the tunables below."""
    return (np.float64(HEAVY_TASK_WEIGHT), np.int64(threads),
            np.int64(PIECES_PER_THREAD * threads), np.int64(threads), np.int64(SHARE_ROOM),
            np.int64(SHARE_EVERY), SHARE_ALWAYS, _NO_TRACE)


def _shared_count(graph, cand, leaves: LeafCounts, updates: UpdateIndex, types: TaskTypes,
                  tu, tv, tr, tt) -> int:
    """The matches of one query's counted tasks, its workers sharing the work as in
    count_phase_cpu (a query count_phase hands back runs its tasks not grouped here)."""
    queries = kernel_list([small_query(cand, leaves, types)])
    tasks = (np.zeros(len(tu), dtype=np.int32), tu, tv, tr, tt)
    with numba.parallel_chunksize(1):
        found, _ = phases.share_tasks(
            queries, tasks, types.orders.shape[1], _graph_arrays(graph),
            _update_arrays(updates), graph.max_degree, *_sharing(numba.get_num_threads()))
    return int(found.sum())


def _graph_arrays(graph) -> tuple:
    return (graph.start, graph.deg, graph.nbr, graph.nlab, graph.elab, graph.rank, graph.label)


# The plan tuple of each TaskTypes, with and without leaf counting (built once per plan).
_PLAN_ARRAYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _plan_arrays(types: TaskTypes, leaves: LeafCounts) -> tuple:
    built = _PLAN_ARRAYS.setdefault(types, {})
    active = leaves.active
    if active not in built:
        leaf_from = types.leaf_from if active else \
            np.full(types.count, types.orders.shape[1], np.int32)
        built[active] = (types.query_labels, types.orders, types.bw_count, types.bw_level,
                         types.bw_label, types.tail_free, leaf_from, types.tail_head,
                         types.perms, types.multiplicity, types.leaf_root, types.bw_key)
    return built[active]


def _leaf_arrays(leaves: LeafCounts, updates: UpdateIndex) -> tuple:
    return (leaves.column, leaves.nc) + _update_arrays(updates)


def _update_arrays(updates: UpdateIndex) -> tuple:
    return (updates.start, updates.count, updates.nbr, updates.rank, updates.elab)


def _execute(graph, cand, leaves, updates, types, tu, tv, tr, tt, list_limit, chunk,
             group_min) -> MatchSet:
    n = types.orders.shape[1]
    shared = (_graph_arrays(graph), cand, _plan_arrays(types, leaves),
              _leaf_arrays(leaves, updates), np.int64(graph.max_degree), np.int64(chunk))
    no_out = np.empty((0, n), dtype=np.int32)
    if list_limit <= 0 and group_min > 0:
        (tu, tv, tr, tt), groups = group_leaf_tasks(types, tu, tv, tr, tt, group_min)
        total = _grouped_count(groups, types, shared)
    else:
        total = 0
    if list_limit <= 0 and numba.get_num_threads() > 1:
        total += _shared_count(graph, cand, leaves, updates, types, tu, tv, tr, tt)
        return MatchSet(total, no_out, False)
    args = (tu, tv, tr, tt) + shared
    counts = search.run_tasks(*args, np.empty(0, dtype=np.int64), no_out, np.int64(0), False)
    per_task = counts * types.multiplicity[tt]
    total += int(per_task.sum())
    if list_limit <= 0:
        return MatchSet(total, no_out, False)
    offsets = np.zeros(len(tu), dtype=np.int64)
    np.cumsum(per_task[:-1], out=offsets[1:])
    rows = np.empty((min(total, list_limit), n), dtype=np.int32)
    search.run_tasks(*args, offsets, rows, np.int64(len(rows)), True)
    return MatchSet(total, rows, total > len(rows))


# Groups of at least this many members, or on a vertex of HEAVY_TASK_WEIGHT ** 0.5
# neighbours or more, are split into PIECES_PER_THREAD pieces per worker.
GROUP_SPLIT_MEMBERS = 4
PIECES_PER_THREAD = 4
# count_phase_cpu splits a task so too when deg(u) * deg(v) of its edge is at least this:
# on GH with the dense queries 7% of the tasks of 100-edge batches pass it and hold 59% of
# their matches; in the heaviest batches one task holds 40-80% of them.
HEAVY_TASK_WEIGHT = 100_000
# count_phase_cpu: a busy worker looks whether another waits for work every this many
# candidate advances (an atomic load of a line only waiting workers write).
SHARE_EVERY = 32
# count_phase_cpu: work-queue records the busy workers may give, beyond the pieces.
SHARE_ROOM = 1 << 12
# count_phase_cpu: give at every look, waiting worker or not (tests: every path of the
# queue on one thread).
SHARE_ALWAYS = False


def _grouped_count(groups: LeafGroups, types: TaskTypes, shared: tuple) -> int:
    if groups.count == 0:
        return 0
    members = (groups.rank, groups.leaf, groups.leaf_by_id, groups.rank_by_id)
    graph_arrays, cand, plan_arrays, leaf_arrays, max_deg, _ = shared
    # A group is one search, and a hub's group can hold most of a batch's work: groups
    # of several members run as pieces (interleaved slices of their first enumerated
    # level), largest first, taken one at a time by every worker.
    # A group of two members on a hub is as heavy as a task on a hub's edge (one such
    # took 11-20 ms of a 100-edge batch on one worker): split too.
    threads = numba.get_num_threads()
    sizes = groups.hi - groups.lo
    hub = graph_arrays[1][groups.parent].astype(np.float64) ** 2 >= HEAVY_TASK_WEIGHT
    parts = np.where((sizes >= GROUP_SPLIT_MEMBERS) | hub, PIECES_PER_THREAD * threads, 1)
    with numba.parallel_chunksize(1):
        counts = leaf_groups.run_groups(groups.task_type, groups.parent, groups.lo, groups.hi,
                                       parts.astype(np.int64), members, graph_arrays, cand,
                                       plan_arrays, leaf_arrays, max_deg, np.int64(threads))
    return int((counts * types.multiplicity[groups.task_type]).sum())
