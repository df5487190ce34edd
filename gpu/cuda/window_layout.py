"""Owns the layout of a windowed phase's one buffer for window.cu's match_window: the window
subgraph as a compact CSR, the update edges, the other side's times, the structural keys
and the queries' plans, written by one Numba call into one int64 array that is copied up
whole.

Until 2026-11-29 the host laid the phase out in ~25 NumPy calls and the launch took ~30
device arrays (each a view made, checked and passed): ~0.5 ms a phase, half a W = 100
phase's cost (docs/benchmarks.md, "Windowed queries in the kernel").  One compiled call
and one pointer cost what the data does.

The buffer: HEAD int64 entries (the counts, then each array's offset in bytes from the
buffer's start; `FIELDS` names them, window.cu's enum P_* follows the same order), then
the arrays, 8-byte ones first so that each is aligned to its type.  The graph part, as
window.cu reads it: vertex verts[i]'s entries are vstart[i] .. vstart[i + 1] - 1, sorted by
neighbour slot (then direction), each with its list key (nlab: the neighbour's vertex
label; on a directed graph 2 label + 0 for an arc out of the vertex, + 1 for one into it,
as gpu/graph/lists.py files them), the edge's label (elab), time (etime) and rank (1 +
its index among the update edges, 0 for the others).  Only the
subgraph's vertices are held: nothing here is the size of the engine's graph.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)

# The header's counts, then the arrays' byte offsets (window.cu: enum P_*).  `words`: the
# buffer's whole size in int64 words, `out` included; the host copies up only what comes
# before `out` (the kernel's rows: nothing to copy), `counters` among it as zeros.
COUNTS = ("nverts", "nupdates", "queries", "nother", "nstructural", "check_other", "words")
ARRAYS = ("vstart", "etime", "first_time", "task_start", "windows", "limits", "out_at",
          "other_keys", "other_times", "structural", "counters",
          "verts", "nbr", "nlab", "elab", "rank", "us", "vs", "u_label", "v_label",
          "root_elab", "heads", "blob", "out")
FIELDS = COUNTS + ARRAYS
HEAD = len(FIELDS)
_WIDE = ARRAYS.index("verts")   # ARRAYS[:_WIDE] hold 8-byte entries, the rest 4-byte ones
(_VSTART, _ETIME, _FIRST_TIME, _TASK_START, _WINDOWS, _LIMITS, _OUT_AT, _OTHER_KEYS,
 _OTHER_TIMES, _STRUCTURAL, _COUNTERS, _VERTS, _NBR, _NLAB, _ELAB, _RANK, _US, _VS,
 _U_LABEL, _V_LABEL, _ROOT_ELAB, _HEADS, _BLOB, _OUT) = range(len(ARRAYS))


def offset(buffer: np.ndarray, name: str) -> int:
    """Where array `name` starts in a phase's buffer, in bytes."""
    return int(buffer[len(COUNTS) + ARRAYS.index(name)])


def phase_buffer(keys: np.ndarray, times: np.ndarray, labels: np.ndarray,
                 vertex_label: np.ndarray, update_keys: np.ndarray,
                 update_times: np.ndarray, other_keys: np.ndarray, other_times: np.ndarray,
                 check_other: bool, structural: np.ndarray, heads: np.ndarray,
                 blob: np.ndarray, types: np.ndarray, windows: np.ndarray,
                 limits: np.ndarray, out_at: np.ndarray, directed: bool = False
                 ) -> np.ndarray:
    """The phase's buffer (module docstring): the window's edges `keys` (u << 32 | v, u < v,
    or `directed` arcs u -> v, ascending) with their `times` and `labels`; `update_keys`
    (ascending) with their times; the refreshed edges' `other_keys` and times and the
    `structural` keys (sorted); the queries' packed plans (`heads`, `blob`:
    gpu/cuda/windowed.py packed), task types, windows, list limits and rows' places in the
    output (`out_at`: [Q + 1], int32s).  Returned: the buffer up to `out`, whose header's
    `words` says how large the device's copy must be."""
    return _fill(np.ascontiguousarray(keys, np.int64), np.ascontiguousarray(times, np.int64),
                 np.ascontiguousarray(labels, np.int32), vertex_label,
                 np.ascontiguousarray(update_keys, np.int64),
                 np.ascontiguousarray(update_times, np.int64),
                 np.ascontiguousarray(other_keys, np.int64),
                 np.ascontiguousarray(other_times, np.int64), bool(check_other),
                 np.ascontiguousarray(structural, np.int64), heads, blob,
                 np.ascontiguousarray(types, np.int64), np.ascontiguousarray(windows, np.int64),
                 np.ascontiguousarray(limits, np.int64), np.ascontiguousarray(out_at, np.int64),
                 bool(directed))


