"""Windowed counting on the CUDA executor (issue 23): a phase's window subgraph laid out
and copied up, the windowed queries' plans packed for the kernel, and the typed launcher
of gpu/cuda/kernels/window.cu's match_window.

gpu/event_time.py decides what a phase searches, for both executors: the edges timed
within the widest window of its update edges' times (`WindowEdges`, read from the times
table and window-sized), the update edges, the refreshed edges' other-side times and the
structural edges.  The CPU executor fills a DynamicGraph with them and runs
gpu/cpu/windowed.py; this module lays them out as a compact CSR (`WindowGraph`: only the
subgraph's vertices, so nothing here follows the engine's graph), copies it up once per
phase with the phase's update edges and its queries' plans, and runs the same search in
one launch for all of them, from the same `WindowPlan` (the CPU's, packed once per
query: `pack`).  Both return a MatchSet.  The CPU's candidate
bits are not used (on CUDA they are not kept for windowed queries: they only filter).

Only import this module where `gpu.cuda.device.cuda_available()` is true.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import cupy as cp
import numpy as np

from gpu.cpu.windowed import WindowEdges, WindowPlan
from gpu.cuda.loader import check_array, kernel, upload_together
from gpu.results import MatchSet

# window.cu's per-warp state: WIN_MAX_QUERY levels, WIN_MAX_EDGES query edges.
WIN_MAX_QUERY = 16
WIN_MAX_EDGES = 64
WIN_WARPS = 4
_NO_KEYS = np.empty(0, dtype=np.int64)


class WindowGraph(NamedTuple):
    """window.cu's graph on the device: vertex verts[i]'s entries are vstart[i] ..
    vstart[i + 1] - 1, sorted by neighbour."""
    verts: cp.ndarray       # int32 [V], ascending slots
    vstart: cp.ndarray      # int64 [V + 1]
    nbr: cp.ndarray         # int32 [2E]
    nlab: cp.ndarray        # int32 [2E]: the neighbour's vertex label
    elab: cp.ndarray        # int32 [2E]
    etime: cp.ndarray       # int64 [2E]
    rank: cp.ndarray        # int32 [2E]: 1 + the edge's index among the update edges, or 0


# window.cu's plan header: the sizes, then each array's offset in the blob.
_HEAD = ("n", "types", "pmax", "nbefore", "q_label", "orders", "root_label", "bw_count",
         "bw_level", "bw_label", "root_edge", "bw_edge", "bc_count", "bc_pairs", "before")
_ARRAYS = _HEAD[4:]


class PackedWindowPlan(NamedTuple):
    """A WindowPlan as window.cu reads it: its arrays in one int32 blob and a header of
    the sizes and their offsets (from the blob's start); a launch concatenates the blobs
    of the phase's queries and shifts the offsets (`packed`)."""
    n: int
    types: int
    head: np.ndarray        # int32 [len(_HEAD)]
    blob: np.ndarray        # int32


def fits(plan: WindowPlan) -> bool:
    """Whether window.cu's per-warp state holds the plan's query (else the host searches)."""
    edges = 1 + max(int(plan.root_edge.max()), int(plan.bw_edge.max()))
    return plan.orders.shape[1] <= WIN_MAX_QUERY and edges <= WIN_MAX_EDGES


def pack(plan: WindowPlan) -> PackedWindowPlan:
    """The plan packed for the kernel (once per query)."""
    arrays = [np.ascontiguousarray(getattr(plan, name), dtype=np.int32).ravel()
              for name in _ARRAYS]
    offsets = np.cumsum([0] + [len(a) for a in arrays])[:-1]
    n, types = int(plan.orders.shape[1]), int(plan.orders.shape[0])
    head = np.array([n, types, int(plan.bc_pairs.shape[2]), int(plan.before.shape[0]),
                     *offsets], dtype=np.int32)
    return PackedWindowPlan(n, types, head, np.concatenate(arrays))


def packed(plans: list[PackedWindowPlan]) -> tuple[np.ndarray, np.ndarray]:
    """(heads, blob) of several plans, each header's offsets shifted to its blob's place."""
    heads, base = [], 0
    for plan in plans:
        head = plan.head.copy()
        head[4:] += base
        heads.append(head)
        base += len(plan.blob)
    return np.concatenate(heads), np.concatenate([plan.blob for plan in plans])


def layout(edges: WindowEdges, vertex_label: np.ndarray, update_keys: np.ndarray
           ) -> tuple[np.ndarray, ...]:
    """WindowGraph's arrays on the host: every edge in both directions, sorted by (vertex,
    neighbour); `update_keys` (ascending) give the ranks.  The keys (u < v) are sorted by
    (u, v) already: only the other direction is sorted, then the two merged (a window's
    ~6,000 entries in ~0.1 ms, where sorting by neighbour label too took 0.5-1.5)."""
    keys = edges.keys
    at = np.searchsorted(update_keys, keys)
    hit = at < len(update_keys)
    hit[hit] = update_keys[at[hit]] == keys[hit]
    rank = np.where(hit, at + 1, 0).astype(np.int32)
    u, v = keys >> 32, keys & 0xFFFFFFFF
    back = (v << 32) | u
    order = np.argsort(back)
    back = back[order]
    # No key is in both halves (u < v forward, u > v back): each entry's place is its
    # index in its half plus the entries of the other half below it.
    count = len(keys)
    place_fwd = np.arange(count) + np.searchsorted(back, keys)
    place_back = np.arange(count) + np.searchsorted(keys, back)
    edge = np.empty(2 * count, dtype=np.int64)
    edge[place_fwd] = np.arange(count)
    edge[place_back] = order
    src = np.empty(2 * count, dtype=np.int64)
    src[place_fwd], src[place_back] = u, back >> 32
    dst = np.empty(2 * count, dtype=np.int32)
    dst[place_fwd], dst[place_back] = v, back & 0xFFFFFFFF
    starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]]) if count else \
        np.empty(0, dtype=np.int64)
    return (src[starts].astype(np.int32), np.append(starts, 2 * count).astype(np.int64), dst,
            vertex_label[dst].astype(np.int32), edges.labels[edge].astype(np.int32),
            edges.times[edge].astype(np.int64), rank[edge])


