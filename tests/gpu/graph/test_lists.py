"""DynamicGraph against a plain set/dict model, batch after batch.

The model keeps slots, labels, external ids and undirected edges in Python
containers; after every batch every observable of the graph (edges, list order,
inline neighbour labels, counts, positions, incident edges, the id map) must
equal what the model says, and ``check()`` must pass.  ``EngineConfig.tiny()``
makes vertex arrays, the pool and the id map grow from capacity 2-4, and
vertex deletions make enough garbage for compaction.
"""
from __future__ import annotations

import dataclasses
import itertools
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpu.config import EngineConfig
from gpu.io.records import LabeledGraph
from gpu.graph.lists import DynamicGraph

CONFIGS = {"tiny": EngineConfig.tiny, "default": EngineConfig}
BIG = 2**63 - 1


class Model:
    """Slots, labels, ids and edges in plain containers."""

    def __init__(self) -> None:
        self.label: dict[int, int] = {}      # alive slot -> label
        self.ext: dict[int, int] = {}        # alive slot -> external id
        self.free: list[int] = []            # freed slots, reused last-freed first
        self.num_slots = 0
        self.edges: dict[tuple[int, int], int] = {}  # (lo, hi) -> edge label
        self.gone: set[int] = set()          # external ids deleted and not re-added

    def next_slots(self, count: int) -> list[int]:
        free, out, fresh = list(self.free), [], self.num_slots
        for _ in range(count):
            if free:
                out.append(free.pop())
            else:
                out.append(fresh)
                fresh += 1
        return out

    def add(self, ids, labels) -> list[int]:
        slots = self.next_slots(len(ids))
        for s, x, lab in zip(slots, ids, labels):
            if self.free and self.free[-1] == s:
                self.free.pop()
            self.num_slots = max(self.num_slots, s + 1)
            self.label[s], self.ext[s] = lab, x
            self.gone.discard(x)
        return slots

    def delete_vertices(self, slots) -> None:
        for s in slots:
            assert not any(s in k for k in self.edges)
            self.gone.add(self.ext.pop(s))
            del self.label[s]
        self.free.extend(slots)

    def adj(self, u: int) -> list[int]:
        out = [b if a == u else a for (a, b) in self.edges if u in (a, b)]
        return sorted(out, key=lambda w: (self.label[w], w))

    def elabel(self, u: int, v: int) -> int:
        return self.edges[(min(u, v), max(u, v))]


def arr(xs, dtype=np.int32):
    return np.asarray(list(xs), dtype=dtype)


def edge_dict(us, vs, labels) -> dict[tuple[int, int], int]:
    us, vs, labels = us.tolist(), vs.tolist(), labels.tolist()
    assert all(u < v for u, v in zip(us, vs))
    out = {(u, v): lab for u, v, lab in zip(us, vs, labels)}
    assert len(out) == len(us), "an edge was listed twice"
    return out