@nb.njit(cache=True)
def _by_second_end(keys):
    """The order of `keys` (u << 32 | v, sorted by (u, v)) sorted by (v, u): a stable radix
    sort by v, 11 bits a pass (two passes for GH's slots), so u stays in order.  Numba's
    argsort took 1.4 ms for a W = 1,000 window's 12,000 keys, NumPy's 0.8 (the VM)."""
    count = len(keys)
    order = np.arange(count)
    spare = np.empty(count, dtype=np.int64)
    top = 0
    for i in range(count):
        top = max(top, keys[i] & 0xFFFFFFFF)
    buckets = np.empty(2049, dtype=np.int64)
    shift = 0
    while shift == 0 or (top >> shift) > 0:
        buckets[:] = 0
        for i in range(count):
            buckets[((keys[order[i]] & 0xFFFFFFFF) >> shift & 2047) + 1] += 1
        for d in range(2048):
            buckets[d + 1] += buckets[d]
        for i in range(count):
            d = (keys[order[i]] & 0xFFFFFFFF) >> shift & 2047
            spare[buckets[d]] = order[i]
            buckets[d] += 1
        order, spare = spare, order
        shift += 11
    return order


@nb.njit(cache=True)
def _entries(keys):
    """Every edge's two entries, sorted by (vertex, neighbour, direction): each entry's
    source, neighbour, edge index and direction (0 at u of the key u << 32 | v, 1 at v;
    for an arc, 0 at its tail, 1 at its head).  The keys are sorted by (u, v) already, the
    other ends are put in order (`_by_second_end`) and the two merged; only arcs can hold
    the same (vertex, neighbour) in both halves (u -> v and v -> u), the forward one
    first."""
    count = len(keys)
    order = _by_second_end(keys)
    back = np.empty(count, dtype=np.int64)
    for i in range(count):
        k = keys[order[i]]
        back[i] = ((k & 0xFFFFFFFF) << 32) | (k >> 32)
    src = np.empty(2 * count, dtype=np.int32)
    dst = np.empty(2 * count, dtype=np.int32)
    edge = np.empty(2 * count, dtype=np.int64)
    way = np.empty(2 * count, dtype=np.int32)
    i = j = 0
    for k in range(2 * count):
        if j >= count or (i < count and keys[i] <= back[j]):
            key, e, d = keys[i], i, 0
            i += 1
        else:
            key, e, d = back[j], order[j], 1
            j += 1
        src[k], dst[k], edge[k], way[k] = key >> 32, key & 0xFFFFFFFF, e, d
    return src, dst, edge, way


@nb.njit(cache=True)
def _ranks(keys, update_keys):
    """Each window edge's rank: 1 + its index among the update edges, or 0 (a merge)."""
    rank = np.zeros(len(keys), dtype=np.int32)
    j = 0
    for i in range(len(keys)):
        while j < len(update_keys) and update_keys[j] < keys[i]:
            j += 1
        if j < len(update_keys) and update_keys[j] == keys[i]:
            rank[i] = j + 1
    return rank