def update_edges(edges: WindowEdges, vertex_label: np.ndarray, update_keys: np.ndarray
                 ) -> tuple[np.ndarray, ...]:
    """What the kernel tests a task's root with, per update edge: its ends, their labels
    and its label in the subgraph (-1 where the subgraph lacks it: the expired edges a
    phase leaves out)."""
    at = np.searchsorted(edges.keys, update_keys)
    present = at < len(edges.keys)
    present[present] = edges.keys[at[present]] == update_keys[present]
    label = np.full(len(update_keys), -1, dtype=np.int32)
    label[present] = edges.labels[at[present]]
    u = (update_keys >> 32).astype(np.int32)
    v = (update_keys & 0xFFFFFFFF).astype(np.int32)
    return u, v, vertex_label[u].astype(np.int32), vertex_label[v].astype(np.int32), label


def match_window(graph: WindowGraph, updates: tuple[cp.ndarray, ...],
                 queries: tuple[cp.ndarray, ...], other: tuple[cp.ndarray, cp.ndarray]
                 | None, structural: cp.ndarray, out: cp.ndarray, counters: cp.ndarray,
                 blocks: int) -> None:
    """Queue window.cu's match_window for every windowed query of a phase, over every
    (update edge, task type) pair: `updates` = (us, vs, their times, us' labels, vs'
    labels, their labels in the subgraph or -1), the update edge i ranked i + 1;
    `queries` = (task_start [Q + 1], heads, blob, windows [Q], limits [Q], out_at [Q]):
    query q's pairs are numbered task_start[q] .. task_start[q + 1] - 1, its plan is
    packed in heads/blob (`packed`), its first limits[q] matches listed as rows at
    out[out_at[q]:] (int32, n per row); its count is added to counters[1 + 2q] (uint64
    [1 + 2Q], zero at the start).  `other`: (sorted keys, times) of the refreshed edges on
    the other side of the batch, None: every match found counts (gpu/cpu/windowed.py's
    module docstring)."""
    for name in WindowGraph._fields:
        check_array(name, getattr(graph, name), _GRAPH_DTYPES[name], 1)
    for name, array, dtype in zip(("us", "vs", "first_time", "u_label", "v_label",
                                   "root_elab"), updates, _UPDATE_DTYPES, strict=True):
        check_array(name, array, dtype, 1)
        if array.shape[0] != updates[0].shape[0]:
            raise ValueError(f"{name}: {array.shape[0]} entries, us {updates[0].shape[0]}")
    for name, array, dtype in zip(("task_start", "heads", "blob", "windows", "limits",
                                   "out_at"), queries, _QUERY_DTYPES, strict=True):
        check_array(name, array, dtype, 1)
    task_start, heads = queries[0], queries[1]
    count = task_start.shape[0] - 1
    if heads.shape[0] != count * len(_HEAD) or counters.shape[0] != 1 + 2 * count:
        raise ValueError(f"{count} queries: {heads.shape[0]} header ints, "
                         f"{counters.shape[0]} counters")
    check_array("structural", structural, np.int64, 1)
    check_array("counters", counters, np.uint64, 1)
    check_array("out", out, np.int32, 1)
    check_other = other is not None
    keys, times = other if check_other else (structural[:0], structural[:0])
    check_array("other keys", keys, np.int64, 1)
    check_array("other times", times, np.int64, 1)
    if updates[0].shape[0] == 0 or count == 0:
        return
    i32, i64 = np.int32, np.int64
    kernel("window", "match_window")(
        (blocks,), (32 * WIN_WARPS,),
        (graph.verts, i64(graph.verts.shape[0]), graph.vstart, graph.nbr, graph.nlab,
         graph.elab, graph.etime, graph.rank, *updates, i32(count), *queries,
         i32(check_other), keys, times, i64(keys.shape[0]), structural,
         i64(structural.shape[0]), out, counters))


