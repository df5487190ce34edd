"""Grouped search of leaf-rooted tasks (gpu/cpu/leaf_groups.py) against a brute-force matcher
and against the one-by-one search.

Batches put many update edges around a few hubs, so leaf-rooted tasks share their
parent vertex and form groups, and the same hubs sit at the tails' leaf parents, so a
tail's value differs between members (rank intervals).  With one or two vertex labels,
prefix and tail vertices can take a member's leaf vertex (the collision paths).  The
patterns cover every tail the grouped search handles: the counted last level, leaf
products with and without a head level, and the non-adjacent pair.  A spy on the
grouping proves that groups were formed and searched.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import gpu.cpu.executor
from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.records import DELETE_EDGE, INSERT_EDGE, NO_LABEL, UpdateStream
from gpu.io.streams import split_stream
from gpu.plan.planner import build_plan, group_leaf_tasks, make_tasks
from tests.graphs import Data, Pattern, embeddings, random_data, skewed_graph

PATTERNS = {
    "path3": Pattern([0, 1, 0], [(0, 1), (1, 2)]),
    "path4": Pattern([0, 0, 1, 0], [(0, 1), (1, 2), (2, 3)]),
    "path5": Pattern([1, 0, 0, 1, 0], [(0, 1), (1, 2), (2, 3), (3, 4)]),
    "star3": Pattern([0, 0, 0, 0], [(0, 1), (0, 2), (0, 3)]),
    "paw": Pattern([0, 0, 1, 0], [(0, 1), (1, 2), (0, 2), (2, 3)]),
    "bull": Pattern([0, 1, 0, 0, 1], [(0, 1), (1, 2), (0, 2), (0, 3), (1, 4)]),
    # leaf 3 roots (grouped with 3 labels), a head (q0 or q1) before the leaf run [4]
    "head": Pattern([1, 1, 0, 2, 0], [(0, 1), (1, 2), (0, 2), (2, 3), (2, 4)]),
    # leaf 0 roots (grouped with 3 labels); the last two (4, 5) are non-adjacent: the
    # pair tail
    "pair": Pattern([2, 0, 1, 1, 0, 0],
                    [(0, 1), (1, 2), (1, 3), (2, 3), (2, 4), (3, 4), (2, 5), (3, 5)]),
    # leaf 0 roots; the last level (q3) is not adjacent to the leaf's parent, so its
    # candidates can be members' leaf vertices, and q1 (matched) is among them
    "banner": Pattern([0, 0, 1, 0, 1], [(0, 1), (1, 2), (2, 3), (3, 4), (4, 1)]),
    # leaf 0 roots; the last level (q4, the leaf's label) is not adjacent to the parent
    "diamond_leaf": Pattern([0, 0, 1, 1, 0], [(0, 1), (1, 2), (1, 3), (2, 3), (2, 4), (3, 4)]),
    "elabel_tree": Pattern([0, 0, 1, 1, 1], [(0, 1, 1), (0, 2, 0), (0, 3, 1), (1, 4, 0)]),
}

CONFIGS = {"default": EngineConfig, "tiny": EngineConfig.tiny,
           "one_by_one": lambda: EngineConfig(leaf_groups=False)}


@pytest.fixture
def group_spy(monkeypatch):
    """Records (groups, members) of every grouping the executor does."""
    seen = []
    real = gpu.cpu.executor.group_leaf_tasks

    def spy(*args):
        singles, groups = real(*args)
        seen.append((groups.count, int((groups.hi - groups.lo).sum())))
        return singles, groups

    monkeypatch.setattr(gpu.cpu.executor, "group_leaf_tasks", spy)
    return seen


def hub_data(rng: random.Random, n: int, nlabels: int, nelabels: int) -> Data:
    d = random_data(rng, n, nlabels, nelabels, 0.2)
    for hub in (0, 1):
        for v in rng.sample(range(2, n), n // 2):
            d.edges.setdefault(frozenset((hub, v)), rng.randrange(nelabels))
    return d


def hub_batch(rng: random.Random, d: Data, nelabels: int) -> UpdateStream:
    """Inserts and deletes, most of them at one or two hubs (vertices 0 and 1)."""
    verts = sorted(d.vertices)
    recs, ins, gone = [], {}, set()
    for _ in range(rng.randint(2, 12)):
        a = rng.choice([0, 1, 0, rng.choice(verts)])
        b = rng.choice(verts)
        k = frozenset((a, b))
        if a == b or k in ins or k in gone:
            continue
        if k in d.edges and rng.random() < 0.5:
            gone.add(k)
            recs.append((DELETE_EDGE, a, b, NO_LABEL))
        elif k not in d.edges:
            ins[k] = rng.randrange(nelabels)
            recs.append((INSERT_EDGE, a, b, ins[k]))
    for k in gone:
        del d.edges[k]
    d.edges.update(ins)
    rng.shuffle(recs)
    return UpdateStream.from_records(recs)


@pytest.fixture(params=["whole", "split"])
def group_pieces(request, monkeypatch):
    """Groups searched whole, or every group of two or more split into three pieces."""
    if request.param == "split":
        monkeypatch.setattr(gpu.cpu.executor, "GROUP_SPLIT_MEMBERS", 2)
        monkeypatch.setattr(gpu.cpu.executor, "PIECES_PER_THREAD", 3)
    return request.param


def check_hub_batches(engine: Engine, rng: random.Random, d: Data, nlabels: int,
                      nelabels: int, batches: int) -> None:
    """Stand every pattern of PATTERNS that fits the labels, apply `batches` hub batches,
    and check each one's deltas and counts against brute force."""
    qids = {}
    for name in sorted(PATTERNS):
        p = PATTERNS[name]
        if max(p.edges.values()) < nelabels:
            p = Pattern([lab % nlabels for lab in p.labels],
                        [(a, b, lab) for (a, b), lab in p.edges.items()])
            qids[engine.add_query(p.query())] = (name, p)
    before = {qid: embeddings(d, p) for qid, (_, p) in qids.items()}
    for _ in range(batches):
        res = engine.apply(hub_batch(rng, d, nelabels))
        after = {qid: embeddings(d, p) for qid, (_, p) in qids.items()}
        for qid, (name, _) in qids.items():
            delta = res.queries[qid]
            assert delta.positive == len(after[qid] - before[qid]), name
            assert delta.negative == len(before[qid] - after[qid]), name
            assert engine.count(qid) == len(after[qid]), name
        before = after
    engine.check()


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("nlabels,nelabels", [(1, 1), (2, 1), (2, 2), (3, 1)])
def test_hub_batches_equal_brute_force(config, nlabels, nelabels, group_spy, group_pieces):
    rng = random.Random(17 * nlabels + nelabels)
    d = hub_data(rng, 13, nlabels, nelabels)
    engine = Engine(d.labeled(), backend="cpu", config=CONFIGS[config]())
    check_hub_batches(engine, rng, d, nlabels, nelabels, 25)
    formed = sum(g for g, _ in group_spy)
    if config == "one_by_one":
        assert not group_spy, "leaf_groups=False must not group"
    else:
        assert formed > 0, "no group formed: the test would not exercise grouped search"


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_last_level_candidate_that_is_a_members_leaf(backend):
    """Hub 0 gets leaves 5, 6, 7 in one batch; 5 is also the only vertex that closes the
    diamond 0-2-3-5, so it serves members 6 and 7 but not its own edge's member.  (On CUDA
    every launch groups: tests/gpu/cuda/test_leaf_groups.py.)"""
    p = PATTERNS["diamond_leaf"]
    d = Data({0: 0, 2: 1, 3: 1, 5: 0, 6: 0, 7: 0},
             {frozenset(k): 0 for k in [(0, 2), (0, 3), (2, 3), (2, 5), (3, 5)]})
    engine = Engine(d.labeled(), backend=backend,
                    config=EngineConfig(device_leaf_group_edges=1, small_phase_edges=0))
    qid = engine.add_query(p.query())
    before = embeddings(d, p)
    recs = [(INSERT_EDGE, 0, leaf, 0) for leaf in (5, 6, 7)]
    d.edges.update({frozenset((0, leaf)): 0 for leaf in (5, 6, 7)})
    res = engine.apply(UpdateStream.from_records(recs))
    assert res.queries[qid].positive == len(embeddings(d, p) - before) == 4


