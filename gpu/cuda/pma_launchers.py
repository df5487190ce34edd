"""Typed launchers of the packed memory array's kernels: its batch update
(gpu/cuda/kernels/pma.cu), which gpu/graph/pma/device_update.py drives level by level,
and its reads: the read view's copy and key lookups (gpu/cuda/kernels/view.cu,
gpu/graph/pma/view.py).

A level's plan is PLAN_ROWS int64 rows of one entry per window; a batch's record is
uint64 counters, then (windows, slots) rewritten per level: both laid out as in pma.cu.
Only import this module where `gpu.cuda.device.cuda_available()` is true.
"""
from __future__ import annotations

import cupy as cp
import cupyx
import numpy as np

from gpu.cuda.loader import Prepared, check_array, kernel, read_back
from gpu.graph.pma.device_update import SMALL_BATCH   # most updates locate_small takes

PLAN_ROWS = 7
PLAN_S0, PLAN_S1, PLAN_IB, PLAN_IE, PLAN_DB, PLAN_DE, PLAN_TOTAL = range(PLAN_ROWS)
PLAN_RANGES, PLAN_DECIDE, PLAN_TOTALS = 0, 1, 2     # plan_windows modes
RECORD_EMPTIED, RECORD_MISCOUNTED, RECORD_FOLLOWERS, RECORD_LEVELS = range(4)
WINDOW_MAX = 1024       # slots of the largest window merge_windows takes (shared memory)
LARGE_BLOCK = 256       # threads per block of the large-window kernels: the largest chunk


def _check_all(arrays) -> None:
    """check_array every (name, dtype, array), one-dimensional but for the plan."""
    for name, dtype, array in arrays:
        check_array(name, array, dtype, 2 if name == "plan" else 1)


