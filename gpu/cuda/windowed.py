"""Windowed counting on the CUDA executor (issue 23): a phase's search on the device, the
windowed queries' plans packed for the kernel, and the typed launcher of
gpu/cuda/kernels/window.cu's match_window.

gpu/event_time.py decides what a phase searches, for both executors: the edges timed
within the widest window of its update edges' times (`WindowEdges`, read from the times
table and window-sized), the update edges, the refreshed edges' other-side times and the
structural edges.  The CPU executor fills a DynamicGraph with them and runs
gpu/cpu/windowed.py; here one Numba call writes them, with the phase's queries' plans, into
one buffer (gpu/cuda/window_layout.py: the subgraph as a compact CSR of its own vertices,
so nothing here follows the engine's graph), copied up once per phase, and one launch
runs the same search for all of them, from the same `WindowPlan` (the CPU's, packed once
per query: `pack`).  Both return a MatchSet.  The CPU's candidate bits are not used (on
CUDA they are not kept for windowed queries: they only filter).

Only import this module where `gpu.cuda.device.cuda_available()` is true.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import cupy as cp
import numpy as np

from gpu.cpu.windowed import WindowEdges, WindowPlan
from gpu.cuda.loader import check_array, kernel
from gpu.cuda.window_layout import COUNTS, HEAD, offset, phase_buffer
from gpu.results import MatchSet

# window.cu's per-warp state: WIN_MAX_QUERY levels, WIN_MAX_EDGES query edges.
WIN_MAX_QUERY = 16
WIN_MAX_EDGES = 64
WIN_MAX_BW = 32         # backward entries of a level (a directed level has up to 2 per vertex)
WIN_WARPS = 4
_NO_KEYS = np.empty(0, dtype=np.int64)


# window.cu's plan header: the sizes (`width`: a backward entry row's, n or 2n; `directed`:
# 1 for a directed query), then each array's offset in the blob.
_HEAD = ("n", "types", "pmax", "nbefore", "width", "directed", "q_label", "orders",
         "root_label", "bw_count", "bw_level", "bw_label", "root_edge", "bw_edge", "bc_count",
         "bc_pairs", "before", "bw_key", "bw_arc")
_SIZES = 6
_ARRAYS = _HEAD[_SIZES:]


class PackedWindowPlan(NamedTuple):
    """A WindowPlan as window.cu reads it: its arrays in one int32 blob and a header of
    the sizes and their offsets (from the blob's start); a launch concatenates the blobs
    of the phase's queries and shifts the offsets (`packed`)."""
    n: int
    types: int
    head: np.ndarray        # int32 [len(_HEAD)]
    blob: np.ndarray        # int32
    directed: bool = False


def fits(plan: WindowPlan) -> bool:
    """Whether window.cu's per-warp state holds the plan's query (else the host searches
    it): its vertices (levels), its edges, a level's backward entries."""
    edges = 1 + max(int(plan.root_edge.max()), int(plan.bw_edge.max()))
    return (plan.orders.shape[1] <= WIN_MAX_QUERY and edges <= WIN_MAX_EDGES
            and int(plan.bw_count.max()) <= WIN_MAX_BW)


def pack(plan: WindowPlan) -> PackedWindowPlan:
    """The plan packed for the kernel (once per query)."""
    arrays = [np.ascontiguousarray(getattr(plan, name), dtype=np.int32).ravel()
              for name in _ARRAYS]
    offsets = np.cumsum([0] + [len(a) for a in arrays])[:-1]
    n, types = int(plan.orders.shape[1]), int(plan.orders.shape[0])
    head = np.array([n, types, int(plan.bc_pairs.shape[2]), int(plan.before.shape[0]),
                     int(plan.bw_level.shape[2]), int(plan.directed), *offsets],
                    dtype=np.int32)
    return PackedWindowPlan(n, types, head, np.concatenate(arrays), bool(plan.directed))


def packed(plans: list[PackedWindowPlan]) -> tuple[np.ndarray, np.ndarray]:
    """(heads, blob) of several plans, each header's offsets shifted to its blob's place."""
    heads, base = [], 0
    for plan in plans:
        head = plan.head.copy()
        head[_SIZES:] += base
        heads.append(head)
        base += len(plan.blob)
    return np.concatenate(heads), np.concatenate([plan.blob for plan in plans])


# The last phase's plans and their concatenation: a phase's windowed queries are those of
# the one before it but when one is added or dropped (0.04 ms a phase otherwise).
_last_packed: list = [(), None]


def _packed_once(plans: list[PackedWindowPlan]) -> tuple[np.ndarray, np.ndarray]:
    """`packed(plans)`, kept while the same plans (the same objects) come again."""
    last, both = _last_packed
    if len(last) != len(plans) or any(a is not b for a, b in zip(last, plans)):
        _last_packed[:] = tuple(plans), packed(plans)
    return _last_packed[1]


def match_window(phase: cp.ndarray, blocks: int) -> None:
    """Queue window.cu's match_window for every windowed query of a phase, over every
    (query, update edge, task type) triple: `phase` is the phase's buffer on the device
    (gpu/cuda/window_layout.py: the subgraph, the update edges, the other side's times,
    the structural keys and the plans as read, the counters (zero) and the rows as
    written; its header's `words` long)."""
    check_array("phase", phase, np.int64, 1)
    if phase.shape[0] < HEAD:
        raise ValueError(f"phase: {phase.shape[0]} entries, the header alone has {HEAD}")
    kernel("window", "match_window")((blocks,), (32 * WIN_WARPS,), (phase,))


@functools.cache
def _multiprocessors(device: int) -> int:
    return cp.cuda.Device(device).attributes["MultiProcessorCount"]


def _blocks(tasks: int) -> int:
    """Enough warps for the triples, 32 a warp at a time, at most 8 blocks a
    multiprocessor."""
    sms = _multiprocessors(cp.cuda.Device().id)
    return max(1, min(-(-tasks // (32 * WIN_WARPS)), 8 * sms))


@functools.cache
def _search_stream() -> cp.cuda.Stream:
    """The windowed searches' stream (non-blocking: no order with the engine's)."""
    return cp.cuda.Stream(non_blocking=True)


class WindowedSearch(NamedTuple):
    """One windowed query's search in a phase: its packed plan, window, and how many
    matches to list."""
    packed: PackedWindowPlan
    window: int
    limit: int


def count_windowed_device(edges: WindowEdges, vertex_label: np.ndarray,
                          update_keys: np.ndarray, update_times: np.ndarray,
                          searches: list[WindowedSearch], other=None, structural=None
                          ) -> list[MatchSet]:
    """gpu/cpu/windowed.py count_windowed on the device, for every query of a phase: the
    valid matches using at least one of the update edges `update_keys` (ascending, timed:
    `update_times`; arcs where the queries are directed), searched in the window subgraph
    `edges`; `other` and `structural` as
    there, each search's first `limit` matches listed (slots in query-vertex order; which
    ones when more are found is not specified).  One copy up (the subgraph, the update
    edges, the plans), one launch, one read-back of the counts (and one of the rows)."""
    update_keys = np.asarray(update_keys, dtype=np.int64)
    found = [MatchSet(0, np.empty((0, s.packed.n), dtype=np.int32), False)
             for s in searches]
    if len(update_keys) == 0 or not searches:
        return found
    directed = searches[0].packed.directed
    if any(s.packed.directed != directed for s in searches):
        raise ValueError("a phase's windowed queries are all of its graph's kind")
    other_keys, other_times = (_NO_KEYS, _NO_KEYS) if other is None else other
    heads, blob = _packed_once([s.packed for s in searches])
    types = np.array([s.packed.types for s in searches], dtype=np.int64)
    limits = np.array([max(0, int(s.limit)) for s in searches], dtype=np.int64)
    out_at = np.cumsum(np.r_[0, limits * [s.packed.n for s in searches]])
    buffer = phase_buffer(
        edges.keys, edges.times, edges.labels, vertex_label, update_keys, update_times,
        other_keys, other_times, other is not None,
        _NO_KEYS if structural is None else structural, heads, blob, types,
        np.array([s.window for s in searches], np.int64), limits, out_at, directed)
    counters = offset(buffer, "counters") // 8
    rows_at = offset(buffer, "out") // 4
    # One copy up (what comes before the rows), one launch, one read-back, on a stream of
    # their own: the search reads nothing but its buffer, so it need not wait for the
    # batch's graph update (queued on the engine's streams before it).
    with _search_stream():
        phase = cp.empty(int(buffer[COUNTS.index("words")]), dtype=np.int64)
        phase[:len(buffer)].set(buffer)
        match_window(phase, _blocks(len(update_keys) * int(types.sum())))
        counts = phase[counters:counters + 1 + 2 * len(searches)].get()[1::2]
        ints = phase.view(np.int32)
        for q, s in enumerate(searches):
            count, limit, n = int(counts[q]), int(limits[q]), s.packed.n
            if limit and count:
                lo = rows_at + int(out_at[q])
                rows = ints[lo:lo + min(count, limit) * n].get().reshape(-1, n)
            else:
                rows = found[q].rows
            found[q] = MatchSet(count, rows, rows.shape[0] < count)
    return found