def test_grouping_keeps_every_task_once():
    """Singles plus members are exactly make_tasks' tasks; groups share type and parent."""
    rng = np.random.default_rng(5)
    q = Pattern([1, 0, 0, 0], [(0, 1), (1, 2), (2, 3)]).query()
    types = build_plan(q).incremental
    n = 30
    pairs = rng.permutation([(u, v) for u in range(5) for v in range(5, n)])[:80]
    us = pairs[:, 0].astype(np.int32)       # few parents: big groups
    vs = pairs[:, 1].astype(np.int32)
    cand = np.full(n, 0xF, dtype=np.uint32)
    labels = np.zeros(len(us), dtype=np.int32)
    ranks = rng.permutation(len(us)).astype(np.int32) + 1
    tu, tv, tr, tt = make_tasks(types, cand, us, vs, labels, ranks)
    (su, sv, sr, st), g = group_leaf_tasks(types, tu, tv, tr, tt, 3)
    assert g.count > 0 and len(su) + int((g.hi - g.lo).sum()) == len(tu)
    rebuilt = set(zip(su.tolist(), sv.tolist(), sr.tolist(), st.tolist()))
    sizes = g.hi - g.lo
    assert (sizes >= 3).all() and (np.diff(sizes) <= 0).all()   # largest first
    for i in range(g.count):
        t, p = int(g.task_type[i]), int(g.parent[i])
        level = int(types.leaf_root[t])
        assert level >= 0
        members = range(int(g.lo[i]), int(g.hi[i]))
        assert (np.diff(g.rank[g.lo[i]:g.hi[i]]) > 0).all()
        assert (np.diff(g.leaf_by_id[g.lo[i]:g.hi[i]]) > 0).all()
        by_id = dict(zip(g.leaf_by_id[g.lo[i]:g.hi[i]].tolist(),
                         g.rank_by_id[g.lo[i]:g.hi[i]].tolist()))
        for j in members:
            leaf, r = int(g.leaf[j]), int(g.rank[j])
            assert by_id[leaf] == r
            u, v = (p, leaf) if level == 1 else (leaf, p)
            rebuilt.add((u, v, r, t))
    assert rebuilt == set(zip(tu.tolist(), tv.tolist(), tr.tolist(), tt.tolist()))