@nb.njit(cache=True)
def _fill(keys, times, labels, vertex_label, update_keys, update_times, other_keys,
          other_times, check_other, structural, heads, blob, types, windows, limits, out_at,
          directed):
    src, dst, edge, way = _entries(keys)
    rank = _ranks(keys, update_keys)
    entries = len(src)
    nverts = 0
    for k in range(entries):
        if k == 0 or src[k] != src[k - 1]:
            nverts += 1
    nup, nq = len(update_keys), len(windows)
    sizes = np.array([nverts + 1, entries, nup, nq + 1, nq, nq, nq, len(other_keys),
                      len(other_times), len(structural), 1 + 2 * nq,
                      nverts, entries, entries, entries, entries, nup, nup, nup, nup, nup,
                      len(heads), len(blob), out_at[nq]], dtype=np.int64)
    offsets = np.empty(len(sizes), dtype=np.int64)
    at = 8 * HEAD
    for a in range(len(sizes)):
        at = (at + 7) // 8 * 8 if a == _OUT else at      # rows start on a word
        offsets[a] = at
        at += sizes[a] * (8 if a < _WIDE else 4)
    buf = np.zeros(offsets[_OUT] // 8, dtype=np.int64)
    w32 = buf.view(np.int32)
    buf[0], buf[1], buf[2] = nverts, nup, nq
    buf[3], buf[4], buf[5] = len(other_keys), len(structural), 1 if check_other else 0
    buf[6] = (at + 7) // 8
    for a in range(len(sizes)):
        buf[len(COUNTS) + a] = offsets[a]
    vstart, etime = offsets[_VSTART] // 8, offsets[_ETIME] // 8
    verts, nbr, nlab = offsets[_VERTS] // 4, offsets[_NBR] // 4, offsets[_NLAB] // 4
    elab, erank = offsets[_ELAB] // 4, offsets[_RANK] // 4
    v = -1
    for k in range(entries):
        if k == 0 or src[k] != src[k - 1]:
            v += 1
            w32[verts + v] = src[k]
            buf[vstart + v] = k
        e = edge[k]
        w32[nbr + k] = dst[k]
        # The list key (gpu/graph/lists.py list_key): directed, 2 label + the direction.
        w32[nlab + k] = 2 * vertex_label[dst[k]] + way[k] if directed else vertex_label[dst[k]]
        w32[elab + k] = labels[e]
        buf[etime + k] = times[e]
        w32[erank + k] = rank[e]
    buf[vstart + nverts] = entries
    # The update edges: ends, their labels, the edge's label in the window or -1 (the
    # expired edges a phase leaves out), and times.
    first, us, vs = offsets[_FIRST_TIME] // 8, offsets[_US] // 4, offsets[_VS] // 4
    ulab, vlab = offsets[_U_LABEL] // 4, offsets[_V_LABEL] // 4
    rlab = offsets[_ROOT_ELAB] // 4
    j = 0
    for i in range(nup):
        key = update_keys[i]
        u, x = key >> 32, key & 0xFFFFFFFF
        w32[us + i], w32[vs + i] = u, x
        w32[ulab + i], w32[vlab + i] = vertex_label[u], vertex_label[x]
        while j < len(keys) and keys[j] < key:
            j += 1
        w32[rlab + i] = labels[j] if j < len(keys) and keys[j] == key else -1
        buf[first + i] = update_times[i]
    # The queries: each one's triples start at its types times the update edges.
    start = offsets[_TASK_START] // 8
    buf[start] = 0
    for q in range(nq):
        buf[start + q + 1] = buf[start + q] + nup * types[q]
        buf[offsets[_WINDOWS] // 8 + q] = windows[q]
        buf[offsets[_LIMITS] // 8 + q] = limits[q]
        buf[offsets[_OUT_AT] // 8 + q] = out_at[q]
    for i in range(len(other_keys)):
        buf[offsets[_OTHER_KEYS] // 8 + i] = other_keys[i]
    for i in range(len(other_times)):
        buf[offsets[_OTHER_TIMES] // 8 + i] = other_times[i]
    for i in range(len(structural)):
        buf[offsets[_STRUCTURAL] // 8 + i] = structural[i]
    for i in range(len(heads)):
        w32[offsets[_HEADS] // 4 + i] = heads[i]
    for i in range(len(blob)):
        w32[offsets[_BLOB] // 4 + i] = blob[i]
    return buf
