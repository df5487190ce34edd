"""The packed memory array against a sorted reference: NumPy here, CuPy on the device."""
from __future__ import annotations

import numpy as np
import pytest

from gpu.graph.pma import device_update
from gpu.graph.pma.array import PackedMemoryArray
from gpu.graph.pma.layout import PMAConfig, PMAUpdateError, edge_keys

TINY = PMAConfig(segment_size=2, min_segments=1)
SMALL = PMAConfig(segment_size=4, min_segments=2)


def _backends():
    yield pytest.param("numpy", id="numpy")
    yield pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)


@pytest.fixture(params=list(_backends()))
def xp(request):
    if request.param == "numpy":
        return np
    import cupy
    return cupy


def _keys(xp, pairs):
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return edge_keys(xp, xp.asarray(pairs[:, 0]), xp.asarray(pairs[:, 1]))


class Reference:
    """The edge set as a dict key -> value."""

    def __init__(self):
        self.edges: dict[int, int] = {}

    def arrays(self):
        keys = np.fromiter(self.edges, dtype=np.uint64, count=len(self.edges))
        vals = np.fromiter(self.edges.values(), dtype=np.int32, count=len(self.edges))
        return keys, vals


def _random_batch(rng, ref: Reference, n: int, inserts: int, deletes: int):
    stored = list(ref.edges)
    gone = rng.choice(len(stored), size=min(deletes, len(stored)), replace=False) \
        if stored else []
    dk = np.asarray([stored[i] for i in gone], dtype=np.uint64)
    new: dict[int, int] = {}
    tries = 0
    while len(new) < inserts and tries < 20 * inserts + 20:
        tries += 1
        u, v = rng.integers(0, n, size=2)
        if u == v:
            continue
        key = (int(u) << 32) | int(v)
        if key in ref.edges or key in new:
            continue
        new[key] = int(rng.integers(0, 7))
    ik = np.fromiter(new, dtype=np.uint64, count=len(new))
    iv = np.fromiter(new.values(), dtype=np.int32, count=len(new))
    return ik, iv, dk


def _apply(ref: Reference, ik, iv, dk):
    for k in dk.tolist():
        del ref.edges[k]
    for k, v in zip(ik.tolist(), iv.tolist()):
        ref.edges[k] = v


@pytest.mark.parametrize("config", [TINY, SMALL, PMAConfig()], ids=["s2", "s4", "default"])
def test_random_batches_match_a_sorted_reference(xp, config):
    rng = np.random.default_rng(7)
    n = 60
    pma = PackedMemoryArray(xp, num_vertices=n, config=config)
    ref = Reference()
    rebuilt = levels = 0
    for step in range(400):
        phase = step // 100          # grow, churn, shrink, regrow
        inserts = int(rng.integers(0, [30, 15, 2, 40][phase]))
        deletes = int(rng.integers(0, [3, 15, 30, 5][phase]))
        ik, iv, dk = _random_batch(rng, ref, n, inserts, deletes)
        stats = pma.apply(xp.asarray(ik), xp.asarray(iv), xp.asarray(dk))
        _apply(ref, ik, iv, dk)
        keys, vals = ref.arrays()
        pma.check(keys, vals)
        rebuilt += stats.rebuilt
        levels = max(levels, stats.levels)
    assert rebuilt >= 2, "growth and shrink both rebuild"
    assert levels >= 1, "some batch rebalanced above the leaves"


def test_skewed_batches_into_one_vertex(xp):
    """Every insert lands in one region: windows overflow up to the root."""
    pma = PackedMemoryArray(xp, num_vertices=3001, config=SMALL)
    ref = Reference()
    rng = np.random.default_rng(1)
    for start in range(1, 3001, 300):
        targets = np.arange(start, start + 300)
        ik = (np.uint64(0) << np.uint64(32)) | targets.astype(np.uint64)
        iv = rng.integers(0, 5, size=ik.size).astype(np.int32)
        pma.apply(xp.asarray(ik), xp.asarray(iv), xp.zeros(0, dtype=np.uint64))
        _apply(ref, ik, iv, np.zeros(0, dtype=np.uint64))
        pma.check(*ref.arrays())
    dst, vals = (a.get() if hasattr(a, "get") else a for a in pma.neighbours(0))
    assert np.array_equal(dst, np.arange(1, 3001))
    assert vals.tolist() == [ref.edges[k] for k in range(1, 3001)]


