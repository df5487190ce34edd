"""The one loader of `gpu/kernels/*.cu` and a typed launcher per CUDA kernel.

Sources are compiled once per process through CuPy's `RawModule` with fixed
options; a `#line` directive makes compiler errors name the real file and
line.  Each launcher checks the dtypes of its arrays and casts its scalars, so
a wrong argument fails here with a message instead of corrupting memory.
Only import this module where `gpu.device.cuda_available()` is true.
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

# One WarpState (gpu/kernels/match.cu) per warp in shared memory: 4 int arrays and
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
    """match_tasks' graph: the mirrored pooled lists (gpu/graph.py's layout)."""
    start: cp.ndarray
    deg: cp.ndarray
    nbr: cp.ndarray
    nlab: cp.ndarray
    elab: cp.ndarray
    rank: cp.ndarray


class PmaGraphArrays(NamedTuple):
    """match_tasks_pma's graph: the packed memory array (gpu/pma.py, keyed as
    gpu/device_graph.py says) and the phase's ranked update edges (touched[x] = 1 + t,
    sources' ranges rstart, destinations rdst, ranks)."""
    keys: cp.ndarray
    vals: cp.ndarray
    cnt: cp.ndarray
    row: cp.ndarray
    seg_shift: int
    label_shift: int
    touched: cp.ndarray
    rstart: cp.ndarray
    rdst: cp.ndarray
    ranked: cp.ndarray


