"""gpu/cuda/window_layout.py's phase buffer (on the CPU: it is Numba, not CUDA), read back
field by field and compared with the layout built the obvious way: every entry of every
edge in both directions, sorted by (vertex, neighbour, direction), on undirected graphs
and on directed ones (list keys with the arc's direction)."""
import random

import numpy as np
import pytest

from gpu.cuda.window_layout import ARRAYS, COUNTS, HEAD, phase_buffer

_WIDE = {"vstart", "etime", "first_time", "task_start", "windows", "limits", "out_at",
         "other_keys", "other_times", "structural", "counters"}


def _read(buf: np.ndarray) -> dict:
    """The buffer's counts and arrays by name (each array runs to the next one's offset),
    but `out`, which only the device's copy holds (its offset: "out")."""
    raw = buf.view(np.uint8)
    fields = {name: int(buf[i]) for i, name in enumerate(COUNTS)}
    offsets = [int(buf[len(COUNTS) + i]) for i in range(len(ARRAYS))]
    assert offsets[0] == 8 * HEAD and offsets[-1] == raw.shape[0] and ARRAYS[-1] == "out"
    fields["out"] = offsets[-1]
    for i, name in enumerate(ARRAYS[:-1]):
        dtype = np.int64 if name in _WIDE else np.int32
        assert offsets[i] % np.dtype(dtype).itemsize == 0, name
        fields[name] = raw[offsets[i]:offsets[i + 1]].view(dtype)
    return fields


def _case(rng: random.Random, vertices: int, edges: int, directed: bool = False):
    # Directed: arcs as drawn, a pair's two arcs often both present.
    pairs = {tuple(rng.sample(range(vertices), 2)) if directed else
             tuple(sorted(rng.sample(range(vertices), 2))) for _ in range(edges)}
    keys = np.array(sorted((u << 32) | v for u, v in pairs), dtype=np.int64)
    times = np.array([rng.randint(-5, 50) for _ in keys], dtype=np.int64)
    labels = np.array([rng.randint(0, 3) for _ in keys], dtype=np.int32)
    vertex_label = np.array([rng.randint(0, 4) for _ in range(vertices)], dtype=np.int64)
    # Update edges: some of the window's, and some it lacks (expired: label -1).
    absent = {(u << 32) | v for u, v in (tuple(sorted(rng.sample(range(vertices), 2)))
                                           for _ in range(3))} - set(keys.tolist())
    if directed:
        absent |= {(v << 32) | u for u, v in pairs} - set(keys.tolist())
    chosen = rng.sample(keys.tolist(), min(len(keys), rng.randint(0, 6)))
    updates = np.array(sorted(set(chosen) | absent), dtype=np.int64)
    return keys, times, labels, vertex_label, updates


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_the_buffer_holds_the_obvious_layout(seed, directed):
    rng = random.Random(seed)
    keys, times, labels, vertex_label, updates = _case(rng, rng.randint(2, 30),
                                                      rng.randint(0, 60), directed)
    update_times = np.arange(len(updates), dtype=np.int64) * 7
    other_keys = np.sort(rng.sample(keys.tolist(), min(2, len(keys)))).astype(np.int64)
    other_times = np.arange(len(other_keys), dtype=np.int64) + 100
    structural = np.array(sorted(rng.sample(updates.tolist(), min(1, len(updates)))),
                          dtype=np.int64)
    heads = np.array([3, 1, 4, 1, 5], dtype=np.int32)
    blob = np.array([9, 2, 6], dtype=np.int32)
    types, windows = np.array([4, 2]), np.array([10, 20])
    limits, out_at = np.array([0, 5]), np.array([0, 0, 5 * 3])
    got = _read(phase_buffer(keys, times, labels, vertex_label, updates, update_times,
                             other_keys, other_times, True, structural, heads, blob,
                             types, windows, limits, out_at, directed))

    # The obvious layout: each edge's entries (direction d: 0 at the key's first end, 1 at
    # its second), sorted by (vertex, neighbour, direction).
    rank = {int(k): i + 1 for i, k in enumerate(updates)}
    full = sorted((int(k) >> 32 if d == 0 else int(k) & 0xFFFFFFFF,
                   int(k) & 0xFFFFFFFF if d == 0 else int(k) >> 32, d, e)
                  for e, k in enumerate(keys) for d in (0, 1))
    entries = [(s, w, e) for s, w, _, e in full]
    verts = sorted({s for s, _, _ in entries})
    assert got["nverts"] == len(verts) and got["verts"].tolist() == verts
    assert got["vstart"].tolist() == [
        next(i for i, (s, _, _) in enumerate(entries) if s == x) for x in verts] + \
        [len(entries)]
    assert got["nbr"].tolist() == [w for _, w, _ in entries]
    assert got["nlab"].tolist() == [2 * vertex_label[w] + d if directed else vertex_label[w]
                                    for _, w, d, _ in full]
    assert got["elab"].tolist() == [labels[e] for _, _, e in entries]
    assert got["etime"].tolist() == [times[e] for _, _, e in entries]
    assert got["rank"].tolist() == [rank.get(int(keys[e]), 0) for _, _, e in entries]

    label_of = {int(k): int(x) for k, x in zip(keys, labels)}
    assert got["nupdates"] == len(updates)
    assert got["us"].tolist() == (updates >> 32).tolist()
    assert got["vs"].tolist() == (updates & 0xFFFFFFFF).tolist()
    assert got["u_label"].tolist() == vertex_label[updates >> 32].tolist()
    assert got["v_label"].tolist() == vertex_label[updates & 0xFFFFFFFF].tolist()
    assert got["root_elab"].tolist() == [label_of.get(int(k), -1) for k in updates]
    assert got["first_time"].tolist() == update_times.tolist()

    assert got["queries"] == 2 and got["check_other"] == 1
    assert got["task_start"].tolist() == [0, 4 * len(updates), 6 * len(updates)]
    assert got["windows"].tolist() == [10, 20] and got["limits"].tolist() == [0, 5]
    assert got["out_at"].tolist() == [0, 0]
    assert got["counters"].tolist() == [0] * 5
    assert got["words"] == (got["out"] + 4 * 15 + 7) // 8
    assert got["nother"] == len(other_keys)
    assert got["other_keys"].tolist() == other_keys.tolist()
    assert got["other_times"].tolist() == other_times.tolist()
    assert got["nstructural"] == len(structural)
    assert got["structural"].tolist() == structural.tolist()
    # The 4-byte arrays may end with one int32 of padding before the rows' word.
    assert got["heads"].tolist() == heads.tolist()
    assert got["blob"].tolist()[:3] == blob.tolist() and len(got["blob"]) in (3, 4)


def test_an_empty_window_has_no_vertices():
    got = _read(phase_buffer(np.empty(0, np.int64), np.empty(0, np.int64),
                             np.empty(0, np.int32), np.zeros(3, np.int64),
                             np.array([1 << 32 | 2]), np.array([5]), np.empty(0, np.int64),
                             np.empty(0, np.int64), False, np.empty(0, np.int64),
                             np.zeros(0, np.int32), np.zeros(0, np.int32), np.array([2]),
                             np.array([1]), np.array([0]), np.array([0, 0])))
    assert got["nverts"] == 0 and got["vstart"].tolist() == [0]
    assert got["root_elab"].tolist() == [-1] and got["check_other"] == 0
    assert got["counters"].tolist() == [0] * 3 and got["words"] == got["out"] // 8
