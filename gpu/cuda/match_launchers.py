"""Typed launchers of the matching kernels: gpu/cuda/kernels/match.cu (match_tasks),
tasks.cu (make_tasks), ranks.cu (set_edge_ranks) and leaves.cu (mark_update_leaves), with the
argument types a launch takes (the graph layouts, the plan, the update edges, the leaf
counts of a phase).

Sources come from the one loader (gpu/cuda/loader.py); each launcher checks its arrays
and casts its scalars there.  Only import this module where
`gpu.cuda.device.cuda_available()` is true.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import cupy as cp
import numpy as np

from gpu.config import EngineConfig
from gpu.cuda.loader import MAX_QUERY, Prepared, check_array, kernel, one_thread_each

# One WarpState (gpu/cuda/kernels/match.cu) per warp in shared memory: 4 int arrays and
# 2 uint64 arrays of MAX_QUERY entries, and the clock.
WARP_STATE_BYTES = 4 * 4 * MAX_QUERY + 2 * 8 * MAX_QUERY + 8
WARPS_PER_BLOCK = 4
# Work-sharing records (task, level, lo, hi, the vertices above) a launch can hand out.
SHARE_RECORD_INTS = 4 + MAX_QUERY
# The defaults of both tunables live in EngineConfig.
SHARE_CAPACITY = EngineConfig.share_capacity
SHARE_EVERY = EngineConfig.share_every


class ListGraphArrays(NamedTuple):
    """match_tasks' graph: the mirrored pooled lists (gpu/graph/lists.py's layout)."""
    start: cp.ndarray
    deg: cp.ndarray
    nbr: cp.ndarray
    nlab: cp.ndarray
    elab: cp.ndarray
    rank: cp.ndarray


class PmaGraphArrays(NamedTuple):
    """match_tasks_pma's graph: the packed memory array (gpu/graph/pma/, keyed as
    gpu/cuda/device_graph.py says; during a phase the value slots of its update edges hold
    -(j + 1)) and the phase's ranks and saved edge labels by j."""
    keys: cp.ndarray
    vals: cp.ndarray
    cnt: cp.ndarray
    row: cp.ndarray
    seg_shift: int
    label_shift: int
    ranked: cp.ndarray
    saved: cp.ndarray


# Per layout: the kernel, and each field's dtype (int: a scalar passed as int32).
GRAPH_LAYOUTS = {
    ListGraphArrays: ("match_tasks", {"start": np.int64, "deg": np.int32, "nbr": np.int32,
                                      "nlab": np.int32, "elab": np.int32, "rank": np.int32}),
    PmaGraphArrays: ("match_tasks_pma", {"keys": np.uint64, "vals": np.int32,
                                         "cnt": np.int32, "row": np.int64, "seg_shift": int,
                                         "label_shift": int, "ranked": np.int32,
                                         "saved": np.int32}),
}


def _graph_args(graph) -> tuple[str, list]:
    """The kernel for this graph layout and its checked, cast arguments."""
    layout = GRAPH_LAYOUTS.get(type(graph))
    if layout is None:
        names = ", ".join(t.__name__ for t in GRAPH_LAYOUTS)
        raise TypeError(f"graph: expected one of {names}, got {type(graph).__name__}")
    kernel, dtypes = layout
    args = []
    for name, value in zip(graph._fields, graph, strict=True):
        if dtypes[name] is int:
            args.append(np.int32(value))
        else:
            check_array(name, value, dtypes[name])
            args.append(value)
    return kernel, args


