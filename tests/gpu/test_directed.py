"""Directed graphs (issue 22) on the engine against the oracle: random directed graphs,
queries and batches (both arcs of a pair, one arc inserted where the reverse exists,
deletions of one direction, vertex deletes, cancelling and repeated records, rejected
batches), each batch's deltas, counts and listings equal to the set differences of
tests/reference.py's directed embeddings (themselves checked against networkx's
DiGraphMatcher in tests/gpu/test_reference_directed.py)."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.plan.planner import build_plan
from gpu.plan.query import QueryError, QueryGraph
from tests import reference as ref
from tests.gpu.test_batch_groups import group_sizes  # noqa: F401  (a fixture)
from tests.gpu.test_oracle import (CONFIGS, CUDA_CONFIGS, EngineSetup, Harness, fresh_id,
                                   to_labeled, to_query, to_stream)
from tests.gpu.test_reference_directed import random_digraph, random_directed_query
from tests.reference import RefGraph, RefQuery

# Both executors, every config; on CUDA every device graph layout: the packed memory
# array's read view (the default), the lists', and the array without its view, which a
# directed engine replaces with the lists' (gpu.engine.device_config).
DIRECTED_CUDA_CONFIGS = {
    **CUDA_CONFIGS,
    "tiny-lists": lambda: dataclasses.replace(EngineConfig.tiny(), device_graph="lists"),
}
SETUPS = [pytest.param((name, "cpu"), id=name) for name in sorted(CONFIGS)] + [
    pytest.param((name, "cuda"), id=f"{name}-cuda", marks=pytest.mark.gpu)
    for name in sorted(CONFIGS | DIRECTED_CUDA_CONFIGS)]
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=SETUPS, scope="module")
def setup(request) -> EngineSetup:
    name, backend = request.param
    return EngineSetup((CONFIGS | DIRECTED_CUDA_CONFIGS)[name](), backend)


def _directed(labels, arcs) -> RefQuery:
    return RefQuery.build(labels, arcs, directed=True)


# Uniform labels where the shape has automorphisms: each match counted once per image.
SHAPES = {
    "arc": _directed([0, 0], [(0, 1)]),
    "cycle3": _directed([0, 0, 0], [(0, 1), (1, 2), (2, 0)]),
    "transitive3": _directed([0, 0, 0], [(0, 1), (1, 2), (0, 2)]),
    "cycle4": _directed([0] * 4, [(0, 1), (1, 2), (2, 3), (3, 0)]),
    "cycle5": _directed([0] * 5, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)]),
    "fan_out": _directed([0] * 4, [(0, 1), (0, 2), (0, 3)]),
    "fan_in": _directed([0] * 4, [(1, 0), (2, 0), (3, 0)]),
    "reciprocal": _directed([0, 0], [(0, 1), (1, 0)]),
    "reciprocal_tail": _directed([0, 0, 0], [(0, 1), (1, 0), (1, 2)]),
    "bowtie": _directed([0] * 4, [(0, 1), (1, 0), (1, 2), (2, 3), (3, 1)]),
    # Counted leaves (gpu/plan/leaf_counts.py, per arc direction): one parent, one label,
    # arcs both ways (overlapping candidates: the counted run stops between them); leaves
    # of two labels; leaves under two parents; a leaf under a reciprocal pair.
    "fan_mixed": _directed([0] * 4, [(0, 1), (2, 0), (0, 3)]),
    "fan_two_labels": _directed([0, 0, 1, 1, 0], [(0, 1), (2, 0), (0, 3), (4, 0)]),
    "tree": _directed([0] * 5, [(0, 1), (1, 2), (3, 1), (4, 0)]),
    "reciprocal_leaves": _directed([0] * 4, [(0, 1), (1, 0), (2, 1), (1, 3)]),
}


def random_graph(rng: random.Random) -> RefGraph:
    vlabels, elabels = rng.randint(1, 2), rng.choice([1, 1, 2])
    g = random_digraph(rng, rng.randint(6, 12), rng.uniform(0.15, 0.35), vlabels, elabels,
                       rng.uniform(0.1, 0.6))
    g.num_vlabels, g.num_elabels = vlabels, elabels
    return g


def random_queries(rng: random.Random, g: RefGraph) -> dict[str, RefQuery]:
    qs = {}
    for name in rng.sample(sorted(SHAPES), 3):
        qs[name] = SHAPES[name]
    for i in range(2):
        qs[f"rand{i}"] = random_directed_query(rng, rng.randint(2, 4), rng.uniform(0, 0.3),
                                               g.num_vlabels, g.num_elabels)
    return qs


def _delete(rng, g: RefGraph, arc) -> tuple:
    lab = g.edges[arc] if rng.random() < 0.5 else ref.NO_LABEL
    return (ref.DELETE_EDGE, *arc, lab)


BATCH_KINDS = ("insert", "reverse", "delete", "mixed", "vertex", "duplicate", "cancel",
               "noop")


def gen_batch(rng: random.Random, g: RefGraph, kind: str) -> list[tuple]:
    """A batch of the given kind, only of behaviour the brief specifies (each arc at most
    once, except where the kind repeats it; no insert touches a vertex deleted in the
    same batch)."""
    verts = sorted(g.vertices)
    absent = [(u, v) for u in verts for v in verts if u != v and (u, v) not in g.edges]
    reverse = [a for a in absent if (a[1], a[0]) in g.edges]
    arcs = sorted(g.edges)
    rng.shuffle(absent)
    rng.shuffle(arcs)
    rng.shuffle(reverse)
    lab = lambda: rng.randrange(g.num_elabels)  # noqa: E731
    recs: list[tuple] = []

    def take(pool, k):
        out = pool[:k]
        del pool[:k]
        return out

    if kind in ("insert", "mixed"):
        for a in take(absent, rng.randint(1, 5)):
            recs.append((ref.INSERT_EDGE, *a, lab()))
    if kind == "reverse":
        # An arc inserted where its reverse exists, and both arcs of a new pair.
        for a in take(reverse, rng.randint(1, 3)):
            recs.append((ref.INSERT_EDGE, *a, lab()))
        pairs = [a for a in absent if (a[1], a[0]) not in g.edges and a[0] < a[1]
                 and not any(r[1:3] in (a, a[::-1]) for r in recs)]
        for u, v in pairs[:rng.randint(1, 2)]:
            recs.extend([(ref.INSERT_EDGE, u, v, lab()), (ref.INSERT_EDGE, v, u, lab())])
    if kind in ("delete", "mixed"):
        for a in take(arcs, rng.randint(1, 5)):
            recs.append(_delete(rng, g, a))
    if kind == "vertex":
        taken = set(g.vertices)
        dead = set(rng.sample(verts, min(len(verts), rng.randint(0, 2))))
        for v in dead:
            recs.append((ref.DELETE_VERTEX, v, 0, ref.NO_LABEL))
        alive = [v for v in verts if v not in dead]
        new = []
        for _ in range(rng.randint(1, 3)):
            v = fresh_id(rng, taken)
            taken.add(v)
            new.append(v)
            recs.append((ref.ADD_VERTEX, v, 0, rng.randrange(g.num_vlabels)))
        ends = alive + new
        chosen = set()
        for x in new:
            for _ in range(rng.randint(1, 4)):
                y = rng.choice(ends)
                if y != x:
                    chosen.add((x, y) if rng.random() < 0.5 else (y, x))
        for a in chosen:
            recs.append((ref.INSERT_EDGE, *a, lab()))
        for a in take([a for a in arcs if not set(a) & dead], rng.randint(0, 2)):
            recs.append(_delete(rng, g, a))
    if kind == "duplicate":
        for a in take(arcs, rng.randint(1, 3)):
            recs.append((ref.INSERT_EDGE, *a, lab()))   # an existing arc: a no-op
        for a in take(absent, rng.randint(1, 3)):
            label = lab()
            recs.extend([(ref.INSERT_EDGE, *a, label)] * rng.randint(1, 3))
    if kind == "cancel":
        for a in take(arcs, rng.randint(1, 2)) + take(absent, rng.randint(1, 2)):
            label = g.edges.get(a, lab())
            pair = [(ref.INSERT_EDGE, *a, label),
                    (ref.DELETE_EDGE, *a, label if rng.random() < 0.5 else ref.NO_LABEL)]
            recs.extend(pair if rng.random() < 0.5 else pair[::-1])
    if kind == "noop":
        for a in take(absent, rng.randint(1, 3)):
            recs.append((ref.DELETE_EDGE, *a, ref.NO_LABEL))
        for a in take(arcs, rng.randint(1, 2)):
            recs.append((ref.INSERT_EDGE, *a, g.edges[a]))
    rng.shuffle(recs)
    return recs


def make_harness(seed: int, setup: EngineSetup) -> tuple[random.Random, Harness]:
    rng = random.Random(seed)
    g = random_graph(rng)
    return rng, Harness(g, setup, random_queries(rng, g))


@pytest.mark.parametrize("kind", BATCH_KINDS)
def test_batch_kinds_match_oracle(kind, setup):
    for seed in range(6):
        rng, h = make_harness(1000 * seed + len(kind), setup)
        for _ in range(4):
            h.apply(gen_batch(rng, h.ref, kind), list_limit=rng.choice([0, ref_limit(rng)]))


def ref_limit(rng: random.Random) -> int:
    return rng.choice([1, 3, 100_000])


def test_long_random_stream(setup):
    rng, h = make_harness(7, setup)
    for _ in range(40):
        h.apply(gen_batch(rng, h.ref, rng.choice(BATCH_KINDS)),
                list_limit=rng.choice([0, 100_000]))


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shapes_on_a_dense_digraph(name, setup):
    """Each shape alone on a dense digraph with many reciprocal pairs, torn down arc by
    arc, one direction at a time."""
    rng = random.Random(len(name))
    g = random_digraph(rng, 9, 0.45, 1, 1, 0.7)
    h = Harness(g, setup, {name: SHAPES[name]})
    arcs = sorted(h.ref.edges)
    rng.shuffle(arcs)
    while arcs:
        h.apply([(ref.DELETE_EDGE, *a, ref.NO_LABEL) for a in arcs[:5]])
        arcs = arcs[5:]
    assert h.engine.count(1) == 0


def test_rejected_batches_change_nothing(setup):
    rng, h = make_harness(11, setup)
    u, v, w = sorted(h.ref.vertices)[:3]
    missing = fresh_id(rng, set(h.ref.vertices))
    for records in ([(ref.INSERT_EDGE, u, u, 0)],
                    [(ref.INSERT_EDGE, u, missing, 0), (ref.INSERT_EDGE, u, v, 0)],
                    [(ref.INSERT_EDGE, u, v, 0), (ref.INSERT_EDGE, u, v, 1)],
                    [(ref.ADD_VERTEX, v, 0, h.ref.vertices[v]),
                     (ref.DELETE_VERTEX, v, 0, ref.NO_LABEL)],
                    [(ref.ADD_VERTEX, w, 0, h.ref.vertices[w] + 1)]):
        valid = gen_batch(rng, h.ref, "mixed")
        poisoned = valid + records
        rng.shuffle(poisoned)
        assert h.apply(poisoned) is None        # both reject it, and nothing changed
        assert h.apply(valid) is not None


def test_two_labels_on_the_two_arcs_of_a_pair_are_no_conflict(setup):
    g = RefGraph.build({1: 0, 2: 0}, [], directed=True)
    h = Harness(g, setup, {"pair": _directed([0, 0], [(0, 1), (1, 0)])})
    res = h.apply([(ref.INSERT_EDGE, 1, 2, 0), (ref.INSERT_EDGE, 2, 1, 1)])
    assert res.applied["edges_inserted"] == 2
    assert h.engine.count(1) == 0       # the labels differ: no pair of label 0
    res = h.apply([(ref.DELETE_EDGE, 2, 1, 1)])
    assert res.applied["edges_deleted"] == 1
    res = h.apply([(ref.INSERT_EDGE, 2, 1, 0)])
    assert res.queries[1].positive == 2


def test_the_reverse_arc_is_a_different_edge(setup):
    g = RefGraph.build({1: 0, 2: 0, 3: 0}, [(1, 2, 0), (2, 3, 0)], directed=True)
    h = Harness(g, setup, {"path": _directed([0, 0, 0], [(0, 1), (1, 2)])})
    assert h.engine.count(1) == 1
    res = h.apply([(ref.INSERT_EDGE, 2, 1, 0)])       # 2 -> 1 beside 1 -> 2
    assert (res.queries[1].positive, res.applied["edges_inserted"]) == (0, 1)
    res = h.apply([(ref.INSERT_EDGE, 3, 1, 0)])       # 2->3->1, 3->1->2
    assert res.queries[1].positive == 2
    res = h.apply([(ref.DELETE_EDGE, 1, 2, ref.NO_LABEL)])     # only 1 -> 2 goes
    assert (res.applied["edges_deleted"], res.queries[1].negative) == (1, 2)
    out = h.engine.to_labeled()
    assert sorted(zip(out.edge_src.tolist(), out.edge_dst.tolist())) == [(2, 1), (2, 3),
                                                                         (3, 1)]


def test_directed_leaves_are_counted_per_arc_direction():
    """The planner counts trailing leaves of directed queries (tails from leaf_counts), but
    not across two leaves of one label and parent whose arcs point different ways."""
    def counted(shape: str) -> list[int]:
        types = build_plan(to_query(SHAPES[shape], shape)).incremental
        return [types.orders.shape[1] - int(first) for first in types.leaf_from]

    assert counted("fan_out") == [2] and counted("fan_in") == [2]
    assert max(counted("fan_two_labels")) == 2
    # fan_mixed rooted at 0 -> 1: its last two levels are the leaves 2 -> 0 and 0 -> 3,
    # one label and parent, arcs both ways: only the last is counted.  Rooted at 2 -> 0:
    # the leaves 0 -> 1 and 0 -> 3 share one set, both counted.
    types = build_plan(to_query(SHAPES["fan_mixed"], "fan_mixed")).incremental
    assert {tuple(root): n for root, n in zip(types.roots.tolist(), counted("fan_mixed"),
                                               strict=True)} == {(0, 1): 1, (2, 0): 2}
    assert all(leaf_root == -1 for leaf_root in
               build_plan(to_query(SHAPES["fan_out"], "fan_out")).incremental.leaf_root)


def test_plans_root_at_arcs_only():
    q = QueryGraph.build("p", [0, 1, 2], [0, 0, 0], [(0, 1), (1, 2)], directed=True)
    plan = build_plan(q)
    roots = sorted(tuple(r) for r in plan.incremental.roots.tolist())
    assert roots == [(0, 1), (1, 2)]
    cycle = QueryGraph.build("c", [0, 1, 2], [0, 0, 0], [(0, 1), (1, 2), (2, 0)],
                             directed=True)
    # The three arcs of a directed 3-cycle are one orbit (rotations); undirected it has six
    # directed edges in one orbit.
    assert build_plan(cycle).incremental.count == 1
    assert build_plan(cycle).incremental.multiplicity.tolist() == [3]


def test_queries_of_the_other_kind_are_refused():
    directed = Engine(directed=True)
    undirected = Engine()
    arc = QueryGraph.build("a", [0, 1], [0, 0], [(0, 1)], directed=True)
    edge = QueryGraph.build("e", [0, 1], [0, 0], [(0, 1)])
    with pytest.raises(ValueError, match="undirected query on a directed graph"):
        directed.add_query(edge)
    with pytest.raises(ValueError, match="directed query on a undirected graph|directed "
                                         "query on an undirected graph"):
        undirected.add_query(arc)
    with pytest.raises(ValueError, match="backend must be one of auto, cpu, cuda, got 'gpu'"):
        Engine(directed=True, backend="gpu")    # not taken for "auto"


def test_directed_query_validation():
    # Both arcs of a pair are two edges; the same arc twice is refused.
    q = QueryGraph.build("r", [5, 6], [0, 0], [(5, 6), (6, 5)], directed=True)
    assert q.num_edges == 2 and q.degrees.tolist() == [2, 2]
    with pytest.raises(QueryError, match="appears twice"):
        QueryGraph.build("r", [5, 6], [0, 0], [(5, 6), (5, 6)], directed=True)
    with pytest.raises(QueryError, match="appears twice"):
        QueryGraph.build("u", [5, 6], [0, 0], [(5, 6), (6, 5)])


def test_static_count_equals_oracle_on_random_digraphs(setup):
    for seed in range(15):
        rng = random.Random(seed)
        g = random_graph(rng)
        h = Harness(g, setup, random_queries(rng, g))   # Harness checks count and matches
        assert h.engine.directed and all(
            np.asarray(h.engine.matches(qid).rows).shape[1] == q.n
            for qid, q in h.queries.items() if h.engine.count(qid))


GROUP_CONFIGS = {
    "serial": dataclasses.replace(EngineConfig(), shared_region_threads=0,
                                  batch_group_edges=3),
    # Every group and phase one parallel region (count_phase).
    "region": dataclasses.replace(EngineConfig(), shared_region_threads=1,
                                  serial_below_tasks=1, group_region_edges=1),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", sorted(GROUP_CONFIGS))
def test_batch_groups_and_shared_calls_equal_the_oracle(mode, backend, group_sizes):
    """Small one-kind batches of arcs (reverse arcs among them) through apply_stream: they
    share searches in batch groups and the compiled shared calls, and each batch's counts
    are still its own."""
    rng = random.Random(5)
    g = random_digraph(rng, 10, 0.3, 1, 1, 0.5)
    queries = {name: SHAPES[name] for name in ("cycle3", "reciprocal_tail", "fan_in",
                                                "bowtie")}
    engine = Engine(to_labeled(g), backend=backend, config=GROUP_CONFIGS[mode],
                    directed=True)
    qids = {engine.add_query(to_query(q, name)): q for name, q in queries.items()}
    oracle = g.copy()
    batches, expected = [], []
    for _ in range(40):
        verts = sorted(oracle.vertices)
        inserting = rng.random() < 0.6
        pool = ([(u, v) for u in verts for v in verts if u != v and (u, v) not in oracle.edges]
                if inserting else sorted(oracle.edges))
        if not pool:
            continue
        arcs = rng.sample(pool, min(len(pool), rng.randint(1, 2)))
        records = [(ref.INSERT_EDGE if inserting else ref.DELETE_EDGE, u, v,
                    0 if inserting else ref.NO_LABEL) for u, v in arcs]
        before = [oracle.embeddings(q) for q in qids.values()]
        oracle.apply(records)
        after = [oracle.embeddings(q) for q in qids.values()]
        batches.append(to_stream(records))
        expected.append([(len(a - b), len(b - a)) for a, b in zip(after, before)])
    got = [[(r.queries[qid].positive, r.queries[qid].negative) for qid in qids]
           for r in engine.apply_stream(batches)]
    assert got == expected
    assert max(group_sizes) > 1       # groups formed
    engine.check()
    for qid, q in qids.items():
        assert engine.count(qid) == len(oracle.embeddings(q))


@pytest.mark.parametrize("backend", BACKENDS)
def test_signatures_count_in_and_out_neighbours_apart(backend):
    """A fan-in's hub (three arcs in) is no candidate of a fan-out's centre (three out),
    and keeps the bit when its arcs turn round, batch by batch."""
    g = RefGraph.build({1: 0, 2: 0, 3: 0, 4: 0}, [(2, 1, 0), (3, 1, 0), (4, 1, 0)],
                       directed=True)
    h = Harness(g, EngineSetup(CONFIGS["default"](), backend), {"out": SHAPES["fan_out"]})
    engine = h.engine
    hub = int(engine.graph.ids.lookup(np.array([1]))[0])
    centre = 1 << int(engine.plan(1).query.degrees.argmax())
    assert int(engine.signatures.cand[1][hub]) & centre == 0
    h.apply([(ref.DELETE_EDGE, a, 1, ref.NO_LABEL) for a in (2, 3, 4)]
            + [(ref.INSERT_EDGE, 1, a, 0) for a in (2, 3, 4)])
    assert int(engine.signatures.cand[1][hub]) & centre != 0
    engine.check()