# Per layout: the kernel, and each field's dtype (int: a scalar passed as int32).
GRAPH_LAYOUTS = {
    ListGraphArrays: ("match_tasks", {"start": np.int64, "deg": np.int32, "nbr": np.int32,
                                      "nlab": np.int32, "elab": np.int32, "rank": np.int32}),
    PmaGraphArrays: ("match_tasks_pma", {"keys": np.uint64, "vals": np.int32,
                                         "cnt": np.int32, "row": np.int64, "seg_shift": int,
                                         "label_shift": int, "touched": np.int32,
                                         "rstart": np.int32, "rdst": np.int32,
                                         "ranked": np.int32}),
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


PLAN_DTYPES = (("q_label", np.int32), ("cand_row", np.int32), ("orders", np.int32),
               ("level_of", np.int32),
               ("bw_count", np.int32), ("bw_level", np.int32), ("bw_label", np.int32),
               ("tail_free", np.uint8), ("perms", np.int32), ("multiplicity", np.int64))
TASK_DTYPES = (("task_u", np.int32), ("task_v", np.int32), ("task_rank", np.int32),
               ("task_type", np.int32))


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


def match_tasks(graph: ListGraphArrays | PmaGraphArrays, cand_ptrs: cp.ndarray, plan: tuple,
                n: int, members: int, tasks: tuple, bufs: cp.ndarray, width: int, warps: int,
                counts: cp.ndarray, offsets: cp.ndarray, out: cp.ndarray, limit: int,
                listing: bool, sharing: bool = True, share_capacity: int = SHARE_CAPACITY,
                share_every: int = SHARE_EVERY) -> None:
    """Launch gpu/kernels/match.cu:match_tasks (or match_tasks_pma, by the graph's layout)
    over `warps` persistent warps.

    cand_ptrs holds the address of each query's candidate bits (the plan's cand_row
    indexes it); counts must start at zero (parts of a task shared between warps add to
    it); `sharing` hands unexplored candidates to idle warps (never while listing)."""
    kernel_name, graph_args = _graph_args(graph)
    _check("cand_ptrs", cand_ptrs, np.uint64, 1)
    for (name, dtype), array in zip(PLAN_DTYPES + TASK_DTYPES, plan + tasks, strict=True):
        _check(name, array, dtype)
    _check("bufs", bufs, np.int32)
    _check("counts", counts, np.int64, 1)
    _check("offsets", offsets, np.int64, 1)
    _check("out", out, np.int32, 2)
    if not 2 <= n <= MAX_QUERY:
        raise ValueError(f"query size must be 2..{MAX_QUERY}, got {n}")
    num_tasks = tasks[0].shape[0]
    if counts.shape[0] != num_tasks:
        raise ValueError(f"counts has {counts.shape[0]} entries for {num_tasks} tasks")
    if warps % WARPS_PER_BLOCK or bufs.size < warps * n * width:
        raise ValueError(f"bufs holds {bufs.size} ints, {warps} warps need {warps * n * width}")
    if listing and (offsets.shape[0] != num_tasks or out.shape[1] != n):
        raise ValueError("listing needs one offset per task and n columns in out")
    if share_capacity < 1 or share_every < 1:
        raise ValueError(f"share_capacity and share_every must be positive, got "
                         f"{share_capacity} and {share_every}")
    sharing = sharing and not listing
    ctl = cp.zeros(5, dtype=np.uint64)
    capacity = share_capacity if sharing else 1
    records = _scratch("records", capacity * SHARE_RECORD_INTS)
    ready = _scratch("ready", capacity)
    ready[:capacity] = 0
    kernel = module("match").get_function(kernel_name)
    blocks = warps // WARPS_PER_BLOCK
    kernel((blocks,), (32 * WARPS_PER_BLOCK,),
           (*graph_args, cand_ptrs, np.int32(n), np.int32(members), *plan,
            np.int32(num_tasks), *tasks, bufs, np.int64(width), ctl, records, ready,
            np.int64(capacity), np.int32(1 if sharing else 0), np.int32(share_every), counts,
            offsets, out, np.int64(limit), np.int32(1 if listing else 0)),
           shared_mem=WARPS_PER_BLOCK * WARP_STATE_BYTES)


def set_edge_ranks(start: cp.ndarray, deg: cp.ndarray, nbr: cp.ndarray, nlab: cp.ndarray,
                   label: cp.ndarray, rank: cp.ndarray, us: cp.ndarray, vs: cp.ndarray,
                   ranks: cp.ndarray, clear: bool) -> None:
    """Launch gpu/kernels/ranks.cu:set_edge_ranks: rank (or 0) on both directions of each
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
    if count == 0:
        return
    threads = 256
    blocks = -(-2 * count // threads)
    module("ranks").get_function("set_edge_ranks")(
        (blocks,), (threads,),
        (start, deg, nbr, nlab, label, rank, us, vs, ranks, np.int32(count),
         np.int32(1 if clear else 0)))


_SCRATCH: dict[str, cp.ndarray] = {}


def _scratch(name: str, size: int) -> cp.ndarray:
    """A reusable int32 device buffer of at least `size` entries."""
    buf = _SCRATCH.get(name)
    if buf is None or buf.size < size:
        buf = _SCRATCH[name] = cp.empty(size, dtype=np.int32)
    return buf


def merge_leaves(keys: cp.ndarray, vals: cp.ndarray, cnt: cp.ndarray, windows: cp.ndarray,
                 ins_begin: cp.ndarray, ins_end: cp.ndarray, del_begin: cp.ndarray,
                 del_end: cp.ndarray, batch_keys: cp.ndarray, batch_vals: cp.ndarray,
                 ins_pending: cp.ndarray, del_pending: cp.ndarray, segment_size: int,
                 upper_count: int, lower_count: int) -> tuple[cp.ndarray, int]:
    """Launch gpu/kernels/pma.cu:merge_leaves over the touched leaf segments `windows`;
    returns (fit per window as bool, how many segments it emptied)."""
    for name, dtype, array in (("keys", np.uint64, keys), ("vals", np.int32, vals),
                               ("cnt", np.int32, cnt), ("windows", np.int64, windows),
                               ("ins_begin", np.int64, ins_begin),
                               ("ins_end", np.int64, ins_end),
                               ("del_begin", np.int64, del_begin),
                               ("del_end", np.int64, del_end),
                               ("batch_keys", np.uint64, batch_keys),
                               ("batch_vals", np.int32, batch_vals),
                               ("ins_pending", np.bool_, ins_pending),
                               ("del_pending", np.bool_, del_pending)):
        _check(name, array, dtype, 1)
    if segment_size not in (2, 4, 8, 16, 32):
        raise ValueError(f"merge_leaves needs a segment size of 2..32, got {segment_size}")
    count = windows.shape[0]
    if any(a.shape[0] != count for a in (ins_begin, ins_end, del_begin, del_end)):
        raise ValueError("windows and their insert/delete ranges differ in length")
    fit = cp.zeros(count, dtype=np.bool_)
    emptied = cp.zeros(1, dtype=np.int32)
    if count == 0:
        return fit, 0
    threads = 256
    warps = -(-count // (32 // segment_size))
    blocks = -(-warps * 32 // threads)
    module("pma").get_function("merge_leaves")(
        (blocks,), (threads,),
        (keys, vals, cnt, windows, ins_begin, ins_end, del_begin, del_end, np.int64(count),
         batch_keys, batch_vals, ins_pending, del_pending, fit, np.int32(segment_size),
         np.int32(upper_count), np.int32(lower_count), emptied))
    return fit, int(emptied[0])


WINDOW_MAX = 1024       # gpu/kernels/pma.cu: slots of the largest window merge_windows takes


def merge_windows(keys: cp.ndarray, vals: cp.ndarray, cnt: cp.ndarray, seg_begin: cp.ndarray,
                  seg_end: cp.ndarray, ins_begin: cp.ndarray, ins_end: cp.ndarray,
                  totals: cp.ndarray, batch_keys: cp.ndarray, batch_vals: cp.ndarray,
                  ins_pending: cp.ndarray, segment_size: int) -> int:
    """Launch gpu/kernels/pma.cu:merge_windows, one block per window [seg_begin, seg_end)
    (at most WINDOW_MAX slots each); returns how many segments it left empty."""
    for name, dtype, array in (("keys", np.uint64, keys), ("vals", np.int32, vals),
                               ("cnt", np.int32, cnt), ("seg_begin", np.int64, seg_begin),
                               ("seg_end", np.int64, seg_end),
                               ("ins_begin", np.int64, ins_begin),
                               ("ins_end", np.int64, ins_end), ("totals", np.int64, totals),
                               ("batch_keys", np.uint64, batch_keys),
                               ("batch_vals", np.int32, batch_vals),
                               ("ins_pending", np.bool_, ins_pending)):
        _check(name, array, dtype, 1)
    count = seg_begin.shape[0]
    if count == 0:
        return 0
    if int((seg_end - seg_begin).max()) * segment_size > WINDOW_MAX:
        raise ValueError(f"merge_windows takes windows of at most {WINDOW_MAX} slots")
    flags = cp.zeros(2, dtype=np.int32)
    module("pma").get_function("merge_windows")(
        (count,), (256,),
        (keys, vals, cnt, seg_begin, seg_end, ins_begin, ins_end, totals, batch_keys,
         batch_vals, ins_pending, np.int32(segment_size), flags[:1], flags[1:]))
    emptied, miscounted = (int(x) for x in flags.get())
    if miscounted:
        raise RuntimeError(f"merge_windows: {miscounted} windows hold another count than "
                           f"the fit test used")
    return emptied


def set_rows(keys: cp.ndarray, cnt: cp.ndarray, segment_size: int, slot_begin: cp.ndarray,
             slot_end: cp.ndarray, window_slots: int, row: cp.ndarray) -> None:
    """Launch gpu/kernels/pma.cu:set_rows over the slots [slot_begin, slot_end) of windows
    of at most `window_slots` slots that a batch rewrote: the row offset of every vertex
    whose first edge is there."""
    for name, dtype, array in (("keys", np.uint64, keys), ("cnt", np.int32, cnt),
                               ("slot_begin", np.int64, slot_begin),
                               ("slot_end", np.int64, slot_end), ("row", np.int64, row)):
        _check(name, array, dtype, 1)
    count = slot_begin.shape[0]
    if count == 0:
        return
    if slot_end.shape[0] != count:
        raise ValueError("slot_begin and slot_end differ in length")
    threads = 256
    module("pma").get_function("set_rows")(
        (-(-count * window_slots // threads),), (threads,),
        (keys, cnt, np.int32(segment_size), slot_begin, slot_end, np.int64(count),
         np.int64(window_slots), row))


def window_totals(cnt: cp.ndarray, seg_begin: cp.ndarray, seg_end: cp.ndarray,
                  ins_pending: cp.ndarray, ins_begin: cp.ndarray, ins_end: cp.ndarray,
                  del_pending: cp.ndarray, del_begin: cp.ndarray,
                  del_end: cp.ndarray) -> cp.ndarray:
    """Launch gpu/kernels/pma.cu:window_totals: what each window [seg_begin, seg_end)
    would hold after its pending inserts and deletes (int64 per window)."""
    for name, dtype, array in (("cnt", np.int32, cnt), ("seg_begin", np.int64, seg_begin),
                               ("seg_end", np.int64, seg_end),
                               ("ins_pending", np.bool_, ins_pending),
                               ("ins_begin", np.int64, ins_begin),
                               ("ins_end", np.int64, ins_end),
                               ("del_pending", np.bool_, del_pending),
                               ("del_begin", np.int64, del_begin),
                               ("del_end", np.int64, del_end)):
        _check(name, array, dtype, 1)
    count = seg_begin.shape[0]
    totals = cp.zeros(count, dtype=np.int64)
    if count:
        module("pma").get_function("window_totals")(
            (-(-count // 256),), (256,),
            (cnt, seg_begin, seg_end, ins_pending, ins_begin, ins_end, del_pending,
             del_begin, del_end, np.int64(count), totals))
    return totals