def compare(g: DynamicGraph, m: Model, rng: random.Random) -> None:
    g.check()
    assert g.num_vertices == len(m.label)
    assert g.num_edges == len(m.edges)
    assert g.num_slots == m.num_slots
    assert edge_dict(*g.edges()) == m.edges

    degrees = {}
    for u in range(g.num_slots):
        if u not in m.label:
            assert not g.alive[u] and g.deg[u] == 0
            continue
        assert g.alive[u] and g.label[u] == m.label[u] and g.ext[u] == m.ext[u]
        want = m.adj(u)
        got = g.neighbors(u)
        assert got.tolist() == want, (u, got, want)
        s, d = g.start[u], g.deg[u]
        assert g.nlab[s: s + d].tolist() == [m.label[w] for w in want]
        assert g.elab[s: s + d].tolist() == [m.elabel(u, w) for w in want]
        degrees[u] = len(want)
    assert all(g.max_degree >= d for d in degrees.values())

    # blocks of live lists are disjoint and inside the pool; the pool top is exactly
    # live capacity plus garbage (the accounting that decides when to compact)
    blocks = sorted((int(g.start[u]), int(g.cap[u])) for u in m.label if g.cap[u] > 0)
    for (s0, c0), (s1, _) in itertools.pairwise(blocks):
        assert s0 + c0 <= s1, "two lists share pool slots"
    if blocks:
        assert blocks[-1][0] + blocks[-1][1] <= g.top <= g.nbr.shape[0]
    assert g.top == sum(c for _, c in blocks) + g.garbage

    # id map: every live id finds its slot, every deleted id is gone
    live_ids = list(m.ext.items())
    if live_ids:
        got = g.ids.lookup(arr((x for _, x in live_ids), np.int64))
        assert got.tolist() == [s for s, _ in live_ids]
    if m.gone:
        assert (g.ids.lookup(arr(m.gone, np.int64)) == -1).all()
    assert len(g.ids) == len(m.ext)

    # positions of present edges, both directions
    if m.edges:
        keys = list(m.edges)
        us = arr(k[0] for k in keys)
        vs = arr(k[1] for k in keys)
        for a, b in ((us, vs), (vs, us)):
            pos = g.edge_positions(a, b)
            assert (pos >= 0).all()
            assert np.array_equal(g.nbr[pos], b)
            assert g.elab[pos].tolist() == [m.edges[k] for k in keys]
    # ... and of absent pairs of live vertices
    alive = sorted(m.label)
    absent = [(u, v) for u, v in itertools.permutations(alive, 2)
              if (min(u, v), max(u, v)) not in m.edges]
    if absent:
        pos = g.edge_positions(arr(p[0] for p in absent), arr(p[1] for p in absent))
        assert (pos == -1).all()

    # incident edges of a random subset (with repeats)
    if alive:
        pick = [rng.choice(alive) for _ in range(rng.randint(1, 4))]
        want = {k: lab for k, lab in m.edges.items() if k[0] in pick or k[1] in pick}
        assert edge_dict(*g.incident_edges(arr(pick))) == want
    empty = g.incident_edges(arr([]))
    assert all(len(x) == 0 for x in empty)


def fresh_ext(rng: random.Random, m: Model, taken: set[int]) -> int:
    while True:
        if m.gone and rng.random() < 0.3:   # re-add a deleted id (tombstone in the id map)
            x = rng.choice(sorted(m.gone))
        else:
            x = rng.choice([rng.randrange(50), BIG - rng.randrange(50),
                            rng.randrange(2**62)])
        if x not in taken and x not in m.ext.values():
            return x


