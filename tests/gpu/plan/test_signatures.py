"""Signatures and candidate bits against their definition, after random batches."""
from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
from gpu.plan.query import QueryGraph
from gpu.plan.signatures import LABELS_PER_WORD, fields_ge
from tests.graphs import Data

U64 = st.integers(min_value=0, max_value=2**64 - 1)


def fields_ge_loop(d: int, q: int) -> bool:
    return all((d >> (2 * i)) & 3 >= (q >> (2 * i)) & 3 for i in range(32))


@settings(max_examples=300, deadline=None)
@given(U64, U64)
def test_fields_ge_matches_loop(d, q):
    assert bool(fields_ge(np.uint64(d), np.uint64(q))) == fields_ge_loop(d, q)


@settings(max_examples=200, deadline=None)
@given(U64, st.integers(min_value=0, max_value=31), st.integers(min_value=0, max_value=3),
       st.integers(min_value=0, max_value=3))
def test_fields_ge_single_field_decides(base, field, dv, qv):
    """Equal words except one field: the answer is that field's comparison."""
    mask = 3 << (2 * field)
    d = (base & ~mask) | (dv << (2 * field))
    q = (base & ~mask) | (qv << (2 * field))
    assert bool(fields_ge(np.uint64(d), np.uint64(q))) == (dv >= qv)


def test_fields_ge_every_field_pair_exhaustive():
    for field in range(32):
        for dv in range(4):
            for qv in range(4):
                for other in (0, 0x5555555555555555, 0xAAAAAAAAAAAAAAAA, 2**64 - 1):
                    mask = 3 << (2 * field)
                    d = (other & ~mask) | (dv << (2 * field))
                    q = (other & ~mask) | (qv << (2 * field))
                    assert bool(fields_ge(np.uint64(d), np.uint64(q))) == (dv >= qv)


# --------------------------------------------------------------------------- model