_QUERY_DTYPES = (np.int64, np.int32, np.int32, np.int64, np.int64, np.int64)
_UPDATE_DTYPES = (np.int32, np.int32, np.int64, np.int32, np.int32, np.int32)
_GRAPH_DTYPES = {"verts": np.int32, "vstart": np.int64, "nbr": np.int32, "nlab": np.int32,
                 "elab": np.int32, "etime": np.int64, "rank": np.int32}


@functools.cache
def _multiprocessors(device: int) -> int:
    return cp.cuda.Device(device).attributes["MultiProcessorCount"]


def _blocks(tasks: int) -> int:
    """Enough warps for the triples, 32 a warp at a time, at most 8 blocks a
    multiprocessor."""
    sms = _multiprocessors(cp.cuda.Device().id)
    return max(1, min(-(-tasks // (32 * WIN_WARPS)), 8 * sms))


class WindowedSearch(NamedTuple):
    """One windowed query's search in a phase: its plan (host and packed), window, and
    how many matches to list."""
    plan: WindowPlan
    packed: PackedWindowPlan
    window: int
    limit: int


def count_windowed_device(edges: WindowEdges, vertex_label: np.ndarray,
                          update_keys: np.ndarray, update_times: np.ndarray,
                          searches: list[WindowedSearch], other=None, structural=None
                          ) -> list[MatchSet]:
    """gpu/cpu/windowed.py count_windowed on the device, for every query of a phase: the
    valid matches using at least one of the update edges `update_keys` (ascending, timed:
    `update_times`), searched in the window subgraph `edges`; `other` and `structural` as
    there, each search's first `limit` matches listed (slots in query-vertex order; which
    ones when more are found is not specified).  One copy up (the subgraph, the update
    edges, the plans), one launch, one read-back of the counts (and one of the rows)."""
    update_keys = np.asarray(update_keys, dtype=np.int64)
    found = [MatchSet(0, np.empty((0, s.packed.n), dtype=np.int32), False)
             for s in searches]
    if len(update_keys) == 0 or not searches:
        return found
    us, vs, u_label, v_label, root_elab = update_edges(edges, vertex_label, update_keys)
    verts, vstart, nbr, nlab, elab, etime, rank = layout(edges, vertex_label, update_keys)
    other_keys, other_times = (_NO_KEYS, _NO_KEYS) if other is None else other
    heads, blob = packed([s.packed for s in searches])
    starts = np.cumsum([0] + [len(update_keys) * s.packed.types for s in searches])
    limits = np.array([max(0, int(s.limit)) for s in searches], dtype=np.int64)
    out_at = np.cumsum(np.r_[0, limits * [s.packed.n for s in searches]])
    # One copy up: the subgraph, the update edges, the other side's times, the plans.
    (vstart, etime, first_time, other_keys, other_times, structural, task_start, windows,
     limits_up, out_at_up, verts, nbr, nlab, elab, rank, us, vs, u_label, v_label,
     root_elab, heads, blob) = upload_together(
        vstart, etime, np.asarray(update_times, np.int64), np.asarray(other_keys, np.int64),
        np.asarray(other_times, np.int64),
        np.asarray(structural if structural is not None else _NO_KEYS, np.int64),
        starts.astype(np.int64), np.array([s.window for s in searches], np.int64),
        limits, out_at[:-1].astype(np.int64),
        verts, nbr, nlab, elab, rank, us, vs, u_label, v_label, root_elab, heads, blob)
    out = cp.empty(max(1, int(out_at[-1])), dtype=np.int32)
    counters = cp.zeros(1 + 2 * len(searches), dtype=np.uint64)
    match_window(WindowGraph(verts, vstart, nbr, nlab, elab, etime, rank),
                 (us, vs, first_time, u_label, v_label, root_elab),
                 (task_start, heads, blob, windows, limits_up, out_at_up),
                 None if other is None else (other_keys, other_times), structural, out,
                 counters, _blocks(int(starts[-1])))
    counts = counters.get()[1::2]
    for q, s in enumerate(searches):
        count, limit, n = int(counts[q]), int(limits[q]), s.packed.n
        if limit and count:
            lo = int(out_at[q])
            rows = out[lo:lo + min(count, limit) * n].get().reshape(-1, n)
        else:
            rows = found[q].rows
        found[q] = MatchSet(count, rows, rows.shape[0] < count)
    return found