def random_batch(g: DynamicGraph, m: Model, rng: random.Random, target: int) -> None:
    """One engine-style batch: add vertices, delete edges, delete vertices, insert edges."""
    n = len(m.label)
    grow = n < target
    nadd = rng.randint(0, 6 if grow else 2)
    ids: list[int] = []
    for _ in range(nadd):
        ids.append(fresh_ext(rng, m, set(ids)))
    labels = [rng.randrange(4) for _ in ids]
    expect = m.next_slots(len(ids))
    assert g.reserve_slots(len(ids)).tolist() == expect
    slots = g.add_vertices(arr(ids, np.int64), arr(labels))
    assert slots.tolist() == expect
    m.add(ids, labels)

    alive = sorted(m.label)
    ndel_v = rng.randint(0, 1 if grow else max(1, len(alive) // 3))
    dv = rng.sample(alive, min(ndel_v, len(alive)))
    doomed = [k for k in m.edges if k[0] in dv or k[1] in dv]
    others = [k for k in m.edges if k not in doomed]
    doomed += rng.sample(others, min(len(others), rng.randint(0, 4 if grow else 12)))
    rng.shuffle(doomed)
    if doomed:   # either orientation: the graph must not care
        flips = [rng.random() < 0.5 for _ in doomed]
        g.delete_edges(arr(k[1] if f else k[0] for k, f in zip(doomed, flips)),
                       arr(k[0] if f else k[1] for k, f in zip(doomed, flips)))
    else:
        g.delete_edges(arr([]), arr([]))
    for k in doomed:
        del m.edges[k]
    g.delete_vertices(arr(dv))
    m.delete_vertices(dv)

    alive = sorted(m.label)
    new: dict[tuple[int, int], int] = {}
    if len(alive) >= 2:
        # sometimes a hub gets many edges at once, so its list relocates by more than 2x
        hub = rng.choice(alive) if rng.random() < 0.3 else None
        for _ in range(rng.randint(0, 30 if grow else 8)):
            u, v = rng.sample(alive, 2)
            if hub is not None and rng.random() < 0.5 and u != hub:
                v = hub
            k = (min(u, v), max(u, v))
            if k not in m.edges and k not in new:
                new[k] = rng.randrange(3)
    keys = list(new)
    flips = [rng.random() < 0.5 for _ in keys]
    g.insert_edges(arr(k[1] if f else k[0] for k, f in zip(keys, flips)),
                   arr(k[0] if f else k[1] for k, f in zip(keys, flips)),
                   arr(new[k] for k in keys))
    m.edges.update(new)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_random_batches_match_model(name):
    cfg = CONFIGS[name]()
    stats = {"compactions": 0, "relocations": 0}
    for seed in range(4):
        rng = random.Random(1000 * seed + len(name))
        g, m = DynamicGraph(cfg), Model()
        initial_pool, initial_vertices = g.nbr.shape[0], g.label.shape[0]
        for step in range(300):
            # the vertex count swings between ~4 and ~35, so deletions leave garbage behind
            target = 35 if (step // 40) % 2 == 0 else 4
            top, garbage = g.top, g.garbage
            random_batch(g, m, rng, target)
            if g.garbage < garbage or g.top < top:
                stats["compactions"] += 1
            if g.garbage > garbage:
                stats["relocations"] += 1
            compare(g, m, rng)
        if name == "tiny":
            assert g.nbr.shape[0] > initial_pool and g.label.shape[0] > initial_vertices
    assert stats["relocations"] > 0
    if name == "tiny":
        assert stats["compactions"] > 0, "compaction never ran"


def test_compaction_keeps_lists_and_drops_garbage():
    g, m, rng = DynamicGraph(EngineConfig.tiny()), Model(), random.Random(5)
    ids = list(range(40))
    labels = [i % 3 for i in ids]
    g.add_vertices(arr(ids, np.int64), arr(labels))
    m.add(ids, labels)
    pairs = [(u, v) for u, v in itertools.combinations(range(40), 2) if rng.random() < 0.3]
    for chunk in range(0, len(pairs), 25):   # many small batches: lists relocate often
        part = pairs[chunk: chunk + 25]
        g.insert_edges(arr(p[0] for p in part), arr(p[1] for p in part), arr(1 for _ in part))
        m.edges.update({p: 1 for p in part})
    compare(g, m, rng)
    # delete 30 vertices with their edges: their blocks become garbage
    dv = list(range(30))
    doomed = [k for k in m.edges if k[0] in dv or k[1] in dv]
    g.delete_edges(arr(k[0] for k in doomed), arr(k[1] for k in doomed))
    for k in doomed:
        del m.edges[k]
    g.delete_vertices(arr(dv))
    m.delete_vertices(dv)
    assert g.garbage > g.top - g.garbage
    top_before, pool_before = g.top, g.nbr.shape[0]
    # keep adding vertices and edges until the pool must make room
    compacted = False
    next_id = 1000
    for _ in range(100):
        new_ids = list(range(next_id, next_id + 10))
        next_id += 10
        new_labels = [rng.randrange(3) for _ in new_ids]
        g.add_vertices(arr(new_ids, np.int64), arr(new_labels))
        m.add(new_ids, new_labels)
        alive = sorted(m.label)
        todo = [(u, v) for u, v in itertools.combinations(alive, 2)
                if (u, v) not in m.edges and rng.random() < 0.1]
        garbage = g.garbage
        g.insert_edges(arr(p[0] for p in todo), arr(p[1] for p in todo), arr(2 for _ in todo))
        m.edges.update({p: 2 for p in todo})
        compare(g, m, rng)
        if g.garbage < garbage:
            compacted = True
            # the dead vertices' blocks are gone: what is left is live blocks plus the
            # relocations of this one batch
            assert g.top < top_before
            break
    assert compacted, (top_before, pool_before, g.top, g.nbr.shape[0])


def test_from_labeled_equals_incremental_build():
    rng = random.Random(7)
    for cfg in (EngineConfig.tiny(), EngineConfig()):
        n = 30
        ids = rng.sample(range(10**6), n - 2) + [0, BIG]
        labels = [rng.randrange(3) for _ in ids]
        pairs = [(u, v) for u, v in itertools.combinations(range(n), 2) if rng.random() < 0.25]
        elabs = [rng.randrange(3) for _ in pairs]
        flips = [rng.random() < 0.5 for _ in pairs]
        lg = LabeledGraph(
            vertex_ids=arr(ids, np.int64), vertex_labels=arr(labels),
            edge_src=arr((ids[v] if f else ids[u] for (u, v), f in zip(pairs, flips)), np.int64),
            edge_dst=arr((ids[u] if f else ids[v] for (u, v), f in zip(pairs, flips)), np.int64),
            edge_labels=arr(elabs))
        bulk = DynamicGraph.from_labeled(lg, cfg)

        inc = DynamicGraph(cfg)
        inc.add_vertices(arr(ids, np.int64), arr(labels))
        order = list(range(len(pairs)))
        rng.shuffle(order)
        for i in range(0, len(order), 7):
            part = order[i: i + 7]
            inc.insert_edges(arr(pairs[j][0] for j in part), arr(pairs[j][1] for j in part),
                             arr(elabs[j] for j in part))
        bulk.check()
        inc.check()
        want = {p: lab for p, lab in zip(pairs, elabs)}
        assert edge_dict(*bulk.edges()) == want == edge_dict(*inc.edges())
        assert bulk.num_vertices == inc.num_vertices == n
        assert bulk.num_edges == inc.num_edges == len(pairs)
        for u in range(n):
            assert bulk.neighbors(u).tolist() == inc.neighbors(u).tolist()
            sb, si, d = bulk.start[u], inc.start[u], bulk.deg[u]
            assert bulk.elab[sb: sb + d].tolist() == inc.elab[si: si + d].tolist()
        assert bulk.ids.lookup(arr(ids, np.int64)).tolist() == list(range(n))


def test_from_labeled_rejects_unknown_endpoint():
    lg = LabeledGraph(vertex_ids=arr([1, 2], np.int64), vertex_labels=arr([0, 0]),
                      edge_src=arr([1], np.int64), edge_dst=arr([3], np.int64),
                      edge_labels=arr([0]))
    with pytest.raises(ValueError):
        DynamicGraph.from_labeled(lg)


def test_slots_are_reused_last_freed_first():
    g = DynamicGraph(EngineConfig.tiny())
    assert g.add_vertices(arr([10, 11, 12, 13, 14], np.int64), arr([0] * 5)).tolist() == [0, 1, 2,
                                                                                           3, 4]
    g.delete_vertices(arr([1, 3]))
    assert g.reserve_slots(3).tolist() == [3, 1, 5]
    assert g.add_vertices(arr([20, 21, 22], np.int64), arr([1, 1, 1])).tolist() == [3, 1, 5]
    assert g.ids.lookup(arr([11, 13, 20, 21, 22], np.int64)).tolist() == [-1, -1, 3, 1, 5]
    assert g.num_vertices == 6 and g.num_slots == 6
    g.check()


def test_pool_overflow_after_compaction():
    """Regression: insert_edges reserves room from the capacities *before* a compaction,
    but compaction gives every live list a new capacity (min_list_capacity for empty lists),
    so the relocations that follow can write past the end of the pool.

    Run in a subprocess: the overflow corrupts the heap (often an abort)."""
    code = textwrap.dedent("""
        import itertools, numpy as np
        from gpu.config import EngineConfig
        from gpu.graph.lists import DynamicGraph
        g = DynamicGraph(EngineConfig(initial_edge_capacity=8, min_list_capacity=4))
        a = g.add_vertices([0, 1], [0, 0])
        g.insert_edges(a[:1], a[1:], np.zeros(1, np.int32))   # two blocks of 4: pool full
        g.delete_edges(a[:1], a[1:]); g.delete_vertices(a)     # all of it garbage
        s = g.add_vertices(np.arange(10, 16), np.zeros(6, np.int32))
        us, vs = map(np.array, zip(*itertools.combinations(s.tolist(), 2)))
        g.insert_edges(us, vs, np.zeros(15, np.int32))         # K6: compaction, 6 relocations
        assert g.top <= g.nbr.shape[0], f"top {g.top} past the pool end {g.nbr.shape[0]}"
        g.check()
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_one_edge_batches_match_model(name):
    """Batches of one edge, as a service sees them (insert_edges and _list_entries take
    their scalar path): lists relocate and the pool grows as with larger batches."""
    rng = random.Random(77 + len(name))
    g, m = DynamicGraph(CONFIGS[name]()), Model()
    ids = [fresh_ext(rng, m, set()) for _ in range(1)]
    relocations = 0
    for step in range(600):
        if len(m.label) < 24 and rng.random() < 0.2:
            ids = [fresh_ext(rng, m, set())]
            labels = [rng.randrange(3)]
            g.add_vertices(arr(ids, np.int64), arr(labels))
            m.add(ids, labels)
        alive = sorted(m.label)
        if len(alive) < 2:
            continue
        garbage = g.garbage
        if m.edges and rng.random() < 0.3:
            k = rng.choice(sorted(m.edges))
            u, v = (k[1], k[0]) if rng.random() < 0.5 else k
            g.delete_edges(arr([u]), arr([v]))
            del m.edges[k]
        else:
            u, v = rng.sample(alive, 2)
            k = (min(u, v), max(u, v))
            if k in m.edges:
                continue
            label = rng.randrange(3)
            g.insert_edges(arr([u]), arr([v]), arr([label]))
            m.edges[k] = label
        relocations += g.garbage > garbage
        compare(g, m, rng)
    assert relocations > 0


def test_bulk_load_refuses_negative_edge_labels():
    lg = LabeledGraph(np.array([1, 2], np.int64), np.zeros(2, np.int32),
                      np.array([1], np.int64), np.array([2], np.int64),
                      np.array([-3], np.int32))
    with pytest.raises(ValueError, match="edge label -3"):
        DynamicGraph.from_labeled(lg)


def test_a_graph_on_the_slots_of_another_takes_its_edges_on_the_same_slots():
    """on_slots_of (the device graph's host lists, the windowed phases' subgraphs): the
    vertex table, deleted slots included, and then the same edges give the same graph."""
    g = DynamicGraph(EngineConfig.tiny())
    g.add_vertices(arr([10, 11, 12, 13, 14], np.int64), arr([0, 1, 0, 2, 1]))
    g.delete_vertices(arr([3]))
    g.insert_edges(arr([0, 1, 2]), arr([1, 2, 4]), arr([0, 1, 0]))
    twin = DynamicGraph.on_slots_of(g, EngineConfig.tiny())
    assert twin.num_edges == 0 and twin.num_slots == g.num_slots
    twin.insert_edges(*g.edges())
    twin.check()
    assert edge_dict(*twin.edges()) == edge_dict(*g.edges())
    assert twin.label[:5].tolist() == g.label[:5].tolist()
    assert twin.alive[:5].tolist() == g.alive[:5].tolist()
    assert twin.reserve_slots(1).tolist() == g.reserve_slots(1).tolist() == [3]


def test_a_scratch_graph_emptied_onto_another_is_a_fresh_one():
    """emptied_onto (the windowed phases' scratch subgraph): after edges of its own, onto
    a graph with more slots and other labels, it holds only the edges given next."""
    g = DynamicGraph(EngineConfig.tiny())
    g.add_vertices(arr(range(6), np.int64), arr([0, 1, 0, 2, 1, 0]))
    g.insert_edges(arr([0, 1, 2, 3]), arr([1, 2, 4, 5]), arr([0, 1, 0, 2]))
    scratch = DynamicGraph.on_slots_of(g, EngineConfig.tiny())
    scratch.insert_edges(*g.edges())
    bigger = DynamicGraph(EngineConfig.tiny())
    bigger.add_vertices(arr(range(40), np.int64), arr([v % 3 for v in range(40)]))
    rng = np.random.default_rng(2)
    pairs = {(int(a), int(b)) for a, b in rng.integers(0, 40, (60, 2)) if a < b}
    us, vs = (arr([p[k] for p in sorted(pairs)]) for k in (0, 1))
    labels = arr(rng.integers(0, 3, len(us)))
    bigger.insert_edges(us, vs, labels)
    for source in (bigger, g):
        reused = scratch.emptied_onto(source)
        assert reused is scratch and reused.num_edges == 0
        fresh = DynamicGraph.on_slots_of(source, EngineConfig.tiny())
        for graph in (reused, fresh):
            graph.insert_edges(*source.edges())
            graph.check()
        assert edge_dict(*reused.edges()) == edge_dict(*fresh.edges()) == \
            edge_dict(*source.edges())


@pytest.mark.parametrize("min_cap", [1, 4])
def test_edges_laid_out_in_an_empty_pool_are_placed_as_a_merge_would_place_them(min_cap):
    """_fill_empty (insert_edges into a graph whose pool holds no list: a fresh or emptied
    one) writes what _insert_sorted writes into lists of capacity 0: the same starts,
    degrees, capacities, entries and pool top; and such a graph checks out."""
    from gpu.graph.lists import _fill_empty, _insert_sorted, _list_entries
    rng = np.random.default_rng(min_cap)
    labels = arr([v % 3 for v in range(50)])
    pairs = sorted({(int(a), int(b)) for a, b in rng.integers(0, 50, (300, 2)) if a < b})
    us, vs = (arr([p[k] for p in pairs]) for k in (0, 1))
    elab = arr(rng.integers(0, 4, len(us)))
    src, dst, keys, lab = _list_entries(us, vs, elab, labels, False)
    room = len(src) + 50 * min_cap
    laid = []
    for fill in (True, False):
        pool = [np.full(room, -7, dtype=np.int32) for _ in range(4)]
        lists = [np.zeros(50, dtype=np.int32) for _ in range(3)]     # start, deg, cap
        if fill:
            top, longest = _fill_empty(*pool, *lists, src, dst, keys, lab, min_cap)
            assert longest == int(lists[1].max())
        else:
            top, garbage = _insert_sorted(*pool, *lists, src, dst, keys, lab, 0, min_cap)
            assert garbage == 0
        laid.append((int(top), [a.tolist() for a in pool + lists]))
    assert laid[0] == laid[1]
    g = DynamicGraph(dataclasses.replace(EngineConfig.tiny(), min_list_capacity=min_cap))
    g.add_vertices(arr(range(50), np.int64), labels)
    assert g.top == 0
    g.insert_edges(us, vs, elab)
    g.check()
    assert g.top == laid[0][0]
    assert edge_dict(*g.edges()) == edge_dict(us, vs, elab)


@pytest.mark.parametrize("span", [50, 2**20, 2**31 - 1], ids=["small", "large", "no-room"])
def test_list_entries_come_in_lexicographic_order_packed_or_not(span):
    """_entry_order packs (source, key, destination) into one int64 where their bits fit
    and falls back to lexsort where not (ids and keys near 2^31 leave no room): the same
    order as lexsort's either way, ties (repeated triples) kept in input order."""
    from gpu.graph.lists import _entry_order
    rng = np.random.default_rng(span % 997)
    src = rng.integers(0, span, 3000).astype(np.int32)
    keys = rng.integers(0, min(span, 7), 3000).astype(np.int32)
    dst = rng.integers(0, span, 3000).astype(np.int32)
    src[:300], keys[:300], dst[:300] = src[300:600], keys[300:600], dst[300:600]  # ties
    expected = np.lexsort((dst, keys, src))
    assert np.array_equal(_entry_order(src, keys, dst), expected)
    keys[0] = -1            # a negative key: not packed
    assert np.array_equal(_entry_order(src, keys, dst), np.lexsort((dst, keys, src)))