def random_batch(rng: random.Random, m: Data, labels: int, next_id: list[int]):
    """A valid batch (records) and its effect applied to m."""
    recs = []
    alive = sorted(m.vertices)
    dead = set(rng.sample(alive, min(len(alive) // 6, rng.randint(0, 2))))
    for v in dead:
        recs.append((DELETE_VERTEX, v, 0, NO_LABEL))
    new = {}
    for _ in range(rng.randint(0, 3)):
        v = next_id[0]
        next_id[0] += 1
        new[v] = rng.randrange(labels)
        recs.append((ADD_VERTEX, v, 0, new[v]))
    keep = [v for v in alive if v not in dead] + list(new)
    present = [k for k in m.edges if not k & dead]
    gone = set(rng.sample(present, min(len(present), rng.randint(0, 8))))
    for k in gone:
        a, b = sorted(k)
        recs.append((DELETE_EDGE, b, a, NO_LABEL))
    ins = {}
    for _ in range(rng.randint(0, 14)):
        a, b = rng.sample(keep, 2)
        k = frozenset((a, b))
        if k not in m.edges and k not in ins:
            ins[k] = rng.randrange(2)
            recs.append((INSERT_EDGE, a, b, ins[k]))
    rng.shuffle(recs)
    m.change(dead, new, gone, ins)
    return UpdateStream.from_records(recs)


def brute_candidates(m: Data, q: QueryGraph) -> dict[int, int]:
    """Bit u of vertex v: same label, deg >=, and min(3, count) >= for every label."""
    qcounts = [Counter(int(q.labels[b]) for b in q.neighbors(a)) for a in range(q.num_vertices)]
    out = {}
    for v, lab in m.vertices.items():
        nb = m.nbrs(v)
        counts = Counter(m.vertices[w] for w in nb)
        bits = 0
        for a in range(q.num_vertices):
            if lab != q.labels[a] or len(nb) < len(q.neighbors(a)):
                continue
            if all(min(3, counts[L]) >= min(3, c) for L, c in qcounts[a].items()):
                bits |= 1 << a
        out[v] = bits
    return out


def check_bits(engine: Engine, m: Data, queries: dict[int, QueryGraph]) -> None:
    engine.check()
    g = engine.graph
    for qid, q in queries.items():
        want = brute_candidates(m, q)
        cand = engine.signatures.cand[qid]
        ext = sorted(want)
        slots = g.ids.lookup(np.array(ext, np.int64))
        assert (slots >= 0).all()
        got = {v: int(cand[s]) for v, s in zip(ext, slots.tolist())}
        assert got == want, qid
        dead = ~g.alive[: g.num_slots]
        assert not cand[: g.num_slots][dead].any()


def query(labels, edges, elabels=None) -> QueryGraph:
    return QueryGraph.build("q", np.arange(len(labels)), labels, edges, elabels)


def random_model(rng: random.Random, n: int, labels: int, p: float) -> Data:
    verts = {v: rng.randrange(labels) for v in range(n)}
    edges = {frozenset((a, b)): rng.randrange(2)
             for a in range(n) for b in range(a + 1, n) if rng.random() < p}
    return Data(verts, edges)


@pytest.mark.parametrize("cfg", [EngineConfig.tiny, EngineConfig], ids=["tiny", "default"])
def test_candidate_bits_follow_random_batches(cfg):
    rng = random.Random(11)
    m = random_model(rng, 14, 3, 0.3)
    engine = Engine(m.labeled(), backend="cpu", config=cfg())
    queries = {}
    shapes = [
        query([0, 1, 1, 1], [(0, 1), (0, 2), (0, 3)]),             # star: needs count 3
        query([0, 0, 0], [(0, 1), (1, 2), (0, 2)]),                # triangle
        query([2, 0, 1, 0, 2], [(0, 1), (1, 2), (2, 3), (3, 4)]),  # path
        query([1, 1, 1, 1, 1], [(0, 1), (0, 2), (0, 3), (0, 4)]),  # count saturates at 3
    ]
    for q in shapes:
        queries[engine.add_query(q)] = q
    check_bits(engine, m, queries)
    next_id = [1000]
    for _ in range(60):
        engine.apply(random_batch(rng, m, 3, next_id))
        check_bits(engine, m, queries)


def test_label_set_grows_past_one_word():
    rng = random.Random(4)
    nlab = 40
    m = random_model(rng, 60, nlab, 0.12)
    engine = Engine(m.labeled(), backend="cpu", config=EngineConfig.tiny())
    queries = {}
    # first query: labels 0..19 (a random tree)
    q1 = query(list(range(20)), [(rng.randrange(i), i) for i in range(1, 20)])
    queries[engine.add_query(q1)] = q1
    assert engine.signatures.words == 1
    assert engine.signatures.labels.tolist() == list(range(20))
    check_bits(engine, m, queries)
    next_id = [1000]
    for _ in range(5):
        engine.apply(random_batch(rng, m, nlab, next_id))
        check_bits(engine, m, queries)
    # second query: labels 20..39, with repeats so counts of high-word labels matter
    labels2 = list(range(20, 40)) + [36, 36, 38, 39, 39, 39]
    q2 = query(labels2, [(0, i) for i in range(1, 6)] + [(i - 1, i) for i in range(6, 20)]
               + [(15, 20), (15, 21), (15, 22), (17, 23), (17, 24), (17, 25)])
    queries[engine.add_query(q2)] = q2
    assert engine.signatures.labels.tolist() == list(range(40))
    assert len(engine.signatures.labels) > LABELS_PER_WORD
    assert engine.signatures.words == 2
    assert engine.signatures.codes.shape[1] == 2
    check_bits(engine, m, queries)
    # a small query living in the second word only, with a candidate-rich data area
    q3 = query([36, 39, 39, 38], [(0, 1), (0, 2), (0, 3)])
    hub = 5000
    m.vertices[hub] = 36
    recs = [(ADD_VERTEX, hub, 0, 36)]
    for i, lab in enumerate([39, 39, 38, 39]):
        m.vertices[hub + 1 + i] = lab
        recs.append((ADD_VERTEX, hub + 1 + i, 0, lab))
        m.edges[frozenset((hub, hub + 1 + i))] = 0
        recs.append((INSERT_EDGE, hub, hub + 1 + i, 0))
    engine.apply(UpdateStream.from_records(recs))
    queries[engine.add_query(q3)] = q3
    check_bits(engine, m, queries)
    hub_slot = int(engine.graph.ids.lookup(np.array([hub]))[0])
    bit = lambda: int(engine.signatures.cand[max(queries)][hub_slot]) & 1
    assert bit()
    # three 39-neighbours -> two (still enough) -> one (not enough)
    for other, still in ((hub + 1, 1), (hub + 2, 0)):
        m.edges.pop(frozenset((hub, other)))
        engine.apply(UpdateStream.from_records([(DELETE_EDGE, other, hub, NO_LABEL)]))
        check_bits(engine, m, queries)
        assert bit() == still
    for _ in range(10):
        engine.apply(random_batch(rng, m, nlab, next_id))
        check_bits(engine, m, queries)


def test_removed_query_keeps_others_right():
    rng = random.Random(8)
    m = random_model(rng, 12, 2, 0.35)
    engine = Engine(m.labeled(), backend="cpu", config=EngineConfig.tiny())
    qa = query([0, 1, 1], [(0, 1), (0, 2)])
    qb = query([5, 6], [(0, 1)])           # labels absent from the data
    ida, idb = engine.add_query(qa), engine.add_query(qb)
    queries = {ida: qa, idb: qb}
    check_bits(engine, m, queries)
    engine.remove_query(idb)
    del queries[idb]
    next_id = [100]
    for _ in range(10):
        engine.apply(random_batch(rng, m, 2, next_id))
        check_bits(engine, m, queries)


def test_degree_matters_when_counts_saturate():
    """Four same-label neighbours saturate at code 3: only the degree tells 3 from 4."""
    verts = {0: 1, 1: 1, 2: 1, 3: 1,            # 0: three label-1 neighbours, degree 3
             10: 1, 11: 1, 12: 1, 13: 1, 14: 2,  # 10: three label-1 + one label-2, degree 4
             20: 1, 21: 1, 22: 1, 23: 1, 24: 1}  # 20: four label-1 neighbours
    edges = {frozenset((c, c + i)): 0 for c in (0, 10, 20) for i in range(1, 5)
             if c + i in verts}
    m = Data(verts, edges)
    engine = Engine(m.labeled(), backend="cpu", config=EngineConfig.tiny())
    q = query([1, 1, 1, 1, 1], [(0, 1), (0, 2), (0, 3), (0, 4)])
    qid = engine.add_query(q)
    check_bits(engine, m, {qid: q})
    slot = dict(zip([0, 10, 20], engine.graph.ids.lookup(np.array([0, 10, 20])).tolist()))
    cand = engine.signatures.cand[qid]
    assert [int(cand[slot[v]]) & 1 for v in (0, 10, 20)] == [0, 1, 1]
    # the code of 0 and 20 for label 1 is the same (saturated) ...
    codes = engine.signatures.codes
    assert codes[slot[0], 0] == codes[slot[20], 0]
    # ... and deleting one edge of 20 brings it down to 0's situation
    m.edges.pop(frozenset((20, 24)))
    engine.apply(UpdateStream.from_records([(DELETE_EDGE, 20, 24, NO_LABEL)]))
    check_bits(engine, m, {qid: q})
    assert int(engine.signatures.cand[qid][slot[20]]) & 1 == 0


def test_planner_edge_counts_follow_random_batches():
    """The planner's measured edges between candidate sets (one pass over the lists in
    compiled code) equal a count over the model's labelled edges, batch after batch."""
    rng = random.Random(5)
    m = random_model(rng, 16, 3, 0.35)
    engine = Engine(m.labeled(), backend="cpu", config=EngineConfig.tiny())
    queries = {}
    for q in [query([0, 1, 1], [(0, 1), (1, 2)], [1, 0]),
              query([0, 0, 0], [(0, 1), (1, 2), (0, 2)]),
              query([2, 0, 1, 0], [(0, 1), (1, 2), (2, 3), (0, 3)], [0, 1, 1, 0])]:
        queries[engine.add_query(q)] = q
    seen = 0
    next_id = [1000]
    for _ in range(30):
        for qid, q in queries.items():
            bits = brute_candidates(m, q)
            got = engine._plan_stats(q, engine.signatures.host_cand(qid)).edges
            for (a, b), label in zip(q.edges.tolist(), q.edge_labels.tolist()):
                want = 0
                for k, lab in m.edges.items():
                    x, y = tuple(k)
                    if lab == label:
                        bx, by = bits.get(x, 0), bits.get(y, 0)
                        want += (bx >> a & 1) * (by >> b & 1) + (by >> a & 1) * (bx >> b & 1)
                assert got[a, b] == got[b, a] == want, (qid, a, b)
                seen += want
        engine.apply(random_batch(rng, m, 3, next_id))
    assert seen > 0
