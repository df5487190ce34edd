"""The one loader of `gpu/cuda/kernels/*.cu` and a typed launcher per CUDA kernel.

Sources are compiled once per process through CuPy's `RawModule` with fixed
options; a `#line` directive makes compiler errors name the real file and
line.  Each launcher checks the dtypes of its arrays and casts its scalars, so
a wrong argument fails here with a message instead of corrupting memory.
Only import this module where `gpu.cuda.device.cuda_available()` is true.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import NamedTuple

import cupy as cp
import numpy as np

from gpu.config import EngineConfig

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
OPTIONS = ("-std=c++17", "--generate-line-info")

# One WarpState (gpu/cuda/kernels/match.cu) per warp in shared memory: 4 int arrays and
# 2 uint64 arrays of MAX_QUERY entries, and the clock.
MAX_QUERY = 32
WARP_STATE_BYTES = 4 * 4 * MAX_QUERY + 2 * 8 * MAX_QUERY + 8
WARPS_PER_BLOCK = 4
# Work-sharing records (task, level, lo, hi, the vertices above) a launch can hand out.
SHARE_RECORD_INTS = 4 + MAX_QUERY
# The defaults of both tunables live in EngineConfig.
SHARE_CAPACITY = EngineConfig.share_capacity
SHARE_EVERY = EngineConfig.share_every


@functools.cache
def module(name: str) -> cp.RawModule:
    path = KERNEL_DIR / f"{name}.cu"
    source = f'#line 1 "{path}"\n' + path.read_text()
    return cp.RawModule(code=source, options=OPTIONS)


def _check(name: str, array, dtype, ndim: int | None = None) -> None:
    if not isinstance(array, cp.ndarray):
        raise TypeError(f"{name}: expected a device array, got {type(array).__name__}")
    if array.dtype != np.dtype(dtype):
        raise TypeError(f"{name}: expected {np.dtype(dtype)}, got {array.dtype}")
    if ndim is not None and array.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got {array.ndim}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous")


class ListGraphArrays(NamedTuple):
    """match_tasks' graph: the mirrored pooled lists (gpu/graph/lists.py's layout)."""
    start: cp.ndarray
    deg: cp.ndarray
    nbr: cp.ndarray
    nlab: cp.ndarray
    elab: cp.ndarray
    rank: cp.ndarray


class PmaGraphArrays(NamedTuple):
    """match_tasks_pma's graph: the packed memory array (gpu/graph/pma.py, keyed as
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
            _check(name, value, dtypes[name])
            args.append(value)
    return kernel, args


class DevicePlan(NamedTuple):
    """The task types of one launch (one query's, or several stacked), on the device."""
    q_label: cp.ndarray       # int32 [T, n]
    cand_row: cp.ndarray      # int32 [T]     which of the launch's candidate tables
    orders: cp.ndarray        # int32 [T, n]
    level_of: cp.ndarray      # int32 [T, n]
    bw_count: cp.ndarray      # int32 [T, n]
    bw_level: cp.ndarray      # int32 [T, n, n]
    bw_label: cp.ndarray      # int32 [T, n, n]
    tail_free: cp.ndarray     # uint8 [T]
    perms: cp.ndarray         # int32 [T, members, n]
    multiplicity: cp.ndarray  # int64 [T]
    roots: cp.ndarray         # int32 [T, 2]  (make_tasks only)
    root_labels: cp.ndarray   # int32 [T]     (make_tasks only)


PLAN_DTYPES = {"q_label": np.int32, "cand_row": np.int32, "orders": np.int32,
               "level_of": np.int32, "bw_count": np.int32, "bw_level": np.int32,
               "bw_label": np.int32, "tail_free": np.uint8, "perms": np.int32,
               "multiplicity": np.int64, "roots": np.int32, "root_labels": np.int32}