def _check_plan(plan: cp.ndarray, fit: cp.ndarray) -> int:
    """The number of windows of a plan and its fit flags."""
    _check_all((("plan", np.int64, plan), ("fit", np.bool_, fit)))
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
    _check_all((("windows", np.int64, windows), ("iseg", np.int64, iseg),
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
            check_array(name, array, np.int64, 1)
            if array.shape[0] != size + 1:
                raise ValueError(f"{name} needs {size + 1} entries, got {array.shape[0]}")
    # pma.cu's use_prefix: bit 0 the pending flags', bit 1 the counts'.
    use_prefix = (1 if ins_prefix is not None else 0) + (2 if cnt_prefix is not None else 0)
    unused = cp.empty(1, dtype=np.int64)
    prefixes = tuple(unused if array is None else array
                     for array in (cnt_prefix, ins_prefix, del_prefix))
    group = 1 if level == 0 else 32
    threads = 256
    kernel("pma", "plan_windows")(
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
    _check_all((("keys", np.uint64, keys), ("vals", np.int32, vals), ("cnt", np.int32, cnt),
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
    kernel("pma", "merge_leaves")(
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
    _check_all((("keys", np.uint64, keys), ("vals", np.int32, vals), ("cnt", np.int32, cnt),
                ("batch_keys", np.uint64, batch_keys), ("batch_vals", np.int32, batch_vals),
                ("ins_pending", np.bool_, ins_pending), ("record", np.uint64, record)))
    if window_slots > WINDOW_MAX:
        raise ValueError(f"merge_windows takes windows of at most {WINDOW_MAX} slots, "
                         f"got {window_slots}")
    if count:
        kernel("pma", "merge_windows")(
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
    _check_all((("keys", np.uint64, keys), ("vals", np.int32, vals), ("cnt", np.int32, cnt),
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
    new_keys = cp.empty(max(n_ins, 1), dtype=np.uint64)
    new_vals = cp.empty(max(n_ins, 1), dtype=np.int32)
    if n_ins:
        kernel("pma", "large_take_inserts")(
            (-(-n_ins // 256),), (256,),
            (plan, np.int64(count), fit, batch_keys, batch_vals, ins_pending, np.int64(n_ins),
             ins_prefix, new_keys, new_vals))
    chunks = -(-window_slots // chunk)
    chunk_counts = cp.empty(count * chunks, dtype=np.int64)
    kernel("pma", "large_count")(
        (count * chunks,), (LARGE_BLOCK,),
        (cnt, vals, plan, np.int64(count), fit, np.int32(segment_size), np.int64(chunks),
         np.int32(chunk), chunk_counts))
    offsets = cp.zeros(count * chunks + 1, dtype=np.int64)
    offsets[1:] = cp.cumsum(chunk_counts)
    live = int(offsets[-1])
    old_keys = cp.empty(max(live, 1), dtype=np.uint64)
    old_vals = cp.empty(max(live, 1), dtype=np.int32)
    kernel("pma", "large_compact")(
        (count * chunks,), (LARGE_BLOCK,),
        (keys, vals, cnt, plan, np.int64(count), fit, np.int32(segment_size), np.int64(chunks),
         np.int32(chunk), offsets, old_keys, old_vals))
    blocks = -(-window_slots // LARGE_BLOCK)
    kernel("pma", "large_spread")(
        (count * blocks,), (LARGE_BLOCK,),
        (keys, vals, cnt, plan, np.int64(count), fit, np.int32(segment_size), np.int64(blocks),
         np.int64(chunks), offsets, old_keys, old_vals, ins_prefix, new_keys, new_vals, record))


def parent_windows(windows: cp.ndarray, plan: cp.ndarray, fit: cp.ndarray, cnt: cp.ndarray,
                   record: cp.ndarray) -> cp.ndarray:
    """Launch gpu/cuda/kernels/pma.cu:parent_windows after a level's merges: the parent of each
    window that did not fit, once (its first such child), else -1 (int64 per window)."""
    count = _check_plan(plan, fit)
    _check_all((("windows", np.int64, windows), ("cnt", np.int32, cnt),
                ("record", np.uint64, record)))
    if windows.shape[0] != count:
        raise ValueError(f"{windows.shape[0]} windows but a plan of {count}")
    parents = cp.empty(count, dtype=np.int64)
    if count:
        kernel("pma", "parent_windows")(
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
    _check_all((("keys", np.uint64, keys), ("cnt", np.int32, cnt),
                ("del_keys", np.uint64, del_keys), ("row", np.int64, row)))
    if row.shape[0] <= num_vertices:
        raise ValueError(f"row holds {row.shape[0]} offsets for {num_vertices} vertices")
    if count == 0:
        return
    threads = 256
    kernel("pma", "set_rows")(
        (-(-count * window_slots // threads),), (threads,),
        (keys, cnt, np.int32(segment_size), np.int64(keys.shape[0]), plan, np.int64(count), fit,
         np.int64(window_slots), del_keys, np.int64(num_vertices), row))


LONG_BLOCK = 1024       # threads per piece of refresh_long_lists (view.cu)


def refresh_lists(pma, vertices: cp.ndarray, start: cp.ndarray, nbr: cp.ndarray,
                  nlab: cp.ndarray, elab: cp.ndarray, deg: cp.ndarray,
                  long_from: int = 2**31 - 1) -> None:
    """Launch gpu/cuda/kernels/view.cu:refresh_lists: the real slots of each of `vertices`
    (distinct, int64) in the packed memory array `pma`, in order, written to its list at
    start[u] of the pools nbr, nlab, elab (gpu/graph/pma/view.py), and its length to
    deg[u], a warp per vertex; vertices of `long_from` edges or more in the array are
    skipped (refresh_long_lists' work)."""
    _check_all((("vertices", np.int64, vertices), ("start", np.int64, start),
                ("nbr", np.int32, nbr), ("nlab", np.int32, nlab), ("elab", np.int32, elab),
                ("deg", np.int32, deg),
                ("keys", np.uint64, pma.keys), ("vals", np.int32, pma.vals),
                ("cnt", np.int32, pma.cnt), ("row", np.int64, pma.row),
                ("array_deg", np.int32, pma.deg)))
    count = vertices.shape[0]
    if count == 0:
        return
    threads = 256
    kernel("view", "refresh_lists")(
        (-(-count * 32 // threads),), (threads,),
        (pma.keys, pma.vals, pma.cnt, pma.row, np.int32(pma.S.bit_length() - 1),
         np.int32(pma.config.vertex_bits), vertices, np.int64(count), start, nbr, nlab,
         elab, deg, pma.deg, np.int32(min(long_from, 2**31 - 1))))


def entry_keys(us: cp.ndarray, vs: cp.ndarray, slot_labels: cp.ndarray, vertex_bits: int,
               directed: bool, labels: cp.ndarray | None = None
               ) -> tuple[cp.ndarray, cp.ndarray | None]:
    """Launch gpu/cuda/kernels/view.cu:entry_keys: the keys (uint64) of both list entries
    of each edge us[i] - vs[i] (int32 born slots; `directed`: the arc us[i] -> vs[i]), the
    entries at us first, then those at vs, each neighbour's label index read from
    `slot_labels`; with `labels` (int32, one per edge) the entries' values too (else
    None)."""
    _check_all((("us", np.int32, us), ("vs", np.int32, vs),
                ("slot_labels", np.int32, slot_labels))
               + ((("labels", np.int32, labels),) if labels is not None else ()))
    count = us.shape[0]
    if vs.shape[0] != count or (labels is not None and labels.shape[0] != count):
        raise ValueError(f"us, vs and labels differ in length: {count}, {vs.shape[0]}, "
                         f"{None if labels is None else labels.shape[0]}")
    keys = cp.empty(2 * count, dtype=np.uint64)
    vals = cp.empty(2 * count, dtype=np.int32) if labels is not None else None
    if count:
        kernel("view", "entry_keys")(
            (-(-2 * count // 256),), (256,),
            (us, vs, np.int64(count), slot_labels, np.int32(vertex_bits),
             np.int32(1 if directed else 0),
             labels if labels is not None else np.uint64(0), np.int32(labels is not None),
             keys, vals if vals is not None else np.uint64(0)))
    return keys, vals


def touched_vertices(du: cp.ndarray, dv: cp.ndarray, iu: cp.ndarray, iv: cp.ndarray,
                     slots: cp.ndarray, deg: cp.ndarray, stamp: cp.ndarray, epoch: int
                     ) -> tuple[np.ndarray, np.ndarray, cp.ndarray]:
    """Launch gpu/cuda/kernels/view.cu:touched_vertices: the distinct vertices among the
    edge ends du, dv, iu, iv and the vertex slots `slots` (int32), each with its degree
    `deg` (int32, per slot), claimed through `stamp` (int32, per slot, no entry equal to
    `epoch` > 0) and read back in one copy.  Returns the vertices and their degrees on the
    host, in the order claimed (not sorted), and the vertices on the device (int32)."""
    _check_all((("du", np.int32, du), ("dv", np.int32, dv), ("iu", np.int32, iu),
                ("iv", np.int32, iv), ("slots", np.int32, slots), ("deg", np.int32, deg),
                ("stamp", np.int32, stamp)))
    n_del, n_ins = du.shape[0], iu.shape[0]
    if dv.shape[0] != n_del or iv.shape[0] != n_ins:
        raise ValueError(f"edge ends differ in length: {n_del}, {dv.shape[0]} deleted, "
                         f"{n_ins}, {iv.shape[0]} inserted")
    if not 0 < epoch < 2**31:
        raise ValueError(f"epoch must be a positive int32, got {epoch}")
    bound = 2 * (n_del + n_ins) + slots.shape[0]
    out = cp.zeros(1 + 2 * bound, dtype=np.int32)
    if bound:
        kernel("view", "touched_vertices")(
            (-(-bound // 256),), (256,),
            (du, dv, np.int64(n_del), iu, iv, np.int64(n_ins), slots,
             np.int64(slots.shape[0]), deg, stamp, np.int32(epoch), np.int64(bound), out))
    host = read_back(out)
    count = int(host[0])
    return host[1:1 + count], host[1 + bound:1 + bound + count], out[1:1 + count]


FIND_KEYS_ARGS = ("keys", "vals", "cnt", "capacity", "seg_shift", "wanted", "count", "slots",
                  "values")


def find_keys(pma, wanted: cp.ndarray, with_values: bool = False, prepare: bool = False
              ) -> tuple[cp.ndarray, cp.ndarray | None] | Prepared:
    """Launch gpu/cuda/kernels/view.cu:find_keys: the slot of each of `wanted` (uint64) in
    the packed memory array `pma`, -1 where it is not stored, and with `with_values` each
    one's value (-1 where not stored).  With `prepare`, nothing is launched: the checked
    launch comes back as a Prepared (FIND_KEYS_ARGS, a thread per key, 256 a block) with
    output arrays of its own for every key of `wanted` ("slots", "values")."""
    _check_all((("wanted", np.uint64, wanted), ("keys", np.uint64, pma.keys),
                ("vals", np.int32, pma.vals), ("cnt", np.int32, pma.cnt)))
    count = wanted.shape[0]
    slots = cp.empty(count, dtype=np.int64)
    values = cp.empty(count, dtype=np.int32) if with_values or prepare else None
    args = (pma.keys, pma.vals, pma.cnt, np.int64(pma.capacity),
            np.int32(pma.S.bit_length() - 1), wanted, np.int64(count), slots,
            values if values is not None else np.uint64(0))
    if prepare:
        return Prepared(kernel("view", "find_keys"), FIND_KEYS_ARGS, args)
    if count:
        kernel("view", "find_keys")((-(-count // 256),), (256,), args)
    return slots, values


def locate_small(pma, ik: cp.ndarray, dk: cp.ndarray
                 ) -> tuple[cp.ndarray, cp.ndarray, cp.ndarray]:
    """Launch gpu/cuda/kernels/pma.cu:locate_small on sorted insert keys `ik` and delete
    keys `dk` (all stored, at most SMALL_BATCH together) of the packed memory array `pma`:
    marks the deletes DEAD and moves the degrees; returns (iseg, dseg, windows), reading
    back the number of windows."""
    _check_all((("ik", np.uint64, ik), ("dk", np.uint64, dk), ("keys", np.uint64, pma.keys),
                ("vals", np.int32, pma.vals), ("deg", np.int32, pma.deg)))
    n_ins, n_del = ik.shape[0], dk.shape[0]
    if n_ins + n_del > SMALL_BATCH:
        raise ValueError(f"locate_small takes at most {SMALL_BATCH} updates, got "
                         f"{n_ins + n_del}")
    out = cp.empty(2 * (n_ins + n_del) + 1, dtype=np.int64)
    iseg, dseg = out[:n_ins], out[n_ins:n_ins + n_del]
    windows, count = out[n_ins + n_del:-1], out[-1:]
    kernel("pma", "locate_small")(
        (1,), (SMALL_BATCH,),
        (pma.keys, pma.vals, np.int64(pma.capacity), np.int32(pma.S.bit_length() - 1),
         np.int64(pma.nseg), ik, np.int64(n_ins), dk, np.int64(n_del), pma.deg, iseg, dseg,
         windows, count))
    return iseg, dseg, windows[:int(count.get()[0])]


def locate_batch(pma, ik: cp.ndarray, dk: cp.ndarray) -> tuple[cp.ndarray, cp.ndarray]:
    """Launch gpu/cuda/kernels/pma.cu:locate_batch on sorted insert keys `ik` and delete
    keys `dk` (all stored) of the packed memory array `pma`, any number: marks the deletes
    DEAD and moves the degrees; returns (iseg, dseg), queued (nothing read back)."""
    _check_all((("ik", np.uint64, ik), ("dk", np.uint64, dk), ("keys", np.uint64, pma.keys),
                ("vals", np.int32, pma.vals), ("deg", np.int32, pma.deg)))
    n_ins, n_del = ik.shape[0], dk.shape[0]
    out = cp.empty(n_ins + n_del, dtype=np.int64)
    iseg, dseg = out[:n_ins], out[n_ins:]
    if n_ins + n_del:
        kernel("pma", "locate_batch")(
            (-(-(n_ins + n_del) // 256),), (256,),
            (pma.keys, pma.vals, np.int64(pma.capacity), np.int32(pma.S.bit_length() - 1),
             np.int64(pma.nseg), ik, np.int64(n_ins), dk, np.int64(n_del), pma.deg, iseg,
             dseg))
    return iseg, dseg


UPDATE_SMALL_ARGS = ("keys", "vals", "cnt", "deg", "row", "capacity", "seg_shift", "nseg",
                     "num_vertices", "ik", "iv", "n_ins", "dk", "n_del", "upper_count",
                     "lower_count", "scratch")


def _update_small_words(n_ins: int, n_del: int) -> int:
    """int64 words of update_small's scratch: pma.cu's layout (int64 result, iseg, dseg,
    dpos, windows, plan, record; then a byte per update, twice)."""
    n = n_ins + n_del
    words = 2 + n_ins + 2 * n_del + n + PLAN_ROWS * n + RECORD_LEVELS + 2
    return words + -(-(2 * n) // 8)


class SmallUpdate:
    """gpu/cuda/kernels/pma.cu:update_small, launched through a launch prepared once (one
    per array: PackedMemoryArray.small_update), its scratch sized for SMALL_BATCH updates
    and kept, its two result words read back into pinned memory: a one-edge batch's array
    update costs one driver call and one wait, not a RawKernel call converting 17
    arguments, a fresh scratch and a pageable read-back.

    Called with sorted insert keys `ik` (values `iv`) and delete keys `dk` (validated:
    inserts absent, deletes stored; at most SMALL_BATCH together) of the packed memory
    array `pma`, whose leaves hold at most 32 slots: the whole batch merged into its
    leaves when each takes its share within [lower_count, upper_count] elements (and
    none is left empty or before an untouched empty segment), else nothing changed.
    Returns (taken, leaves touched)."""

    def __init__(self) -> None:
        self._scratch = cp.empty(_update_small_words(SMALL_BATCH, SMALL_BATCH), dtype=np.int64)
        self._result = cupyx.empty_pinned(2, dtype=np.int64)
        self._launch: Prepared | None = None

    def __call__(self, pma, ik: cp.ndarray, iv: cp.ndarray, dk: cp.ndarray,
                 upper_count: int, lower_count: int) -> tuple[bool, int]:
        n_ins, n_del = _check_update_small(pma, ik, iv, dk)
        args = (pma.keys, pma.vals, pma.cnt, pma.deg, pma.row, np.int64(pma.capacity),
                np.int32(pma.S.bit_length() - 1), np.int64(pma.nseg),
                np.int64(pma.num_vertices), ik, iv, np.int64(n_ins), dk, np.int64(n_del),
                np.int32(upper_count), np.int32(lower_count), self._scratch)
        if self._launch is None:
            self._launch = Prepared(kernel("pma", "update_small"), UPDATE_SMALL_ARGS, args)
        else:
            # The array's buffers move when it grows, the batch's every time.
            for name, arg in zip(UPDATE_SMALL_ARGS, args, strict=True):
                self._launch.set(name, arg)
        self._launch.launch(1, SMALL_BATCH)
        stream = cp.cuda.get_current_stream()
        self._scratch.data.copy_to_host_async(self._result.ctypes.data, 16, stream)
        stream.synchronize()
        taken, leaves = self._result.tolist()
        return bool(taken), leaves


def _check_update_small(pma, ik, iv, dk) -> tuple[int, int]:
    _check_all((("ik", np.uint64, ik), ("iv", np.int32, iv), ("dk", np.uint64, dk),
                ("keys", np.uint64, pma.keys), ("vals", np.int32, pma.vals),
                ("cnt", np.int32, pma.cnt), ("deg", np.int32, pma.deg),
                ("row", np.int64, pma.row)))
    n_ins, n_del = ik.shape[0], dk.shape[0]
    if n_ins + n_del > SMALL_BATCH or iv.shape[0] != n_ins:
        raise ValueError(f"update_small takes at most {SMALL_BATCH} updates and a value per "
                         f"insert, got {n_ins} inserts, {iv.shape[0]} values, {n_del} deletes")
    if pma.S > 32:
        raise ValueError(f"update_small needs leaves of at most 32 slots, got {pma.S}")
    return n_ins, n_del


def refresh_long_lists(pma, vertices: np.ndarray, pieces: np.ndarray, start: cp.ndarray,
                       nbr: cp.ndarray, nlab: cp.ndarray, elab: cp.ndarray,
                       deg: cp.ndarray) -> None:
    """Launch gpu/cuda/kernels/view.cu:refresh_long_lists twice (count, then write): as
    refresh_lists, each of `vertices` (host, distinct) cut into `pieces` (host, >= 1 each)
    pieces of a block each."""
    _check_all((("start", np.int64, start), ("nbr", np.int32, nbr),
                ("nlab", np.int32, nlab), ("elab", np.int32, elab), ("deg", np.int32, deg),
                ("keys", np.uint64, pma.keys), ("vals", np.int32, pma.vals),
                ("cnt", np.int32, pma.cnt), ("row", np.int64, pma.row)))
    pieces = np.asarray(pieces, dtype=np.int64)
    total = int(pieces.sum())
    if total == 0:
        return
    if pieces.min() < 1 or len(pieces) != len(vertices):
        raise ValueError("every vertex needs at least one piece")
    # One upload: each piece's vertex, its index among the vertex's pieces, their number.
    first = np.repeat(np.cumsum(pieces) - pieces, pieces)
    table = cp.asarray(np.concatenate([np.repeat(np.asarray(vertices, dtype=np.int64), pieces),
                                       np.arange(total, dtype=np.int64) - first,
                                       np.repeat(pieces, pieces)]))
    part_vertex, part_index, parts = table[:total], table[total:2 * total], table[2 * total:]
    counts = cp.empty(total, dtype=np.int64)
    refresh = kernel("view", "refresh_long_lists")
    for counting in (1, 0):
        refresh((total,), (LONG_BLOCK,),
               (pma.keys, pma.vals, pma.cnt, pma.row, np.int32(pma.S.bit_length() - 1),
                np.int32(pma.config.vertex_bits), part_vertex, part_index, parts,
                np.int32(counting), counts, start, nbr, nlab, elab, deg))
