"""gpu/graph/times.py's TimeTable (edge key -> event time and edge label, a hash table of
NumPy arrays) against a dict, through growth, drops and the slots they leave; and
EdgeTimes on it."""
from __future__ import annotations

import numpy as np
import pytest

from gpu.cpu import interpreted
from gpu.graph import times as times_module
from gpu.graph.times import GONE, NO_EDGE_LABEL, EdgeTimes, ExpiryIndex, TimeTable
from gpu.io.records import NO_TIME


def _keys(rng, n: int, span: int) -> np.ndarray:
    return (rng.integers(0, span, n).astype(np.int64) << 32) | rng.integers(0, span, n)


@pytest.mark.parametrize("plain", [False, True], ids=["compiled", "plain-python"])
def test_random_sets_drops_and_gets_equal_a_dict(plain, monkeypatch):
    """Keys set again, dropped, set again into their tombstones, the table grown from 4
    slots; the kernels compiled, or run as plain Python as a first start runs them (where
    no multiplication may overflow: NumPy's scalars would warn, an error here)."""
    if plain:
        for name in ("_get_many", "_get_labeled", "_put_many", "_drop_many"):
            monkeypatch.setattr(times_module, name,
                                interpreted.twin(getattr(times_module, name)))
    rng = np.random.default_rng(3)
    table, want = TimeTable(4), {}
    reused = False
    for step in range(200):
        keys, times = _keys(rng, 12, 40), rng.integers(0, 10**12, 12)
        labels = rng.integers(0, 5, 12).astype(np.int32)
        capacity, tombstones = len(table.keys), table.gone
        table.set(keys, times, labels)
        # A set that did not rebuild the table and left fewer tombstones used them again.
        reused |= len(table.keys) == capacity and table.gone < tombstones
        want.update(zip(keys.tolist(), zip(times.tolist(), labels.tolist()), strict=True))
        dropped = _keys(rng, 8, 40) if step % 2 else keys[:6]    # some absent, some not
        table.drop(dropped)
        for key in dropped.tolist():
            want.pop(key, None)
        assert table.gone == int((table.keys == GONE).sum())
        asked = _keys(rng, 30, 40)
        expected = [want.get(k, (NO_TIME, NO_EDGE_LABEL)) for k in asked.tolist()]
        assert table.get(asked).tolist() == [t for t, _ in expected]
        at, labels = table.get_labeled(asked)
        assert list(zip(at.tolist(), labels.tolist(), strict=True)) == expected
        assert len(table) == len(want)
        assert 2 * (table.count + table.gone) <= len(table.keys)
    keys, times, labels = table.labeled_items()
    assert dict(zip(keys.tolist(), zip(times.tolist(), labels.tolist()), strict=True)) == want
    assert np.array_equal(table.items()[1], times)
    assert len(table.keys) > 4 and reused


def test_edge_times_keep_the_expiry_index_and_answer_as_before():
    times = EdgeTimes()
    keys = np.array([(1 << 32) | 2, (2 << 32) | 3, (3 << 32) | 4], dtype=np.int64)
    times.set(keys, np.array([10, 20, 30]), np.array([0, 1, 2]))
    assert times.get(int(keys[1])) == 20 and times.get((7 << 32) | 8) is None
    times.set(keys[1:2], np.array([25]), np.array([1]))  # a refresh: the old entry goes stale
    times.drop(keys[2:])
    taken, at = times.index.take_until(100)
    assert times.current(taken, at).tolist() == [k == keys[0] or (k == keys[1] and t == 25)
                                                 for k, t in zip(taken, at, strict=True)]
    assert sorted(times.items()) == [(int(keys[0]), 10), (int(keys[1]), 25)]
    assert len(times) == 2
    assert times.get_many(keys).tolist() == [10, 25, NO_TIME]
    assert times.table.get_labeled(keys)[1].tolist() == [0, 1, NO_EDGE_LABEL]


def test_between_finds_every_untaken_entry_in_range_across_runs():
    """Runs in and out of time order, some partly taken: between(lo, hi) is exactly the
    entries not taken with lo <= time <= hi (the runs it skips hold none)."""
    rng = np.random.default_rng(3)
    index = ExpiryIndex()
    entries = {}
    for run in range(40):
        base = run * 50 if run % 5 else int(rng.integers(0, 2000))     # now and then late
        times = base + rng.integers(0, 120, size=30)
        keys = run * 1000 + np.arange(30, dtype=np.int64)
        index.add(keys, times)
        entries.update(zip(keys.tolist(), times.tolist(), strict=True))
    taken, _ = index.take_until(400)
    for key in taken.tolist():
        del entries[key]
    for lo, hi in [(0, 3000), (390, 410), (401, 401), (1000, 1100), (-50, -1), (2500, 9000)]:
        want = sorted(k for k, t in entries.items() if lo <= t <= hi)
        assert sorted(index.between(lo, hi).tolist()) == want, (lo, hi)