# The fields match_tasks reads, in its parameter order.
MATCH_PLAN_FIELDS = DevicePlan._fields[:10]


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
        _check(name, array, PLAN_DTYPES[name])
    if not isinstance(edges, UpdateEdges):
        raise TypeError(f"edges: expected UpdateEdges, got {type(edges).__name__}")
    for name, array in zip(edges._fields, edges, strict=True):
        _check(name, array, np.int32, 1)
        if array.shape[0] != edges.us.shape[0]:
            raise ValueError(f"edges.{name} has {array.shape[0]} entries, us "
                             f"{edges.us.shape[0]}")


def make_tasks(cand_ptrs: cp.ndarray, plan: DevicePlan, edges: UpdateEdges,
               tasks: cp.ndarray, ctl: cp.ndarray) -> None:
    """Launch gpu/cuda/kernels/tasks.cu:make_tasks: the (edge, type) pairs that can start a
    match go to `tasks` (room for every pair) and their number to ctl[TASKS_WORD], which
    must start at zero."""
    _check_plan_and_edges(plan, edges)
    _check("cand_ptrs", cand_ptrs, np.uint64, 1)
    _check("tasks", tasks, np.int32, 1)
    _check("ctl", ctl, np.uint64, 1)
    types, count = plan.roots.shape[0], edges.us.shape[0]
    if types * count >= 1 << 31:
        raise ValueError(f"{count} edges x {types} task types exceed int32 task numbers")
    if tasks.shape[0] < types * count or ctl.shape[0] != CTL_WORDS:
        raise ValueError(f"tasks holds {tasks.shape[0]} of {types * count} pairs, or ctl "
                         f"has {ctl.shape[0]} words instead of {CTL_WORDS}")
    if types * count == 0:
        return
    threads = 256
    blocks = min(-(-types * count // threads), 65535)
    module("tasks").get_function("make_tasks")(
        (blocks,), (threads,),
        (cand_ptrs, plan.cand_row, plan.roots, plan.root_labels, np.int32(types), edges.us,
         edges.vs, edges.labels, np.int32(count), tasks, ctl))


@functools.cache
def resident_warps(name: str = "match_tasks") -> int:
    """Warps that fit on the device at once with the matching kernel's register use."""
    kernel = module("match").get_function(name)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    regs_per_warp = max(1, kernel.num_regs) * 32
    per_sm = min(props["maxThreadsPerMultiProcessor"] // 32,
                 props["regsPerMultiprocessor"] // regs_per_warp)
    per_sm -= per_sm % WARPS_PER_BLOCK
    return max(WARPS_PER_BLOCK, per_sm * props["multiProcessorCount"])


def match_tasks(graph: ListGraphArrays | PmaGraphArrays, cand_ptrs: cp.ndarray,
                plan: DevicePlan, n: int, members: int, tasks: cp.ndarray,
                edges: UpdateEdges, ctl: cp.ndarray, bufs: cp.ndarray, width: int, warps: int,
                counts: cp.ndarray, by_task: bool, offsets: cp.ndarray, out: cp.ndarray,
                row_end: cp.ndarray, listing: bool, sharing: bool = True,
                share_capacity: int = SHARE_CAPACITY, share_every: int = SHARE_EVERY
                ) -> None:
    """Launch gpu/cuda/kernels/match.cu:match_tasks (or match_tasks_pma, by the graph's layout)
    over `warps` persistent warps, on the tasks make_tasks wrote (their number in ctl).

    cand_ptrs holds the address of each query's candidate bits (the plan's cand_row
    indexes it).  Counts must start at zero: with `by_task`, one per (edge, type) pair,
    pair-major as make_tasks numbers them (parts of a task shared between warps add to
    it); otherwise [warps + 1, queries], warp-major: each warp's totals, orbit sizes
    included, then in the last row each query's total over the launch.  `sharing` hands
    unexplored candidates to idle warps (never while listing).  Listing reads an offset
    per pair, the first row of `out` its task writes, and row_end per query (as cand_row
    numbers them), the row its query's tasks stop before."""
    kernel_name, graph_args = _graph_args(graph)
    _check("cand_ptrs", cand_ptrs, np.uint64, 1)
    _check_plan_and_edges(plan, edges)
    _check("tasks", tasks, np.int32, 1)
    _check("ctl", ctl, np.uint64, 1)
    _check("bufs", bufs, np.int32)
    _check("counts", counts, np.int64, 1)
    _check("offsets", offsets, np.int64, 1)
    _check("out", out, np.int32, 2)
    _check("row_end", row_end, np.int64, 1)
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
    ctl[:TASKS_WORD] = 0        # the task count stays: make_tasks wrote it
    capacity = share_capacity if sharing else 1
    records = _scratch("records", capacity * SHARE_RECORD_INTS)
    ready = _scratch("ready", capacity)
    ready[:capacity] = 0
    kernel = module("match").get_function(kernel_name)
    blocks = warps // WARPS_PER_BLOCK
    kernel((blocks,), (32 * WARPS_PER_BLOCK,),
           (*graph_args, cand_ptrs, np.int32(n), np.int32(members),
            *(getattr(plan, name) for name in MATCH_PLAN_FIELDS),
            tasks, np.int32(plan.roots.shape[0]), edges.us, edges.vs, edges.ranks,
            bufs, np.int64(width), ctl, records, ready,
            np.int64(capacity), np.int32(1 if sharing else 0), np.int32(share_every), counts,
            np.int32(1 if by_task else 0), np.int32(queries),
            offsets, out, row_end, np.int32(1 if listing else 0)),
           shared_mem=WARPS_PER_BLOCK * WARP_STATE_BYTES)


def set_edge_ranks(start: cp.ndarray, deg: cp.ndarray, nbr: cp.ndarray, nlab: cp.ndarray,
                   label: cp.ndarray, rank: cp.ndarray, us: cp.ndarray, vs: cp.ndarray,
                   ranks: cp.ndarray, clear: bool) -> None:
    """Launch gpu/cuda/kernels/ranks.cu:set_edge_ranks: rank (or 0) on both directions of each
    edge us[i] - vs[i], all of which must be in the device graph."""
    for name, dtype, array in (("start", np.int64, start), ("deg", np.int32, deg),
                               ("nbr", np.int32, nbr), ("nlab", np.int32, nlab),
                               ("label", np.int32, label), ("rank", np.int32, rank),
                               ("us", np.int32, us), ("vs", np.int32, vs),
                               ("ranks", np.int32, ranks)):
        _check(name, array, dtype, 1)
    count = us.shape[0]
    if vs.shape[0] != count or ranks.shape[0] != count:
        raise ValueError(f"us, vs and ranks differ in length: {count}, {vs.shape[0]}, "
                         f"{ranks.shape[0]}")
    _one_thread_each("ranks", "set_edge_ranks", 2 * count,
                     (start, deg, nbr, nlab, label, rank, us, vs, ranks, np.int32(count),
                      np.int32(1 if clear else 0)))


def _one_thread_each(source: str, kernel: str, items: int, args: tuple,
                     threads: int = 256) -> None:
    """Launch gpu/cuda/kernels/<source>.cu:<kernel> with a thread per item (none for none)."""
    if items == 0:
        return
    module(source).get_function(kernel)((-(-items // threads),), (threads,), args)


_SCRATCH: dict[str, cp.ndarray] = {}


def _scratch(name: str, size: int) -> cp.ndarray:
    """A reusable int32 device buffer of at least `size` entries."""
    buf = _SCRATCH.get(name)
    if buf is None or buf.size < size:
        buf = _SCRATCH[name] = cp.empty(size, dtype=np.int32)
    return buf


# ---- the packed memory array's batch kernels (gpu/graph/pma.py, gpu/cuda/kernels/pma.cu) --------
# A level's plan is PLAN_ROWS int64 rows of one entry per window; a batch's record is
# uint64 counters, then (windows, slots) rewritten per level: both laid out as in pma.cu.
PLAN_ROWS = 7
PLAN_S0, PLAN_S1, PLAN_IB, PLAN_IE, PLAN_DB, PLAN_DE, PLAN_TOTAL = range(PLAN_ROWS)
PLAN_RANGES, PLAN_DECIDE, PLAN_TOTALS = 0, 1, 2     # plan_windows modes
RECORD_EMPTIED, RECORD_MISCOUNTED, RECORD_FOLLOWERS, RECORD_LEVELS = range(4)
WINDOW_MAX = 1024       # slots of the largest window merge_windows takes (shared memory)
LARGE_BLOCK = 256       # threads per block of the large-window kernels: the largest chunk


def _check_pma(arrays) -> None:
    """_check every (name, dtype, array), one-dimensional but for the plan."""
    for name, dtype, array in arrays:
        _check(name, array, dtype, 2 if name == "plan" else 1)


def _check_plan(plan: cp.ndarray, fit: cp.ndarray) -> int:
    """The number of windows of a plan and its fit flags."""
    _check_pma((("plan", np.int64, plan), ("fit", np.bool_, fit)))
    if plan.shape[0] != PLAN_ROWS or plan.shape[1] != fit.shape[0]:
        raise ValueError(f"plan must be {PLAN_ROWS} rows of one entry per fit flag "
                         f"({fit.shape[0]}), got shape {plan.shape}")
    return fit.shape[0]


def plan_windows(windows: cp.ndarray, level: int, segment_size: int, iseg: cp.ndarray,
                 dseg: cp.ndarray, cnt: cp.ndarray, ins_pending: cp.ndarray,
                 del_pending: cp.ndarray, prefixes: tuple | None, mode: int, lower: float,
                 upper: float, record: cp.ndarray) -> tuple[cp.ndarray, cp.ndarray]:
    """Launch gpu/cuda/kernels/pma.cu:plan_windows over one level's windows (sorted distinct
    window ids; iseg and dseg: the sorted segment of each insert and delete); returns
    (plan, fit).  `prefixes`: for windows too large to total in a loop, None or exclusive
    prefix sums (int64) of (cnt or None: counted in a loop, ins_pending, del_pending).
    A thread per window at level 0, a warp above."""
    _check_pma((("windows", np.int64, windows), ("iseg", np.int64, iseg),
                ("dseg", np.int64, dseg), ("cnt", np.int32, cnt),
                ("ins_pending", np.bool_, ins_pending), ("del_pending", np.bool_, del_pending),
                ("record", np.uint64, record)))
    if mode not in (PLAN_RANGES, PLAN_DECIDE, PLAN_TOTALS):
        raise ValueError(f"plan_windows: unknown mode {mode}")
    if record.shape[0] < RECORD_LEVELS + 2 * (level + 1):
        raise ValueError(f"record holds {record.shape[0]} counters, level {level} needs "
                         f"{RECORD_LEVELS + 2 * (level + 1)}")
    if iseg.shape != ins_pending.shape or dseg.shape != del_pending.shape:
        raise ValueError("iseg and dseg need one pending flag each")
    count = windows.shape[0]
    plan = cp.empty((PLAN_ROWS, count), dtype=np.int64)
    fit = cp.zeros(count, dtype=np.bool_)
    if count == 0:
        return plan, fit
    cnt_prefix, ins_prefix, del_prefix = prefixes if prefixes is not None else (None,) * 3
    if (ins_prefix is None) != (del_prefix is None):
        raise ValueError("plan_windows takes the prefix sums of both pending flags or neither")
    for name, array, size in (("cnt_prefix", cnt_prefix, cnt.shape[0]),
                              ("ins_prefix", ins_prefix, iseg.shape[0]),
                              ("del_prefix", del_prefix, dseg.shape[0])):
        if array is not None:
            _check(name, array, np.int64, 1)
            if array.shape[0] != size + 1:
                raise ValueError(f"{name} needs {size + 1} entries, got {array.shape[0]}")
    # pma.cu's use_prefix: bit 0 the pending flags', bit 1 the counts'.
    use_prefix = (1 if ins_prefix is not None else 0) + (2 if cnt_prefix is not None else 0)
    unused = cp.empty(1, dtype=np.int64)
    prefixes = tuple(unused if array is None else array
                     for array in (cnt_prefix, ins_prefix, del_prefix))
    group = 1 if level == 0 else 32
    threads = 256
    module("pma").get_function("plan_windows")(
        (-(-count * group // threads),), (threads,),
        (windows, np.int64(count), np.int32(level), np.int64(cnt.shape[0]),
         np.int32(segment_size), iseg, np.int64(iseg.shape[0]), dseg, np.int64(dseg.shape[0]),
         cnt, ins_pending, del_pending, np.int32(use_prefix), *prefixes, np.int32(mode),
         np.int32(group), np.float64(lower), np.float64(upper), plan, fit, record))
    return plan, fit


def merge_leaves(keys: cp.ndarray, vals: cp.ndarray, cnt: cp.ndarray, plan: cp.ndarray,
                 fit: cp.ndarray, batch_keys: cp.ndarray, batch_vals: cp.ndarray,
                 ins_pending: cp.ndarray, del_pending: cp.ndarray, segment_size: int,
                 upper_count: int, lower_count: int, record: cp.ndarray) -> None:
    """Launch gpu/cuda/kernels/pma.cu:merge_leaves over a level-0 plan (one segment per window):
    merges every leaf that stays within [lower_count, upper_count] elements in place and
    sets its fit flag; counts emptied segments in `record`."""
    count = _check_plan(plan, fit)
    _check_pma((("keys", np.uint64, keys), ("vals", np.int32, vals), ("cnt", np.int32, cnt),
                ("batch_keys", np.uint64, batch_keys), ("batch_vals", np.int32, batch_vals),
                ("ins_pending", np.bool_, ins_pending), ("del_pending", np.bool_, del_pending),
                ("record", np.uint64, record)))
    if segment_size not in (2, 4, 8, 16, 32):
        raise ValueError(f"merge_leaves needs a segment size of 2..32, got {segment_size}")
    if count == 0:
        return
    threads = 256
    warps = -(-count // (32 // segment_size))
    blocks = -(-warps * 32 // threads)
    module("pma").get_function("merge_leaves")(
        (blocks,), (threads,),
        (keys, vals, cnt, plan, np.int64(count), batch_keys, batch_vals, ins_pending,
         del_pending, fit, np.int32(segment_size), np.int32(upper_count),
         np.int32(lower_count), record))


def merge_windows(keys: cp.ndarray, vals: cp.ndarray, cnt: cp.ndarray, plan: cp.ndarray,
                  fit: cp.ndarray, window_slots: int, batch_keys: cp.ndarray,
                  batch_vals: cp.ndarray, ins_pending: cp.ndarray, segment_size: int,
                  record: cp.ndarray) -> None:
    """Launch gpu/cuda/kernels/pma.cu:merge_windows, one block per window of a plan whose
    windows hold at most `window_slots` <= WINDOW_MAX slots; merges those that fit."""
    count = _check_plan(plan, fit)
    _check_pma((("keys", np.uint64, keys), ("vals", np.int32, vals), ("cnt", np.int32, cnt),
                ("batch_keys", np.uint64, batch_keys), ("batch_vals", np.int32, batch_vals),
                ("ins_pending", np.bool_, ins_pending), ("record", np.uint64, record)))
    if window_slots > WINDOW_MAX:
        raise ValueError(f"merge_windows takes windows of at most {WINDOW_MAX} slots, "
                         f"got {window_slots}")
    if count:
        module("pma").get_function("merge_windows")(
            (count,), (256,),
            (keys, vals, cnt, plan, np.int64(count), fit, batch_keys, batch_vals, ins_pending,
             np.int32(segment_size), record))


def merge_large(keys: cp.ndarray, vals: cp.ndarray, cnt: cp.ndarray, plan: cp.ndarray,
                fit: cp.ndarray, window_slots: int, batch_keys: cp.ndarray,
                batch_vals: cp.ndarray, ins_pending: cp.ndarray, ins_prefix: cp.ndarray,
                segment_size: int, chunk: int, record: cp.ndarray) -> None:
    """Merge the windows of a plan that fit, of up to `window_slots` slots each, with
    several blocks per window (gpu/cuda/kernels/pma.cu large_*): their pending inserts and,
    chunk by chunk of `chunk` slots, their live elements go to scratch, then each slot
    takes its element of the merge.  ins_prefix: the exclusive prefix sum of ins_pending
    before this level (int64).  Synchronises once (the scratch size)."""
    count = _check_plan(plan, fit)
    _check_pma((("keys", np.uint64, keys), ("vals", np.int32, vals), ("cnt", np.int32, cnt),
                ("batch_keys", np.uint64, batch_keys), ("batch_vals", np.int32, batch_vals),
                ("ins_pending", np.bool_, ins_pending), ("ins_prefix", np.int64, ins_prefix),
                ("record", np.uint64, record)))
    n_ins = batch_keys.shape[0]
    if ins_prefix.shape[0] != n_ins + 1 or ins_pending.shape[0] != n_ins:
        raise ValueError(f"{n_ins} inserts need as many pending flags and {n_ins + 1} "
                         f"prefix entries")
    if not 1 <= chunk <= LARGE_BLOCK:
        raise ValueError(f"merge_large: chunk must be 1..{LARGE_BLOCK} slots, got {chunk}")
    if count == 0:
        return
    pma = module("pma")
    new_keys = cp.empty(max(n_ins, 1), dtype=np.uint64)
    new_vals = cp.empty(max(n_ins, 1), dtype=np.int32)
    if n_ins:
        pma.get_function("large_take_inserts")(
            (-(-n_ins // 256),), (256,),
            (plan, np.int64(count), fit, batch_keys, batch_vals, ins_pending, np.int64(n_ins),
             ins_prefix, new_keys, new_vals))
    chunks = -(-window_slots // chunk)
    chunk_counts = cp.empty(count * chunks, dtype=np.int64)
    pma.get_function("large_count")(
        (count * chunks,), (LARGE_BLOCK,),
        (cnt, vals, plan, np.int64(count), fit, np.int32(segment_size), np.int64(chunks),
         np.int32(chunk), chunk_counts))
    offsets = cp.zeros(count * chunks + 1, dtype=np.int64)
    offsets[1:] = cp.cumsum(chunk_counts)
    live = int(offsets[-1])
    old_keys = cp.empty(max(live, 1), dtype=np.uint64)
    old_vals = cp.empty(max(live, 1), dtype=np.int32)
    pma.get_function("large_compact")(
        (count * chunks,), (LARGE_BLOCK,),
        (keys, vals, cnt, plan, np.int64(count), fit, np.int32(segment_size), np.int64(chunks),
         np.int32(chunk), offsets, old_keys, old_vals))
    blocks = -(-window_slots // LARGE_BLOCK)
    pma.get_function("large_spread")(
        (count * blocks,), (LARGE_BLOCK,),
        (keys, vals, cnt, plan, np.int64(count), fit, np.int32(segment_size), np.int64(blocks),
         np.int64(chunks), offsets, old_keys, old_vals, ins_prefix, new_keys, new_vals, record))


def parent_windows(windows: cp.ndarray, plan: cp.ndarray, fit: cp.ndarray, cnt: cp.ndarray,
                   record: cp.ndarray) -> cp.ndarray:
    """Launch gpu/cuda/kernels/pma.cu:parent_windows after a level's merges: the parent of each
    window that did not fit, once (its first such child), else -1 (int64 per window)."""
    count = _check_plan(plan, fit)
    _check_pma((("windows", np.int64, windows), ("cnt", np.int32, cnt),
                ("record", np.uint64, record)))
    if windows.shape[0] != count:
        raise ValueError(f"{windows.shape[0]} windows but a plan of {count}")
    parents = cp.empty(count, dtype=np.int64)
    if count:
        module("pma").get_function("parent_windows")(
            (-(-count // 256),), (256,),
            (windows, np.int64(count), fit, plan, cnt, np.int64(cnt.shape[0]), parents,
             record))
    return parents


def set_rows(keys: cp.ndarray, cnt: cp.ndarray, segment_size: int, plan: cp.ndarray,
             fit: cp.ndarray, window_slots: int, del_keys: cp.ndarray, num_vertices: int,
             row: cp.ndarray) -> None:
    """Launch gpu/cuda/kernels/pma.cu:set_rows over the windows of one level's plan that fit
    (at most `window_slots` slots each; del_keys: the batch's sorted deletes): the row
    offset of every vertex whose first edge is there, or whose edges there all went."""
    count = _check_plan(plan, fit)
    _check_pma((("keys", np.uint64, keys), ("cnt", np.int32, cnt),
                ("del_keys", np.uint64, del_keys), ("row", np.int64, row)))
    if row.shape[0] <= num_vertices:
        raise ValueError(f"row holds {row.shape[0]} offsets for {num_vertices} vertices")
    if count == 0:
        return
    threads = 256
    module("pma").get_function("set_rows")(
        (-(-count * window_slots // threads),), (threads,),
        (keys, cnt, np.int32(segment_size), np.int64(keys.shape[0]), plan, np.int64(count), fit,
         np.int64(window_slots), del_keys, np.int64(num_vertices), row))


def count_edges(us: cp.ndarray, vs: cp.ndarray, delta: int, slot_of: cp.ndarray,
                counts: cp.ndarray, deg: cp.ndarray) -> None:
    """Launch gpu/cuda/kernels/signature.cu:count_edges: edges us[i] - vs[i] added (delta 1)
    or taken out (-1) in the neighbour-label counts [vertices, slots] and degrees."""
    for name, array in (("us", us), ("vs", vs), ("slot_of", slot_of), ("deg", deg)):
        _check(name, array, np.int32, 1)
    _check("counts", counts, np.int32, 2)
    if vs.shape[0] != us.shape[0] or delta not in (1, -1):
        raise ValueError(f"us and vs differ in length ({us.shape[0]}, {vs.shape[0]}) or "
                         f"delta {delta} is not 1 or -1")
    _one_thread_each("signature", "count_edges", us.shape[0],
                     (us, vs, np.int32(us.shape[0]), np.int32(delta), slot_of, counts,
                      np.int32(counts.shape[1]), deg))


class QueryTables(NamedTuple):
    """Every standing query's side of the candidate test, stacked for refresh."""
    cand_ptrs: cp.ndarray     # uint64 [Q]   address of each query's candidate bits
    q_n: cp.ndarray           # int32 [Q]
    q_label: cp.ndarray       # int32 [Q, MAX_QUERY]
    q_deg: cp.ndarray         # int32 [Q, MAX_QUERY]
    q_codes: cp.ndarray       # uint64 [Q, MAX_QUERY, words]


def refresh_candidates(vertices: cp.ndarray, counts: cp.ndarray, codes: cp.ndarray,
                       label: cp.ndarray, deg: cp.ndarray, alive: cp.ndarray,
                       queries: QueryTables) -> None:
    """Launch gpu/cuda/kernels/signature.cu:refresh: re-encode `vertices` from their counts
    and recompute their candidate bits in every query's table."""
    for name, array in (("vertices", vertices), ("label", label), ("deg", deg)):
        _check(name, array, np.int32, 1)
    _check("counts", counts, np.int32, 2)
    _check("codes", codes, np.uint64, 2)
    _check("alive", alive, np.bool_, 1)
    dtypes = {"cand_ptrs": np.uint64, "q_n": np.int32, "q_label": np.int32,
              "q_deg": np.int32, "q_codes": np.uint64}
    for name, array in zip(queries._fields, queries, strict=True):
        _check(name, array, dtypes[name])
    words = codes.shape[1]
    if queries.q_codes.shape[1:] != (MAX_QUERY, words) or words * 32 < counts.shape[1]:
        raise ValueError(f"codes have {words} words for {counts.shape[1]} label slots, "
                         f"query codes {queries.q_codes.shape[1:]}")
    _one_thread_each("signature", "refresh", vertices.shape[0],
                     (vertices, np.int32(vertices.shape[0]), counts,
                      np.int32(counts.shape[1]), codes, np.int32(words), label, deg, alive,
                      np.int32(queries.cand_ptrs.shape[0]), *queries), threads=128)