SKEWED = ["banner", "diamond_leaf", "path4", "path5", "star3", "paw", "bull", "head", "pair",
          "elabel_tree"]


@pytest.mark.parametrize("labels", [1, 2, 3])
def test_skewed_graph_grouped_equals_one_by_one(labels, group_spy):
    full = skewed_graph(labels, n=300, hubs=4, labels=labels)
    initial, stream = split_stream(full, 0.25, labels)
    rng = random.Random(labels)
    results = []
    for config in (EngineConfig(), EngineConfig(leaf_group_min=5),
                   EngineConfig(leaf_groups=False)):
        engine = Engine(initial, backend="cpu", config=config)
        for name in SKEWED:
            p = PATTERNS[name]
            q = Pattern([rng.randrange(labels) for _ in p.labels], list(p.edges))
            engine.add_query(q.query())
        got = []
        inserted = engine.apply(stream)
        got.append({k: (d.positive, d.negative) for k, d in inserted.queries.items()})
        undo = UpdateStream(np.full(len(stream), DELETE_EDGE), stream.a, stream.b,
                            stream.label, stream.line, "undo")
        deleted = engine.apply(undo)
        got.append({k: (d.positive, d.negative) for k, d in deleted.queries.items()})
        got.append([engine.count(qid) for qid in engine.query_ids()])
        results.append(got)
        rng = random.Random(labels)      # the same labels for every config
    assert results[1] == results[0] and results[2] == results[0]
    assert max(m for _, m in group_spy) >= 20, "expected big groups around the hubs"


