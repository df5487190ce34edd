"""Engine-vs-oracle correctness: every batch's deltas, counts and listings must be exact.

Each scenario keeps a ``RefGraph`` (tests/reference.py) in lock-step with an
``Engine`` on the CPU backend. Around every batch the oracle enumerates all
embeddings before and after; the engine's positive/negative counts, its listed
added/removed rows, ``count`` and ``matches`` must equal the set differences
exactly. Every scenario runs with the default ``EngineConfig`` and with
``EngineConfig.tiny()`` (which forces capacity growth, list relocation and
one-task chunks on these small graphs).

Only behaviour the brief specifies is asserted; batches mixing cases it leaves
open (see tests/reference.py) are never generated here.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import random
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests import reference as ref
from tests.reference import RefGraph, RefQuery, Rejected

# Skip only while the engine module does not exist at all: once it exists, a
# broken import must fail loudly rather than silently skip the suite.
if importlib.util.find_spec("gpu.engine") is None:
    pytest.skip("gpu.engine is not written yet", allow_module_level=True)

from gpu.io import records as io_records  # noqa: E402
from gpu.engine import BatchRejected, Engine  # noqa: E402
from gpu.io.records import LabeledGraph, UpdateStream  # noqa: E402
from gpu.plan.query import QueryGraph  # noqa: E402

try:
    from gpu.engine import EngineConfig  # noqa: E402
except ImportError:  # the config may live only in gpu.config
    from gpu.config import EngineConfig  # noqa: E402

# Comfortably above any delta these small graphs produce, so listings are complete.
BIG_LIMIT = 100_000

CONFIGS: dict[str, Callable[[], EngineConfig]] = {
    "default": EngineConfig,
    "tiny": EngineConfig.tiny,
}
# The CUDA executor's other device graph layout (the CPU executor has only one), read
# through its view and directly; tiny, its segments hold 2 slots, so the window tree is
# deep, and the view's lists start with room for one entry.
CUDA_CONFIGS: dict[str, Callable[[], EngineConfig]] = {
    "tiny-pma": lambda: dataclasses.replace(EngineConfig.tiny(), device_graph="pma"),
    "tiny-pma-direct": lambda: dataclasses.replace(EngineConfig.tiny(), device_graph="pma",
                                                   pma_view=False),
}


@dataclass(frozen=True)
class EngineSetup:
    """Which executor runs the scenario, and with which tunables."""
    config: EngineConfig
    backend: str = "cpu"


# Every scenario runs on the CPU executor and, where a device is present, on the CUDA
# one: both must equal the oracle exactly.
SETUPS = [pytest.param((name, "cpu"), id=name) for name in sorted(CONFIGS)] + [
    pytest.param((name, "cuda"), id=f"{name}-cuda", marks=pytest.mark.gpu)
    for name in sorted(CONFIGS | CUDA_CONFIGS)]


@pytest.fixture(params=SETUPS, scope="module")
def engine_setup(request) -> EngineSetup:
    name, backend = request.param
    return EngineSetup((CONFIGS | CUDA_CONFIGS)[name](), backend)


# --------------------------------------------------------------------------
# conversions between the oracle's plain objects and the engine's formats

_KIND = {
    ref.ADD_VERTEX: io_records.ADD_VERTEX,
    ref.DELETE_VERTEX: io_records.DELETE_VERTEX,
    ref.INSERT_EDGE: io_records.INSERT_EDGE,
    ref.DELETE_EDGE: io_records.DELETE_EDGE,
}


def to_stream(records) -> UpdateStream:
    rows = []
    for kind, a, b, label in records:
        # An omitted insert label means 0; the record layer wants it explicit.
        if kind == ref.INSERT_EDGE and label == ref.NO_LABEL:
            label = ref.DEFAULT_EDGE_LABEL
        if kind in (ref.ADD_VERTEX, ref.DELETE_VERTEX):
            b = 0
        rows.append((_KIND[kind], a, b, io_records.NO_LABEL if label == ref.NO_LABEL else label))
    return UpdateStream.from_records(rows)


def to_labeled(g: RefGraph) -> LabeledGraph:
    ids = sorted(g.vertices)
    edges = g.edge_list()
    return LabeledGraph(
        vertex_ids=np.array(ids, dtype=np.int64),
        vertex_labels=np.array([g.vertices[v] for v in ids], dtype=np.int32),
        edge_src=np.array([e[0] for e in edges], dtype=np.int64),
        edge_dst=np.array([e[1] for e in edges], dtype=np.int64),
        edge_labels=np.array([e[2] for e in edges], dtype=np.int32),
    )


def to_query(q: RefQuery, name: str) -> QueryGraph:
    # Query vertex ids 0..n-1 in index order, so "query-vertex order" is unambiguous.
    edges = q.edge_list()
    g = LabeledGraph(
        vertex_ids=np.arange(q.n, dtype=np.int64),
        vertex_labels=np.array(q.labels, dtype=np.int32),
        edge_src=np.array([e[0] for e in edges], dtype=np.int64),
        edge_dst=np.array([e[1] for e in edges], dtype=np.int64),
        edge_labels=np.array([e[2] for e in edges], dtype=np.int32),
    )
    return QueryGraph.from_labeled(g, name=name, directed=q.directed)


def row_set(rows, n: int) -> set[tuple[int, ...]]:
    """Rows as a set of tuples; also checks shape, dtype and that no row repeats."""
    arr = np.asarray(rows)
    if arr.size == 0:
        return set()
    assert arr.dtype == np.int64, arr.dtype
    assert arr.ndim == 2 and arr.shape[1] == n, arr.shape
    out = {tuple(int(x) for x in row) for row in arr}
    assert len(out) == arr.shape[0], "a match was listed more than once"
    return out


# --------------------------------------------------------------------------
# the lock-step harness


class Harness:
    """A RefGraph and an Engine fed identical batches, checked after each one."""

    def __init__(self, g: RefGraph, setup: EngineSetup, queries: dict[str, RefQuery]):
        self.ref = g.copy()
        self.engine = Engine(to_labeled(self.ref), backend=setup.backend, config=setup.config,
                             directed=g.directed)
        self.queries: dict[int, RefQuery] = {}
        self.graveyard: set[int] = set()  # deleted ids, reused later to exercise slot reuse
        for name, q in queries.items():
            self.add_query(q, name)
        self.check_state()

    def add_query(self, q: RefQuery, name: str) -> int:
        qid = self.engine.add_query(to_query(q, name))
        assert qid not in self.queries
        self.queries[qid] = q
        return qid

    def remove_query(self, qid: int) -> None:
        self.engine.remove_query(qid)
        del self.queries[qid]

    def embeddings(self) -> dict[int, set]:
        return {qid: self.ref.embeddings(q) for qid, q in self.queries.items()}

    def check_state(self, expected: dict[int, set] | None = None) -> None:
        expected = self.embeddings() if expected is None else expected
        self.engine.check()   # incrementally maintained state equals a rebuild
        for qid, q in self.queries.items():
            assert self.engine.count(qid) == len(expected[qid]), qid
            ml = self.engine.matches(qid)
            assert not ml.truncated
            assert row_set(ml.rows, q.n) == expected[qid], qid

    def apply(self, records, list_limit: int = BIG_LIMIT, before=None):
        """Apply one batch to both sides and check it; returns the engine result.

        Returns None when the oracle rejects the batch (after checking that the
        engine rejected it too and that nothing changed).
        """
        before = self.embeddings() if before is None else before
        old = self.ref.copy()
        try:
            self.ref.apply(records)
        except Rejected:
            with pytest.raises(BatchRejected):
                self.engine.apply(to_stream(records), list_limit=list_limit)
            assert self.ref == old
            self.check_state(before)
            return None
        self.graveyard |= old.vertices.keys() - self.ref.vertices.keys()
        self.graveyard -= self.ref.vertices.keys()
        res = self.engine.apply(to_stream(records), list_limit=list_limit)
        after = self.embeddings()
        qid = None
        try:
            for qid, q in self.queries.items():
                check_delta(res.queries[qid], before[qid], after[qid], q.n, list_limit)
            qid = None
            self.check_state(after)
        except AssertionError as exc:
            # Make every failure a self-contained repro: graph, query, batch.
            query = self.queries.get(qid, "(state check)")
            raise AssertionError(f"{exc}\nquery {qid}: {query}\nbatch: {records!r}\n"
                                 f"list_limit: {list_limit}\ngraph before: {old!r}") from None
        return res


def check_delta(r, before: set, after: set, n: int, list_limit: int) -> None:
    pos, neg = after - before, before - after
    assert r.positive == len(pos), (r.positive, len(pos))
    assert r.negative == len(neg), (r.negative, len(neg))
    if list_limit == 0:
        # Nothing was asked to be listed: no rows (None or empty both say so).
        assert r.added is None or np.asarray(r.added).size == 0
        assert r.removed is None or np.asarray(r.removed).size == 0
        return
    added, removed = row_set(r.added, n), row_set(r.removed, n)
    assert added <= pos and removed <= neg
    assert len(added) <= list_limit and len(removed) <= list_limit
    complete = len(added) == len(pos) and len(removed) == len(neg)
    # A list may only be cut at the limit, and the flag must say so.
    assert bool(r.truncated) == (not complete)
    if len(pos) <= list_limit:
        assert added == pos
    if len(neg) <= list_limit:
        assert removed == neg


# --------------------------------------------------------------------------
# random graphs, queries and batches


def fresh_id(rng: random.Random, taken) -> int:
    # Arbitrary non-negative int64 ids: small, mid and near 2**62.
    while True:
        v = rng.choice([rng.randrange(100), rng.randrange(10**9), rng.randrange(2**62, 2**63)])
        if v not in taken:
            return v


def random_graph(rng: random.Random, n: int | None = None, vlabels: int | None = None,
                 elabels: int | None = None, p: float | None = None) -> RefGraph:
    n = rng.randint(6, 14) if n is None else n
    vlabels = rng.randint(1, 3) if vlabels is None else vlabels
    elabels = rng.choice([1, 1, 2]) if elabels is None else elabels
    p = rng.uniform(0.2, 0.45) if p is None else p
    ids: list[int] = []
    while len(ids) < n:
        ids.append(fresh_id(rng, set(ids)))
    g = RefGraph.build({v: rng.randrange(vlabels) for v in ids},
                       [(u, v, rng.randrange(elabels))
                        for i, u in enumerate(ids) for v in ids[i + 1:] if rng.random() < p])
    g.num_vlabels, g.num_elabels = vlabels, elabels  # remembered for batch generation
    return g


def subgraph_query(rng: random.Random, g: RefGraph, size: int) -> RefQuery | None:
    """A random connected subgraph of g (so it has >= 1 match), randomly renumbered."""
    starts = [v for v in g.vertices if any(v in k for k in g.edges)]
    if not starts:
        return None
    chosen = [rng.choice(starts)]
    tree: list[frozenset] = []
    while len(chosen) < size:
        frontier = [(k, next(iter(k - {x})))
                    for x in chosen for k in g.edges if x in k and not k <= set(chosen)]
        if not frontier:
            break
        k, y = rng.choice(frontier)
        chosen.append(y)
        tree.append(k)
    if len(chosen) < 2:
        return None
    inside = [k for k in g.edges if k <= set(chosen)]
    # Keep the spanning tree and a random part of the remaining induced edges.
    keep = set(tree) | {k for k in inside if rng.random() < 0.5}
    perm = list(range(len(chosen)))
    rng.shuffle(perm)
    index = {v: perm[i] for i, v in enumerate(chosen)}
    labels = [0] * len(chosen)
    for v, i in index.items():
        labels[i] = g.vertices[v]
    q = RefQuery.build(labels, [tuple(index[v] for v in k) + (g.edges[k],) for k in keep])
    assert q.is_connected()
    return q


def random_connected_query(rng: random.Random, n: int, vlabels: int, elabels: int) -> RefQuery:
    """A connected subgraph of a fresh random graph: random tree plus extra edges."""
    edges = {(rng.randrange(i), i) for i in range(1, n)}
    edges |= {(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < 0.3}
    perm = list(range(n))
    rng.shuffle(perm)
    return RefQuery.build([rng.randrange(vlabels) for _ in range(n)],
                          [(perm[a], perm[b], rng.randrange(elabels)) for a, b in edges])


def _uniform(n: int, edges) -> RefQuery:
    return RefQuery.build([0] * n, edges)


# Uniform labels so their automorphisms are real: each match is counted |Aut| times.
SHAPES = {
    "triangle": _uniform(3, [(0, 1), (1, 2), (0, 2)]),
    "clique4": _uniform(4, [(a, b) for a in range(4) for b in range(a + 1, 4)]),
    "star3": _uniform(4, [(0, 1), (0, 2), (0, 3)]),
    "cycle4": _uniform(4, [(0, 1), (1, 2), (2, 3), (3, 0)]),
    "path4": _uniform(4, [(0, 1), (1, 2), (2, 3)]),
    "edge": _uniform(2, [(0, 1)]),
}


def random_queries(rng: random.Random, g: RefGraph) -> dict[str, RefQuery]:
    qs: dict[str, RefQuery] = {}
    for size in (rng.randint(2, 4), rng.randint(3, 5)):
        q = subgraph_query(rng, g, size)
        if q is not None:
            qs[f"sub{len(qs)}"] = q
    name = rng.choice(sorted(SHAPES))
    qs[name] = SHAPES[name]
    qs["rand"] = random_connected_query(rng, rng.randint(2, 4), g.num_vlabels, g.num_elabels)
    return qs


def _elabel(rng: random.Random, g: RefGraph) -> int:
    return rng.randrange(g.num_elabels)


def _insert_record(rng, u, v, lab):
    # Label 0 is sometimes written as omitted, which must mean the same.
    if lab == 0 and rng.random() < 0.3:
        lab = ref.NO_LABEL
    return (ref.INSERT_EDGE, u, v, lab) if rng.random() < 0.5 else (ref.INSERT_EDGE, v, u, lab)


def _delete_record(rng, g, key):
    u, v = sorted(key) if rng.random() < 0.5 else sorted(key, reverse=True)
    lab = g.edges.get(key, 0) if rng.random() < 0.5 else ref.NO_LABEL
    return (ref.DELETE_EDGE, u, v, lab)


BATCH_KINDS = ("insert", "delete", "mixed", "vertex", "duplicate", "cancel", "noop")


def gen_batch(rng: random.Random, g: RefGraph, kind: str, graveyard=()) -> list[tuple]:
    """A batch of the given kind that only uses behaviour the brief specifies.

    Edge keys are used at most once per batch except where the kind is about
    repeating them (duplicates, cancel pairs), and no insert touches a vertex
    deleted in the same batch.
    """
    verts = sorted(g.vertices)
    non_edges = [frozenset((u, v)) for i, u in enumerate(verts) for v in verts[i + 1:]
                 if frozenset((u, v)) not in g.edges]
    edges = sorted(g.edges, key=sorted)
    rng.shuffle(non_edges)
    rng.shuffle(edges)
    recs: list[tuple] = []

    def take(pool, k):
        out = pool[:k]
        del pool[:k]
        return out

    if kind in ("insert", "mixed"):
        for key in take(non_edges, rng.randint(1, 5)):
            recs.append(_insert_record(rng, *sorted(key), _elabel(rng, g)))
    if kind in ("delete", "mixed"):
        for key in take(edges, rng.randint(1, 5)):
            recs.append(_delete_record(rng, g, key))
    if kind == "vertex":
        taken = set(g.vertices)
        dead = set(take(rng.sample(verts, len(verts)), rng.randint(0, 2)))
        for v in dead:
            recs.append((ref.DELETE_VERTEX, v, 0, ref.NO_LABEL))
            # Deleting an edge of a vertex deleted in the same batch: a no-op.
            inc = [k for k in edges if v in k]
            if inc:
                recs.append(_delete_record(rng, g, rng.choice(inc)))
        alive = [v for v in verts if v not in dead]
        new = []
        reuse = [v for v in graveyard if v not in taken]
        for _ in range(rng.randint(1, 3)):
            v = rng.choice(reuse) if reuse and rng.random() < 0.4 else fresh_id(rng, taken)
            taken.add(v)
            if v in reuse:
                reuse.remove(v)
            new.append(v)
            recs.append((ref.ADD_VERTEX, v, 0, rng.randrange(g.num_vlabels)))
        ends = alive + new
        pairs = {frozenset((x, rng.choice(ends))) for x in new for _ in range(rng.randint(1, 4))}
        for key in pairs:
            if len(key) == 2:
                recs.append(_insert_record(rng, *sorted(key), _elabel(rng, g)))
        # Plus some plain edge churn among surviving vertices.
        for key in take([k for k in non_edges if not k & dead], rng.randint(0, 2)):
            recs.append(_insert_record(rng, *sorted(key), _elabel(rng, g)))
        for key in take([k for k in edges if not k & dead], rng.randint(0, 2)):
            recs.append(_delete_record(rng, g, key))
        if alive and rng.random() < 0.5:  # re-adding a live vertex with its label: no-op
            v = rng.choice(alive)
            recs.append((ref.ADD_VERTEX, v, 0, g.vertices[v]))
        if rng.random() < 0.5:  # deleting a vertex that does not exist: no-op
            recs.append((ref.DELETE_VERTEX, fresh_id(rng, taken), 0, ref.NO_LABEL))
    if kind == "duplicate":
        for key in take(edges, rng.randint(1, 3)):
            # Inserting an existing edge is a no-op, whatever label it carries.
            recs.append(_insert_record(rng, *sorted(key), _elabel(rng, g)))
        for key in take(non_edges, rng.randint(1, 3)):
            lab = _elabel(rng, g)
            for _ in range(rng.randint(1, 3)):  # the same new edge, same label, repeated
                recs.append((ref.INSERT_EDGE, *sorted(key, reverse=rng.random() < 0.5), lab))
    if kind == "cancel":
        for key in take(edges, rng.randint(1, 3)) + take(non_edges, rng.randint(1, 3)):
            lab = g.edges.get(key, _elabel(rng, g))
            u, v = sorted(key)
            pair = [(ref.INSERT_EDGE, u, v, lab),
                    (ref.DELETE_EDGE, v, u, lab if rng.random() < 0.5 else ref.NO_LABEL)]
            recs.extend(pair if rng.random() < 0.5 else pair[::-1])
        for key in take(non_edges, rng.randint(0, 2)):
            recs.append(_insert_record(rng, *sorted(key), _elabel(rng, g)))
        for key in take(edges, rng.randint(0, 2)):
            recs.append(_delete_record(rng, g, key))
    if kind == "noop":
        for key in take(non_edges, rng.randint(1, 3)):
            recs.append((ref.DELETE_EDGE, *sorted(key), ref.NO_LABEL))
        if g.num_elabels > 1:
            for key in take(edges, rng.randint(1, 2)):  # label differs from the stored one
                recs.append((ref.DELETE_EDGE, *sorted(key), 1 - g.edges[key]))
        for key in take(edges, rng.randint(1, 2)):  # existing edge re-inserted
            recs.append((ref.INSERT_EDGE, *sorted(key), g.edges[key]))
        recs.append((ref.DELETE_VERTEX, fresh_id(rng, set(g.vertices)), 0, ref.NO_LABEL))
        if verts:
            v = rng.choice(verts)
            recs.append((ref.ADD_VERTEX, v, 0, g.vertices[v]))
    rng.shuffle(recs)  # a batch is a set: record order must not matter
    return recs


def make_harness(seed: int, setup: EngineSetup) -> tuple[random.Random, Harness]:
    rng = random.Random(seed)
    g = random_graph(rng)
    return rng, Harness(g, setup, random_queries(rng, g))


# --------------------------------------------------------------------------
# scenarios


@pytest.mark.parametrize("kind", BATCH_KINDS)
def test_batch_kinds_match_oracle(kind, engine_setup):
    for seed in range(4):
        rng, h = make_harness(1000 * BATCH_KINDS.index(kind) + seed, engine_setup)
        for _ in range(3):
            res = h.apply(gen_batch(rng, h.ref, kind, h.graveyard))
            assert res is not None, "generated batches must be valid"


def test_noop_batches_change_nothing(engine_setup):
    rng, h = make_harness(7, engine_setup)
    h.apply([])  # the empty batch
    for _ in range(4):
        before = h.embeddings()
        res = h.apply(gen_batch(rng, h.ref, "noop"))
        for qid in h.queries:
            assert res.queries[qid].positive == 0 and res.queries[qid].negative == 0
        assert h.embeddings() == before


def test_long_random_stream(engine_setup):
    # Many batches of every kind on one engine: state carried across batches
    # (relocated lists, reused slots, re-added ids) must stay exact.
    rng, h = make_harness(4242, engine_setup)
    for step in range(30):
        h.apply(gen_batch(rng, h.ref, rng.choice(BATCH_KINDS), h.graveyard),
                list_limit=rng.choice([BIG_LIMIT, BIG_LIMIT, 1, 3]))


def _sequential_friendly(rng: random.Random, g: RefGraph) -> list[tuple]:
    """Records whose one-by-one application reaches the same graph as the batch.

    Order: vertex adds, then edge changes (incl. insert-then-delete pairs on new
    edges and delete-then-reinsert pairs on old ones), then deletes of edges of
    vertices about to be deleted, then the vertex deletes.
    """
    verts = sorted(g.vertices)
    taken = set(verts)
    adds = []
    for _ in range(rng.randint(1, 2)):
        v = fresh_id(rng, taken)
        taken.add(v)
        adds.append((ref.ADD_VERTEX, v, 0, rng.randrange(g.num_vlabels)))
    dead = set(rng.sample(verts, rng.randint(0, 2)))
    alive = [v for v in verts if v not in dead] + [r[1] for r in adds]
    edges = [k for k in sorted(g.edges, key=sorted) if not k & dead]
    non_edges = [frozenset((u, v)) for i, u in enumerate(alive) for v in alive[i + 1:]
                 if frozenset((u, v)) not in g.edges]
    rng.shuffle(edges)
    rng.shuffle(non_edges)
    # Units are kept contiguous: an insert/delete pair on one edge only has the
    # same effect one-by-one as in a batch when its order is kept as written.
    units: list[list[tuple]] = []
    for key in non_edges[:rng.randint(2, 7)]:
        units.append([_insert_record(rng, *sorted(key), _elabel(rng, g))])
    for key in edges[:rng.randint(1, 4)]:
        units.append([_delete_record(rng, g, key)])
    for key in non_edges[7:8]:  # insert then delete a new edge: cancels
        lab = _elabel(rng, g)
        units.append([(ref.INSERT_EDGE, *sorted(key), lab), (ref.DELETE_EDGE, *sorted(key), lab)])
    for key in edges[4:5]:  # delete then re-insert an old edge with its label: cancels
        units.append([(ref.DELETE_EDGE, *sorted(key), ref.NO_LABEL),
                      (ref.INSERT_EDGE, *sorted(key), g.edges[key])])
    for key in non_edges[8:9]:  # a duplicate insert, the second one a no-op
        lab = _elabel(rng, g)
        units.append([(ref.INSERT_EDGE, *sorted(key), lab)] * 2)
    rng.shuffle(units)
    changes = [r for unit in units for r in unit]
    tail = []
    for v in dead:
        inc = [k for k in g.edges if v in k]
        if inc:
            tail.append(_delete_record(rng, g, rng.choice(inc)))
    tail += [(ref.DELETE_VERTEX, v, 0, ref.NO_LABEL) for v in dead]
    return adds + changes + tail


@pytest.mark.parametrize("seed", range(4))
def test_size_one_batches_equal_one_big_batch(seed, engine_setup):
    rng, whole = make_harness(500 + seed, engine_setup)
    records = _sequential_friendly(rng, whole.ref)
    # The generator must produce order-insensitive-in-effect records, or the
    # comparison below would be vacuous.
    seq_ref = whole.ref.copy()
    for r in records:
        seq_ref.apply([r])
    big_ref = whole.ref.copy()
    big_ref.apply(records)
    assert seq_ref == big_ref, "generator produced a non-commuting batch"

    one = Harness(whole.ref, engine_setup, {f"q{i}": q for i, q in
                                      enumerate(whole.queries.values())})
    res = whole.apply(records)
    net = {qid: res.queries[qid].positive - res.queries[qid].negative for qid in whole.queries}

    stream = to_stream(records)
    pieces = list(stream.batches(1))
    assert len(pieces) == len(records)
    total = Counter()
    for piece, r in zip(pieces, records):
        before = one.embeddings()
        one.ref.apply([r])
        after = one.embeddings()
        out = one.engine.apply(piece, list_limit=BIG_LIMIT)
        for qid, q in one.queries.items():
            check_delta(out.queries[qid], before[qid], after[qid], q.n, BIG_LIMIT)
            total[qid] += out.queries[qid].positive - out.queries[qid].negative
        one.check_state(after)
    # Same query registration order, so qids line up position by position.
    for qa, qb in zip(whole.queries, one.queries):
        assert total[qb] == net[qa]
        assert one.engine.count(qb) == whole.engine.count(qa)


def test_uniform_label_shapes_count_automorphisms(engine_setup):
    # Dense single-label graph: the automorphic shapes have many matches each,
    # and every automorphic image must be counted and listed separately.
    rng = random.Random(99)
    g = random_graph(rng, n=9, vlabels=1, elabels=1, p=0.6)
    h = Harness(g, engine_setup, SHAPES)
    clique = RefGraph.build({v: 0 for v in range(4)},
                            [(a, b) for a in range(4) for b in range(a + 1, 4)])
    assert len(clique.embeddings(SHAPES["clique4"])) == 24
    for _ in range(4):
        h.apply(gen_batch(rng, h.ref, rng.choice(["insert", "delete", "mixed", "vertex"])))


def test_complete_graph_then_tear_down(engine_setup):
    # Build K_7 in one batch from isolated vertices, then delete all its edges
    # in one batch: every shape's whole match set appears and then disappears.
    g = RefGraph.build({v * 1_000_003: 0 for v in range(7)}, [])
    h = Harness(g, engine_setup, SHAPES)
    ids = sorted(g.vertices)
    all_pairs = [(u, v) for i, u in enumerate(ids) for v in ids[i + 1:]]
    res = h.apply([(ref.INSERT_EDGE, u, v, 0) for u, v in all_pairs])
    assert all(res.queries[qid].negative == 0 for qid in h.queries)
    res = h.apply([(ref.DELETE_EDGE, u, v, ref.NO_LABEL) for u, v in all_pairs])
    assert all(res.queries[qid].positive == 0 for qid in h.queries)
    assert all(h.engine.count(qid) == 0 for qid in h.queries)


def test_vertex_delete_and_readd_with_new_label(engine_setup):
    # A vertex deleted in one batch may come back with another label later.
    rng, h = make_harness(31, engine_setup)
    v = max(h.ref.vertices, key=lambda x: sum(x in k for k in h.ref.edges))
    old_label = h.ref.vertices[v]
    h.apply([(ref.DELETE_VERTEX, v, 0, ref.NO_LABEL)])
    others = sorted(h.ref.vertices)[:4]
    h.apply([(ref.ADD_VERTEX, v, 0, old_label + 1)]
            + [(ref.INSERT_EDGE, v, u, 0) for u in others])
    # And back to its old label, through another delete.
    h.apply([(ref.DELETE_VERTEX, v, 0, ref.NO_LABEL)])
    h.apply([(ref.ADD_VERTEX, v, 0, old_label)] + [(ref.INSERT_EDGE, u, v, 0) for u in others])


def test_edges_to_new_vertices_listed_before_the_adds(engine_setup):
    rng, h = make_harness(77, engine_setup)
    old = sorted(h.ref.vertices)[:3]
    a = fresh_id(rng, h.ref.vertices)
    b = fresh_id(rng, set(h.ref.vertices) | {a})
    h.apply([(ref.INSERT_EDGE, a, b, 0), (ref.INSERT_EDGE, old[0], a, 0),
             (ref.INSERT_EDGE, b, old[1], 0), (ref.INSERT_EDGE, old[2], b, 0),
             (ref.ADD_VERTEX, a, 0, 0), (ref.ADD_VERTEX, b, 0, 0)])


def _rejected_batches(rng: random.Random, g: RefGraph) -> dict[str, list[tuple]]:
    """One minimal invalid batch per rejection rule (needs >= 3 vertices)."""
    verts = sorted(g.vertices)
    u, v, w = verts[:3]
    missing = fresh_id(rng, g.vertices)
    pairs = [frozenset((x, y)) for i, x in enumerate(verts) for y in verts[i + 1:]]
    # Prefer a non-edge; two differently-labelled inserts reject either way.
    x, y = sorted(next((k for k in pairs if k not in g.edges), pairs[0]))
    return {
        "self-loop": [(ref.INSERT_EDGE, u, u, 0)],
        "missing-endpoint": [(ref.INSERT_EDGE, u, missing, 0)],
        "add-and-delete-new": [(ref.ADD_VERTEX, missing, 0, 0),
                               (ref.DELETE_VERTEX, missing, 0, ref.NO_LABEL)],
        "add-and-delete-existing": [(ref.ADD_VERTEX, v, 0, g.vertices[v]),
                                    (ref.DELETE_VERTEX, v, 0, ref.NO_LABEL)],
        "relabel-existing": [(ref.ADD_VERTEX, w, 0, g.vertices[w] + 1)],
        "insert-two-labels": [(ref.INSERT_EDGE, x, y, 0), (ref.INSERT_EDGE, y, x, 1)],
    }


REJECT_CASES = sorted(_rejected_batches(random.Random(0),
                                        RefGraph.build({1: 0, 2: 0, 3: 0}, [])))


@pytest.mark.parametrize("case", REJECT_CASES)
def test_rejected_batches_change_nothing(case, engine_setup):
    rng, h = make_harness(2024, engine_setup)
    valid = gen_batch(rng, h.ref, "mixed")
    poisoned = valid + _rejected_batches(rng, h.ref)[case]
    rng.shuffle(poisoned)
    with pytest.raises(BatchRejected) as info:
        h.engine.apply(to_stream(poisoned))
    assert isinstance(info.value, ValueError)
    h.check_state()
    assert h.apply(poisoned) is None  # the oracle agrees it is rejected
    # The engine must still be fully usable: the valid part applies cleanly.
    assert h.apply(valid) is not None


def test_delete_with_missing_endpoint_is_rejected(engine_setup):
    # "An edge with an endpoint that does not exist rejects the whole batch",
    # read literally for deletes as well as inserts.
    rng, h = make_harness(2025, engine_setup)
    u = sorted(h.ref.vertices)[0]
    assert h.apply([(ref.DELETE_EDGE, u, fresh_id(rng, h.ref.vertices), ref.NO_LABEL)]) is None


def test_applied_and_ignored_counts_on_plain_batch(engine_setup):
    # Only records whose classification the brief leaves no doubt about.
    g = RefGraph.build({1: 0, 2: 0, 3: 1, 4: 0, 5: 1}, [(1, 2, 0), (2, 3, 0)])
    h = Harness(g, engine_setup, {"edge": SHAPES["edge"]})
    records = [
        (ref.INSERT_EDGE, 1, 3, 0),               # new edge: applied
        (ref.INSERT_EDGE, 2, 1, 0),               # existing: ignored
        (ref.DELETE_EDGE, 3, 2, ref.NO_LABEL),    # existing: applied
        (ref.DELETE_EDGE, 1, 4, ref.NO_LABEL),    # missing: ignored
        (ref.DELETE_EDGE, 1, 2, 1),               # wrong label: ignored
        (ref.ADD_VERTEX, 6, 0, 0),                # new vertex: applied
        (ref.ADD_VERTEX, 4, 0, 0),                # existing, same label: ignored
        (ref.DELETE_VERTEX, 5, 0, ref.NO_LABEL),  # isolated vertex: applied
        (ref.DELETE_VERTEX, 77, 0, ref.NO_LABEL),  # missing vertex: ignored
    ]
    expected_applied, expected_ignored = h.ref.copy().apply(records)
    res = h.apply(records)
    for key in ref.COUNT_KEYS:
        assert res.applied[key] == expected_applied[key], key
        assert res.ignored[key] == expected_ignored[key], key


def test_small_list_limit_truncates_but_counts_stay_exact(engine_setup):
    g = RefGraph.build({v: 0 for v in range(1, 7)}, [])
    h = Harness(g, engine_setup, {"triangle": SHAPES["triangle"], "edge": SHAPES["edge"]})
    pairs = [(u, v) for u in range(1, 7) for v in range(u + 1, 7)]
    for limit in (1, 4):
        res = h.apply([(ref.INSERT_EDGE, u, v, 0) for u, v in pairs], list_limit=limit)
        for qid in h.queries:
            r = res.queries[qid]
            assert r.positive > limit and r.truncated
            assert len(r.added) <= limit
        res = h.apply([(ref.DELETE_EDGE, u, v, ref.NO_LABEL) for u, v in pairs],
                      list_limit=limit)
        assert all(res.queries[qid].truncated for qid in h.queries)
    # list_limit=0 (the default): counts only, no rows.
    res = h.apply([(ref.INSERT_EDGE, u, v, 0) for u, v in pairs], list_limit=0)
    # matches(limit=...) cuts the listing but not the count.
    for qid, q in h.queries.items():
        true = h.ref.embeddings(q)
        ml = h.engine.matches(qid, limit=5)
        assert ml.truncated and len(ml.rows) <= 5 and row_set(ml.rows, q.n) <= true
        assert h.engine.count(qid) == len(true)
        full = h.engine.matches(qid, limit=len(true))
        assert not full.truncated and row_set(full.rows, q.n) == true


def test_queries_added_and_removed_mid_stream(engine_setup):
    rng, h = make_harness(314, engine_setup)
    for step in range(6):
        h.apply(gen_batch(rng, h.ref, rng.choice(BATCH_KINDS), h.graveyard))
        if step == 1:
            # Registered against a graph already changed by updates.
            h.add_query(SHAPES["triangle"], "late-triangle")
            q = subgraph_query(rng, h.ref, 3)
            if q is not None:
                h.add_query(q, "late-sub")
            h.check_state()
        if step == 3:
            h.remove_query(min(h.queries))
            h.check_state()


def test_large_query_with_no_room(engine_setup):
    # A valid 32-vertex query (path) that cannot fit a small graph: zero, then still zero.
    rng = random.Random(5)
    g = random_graph(rng, n=10, vlabels=1, elabels=1, p=0.3)
    h = Harness(g, engine_setup, {"path32": _uniform(32, [(i, i + 1) for i in range(31)]),
                            "path6": _uniform(6, [(i, i + 1) for i in range(5)])})
    h.apply(gen_batch(rng, h.ref, "insert"))
    h.apply(gen_batch(rng, h.ref, "vertex"))


# --------------------------------------------------------------------------
# hypothesis: random batch sequences, shrunk to a minimal failing stream


class EngineMachine(RuleBasedStateMachine):
    """Random batches (of every kind, plus rejected ones) on one lock-stepped engine."""

    config_factory: Callable[[], EngineConfig] = EngineConfig

    @initialize(seed=st.integers(0, 10**6))
    def setup(self, seed):
        self.rng, self.h = make_harness(seed, EngineSetup(type(self).config_factory()))

    @rule(kind=st.sampled_from(BATCH_KINDS), seed=st.integers(0, 10**6),
          limit=st.sampled_from([BIG_LIMIT, 0, 2]))
    def batch(self, kind, seed, limit):
        rng = random.Random(seed)
        assert self.h.apply(gen_batch(rng, self.h.ref, kind, self.h.graveyard),
                            list_limit=limit) is not None

    @rule(case=st.sampled_from(REJECT_CASES), seed=st.integers(0, 10**6))
    def rejected(self, case, seed):
        if len(self.h.ref.vertices) < 3:
            return
        rng = random.Random(seed)
        assert self.h.apply(_rejected_batches(rng, self.h.ref)[case]) is None

    @rule(seed=st.integers(0, 10**6))
    def single_updates(self, seed):
        rng = random.Random(seed)
        for r in gen_batch(rng, self.h.ref, "mixed")[:3]:
            self.h.apply([r])

    @invariant()
    def counts_agree(self):
        if hasattr(self, "h"):
            for qid, q in self.h.queries.items():
                assert self.h.engine.count(qid) == len(self.h.ref.embeddings(q))


class TinyEngineMachine(EngineMachine):
    config_factory = staticmethod(EngineConfig.tiny)


# No shrink phase: shrinking a failing engine run costs minutes (each step re-runs
# the oracle); the seeded tests above give small repros, and a failing step's
# graph, query and batch are in its assertion message anyway.
_machine_settings = settings(max_examples=20, stateful_step_count=6, deadline=None,
                             phases=[Phase.explicit, Phase.reuse, Phase.generate],
                             report_multiple_bugs=False,
                             suppress_health_check=[HealthCheck.too_slow])
TestEngineMachineDefault = EngineMachine.TestCase
TestEngineMachineDefault.settings = _machine_settings
TestEngineMachineTiny = TinyEngineMachine.TestCase
TestEngineMachineTiny.settings = _machine_settings