def test_load_then_update_and_read_neighbours(xp):
    rng = np.random.default_rng(3)
    n = 500
    src = rng.integers(0, n, 4000)
    dst = rng.integers(0, n, 4000)
    keep = src != dst
    keys = np.unique((src[keep].astype(np.uint64) << np.uint64(32)) | dst[keep].astype(np.uint64))
    vals = rng.integers(0, 9, keys.size).astype(np.int32)
    pma = PackedMemoryArray(xp, config=SMALL)
    pma.load(xp.asarray(keys), xp.asarray(vals))
    assert pma.num_vertices == n or pma.num_vertices == int(max(src.max(), dst.max())) + 1
    pma.check(keys, vals)
    ref = Reference()
    ref.edges = dict(zip(keys.tolist(), vals.tolist()))
    assert 0.6 <= pma.density() <= 0.85
    for _ in range(30):
        ik, iv, dk = _random_batch(rng, ref, n, 80, 60)
        pma.apply(xp.asarray(ik), xp.asarray(iv), xp.asarray(dk))
        _apply(ref, ik, iv, dk)
    pma.check(*ref.arrays())
    for u in (0, 17, 499):
        got, got_vals = (a.get() if hasattr(a, "get") else a for a in pma.neighbours(u))
        want = sorted(k for k in ref.edges if k >> 32 == u)
        assert got.tolist() == [k & 0xFFFFFFFF for k in want]
        assert got_vals.tolist() == [ref.edges[k] for k in want]
    # out_edges of several vertices at once (a vertex's edges in key order, gaps skipped).
    vertices = [499, 0, 17, 250]
    src, keys, vals = (a.get() if hasattr(a, "get") else a
                       for a in pma.out_edges(xp.asarray(vertices)))
    want = [k for u in vertices for k in sorted(k for k in ref.edges if k >> 32 == u)]
    assert keys.tolist() == want
    assert src.tolist() == [k >> 32 for k in want]
    assert vals.tolist() == [ref.edges[k] for k in want]


def test_found_slots_and_missing_keys(xp):
    pma = PackedMemoryArray(xp, num_vertices=5, config=TINY)
    pma.apply(_keys(xp, [(0, 1), (1, 0), (3, 4)]), xp.asarray([5, 5, 6], dtype=np.int32),
              xp.zeros(0, dtype=np.uint64))
    slots = pma.find(_keys(xp, [(0, 1), (3, 4), (4, 3), (2, 1)]))
    slots = slots.get() if hasattr(slots, "get") else slots
    assert (slots[:2] >= 0).all() and (slots[2:] == -1).all()
    vals = pma.vals.get() if hasattr(pma.vals, "get") else pma.vals
    assert vals[slots[1]] == 6


@pytest.mark.parametrize("batch, message", [
    (([(0, 1), (0, 1)], [], []), "0 -> 1 appears twice among the inserts"),
    (([(2, 2)], [], []), "2 -> 2 is a loop"),
    (([(0, 9)], [], []), "0 -> 9 names a vertex beyond the 5 vertices"),
    (([(1, 2)], [], []), "1 -> 2 is already stored"),
    (([], [], [(3, 1)]), "3 -> 1 is not stored"),
    (([(3, 1)], [], [(3, 1)]), "3 -> 1 is both inserted and deleted"),
    (([], [], [(1, 2), (1, 2)]), "1 -> 2 appears twice among the deletes"),
    # Several problems: the first in the order above is reported.
    (([(2, 2), (1, 2)], [], [(3, 1), (3, 1)]), "2 -> 2 is a loop"),
    (([(1, 2)], [], [(3, 1)]), "1 -> 2 is already stored"),
])
def test_refused_batches_change_nothing(xp, batch, message):
    pma = PackedMemoryArray(xp, num_vertices=5, config=TINY)
    pma.apply(_keys(xp, [(1, 2), (2, 1), (0, 4)]), xp.asarray([1, 1, 2], dtype=np.int32),
              xp.zeros(0, dtype=np.uint64))
    before = [a.copy() for a in (pma.keys, pma.vals, pma.cnt, pma.row, pma.deg)]
    ins, _, dels = batch
    with pytest.raises(PMAUpdateError, match=message):
        pma.apply(_keys(xp, ins), xp.zeros(len(ins), dtype=np.int32), _keys(xp, dels))
    for old, new in zip(before, (pma.keys, pma.vals, pma.cnt, pma.row, pma.deg)):
        assert bool((old == new).all())
    pma.check(_keys(np, [(1, 2), (2, 1), (0, 4)]), [1, 1, 2])