def test_plan_groups_only_tails_that_cannot_take_a_members_leaf():
    def grouped(p: Pattern) -> dict:
        types = build_plan(p.query()).incremental
        return {tuple(types.roots[t].tolist()): int(types.leaf_root[t])
                for t in range(types.count) if types.leaf_root[t] >= 0}

    # One label: the star's other leaves (its counted tail) could be a member's leaf.
    assert grouped(Pattern([0, 0, 0, 0], [(0, 1), (0, 2), (0, 3)])) == {}
    # Each leaf's tail is the other leaf, of another label: both leaf edges, both ways.
    assert grouped(Pattern([1, 0, 0, 0], [(0, 1), (1, 2), (2, 3)])) == \
        {(0, 1): 0, (1, 0): 1, (3, 2): 0, (2, 3): 1}
    # A head level before the leaf run, neither of the root leaf's label.
    head = build_plan(PATTERNS["head"].query()).incremental
    t = [i for i in range(head.count) if head.roots[i].tolist() == [3, 2]][0]
    assert head.leaf_root[t] == 0 and head.tail_head[t]
    # A pair tail (q4, q5) of other labels than the root leaf's.
    pair = build_plan(PATTERNS["pair"].query()).incremental
    t = [i for i in range(pair.count) if pair.roots[i].tolist() == [0, 1]][0]
    assert pair.leaf_root[t] == 0 and pair.tail_free[t] and pair.leaf_from[t] == 6
    # A counted last level may collide: the weights handle it.
    assert set(grouped(PATTERNS["diamond_leaf"])) == {(0, 1), (1, 0)}


def test_list_limits_per_query_keep_the_others_grouped(group_spy):
    """One query lists its matches, the others only count them: the counted ones still
    take the grouped search, the listed one lists exactly its new and lost matches."""
    rng = random.Random(23)
    d = hub_data(rng, 13, 2, 1)
    # No batch takes the shared call (count_small, count_phase), which skips the grouping
    # step when no group can form (tests/gpu/cpu/test_small_batches.py).
    engine = Engine(d.labeled(), backend="cpu",
                    config=EngineConfig(serial_below_tasks=1, shared_call=False))
    qids = {engine.add_query(p.query()): p for p in
            (Pattern([0, 1, 0], [(0, 1), (1, 2)]), Pattern([0, 0, 1], [(0, 1), (1, 2), (0, 2)]))}
    listed = next(iter(qids))
    before = {qid: embeddings(d, p) for qid, p in qids.items()}
    groupings = 0
    for _ in range(15):
        group_spy.clear()
        res = engine.apply(hub_batch(rng, d, 1), list_limit={listed: 10_000})
        groupings += len(group_spy)
        after = {qid: embeddings(d, p) for qid, p in qids.items()}
        for qid in qids:
            delta = res.queries[qid]
            assert delta.positive == len(after[qid] - before[qid])
            assert delta.negative == len(before[qid] - after[qid])
            if qid == listed:
                assert {tuple(r) for r in delta.added.tolist()} == after[qid] - before[qid]
                assert {tuple(r) for r in delta.removed.tolist()} == before[qid] - after[qid]
            else:
                assert delta.added is None
        # Grouping is tried for the counted query only (listing takes the one-by-one
        # path): at most once per phase.
        assert len(group_spy) <= 2
        before = after
    assert groupings > 0, "the counted query never took the grouped search"
    engine.check()