class DevicePlan(NamedTuple):
    """The task types of one launch (one query's, or several stacked), on the device."""
    q_label: cp.ndarray       # int32 [T, n]
    cand_row: cp.ndarray      # int32 [T]     which of the launch's candidate tables
    orders: cp.ndarray        # int32 [T, n]
    level_of: cp.ndarray      # int32 [T, n]
    bw_count: cp.ndarray      # int32 [T, n]
    # A level's backward entries, W a level (n; 2n for a directed plan, an arc each way):
    # the level reached, the edge label, the neighbour-list key (match.cu Plan).
    bw_level: cp.ndarray      # int32 [T, n, W]
    bw_label: cp.ndarray      # int32 [T, n, W]
    bw_key: cp.ndarray        # int32 [T, n, W]
    tail_free: cp.ndarray     # uint8 [T]
    perms: cp.ndarray         # int32 [T, members, n]
    multiplicity: cp.ndarray  # int64 [T]
    roots: cp.ndarray         # int32 [T, 2]  (make_tasks only)
    root_labels: cp.ndarray   # int32 [T]     (make_tasks only)
    # The counted leaf tails (match.cu Leaves; PhaseLeaves): the level of each type's first
    # counted leaf (n: none), each leaf's column in the leaf counts, and per column its
    # query vertex, edge label and candidate-table row.
    leaf_from: cp.ndarray     # int32 [T]
    leaf_col: cp.ndarray      # int32 [T, n]  (-1: not a counted leaf)
    col_q: cp.ndarray         # int32 [C]
    col_elab: cp.ndarray      # int32 [C]
    col_row: cp.ndarray       # int32 [C]
    # The root level (0 or 1) of a type's query leaf, searched in groups of tasks that
    # share the leaf's parent (match.cu match_groups); -1: none.
    leaf_root: cp.ndarray     # int32 [T]


PLAN_DTYPES = {"q_label": np.int32, "cand_row": np.int32, "orders": np.int32,
               "level_of": np.int32, "bw_count": np.int32, "bw_level": np.int32,
               "bw_label": np.int32, "bw_key": np.int32, "tail_free": np.uint8,
               "perms": np.int32, "multiplicity": np.int64, "roots": np.int32,
               "root_labels": np.int32, "leaf_from": np.int32, "leaf_col": np.int32,
               "col_q": np.int32, "col_elab": np.int32, "col_row": np.int32,
               "leaf_root": np.int32}
# match_tasks' plan parameters in order: the first fields, the entries' width W after
# bw_key.
MATCH_PLAN_ARGS = (*DevicePlan._fields[:8], "bw_width", *DevicePlan._fields[8:11])


def plan_args(plan: DevicePlan) -> tuple:
    """match_tasks' plan arguments, as MATCH_PLAN_ARGS names them."""
    return tuple(np.int32(plan.bw_key.shape[2]) if name == "bw_width" else
                 getattr(plan, name) for name in MATCH_PLAN_ARGS)


class UpdateEdges(NamedTuple):
    """A phase's update edges on the device: ends, edge labels and ranks (int32 [E])."""
    us: cp.ndarray
    vs: cp.ndarray
    labels: cp.ndarray
    ranks: cp.ndarray


# ctl words of a launch: match.cu's [next_task, head, tail, active, waiting] and the
# number of tasks make_tasks wrote.
CTL_WORDS = 6
TASKS_WORD = 5


def _check_plan_and_edges(plan: DevicePlan, edges: UpdateEdges) -> None:
    if not isinstance(plan, DevicePlan):
        raise TypeError(f"plan: expected a DevicePlan, got {type(plan).__name__}")
    for name, array in zip(plan._fields, plan, strict=True):
        check_array(name, array, PLAN_DTYPES[name])
    if not plan.bw_level.shape == plan.bw_label.shape == plan.bw_key.shape:
        raise ValueError(f"bw_level, bw_label and bw_key differ in shape: "
                         f"{plan.bw_level.shape}, {plan.bw_label.shape}, {plan.bw_key.shape}")
    if not isinstance(edges, UpdateEdges):
        raise TypeError(f"edges: expected UpdateEdges, got {type(edges).__name__}")
    for name, array in zip(edges._fields, edges, strict=True):
        check_array(name, array, np.int32, 1)
        if array.shape[0] != edges.us.shape[0]:
            raise ValueError(f"edges.{name} has {array.shape[0]} entries, us "
                             f"{edges.us.shape[0]}")


MAKE_TASKS_ARGS = ("cand_ptrs", "cand_row", "roots", "root_labels", "types", "us", "vs",
                   "labels", "count", "tasks", "ctl")