@pytest.mark.parametrize("tunables, message", [
    ({"block_window": -1}, "block_window must be 0..1024, got -1"),
    ({"block_window": 2048}, "block_window must be 0..1024, got 2048"),
    ({"merge_chunk": 0}, "merge_chunk must be 1..256, got 0"),
    ({"merge_chunk": 512}, "merge_chunk must be 1..256, got 512"),
])
def test_config_refuses_kernel_tunables_out_of_range(tunables, message):
    with pytest.raises(ValueError, match=message):
        PMAConfig(**tunables)


def test_empty_structure_and_emptying_it(xp):
    pma = PackedMemoryArray(xp, num_vertices=4, config=TINY)
    pma.check(np.zeros(0, dtype=np.uint64))
    keys = _keys(xp, [(0, 1), (1, 0), (2, 3), (3, 2)])
    pma.apply(keys, xp.zeros(4, dtype=np.int32), xp.zeros(0, dtype=np.uint64))
    pma.apply(xp.zeros(0, dtype=np.uint64), xp.zeros(0, dtype=np.int32), keys)
    pma.check(np.zeros(0, dtype=np.uint64))
    assert pma.num_edges == 0


def test_memory_per_edge_stays_bounded(xp):
    """Between the root thresholds, bytes per stored edge stay under the 24-byte target
    once the graph is large enough for the rows to be a small share."""
    rng = np.random.default_rng(5)
    n = 2000
    pma = PackedMemoryArray(xp, num_vertices=n)
    ref = Reference()
    worst = 0.0
    for step in range(60):
        ik, iv, dk = _random_batch(rng, ref, n, 1500, 300 if step > 20 else 0)
        pma.apply(xp.asarray(ik), xp.asarray(iv), xp.asarray(dk))
        _apply(ref, ik, iv, dk)
        if pma.num_edges > 20000:
            slots_bytes = (pma.keys.nbytes + pma.vals.nbytes + pma.cnt.nbytes) / pma.num_edges
            worst = max(worst, slots_bytes)
    pma.check(*ref.arrays())
    assert worst <= 12.25 / 0.5 + 1e-9


def test_a_one_edge_batch_rewrites_a_few_segments(xp):
    """Per-batch cost follows the batch: one insert and one delete among 60,000 edges
    rewrite their leaf windows (or a few levels above them), not the array."""
    rng = np.random.default_rng(11)
    n = 4000
    src, dst = rng.integers(0, n, 70000), rng.integers(0, n, 70000)
    keys = np.unique((src.astype(np.uint64) << np.uint64(32)) | dst.astype(np.uint64))
    keys = keys[(keys >> np.uint64(32)) != (keys & np.uint64(0xFFFFFFFF))][:60000]
    pma = PackedMemoryArray(xp, num_vertices=n)
    pma.load(xp.asarray(keys), xp.zeros(keys.size, dtype=np.int32))
    ref = Reference()
    ref.edges = dict.fromkeys(keys.tolist(), 0)
    worst = 0
    for _ in range(50):
        ik, iv, dk = _random_batch(rng, ref, n, 1, 1)
        stats = pma.apply(xp.asarray(ik), xp.asarray(iv), xp.asarray(dk))
        _apply(ref, ik, iv, dk)
        assert not stats.rebuilt
        worst = max(worst, stats.slots)
    pma.check(*ref.arrays())
    assert worst <= 16 * pma.S < pma.capacity // 50, worst


