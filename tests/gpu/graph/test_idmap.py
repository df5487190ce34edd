"""IdMap (open addressing with tombstones) against a dict."""
from __future__ import annotations

import random

import numpy as np
import pytest

from gpu.graph.idmap import EMPTY, TOMBSTONE, IdMap

BIG = 2**63 - 1


def ids(xs) -> np.ndarray:
    return np.asarray(list(xs), dtype=np.int64)


def slots(xs) -> np.ndarray:
    return np.asarray(list(xs), dtype=np.int32)


def assert_same(m: IdMap, ref: dict[int, int], probes) -> None:
    assert len(m) == len(ref)
    probes = list(probes)
    got = m.lookup(ids(probes)).tolist()
    assert got == [ref.get(x, -1) for x in probes]
    # table hygiene: live keys are exactly the dict, load stays at most half
    keys = m._keys
    live = keys[keys >= 0]
    assert sorted(live.tolist()) == sorted(ref)
    assert set(np.unique(keys[keys < 0]).tolist()) <= {EMPTY, TOMBSTONE}
    assert 2 * (keys >= 0).sum() + 2 * (keys == TOMBSTONE).sum() <= keys.shape[0]
    assert m._dead == int((keys == TOMBSTONE).sum())
    assert (keys.shape[0] & (keys.shape[0] - 1)) == 0


def draw_id(rng: random.Random) -> int:
    return rng.choice([rng.randrange(64), BIG - rng.randrange(64), rng.randrange(2**63)])


@pytest.mark.parametrize("seed", range(3))
def test_random_operations_match_dict(seed):
    rng = random.Random(seed)
    m, ref = IdMap(2), {}
    universe: set[int] = {0, 1, BIG, BIG - 1}
    for _ in range(400):
        op = rng.random()
        if op < 0.5:
            new = []
            for _ in range(rng.randint(0, 12)):
                x = draw_id(rng)
                if x not in ref and x not in new:
                    new.append(x)
            vals = [rng.randrange(2**31) for _ in new]
            m.insert(ids(new), slots(vals))
            ref.update(zip(new, vals))
            universe.update(new)
        elif op < 0.85:
            # delete some present ids, some absent ones, one repeated
            present = rng.sample(sorted(ref), min(len(ref), rng.randint(0, 10)))
            absent = [draw_id(rng) for _ in range(3)]
            absent = [x for x in absent if x not in ref]
            batch = present + absent + present[:1]
            m.delete(ids(batch))
            for x in present:
                del ref[x]
            universe.update(absent)
        probes = list(universe) + [draw_id(rng) for _ in range(5)]
        assert_same(m, ref, probes)


def test_extremes_and_zero():
    m = IdMap(2)
    m.insert(ids([0, BIG, 1, BIG - 1]), slots([5, 6, 7, 8]))
    assert m.lookup(ids([0, BIG, 1, BIG - 1, 2, BIG - 2])).tolist() == [5, 6, 7, 8, -1, -1]
    m.delete(ids([BIG, 0]))
    assert m.lookup(ids([0, BIG, 1, BIG - 1])).tolist() == [-1, -1, 7, 8]
    m.insert(ids([BIG]), slots([9]))
    assert m.lookup(ids([0, BIG])).tolist() == [-1, 9]


def test_growth_from_capacity_two():
    m = IdMap(2)
    assert m._keys.shape[0] == 2
    ref = {}
    for i in range(200):
        x = i * 7919 if i % 2 else BIG - i
        m.insert(ids([x]), slots([i]))
        ref[x] = i
        assert_same(m, ref, list(ref) + [x + 1 if x < BIG else 3])
    assert m._keys.shape[0] >= 512


def test_many_deletes_then_reinserts_reuse_tombstones():
    m, ref = IdMap(2), {}
    rng = random.Random(3)
    base = [BIG - i for i in range(100)] + list(range(100))
    m.insert(ids(base), slots(range(200)))
    ref.update(zip(base, range(200)))
    size = m._keys.shape[0]
    for rnd in range(30):
        gone = rng.sample(sorted(ref), 150)
        m.delete(ids(gone))
        for x in gone:
            del ref[x]
        assert_same(m, ref, base)
        # put them back with new slots (and in another order)
        rng.shuffle(gone)
        vals = [rng.randrange(1000) for _ in gone]
        m.insert(ids(gone), slots(vals))
        ref.update(zip(gone, vals))
        assert_same(m, ref, base + [200, BIG - 200])
    # the live count never exceeded 200, so tombstones are recycled, not piled up
    assert m._keys.shape[0] <= 4 * size


def test_empty_calls():
    m = IdMap(2)
    m.insert(ids([]), slots([]))
    m.delete(ids([]))
    assert m.lookup(ids([])).shape == (0,)
    assert m.lookup(ids([0, BIG])).tolist() == [-1, -1]
    assert len(m) == 0
    m.delete(ids([5]))  # absent: no-op
    assert len(m) == 0 and m._dead == 0


class _Copy:
    """A copy of an IdMap's table kept as DeviceIdMap keeps one (host arrays here)."""

    def __init__(self, m: IdMap) -> None:
        self.m, self.generation = m, None
        m.record_changes()

    def follow(self) -> None:
        changed = self.m.take_changes()
        keys, vals = self.m.table
        if self.generation != self.m.generation or self.keys.shape != keys.shape:
            self.keys, self.vals, self.generation = keys.copy(), vals.copy(), self.m.generation
            return
        self.keys[changed], self.vals[changed] = keys[changed], vals[changed]


@pytest.mark.parametrize("seed", range(4))
def test_a_copy_following_the_changed_positions_is_the_table(seed):
    """IdMap.take_changes names every position written since the last call, through
    inserts, deletes (tombstones), rehashes and many small changes between two calls."""
    rng = np.random.default_rng(seed)
    m = IdMap(4)
    copy = _Copy(m)
    live: set[int] = set()
    for step in range(300):
        if live and rng.random() < 0.4:
            gone = rng.choice(sorted(live), size=min(len(live), int(rng.integers(1, 4))),
                              replace=False)
            m.delete(np.array(gone, dtype=np.int64))
            live -= set(gone.tolist())
        else:
            new = [int(x) for x in rng.integers(0, 2**40, size=int(rng.integers(1, 5)))
                   if int(x) not in live]
            new = list(dict.fromkeys(new))
            m.insert(np.array(new, dtype=np.int64), np.arange(len(new), dtype=np.int32))
            live |= set(new)
        if rng.random() < 0.3 or step == 299:
            copy.follow()
            keys, vals = m.table
            assert np.array_equal(copy.keys, keys) and np.array_equal(copy.vals, vals), step