def make_tasks(cand_ptrs: cp.ndarray, plan: DevicePlan, edges: UpdateEdges,
               tasks: cp.ndarray, ctl: cp.ndarray, prepare: bool = False
               ) -> Prepared | None:
    """Launch gpu/cuda/kernels/tasks.cu:make_tasks: the (edge, type) pairs that can start a
    match go to `tasks` (room for every pair) and their number to ctl[TASKS_WORD], which
    must start at zero.  With `prepare`, nothing is launched: the checked launch comes
    back as a Prepared (MAKE_TASKS_ARGS; launch it on make_tasks_blocks(types, count)
    blocks of 256 threads)."""
    _check_plan_and_edges(plan, edges)
    check_array("cand_ptrs", cand_ptrs, np.uint64, 1)
    check_array("tasks", tasks, np.int32, 1)
    check_array("ctl", ctl, np.uint64, 1)
    types, count = plan.roots.shape[0], edges.us.shape[0]
    if types * count >= 1 << 31:
        raise ValueError(f"{count} edges x {types} task types exceed int32 task numbers")
    if tasks.shape[0] < types * count or ctl.shape[0] != CTL_WORDS:
        raise ValueError(f"tasks holds {tasks.shape[0]} of {types * count} pairs, or ctl "
                         f"has {ctl.shape[0]} words instead of {CTL_WORDS}")
    args = (cand_ptrs, plan.cand_row, plan.roots, plan.root_labels, np.int32(types),
            edges.us, edges.vs, edges.labels, np.int32(count), tasks, ctl)
    if prepare:
        return Prepared(kernel("tasks", "make_tasks"), MAKE_TASKS_ARGS, args)
    if types * count == 0:
        return None
    kernel("tasks", "make_tasks")((make_tasks_blocks(types, count),), (256,), args)
    return None