@pytest.mark.parametrize("corrupt", ["gap", "row", "count", "degree"])
def test_check_catches_a_corrupted_structure(corrupt):
    pma = PackedMemoryArray(np, num_vertices=6, config=SMALL)
    keys = _keys(np, [(0, 1), (1, 0), (1, 2), (2, 1), (4, 5), (5, 4)])
    pma.apply(keys, np.zeros(6, dtype=np.int32), np.zeros(0, dtype=np.uint64))
    pma.check(keys)
    gap = int(np.flatnonzero(~pma.real_mask())[-1])
    if corrupt == "gap":
        pma.keys[gap] = pma.keys[gap] + np.uint64(1)
    elif corrupt == "row":
        pma.row[3] += 1
    elif corrupt == "count":
        pma.cnt[gap // pma.S] += 1
    else:
        pma.deg[2] += 1
    with pytest.raises(AssertionError):
        pma.check(keys)


def _kernels_and_array_path(n: int, **tunables) -> list:
    """A PMA on the CUDA kernels and one on the generic array path, alike otherwise."""
    import cupy
    return [PackedMemoryArray(cupy, num_vertices=n, config=PMAConfig(kernels=kernels, **tunables))
            for kernels in (True, False)]


def _assert_same_state(pmas) -> None:
    """The kernels left exactly the array path's layout, rows, degrees and stats."""
    kernel, array = pmas
    for name in ("keys", "cnt", "row", "deg"):
        assert bool((getattr(kernel, name) == getattr(array, name)).all()), name
    # A gap's value is not part of the state (readers skip gaps by count).
    real = kernel.real_mask()
    assert bool((kernel.vals[real] == array.vals[real]).all()), "vals"
    assert kernel.num_edges == array.num_edges
    for name in ("levels", "windows", "slots", "per_level", "rebuilt"):
        assert getattr(kernel.stats, name) == getattr(array.stats, name), name


def _apply_both(pmas, ref: Reference, ik, iv, dk, unchecked: bool = False) -> None:
    """Apply a batch to both; with `unchecked`, the kernels' PMA takes it as the engine
    gives it (no checks; sorted on the host when small: the one-launch start)."""
    import cupy
    for pma in pmas:
        if unchecked and pma.config.kernels:
            order = np.argsort(ik)
            pma.apply(cupy.asarray(ik[order]), cupy.asarray(iv[order]),
                      cupy.asarray(np.sort(dk)), check=False, presorted=True)
        else:
            pma.apply(cupy.asarray(ik), cupy.asarray(iv), cupy.asarray(dk))
    _apply(ref, ik, iv, dk)
    _assert_same_state(pmas)


# (segment size, block_window, merge_chunk): the defaults, then tunables so small that
# windows above the leaves (or all of them) take the multi-block path, in many chunks.
KERNEL_TUNABLES = [(2, 1024, 256), (16, 1024, 256), (32, 1024, 256), (2, 8, 3), (4, 0, 1),
                   (16, 64, 7), (32, 64, 5), (64, 1024, 256), (64, 0, 13)]


@pytest.mark.gpu
@pytest.mark.parametrize("segment_size, block_window, merge_chunk", KERNEL_TUNABLES)
def test_kernels_equal_the_array_path(segment_size, block_window, merge_chunk):
    """The CUDA kernels (leaf merges, window merges in one block or several, rows) leave
    exactly the layout the generic array path leaves; every third batch comes unchecked
    and sorted, as the engine gives it (the one-launch start of a small batch)."""
    rng = np.random.default_rng(segment_size + block_window + merge_chunk)
    n = 300
    pmas = _kernels_and_array_path(n, segment_size=segment_size, block_window=block_window,
                                   merge_chunk=merge_chunk)
    ref = Reference()
    for step in range(150):
        ik, iv, dk = _random_batch(rng, ref, n, int(rng.integers(0, 200)),
                                   int(rng.integers(0, 120 if step > 30 else 5)))
        _apply_both(pmas, ref, ik, iv, dk, unchecked=step % 3 == 0)
        if step % 10 == 0:
            for pma in pmas:
                pma.check(*ref.arrays())


@pytest.mark.gpu
@pytest.mark.parametrize("segment_size", [2, 4, 16, 32])
def test_small_batches_in_one_launch_equal_the_array_path(segment_size):
    """The engine's small batches (unchecked, sorted): update_small merges those whose
    leaves all take them in one launch, the others (a leaf overflows, underflows or is
    left empty) change nothing there and take the level-by-level path; both leave the
    array path's layout, and both happen here."""
    rng = np.random.default_rng(segment_size)
    n = 400
    pmas = _kernels_and_array_path(n, segment_size=segment_size, min_segments=2)
    ref = Reference()
    _apply_both(pmas, ref, *_random_batch(rng, ref, n, 1500, 0))
    one_launch = levels = 0
    for step in range(300):
        phase = step // 100          # growing, churning, shrinking
        ik, iv, dk = _random_batch(rng, ref, n, int(rng.integers(0, [9, 5, 2][phase])),
                                   int(rng.integers(0, [2, 5, 12][phase])))
        if ik.size + dk.size == 0:
            continue
        _apply_both(pmas, ref, ik, iv, dk, unchecked=True)
        one_launch += pmas[0].stats.one_launch
        levels += not pmas[0].stats.one_launch
    pmas[0].check(*ref.arrays())
    assert one_launch >= 10 and levels >= 5, (one_launch, levels)


@pytest.mark.gpu
@pytest.mark.parametrize("start", ["checked", "small", "located"])
@pytest.mark.parametrize("segment_size, block_window, merge_chunk",
                         [(2, 1024, 256), (2, 8, 3), (4, 0, 1), (32, 1024, 256)])
def test_kernels_through_growth_and_shrinking(monkeypatch, segment_size, block_window,
                                              merge_chunk, start):
    """Growth, churn, shrinking and regrowth on a nearly empty array: rebuilds, the root
    merged, segments left empty (the gap repair) on both paths alike.  Unchecked, the
    kernels' side takes batches as the engine gives them: `small`, each in update_small's
    or locate_small's one launch; `located`, past a SMALL_BATCH of 4, in locate_batch's."""
    if start == "located":
        monkeypatch.setattr(device_update, "SMALL_BATCH", 4)
    unchecked = start != "checked"
    rng = np.random.default_rng(17)
    n = 60
    pmas = _kernels_and_array_path(n, segment_size=segment_size, block_window=block_window,
                                   merge_chunk=merge_chunk, min_segments=1)
    ref = Reference()
    rebuilt = fixups = 0
    for step in range(200):
        phase = step // 50
        ik, iv, dk = _random_batch(rng, ref, n, int(rng.integers(0, [30, 15, 2, 40][phase])),
                                   int(rng.integers(0, [3, 15, 30, 5][phase])))
        _apply_both(pmas, ref, ik, iv, dk, unchecked)
        rebuilt += pmas[0].stats.rebuilt
        fixups += pmas[0].stats.fixup
    pmas[0].check(*ref.arrays())
    assert rebuilt >= 2 and fixups >= 1


@pytest.mark.gpu
@pytest.mark.parametrize("prefix_counts_above", [1, device_update.PREFIX_COUNTS_ABOVE])
@pytest.mark.parametrize("segment_size, block_window, merge_chunk",
                         [(4, 16, 5), (32, 1024, 256), (32, 0, 256)])
@pytest.mark.parametrize("located", [False, True], ids=["checked", "located"])
def test_kernels_on_skewed_batches_up_to_the_root(monkeypatch, prefix_counts_above,
                                                  segment_size, block_window, merge_chunk,
                                                  located):
    """Batches into one vertex overflow windows up to the root (merged, not rebuilt, when
    the array as a whole has room), then deletes empty the region again; with the counts
    of large windows from a prefix sum or from loops; `located`, unchecked and started in
    locate_batch's one launch (past a SMALL_BATCH of 4), as the engine gives them."""
    monkeypatch.setattr(device_update, "PREFIX_COUNTS_ABOVE", prefix_counts_above)
    if located:
        monkeypatch.setattr(device_update, "SMALL_BATCH", 4)
    rng = np.random.default_rng(1)
    pmas = _kernels_and_array_path(3001, segment_size=segment_size, block_window=block_window,
                                   merge_chunk=merge_chunk, min_segments=2)
    ref = Reference()
    none = np.zeros(0, dtype=np.uint64)
    levels = set()
    for start in range(1, 3001, 300):
        ik = np.arange(start, start + 300, dtype=np.uint64)      # 0 -> start..start+299
        _apply_both(pmas, ref, ik, rng.integers(0, 5, ik.size).astype(np.int32), none,
                    located)
        levels.add(pmas[0].stats.levels)
    for start in range(1, 2800, 400):
        _apply_both(pmas, ref, none, np.zeros(0, dtype=np.int32),
                    np.arange(start, start + 350, dtype=np.uint64), located)
        levels.add(pmas[0].stats.levels)
    pmas[0].check(*ref.arrays())
    assert max(levels) >= 4, levels
