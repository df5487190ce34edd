"""Leaf counting (nc tables, trailing leaf runs as falling-factorial products) through the
Engine, against a small brute-force matcher on the same graph.

Queries have leaves: stars, paths, trees with repeated labels, leaves whose label is
also a non-leaf's (so matched vertices must be excluded from the products), and leaves
under one parent with different edge labels.  After every batch: `engine.check()`
(nc equals a rebuild), the positive/negative counts equal the brute-force set
differences, and `count()` equals the brute-force count.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.records import (
    ADD_VERTEX,
    DELETE_EDGE,
    DELETE_VERTEX,
    INSERT_EDGE,
    NO_LABEL,
    UpdateStream,
)
from gpu.plan.leaf_counts import LeafCounts, UpdateIndex
from tests.graphs import Data, Pattern, embeddings, random_batch, random_data

CONFIGS = {"tiny": EngineConfig.tiny, "default": EngineConfig}


LEAFY = {
    "star3": Pattern([0, 0, 0, 0], [(0, 1), (0, 2), (0, 3)]),
    "star_mixed": Pattern([0, 1, 1, 0], [(0, 1), (0, 2), (0, 3)]),
    "path4": Pattern([0, 0, 0, 0], [(0, 1), (1, 2), (2, 3)]),
    "path3": Pattern([1, 0, 1], [(0, 1), (1, 2)]),
    "tree": Pattern([0, 1, 0, 0, 1, 0], [(0, 1), (1, 2), (1, 3), (0, 4), (4, 5)]),
    "spider": Pattern([0, 0, 0, 0, 0, 0], [(0, 1), (0, 2), (0, 3), (1, 4), (1, 5)]),
    "triangle_tail": Pattern([0, 0, 0, 0, 0], [(0, 1), (1, 2), (0, 2), (2, 3), (2, 4)]),
    "elabel_star": Pattern([0, 1, 1, 1], [(0, 1, 0), (0, 2, 0), (0, 3, 1)]),
    "elabel_tree": Pattern([0, 0, 1, 1, 1], [(0, 1, 1), (0, 2, 0), (0, 3, 1), (1, 4, 0)]),
}


def check_all(engine: Engine, d: Data, qids: dict[int, Pattern], before, res) -> dict:
    engine.check()
    after = {qid: embeddings(d, p) for qid, p in qids.items()}
    for qid, p in qids.items():
        if res is not None:
            delta = res.queries[qid]
            assert delta.positive == len(after[qid] - before[qid]), (qid, p.labels, p.edges)
            assert delta.negative == len(before[qid] - after[qid]), (qid, p.labels, p.edges)
        assert engine.count(qid) == len(after[qid]), (qid, p.labels, p.edges)
    return after


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_random_batches_with_leafy_queries(name):
    for seed, (nlabels, nelabels) in enumerate([(1, 1), (2, 2), (2, 1)]):
        rng = random.Random(seed + 31 * len(name))
        d = random_data(rng, 12, nlabels, nelabels, 0.35)
        engine = Engine(d.labeled(), backend="cpu", config=CONFIGS[name]())
        qids = {}
        for pname in sorted(LEAFY):
            p = LEAFY[pname]
            if max(p.labels) < nlabels and max(p.edges.values()) < nelabels:
                qids[engine.add_query(p.query())] = p
        assert len(qids) >= 4
        state = check_all(engine, d, qids, None, None)
        next_id = [100]
        for _ in range(40):
            res = engine.apply(random_batch(rng, d, nlabels, nelabels, next_id))
            state = check_all(engine, d, qids, state, res)


def star_data(center_label, spokes: list[tuple[int, int]]) -> Data:
    """Vertex 0 (center_label) with one neighbour per (label, edge label) in spokes."""
    verts = {0: center_label}
    edges = {}
    for i, (lab, el) in enumerate(spokes, start=1):
        verts[i] = lab
        edges[frozenset((0, i))] = el
    return Data(verts, edges)


def falling(k: int, r: int) -> int:
    out = 1
    for i in range(r):
        out *= max(k - i, 0)
    return out


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_same_parent_label_and_edge_label_is_a_falling_factorial(name):
    """Three leaves sharing parent, label and edge label: k(k-1)(k-2) per centre."""
    p = Pattern([0, 1, 1, 1], [(0, 1), (0, 2), (0, 3)])
    d = star_data(0, [(1, 0)] * 2 + [(0, 0), (1, 1)])   # 2 matching spokes, 2 that don't
    engine = Engine(d.labeled(), backend="cpu", config=CONFIGS[name]())
    qid = engine.add_query(p.query())
    assert engine.count(qid) == 0
    k, nxt = 2, 10
    for grow in (1, 3, 1, 2):                 # spokes arrive one or several per batch
        recs = []
        for _ in range(grow):
            recs += [(ADD_VERTEX, nxt, 0, 1), (INSERT_EDGE, nxt, 0, 0)]
            d.vertices[nxt] = 1
            d.edges[frozenset((0, nxt))] = 0
            nxt += 1
        res = engine.apply(UpdateStream.from_records(recs))
        assert res.queries[qid].positive == falling(k + grow, 3) - falling(k, 3)
        assert res.queries[qid].negative == 0
        k += grow
        engine.check()
        assert engine.count(qid) == falling(k, 3) == len(embeddings(d, p))
    # take two spokes away at once, one of them by deleting its vertex
    res = engine.apply(UpdateStream.from_records([(DELETE_EDGE, 0, 10, NO_LABEL),
                                                  (DELETE_VERTEX, 11, 0, NO_LABEL)]))
    assert res.queries[qid].negative == falling(k, 3) - falling(k - 2, 3)
    assert res.queries[qid].positive == 0
    engine.check()
    assert engine.count(qid) == falling(k - 2, 3)
    # the leaf run really is counted, not enumerated: the plan says so
    types = engine.plan(qid).incremental
    assert (types.leaf_from == 2).all()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_different_edge_labels_under_one_parent(name):
    """Leaves 1, 2 by edge label 0 and leaf 3 by edge label 1: a(a-1) * b per centre."""
    p = Pattern([0, 1, 1, 1], [(0, 1, 0), (0, 2, 0), (0, 3, 1)])
    q = p.query()
    for a, b in [(0, 3), (1, 3), (2, 0), (2, 1), (3, 2), (4, 4)]:
        d = star_data(0, [(1, 0)] * a + [(1, 1)] * b + [(0, 1)])
        engine = Engine(d.labeled(), backend="cpu", config=CONFIGS[name]())
        qid = engine.add_query(q)
        engine.check()
        assert engine.count(qid) == a * max(a - 1, 0) * b == len(embeddings(d, p))
    # then flip edge labels by delete + re-insert in one batch (the same edge, new label:
    # a delete and an insert of one edge cancel, so use two batches)
    d = star_data(0, [(1, 0)] * 3 + [(1, 1)] * 2)
    engine = Engine(d.labeled(), backend="cpu", config=CONFIGS[name]())
    qid = engine.add_query(q)
    assert engine.count(qid) == 3 * 2 * 2
    res = engine.apply(UpdateStream.from_records([(DELETE_EDGE, 0, 1, 0)]))
    assert res.queries[qid].negative == 12 - 2 * 1 * 2
    res = engine.apply(UpdateStream.from_records([(INSERT_EDGE, 1, 0, 1)]))
    assert res.queries[qid].positive == 2 * 1 * 3 - 2 * 1 * 2
    engine.check()
    d.edges[frozenset((0, 1))] = 1
    assert engine.count(qid) == 6 == len(embeddings(d, p))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_leaves_exclude_matched_vertices_of_their_label(name):
    """Uniform labels: a leaf's candidates among the parent's neighbours include vertices
    already matched to non-leaves (and the other parent's leaves), which must not count."""
    rng = random.Random(77)
    d = random_data(rng, 9, 1, 1, 0.7)       # dense: many triangles, shared neighbours
    engine = Engine(d.labeled(), backend="cpu", config=CONFIGS[name]())
    patterns = [LEAFY["triangle_tail"], LEAFY["spider"], LEAFY["star3"], LEAFY["path4"]]
    qids = {engine.add_query(p.query()): p for p in patterns}
    state = check_all(engine, d, qids, None, None)
    assert all(len(s) > 0 for s in state.values())
    next_id = [100]
    for _ in range(8):
        res = engine.apply(random_batch(rng, d, 1, 1, next_id))
        state = check_all(engine, d, qids, state, res)


def test_listing_agrees_with_counting():
    """Listing enumerates the leaves; counting multiplies: both must agree."""
    rng = random.Random(5)
    d = random_data(rng, 10, 2, 2, 0.4)
    engine = Engine(d.labeled(), backend="cpu", config=EngineConfig.tiny())
    qids = {engine.add_query(p.query()): p for p in
            (LEAFY["star_mixed"], LEAFY["elabel_tree"], LEAFY["tree"])}
    before = {qid: embeddings(d, p) for qid, p in qids.items()}
    next_id = [100]
    for _ in range(10):
        res = engine.apply(random_batch(rng, d, 2, 2, next_id), list_limit=10**6)
        after = {qid: embeddings(d, p) for qid, p in qids.items()}
        for qid in qids:
            delta = res.queries[qid]
            ext = lambda rows: {tuple(int(x) for x in r) for r in np.asarray(rows)}
            assert ext(delta.added) == after[qid] - before[qid]
            assert ext(delta.removed) == before[qid] - after[qid]
            assert delta.positive == len(after[qid] - before[qid])
            assert engine.matches(qid).count == len(after[qid])
            assert ext(engine.matches(qid).rows) == after[qid]
        before = after
        engine.check()


# --------------------------------------------------------------------------- units


def test_leaf_columns_and_edge_labels():
    p = Pattern([0, 1, 2, 1, 3], [(0, 1, 4), (0, 2, 5), (2, 3, 6), (2, 4, 7)])
    lc = LeafCounts(p.query(), 8)
    assert lc.leaf_q.tolist() == [1, 3, 4]
    assert lc.leaf_elab.tolist() == [4, 6, 7]
    assert lc.column.tolist() == [-1, 0, -1, 1, 2]
    assert lc.nc.shape == (8, 3) and lc.active
    lc.resize(20)
    assert lc.nc.shape == (20, 3)
    # a 2-vertex query has no counted leaves
    assert not LeafCounts(Pattern([0, 0], [(0, 1)]).query(), 4).active


def test_nc_is_the_number_of_candidate_neighbours():
    rng = random.Random(9)
    d = random_data(rng, 15, 2, 2, 0.4)
    engine = Engine(d.labeled(), backend="cpu", config=EngineConfig.tiny())
    p = LEAFY["elabel_tree"]
    qid = engine.add_query(p.query())
    next_id = [100]
    for _ in range(10):
        engine.apply(random_batch(rng, d, 2, 2, next_id))
    g = engine.graph
    leaves = engine._queries[qid].leaves
    cand = engine.signatures.cand[qid]
    adj = d.adj()
    for v in d.vertices:
        y = int(g.ids.lookup(np.array([v]))[0])
        for j, (q, el) in enumerate(zip(leaves.leaf_q.tolist(), leaves.leaf_elab.tolist())):
            want = 0
            for w, lab in adj[v].items():
                ws = int(g.ids.lookup(np.array([w]))[0])
                if lab == el and (int(cand[ws]) >> q) & 1:
                    want += 1
            assert leaves.nc[y, j] == want


def test_update_index_lists_edges_per_endpoint():
    idx = UpdateIndex(4)
    us = np.array([0, 2, 0, 5], dtype=np.int32)
    vs = np.array([1, 0, 3, 2], dtype=np.int32)
    labels = np.array([7, 8, 9, 6], dtype=np.int32)
    ranks = np.array([1, 2, 3, 4], dtype=np.int32)
    idx.fill(8, us, vs, labels, ranks)
    want: dict[int, list] = {}
    for u, v, lab, r in zip(us.tolist(), vs.tolist(), labels.tolist(), ranks.tolist()):
        want.setdefault(u, []).append((v, r, lab))
        want.setdefault(v, []).append((u, r, lab))
    for x in range(8):
        s, c = int(idx.start[x]), int(idx.count[x])
        got = sorted(zip(idx.nbr[s: s + c].tolist(), idx.rank[s: s + c].tolist(),
                         idx.elab[s: s + c].tolist()))
        assert got == sorted(want.get(x, [])), x
    idx.clear()
    assert not idx.count.any()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_head_level_excludes_matched_vertices(name):
    """A 4-cycle of label 0 with a label-1 leaf: the level before the leaf is a head (it
    feeds no leaf and has another label), and on a dense label-0 graph its candidates
    include vertices matched earlier, which the head count must leave out."""
    rng = random.Random(5)
    vertices = {v: 0 for v in range(7)} | {v: 1 for v in range(7, 12)}
    edges = {frozenset((a, b)): 0 for a in range(7) for b in range(a + 1, 7)
             if rng.random() < 0.8}
    edges |= {frozenset((a, b)): 0 for a in range(7) for b in range(7, 12)
              if rng.random() < 0.4}
    d = Data(vertices, edges)
    p = Pattern([0, 0, 0, 0, 1], [(0, 1), (1, 2), (2, 3), (3, 0), (0, 4)])
    engine = Engine(d.labeled(), backend="cpu", config=CONFIGS[name]())
    qid = engine.add_query(p.query())
    types = engine.plan(qid).incremental
    assert types.tail_head.any(), "the plan must use a head level for this test to mean much"
    state = check_all(engine, d, {qid: p}, None, None)
    assert len(state[qid]) > 0
    next_id = [100]
    for _ in range(6):
        res = engine.apply(random_batch(rng, d, 2, 1, next_id))
        state = check_all(engine, d, {qid: p}, state, res)