def make_tasks_blocks(types: int, count: int) -> int:
    """Blocks of 256 threads make_tasks takes for `count` edges of `types` task types."""
    return min(-(-types * count // 256), 65535)


@functools.cache
def resident_warps(name: str = "match_tasks", blocks_per_sm: int = 0) -> int:
    """Warps that fit on the device at once with the matching kernel's register use, at
    most `blocks_per_sm` blocks per multiprocessor (0: no bound)."""
    search = kernel("match", name)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    regs_per_warp = max(1, search.num_regs) * 32
    per_sm = min(props["maxThreadsPerMultiProcessor"] // 32,
                 props["regsPerMultiprocessor"] // regs_per_warp)
    if blocks_per_sm:
        per_sm = min(per_sm, blocks_per_sm * WARPS_PER_BLOCK)
    per_sm -= per_sm % WARPS_PER_BLOCK
    return max(WARPS_PER_BLOCK, per_sm * props["multiProcessorCount"])


def match_tasks(graph: ListGraphArrays | PmaGraphArrays, cand_ptrs: cp.ndarray,
                plan: DevicePlan, n: int, members: int, tasks: cp.ndarray,
                edges: UpdateEdges, ctl: cp.ndarray, bufs: cp.ndarray, width: int, warps: int,
                counts: cp.ndarray, by_task: bool, offsets: cp.ndarray, out: cp.ndarray,
                row_end: cp.ndarray, listing: bool, sharing: bool = True,
                share_capacity: int = SHARE_CAPACITY, share_every: int = SHARE_EVERY,
                prepare: bool = False, leaves: PhaseLeaves | None = None
                ) -> Prepared | None:
    """Launch gpu/cuda/kernels/match.cu:match_tasks (or match_tasks_pma, by the graph's layout)
    over `warps` persistent warps, on the tasks make_tasks wrote (their number in ctl).
    `leaves` (the lists' layout only): the phase's leaf counts, read when counting; None
    enumerates every level.

    cand_ptrs holds the address of each query's candidate bits (the plan's cand_row
    indexes it).  Counts must start at zero: with `by_task`, one per (edge, type) pair,
    pair-major as make_tasks numbers them (parts of a task shared between warps add to
    it); otherwise [warps + 1, queries], warp-major: each warp's totals, orbit sizes
    included, then in the last row each query's total over the launch.  `sharing` hands
    unexplored candidates to idle warps (never while listing).  Listing reads an offset
    per pair, the first row of `out` its task writes, and row_end per query (as cand_row
    numbers them), the row its query's tasks stop before.

    With `prepare`, nothing is launched: the checked launch comes back as a Prepared
    (its arguments named as match_tasks_args says); before each launch of it ctl's first
    TASKS_WORD words and its `ready` array must be zeroed, and it runs on
    warps // WARPS_PER_BLOCK blocks of 32 * WARPS_PER_BLOCK threads."""
    kernel_name, graph_args = _graph_args(graph)
    check_array("cand_ptrs", cand_ptrs, np.uint64, 1)
    _check_plan_and_edges(plan, edges)
    check_array("tasks", tasks, np.int32, 1)
    check_array("ctl", ctl, np.uint64, 1)
    check_array("bufs", bufs, np.int32)
    check_array("counts", counts, np.int64, 1)
    check_array("offsets", offsets, np.int64, 1)
    check_array("out", out, np.int32, 2)
    check_array("row_end", row_end, np.int64, 1)
    if not 2 <= n <= MAX_QUERY:
        raise ValueError(f"query size must be 2..{MAX_QUERY}, got {n}")
    pairs = plan.roots.shape[0] * edges.us.shape[0]
    queries = cand_ptrs.shape[0]
    if tasks.shape[0] < pairs or ctl.shape[0] != CTL_WORDS:
        raise ValueError(f"tasks holds {tasks.shape[0]} of {pairs} pairs, or ctl has "
                         f"{ctl.shape[0]} words instead of {CTL_WORDS}")
    need = pairs if by_task else (warps + 1) * queries
    if listing:
        if not by_task:
            raise ValueError("listing reads its offsets per pair: it needs by_task")
        if offsets.shape[0] < pairs:
            raise ValueError(f"offsets has {offsets.shape[0]} entries, {pairs} needed")
        if row_end.shape[0] < queries:
            raise ValueError(f"row_end has {row_end.shape[0]} entries, {queries} needed")
    if counts.shape[0] < need:
        raise ValueError(f"counts has {counts.shape[0]} entries, {need} needed")
    if warps % WARPS_PER_BLOCK or bufs.size < warps * n * width:
        raise ValueError(f"bufs holds {bufs.size} ints, {warps} warps need {warps * n * width}")
    if listing and out.shape[1] != n:
        raise ValueError(f"listing needs {n} columns in out, got {out.shape[1]}")
    if share_capacity < 1 or share_every < 1:
        raise ValueError(f"share_capacity and share_every must be positive, got "
                         f"{share_capacity} and {share_every}")
    sharing = sharing and not listing
    capacity = share_capacity if sharing else 1
    # Shared by every launch (one stream runs them in turn).  A prepared launch keeps the
    # buffers it was given alive should a larger launch replace them here.
    records = scratch("records", capacity * SHARE_RECORD_INTS)
    ready = scratch("ready", capacity)
    if not prepare:
        ctl[:TASKS_WORD] = 0        # the task count stays: make_tasks wrote it
        ready[:capacity] = 0
    if leaves is not None:
        if not isinstance(graph, ListGraphArrays):
            raise TypeError("leaves: leaf counts are read on the lists' layout only")
        kernel_name = LEAF_KERNEL
    search = kernel("match", kernel_name)
    args = (*graph_args, cand_ptrs, np.int32(n), np.int32(members),
            *plan_args(plan),
            tasks, np.int32(plan.roots.shape[0]), edges.us, edges.vs, edges.ranks,
            bufs, np.int64(width), ctl, records, ready,
            np.int64(capacity), np.int32(1 if sharing else 0), np.int32(share_every), counts,
            np.int32(1 if by_task else 0), np.int32(queries),
            offsets, out, row_end, np.int32(1 if listing else 0),
            (leaves.record if leaves is not None else _no_leaves()))
    shared_mem = WARPS_PER_BLOCK * WARP_STATE_BYTES
    if prepare:
        return Prepared(search, match_tasks_args(type(graph)), args, shared_mem)
    blocks = warps // WARPS_PER_BLOCK
    search((blocks,), (32 * WARPS_PER_BLOCK,), args, shared_mem=shared_mem)
    return None


def match_tasks_args(layout: type) -> tuple[str, ...]:
    """The names of match_tasks' arguments (a Prepared's) for a graph layout: the graph's
    fields, then the launch's."""
    return (*layout._fields, "cand_ptrs", "n", "members", *MATCH_PLAN_ARGS, "tasks",
            "types", "us", "vs", "ranks", "bufs", "width", "ctl", "records", "ready",
            "capacity", "sharing", "share_every", "counts", "by_task", "queries", "offsets",
            "out", "row_end", "listing", "leaves")


# Words of match.cu's Leaves record, and the kernel that reads it (match_tasks' search with
# the counted tails; the others are compiled without them).
LEAF_ARGS = 22
LEAF_KERNEL = "match_tasks_leaves"


@functools.cache
def _no_leaves() -> cp.ndarray:
    """The Leaves record of a launch without leaf counts (`on` is 0)."""
    return cp.zeros(LEAF_ARGS, dtype=np.int64)


class PhaseLeaves:
    """A launch's leaf counts: the Leaves record match.cu reads, and the arrays it points to
    (kept here, alive as long as the record may be read).

    Made after the phase's ranks are set.  The per-vertex totals are counted by the search
    when it first needs them and kept in `cache` (the mirror's, reused across launches:
    a new `epoch` makes older entries stale, so nothing of the graph's size is written
    here); the phase's update edges are listed by end vertex and rank with prefix counts
    of the ones each column could use (gpu/cuda/kernels/leaves.cu), for a task to take out
    those the total-order rule blocks.  A static count (ranks all zero) blocks nothing.
    `min_degree`: a tail whose first leaf's parent has fewer neighbours is enumerated
    (EngineConfig)."""

    def __init__(self, graph: ListGraphArrays, plan: DevicePlan, cand_ptrs: cp.ndarray,
                 edges: UpdateEdges, cache: cp.ndarray, epoch: int, min_degree: int) -> None:
        for name, value in zip(graph._fields, graph, strict=True):
            check_array(name, value, GRAPH_LAYOUTS[ListGraphArrays][1][name], 1)
        check_array("cache", cache, np.uint64, 1)
        slots, cols = graph.deg.shape[0], plan.col_q.shape[0]
        if cache.shape[0] < slots * cols:
            raise ValueError(f"cache holds {cache.shape[0]} entries, {slots} slots x {cols} "
                             "columns")
        if not 0 < epoch < 1 << 31:
            raise ValueError(f"epoch must be in [1, 2**31), got {epoch}")
        us, vs = edges.us.astype(np.int64), edges.vs.astype(np.int64)
        ranks = edges.ranks.astype(np.int64)
        key = cp.concatenate(((us << 32) | ranks, (vs << 32) | ranks))
        order = cp.argsort(key)
        self.upd_key = key[order]
        self.upd_nbr = cp.concatenate((edges.vs, edges.us))[order]
        self.upd_elab = cp.concatenate((edges.labels, edges.labels))[order]
        self.upd_hits = mark_update_leaves(self.upd_nbr, self.upd_elab, self.upd_key,
                                           cand_ptrs, plan.col_row, plan.col_q, plan.col_elab)
        self.plan, self.graph, self.cand_ptrs, self.cache = plan, graph, cand_ptrs, cache
        words = [1, plan.leaf_from.data.ptr, plan.leaf_col.data.ptr, cache.data.ptr, cols,
                 epoch, self.upd_key.data.ptr, self.upd_hits.data.ptr, self.upd_key.shape[0],
                 min_degree, *(a.data.ptr for a in graph),
                 plan.orders.data.ptr, plan.bw_level.data.ptr, plan.bw_label.data.ptr,
                 plan.q_label.data.ptr, cand_ptrs.data.ptr, plan.cand_row.data.ptr]
        assert len(words) == LEAF_ARGS
        self.record = cp.asarray(np.array(words, dtype=np.uint64).view(np.int64))


def mark_update_leaves(nbr: cp.ndarray, elab: cp.ndarray, key: cp.ndarray,
                       cand_ptrs: cp.ndarray, col_row: cp.ndarray, col_q: cp.ndarray,
                       col_elab: cp.ndarray) -> cp.ndarray:
    """Launch gpu/cuda/kernels/leaves.cu:mark_update_leaves over the m update-edge entries
    (neighbour, edge label, key y << 32 | rank; sorted by key) and the C columns, and
    return its prefix counts: int32 [C, m + 1], row c's entry i counting the entries
    before i that are ranked and would be candidates of column c."""
    for name, array in (("nbr", nbr), ("elab", elab), ("col_row", col_row),
                        ("col_q", col_q), ("col_elab", col_elab)):
        check_array(name, array, np.int32, 1)
    check_array("key", key, np.int64, 1)
    check_array("cand_ptrs", cand_ptrs, np.uint64, 1)
    m, cols = key.shape[0], col_q.shape[0]
    if nbr.shape[0] != m or elab.shape[0] != m:
        raise ValueError(f"nbr, elab and key differ in length: {nbr.shape[0]}, "
                         f"{elab.shape[0]}, {m}")
    if col_row.shape[0] != cols or col_elab.shape[0] != cols:
        raise ValueError(f"col_row, col_q and col_elab differ in length: {col_row.shape[0]}, "
                         f"{cols}, {col_elab.shape[0]}")
    hits = cp.zeros((cols, m + 1), dtype=np.int32)
    if m == 0 or cols == 0:
        return hits
    args = (nbr, elab, key, np.int64(m), cand_ptrs, col_row, col_q, col_elab, np.int32(cols),
            hits)
    kernel("leaves", "mark_update_leaves")((-(-m * cols // 256),), (256,), args)
    return cp.cumsum(hits, axis=1, dtype=np.int32)


SET_EDGE_RANKS_ARGS = ("start", "deg", "nbr", "nlab", "label", "rank", "us", "vs", "ranks",
                       "count", "clear", "directed")


def set_edge_ranks(start: cp.ndarray, deg: cp.ndarray, nbr: cp.ndarray, nlab: cp.ndarray,
                   label: cp.ndarray, rank: cp.ndarray, us: cp.ndarray, vs: cp.ndarray,
                   ranks: cp.ndarray, clear: bool, prepare: bool = False,
                   directed: bool = False) -> Prepared | None:
    """Launch gpu/cuda/kernels/ranks.cu:set_edge_ranks: rank (or 0) on both directions of each
    edge us[i] - vs[i] (`directed`: both list entries of the arc us[i] -> vs[i]), all of
    which must be in the device graph.  With `prepare`, the checked launch comes back as a
    Prepared (SET_EDGE_RANKS_ARGS; a thread for each direction of each edge, 256 a
    block)."""
    for name, dtype, array in (("start", np.int64, start), ("deg", np.int32, deg),
                               ("nbr", np.int32, nbr), ("nlab", np.int32, nlab),
                               ("label", np.int32, label), ("rank", np.int32, rank),
                               ("us", np.int32, us), ("vs", np.int32, vs),
                               ("ranks", np.int32, ranks)):
        check_array(name, array, dtype, 1)
    count = us.shape[0]
    if vs.shape[0] != count or ranks.shape[0] != count:
        raise ValueError(f"us, vs and ranks differ in length: {count}, {vs.shape[0]}, "
                         f"{ranks.shape[0]}")
    args = (start, deg, nbr, nlab, label, rank, us, vs, ranks, np.int32(count),
            np.int32(1 if clear else 0), np.int32(1 if directed else 0))
    if prepare:
        return Prepared(kernel("ranks", "set_edge_ranks"), SET_EDGE_RANKS_ARGS, args)
    one_thread_each("ranks", "set_edge_ranks", 2 * count, args)
    return None


_SCRATCH: dict[str, cp.ndarray] = {}


def scratch(name: str, size: int) -> cp.ndarray:
    """A reusable int32 device buffer of at least `size` entries."""
    buf = _SCRATCH.get(name)
    if buf is None or buf.size < size:
        buf = _SCRATCH[name] = cp.empty(size, dtype=np.int32)
    return buf
