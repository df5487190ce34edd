"""normalize(): batch set semantics, applied/ignored accounting and rejections.

Expectations are written out per rule and, where the rule is specified, also
checked against ``tests/reference.py`` (RefGraph.apply).  normalize() must
never change the graph, whether it accepts the batch or rejects it.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpu.batch
from gpu.batch import COUNT_KEYS, BatchRejected, normalize
from gpu.config import EngineConfig
from gpu.io.records import (
    ADD_VERTEX,
    DELETE_EDGE,
    DELETE_VERTEX,
    INSERT_EDGE,
    NO_LABEL,
    LabeledGraph,
    UpdateStream,
)
from gpu.graph.lists import DynamicGraph
from tests import reference as ref
from tests.reference import RefGraph, Rejected

SOURCE = "updates/batch-7.txt"

VERTICES = {1: 0, 2: 0, 3: 1, 4: 1, 5: 2, 6: 0, 2**63 - 1: 2}
EDGES = {(1, 2): 0, (2, 3): 1, (3, 4): 0, (4, 5): 2, (1, 3): 0, (5, 2**63 - 1): 1}

V, DV, E, DE = ADD_VERTEX, DELETE_VERTEX, INSERT_EDGE, DELETE_EDGE
_REF_KIND = {V: ref.ADD_VERTEX, DV: ref.DELETE_VERTEX, E: ref.INSERT_EDGE,
             DE: ref.DELETE_EDGE}


def labeled() -> LabeledGraph:
    """VERTICES and EDGES as a LabeledGraph."""
    ids = sorted(VERTICES)
    keys = sorted(EDGES)
    return LabeledGraph(np.array(ids, np.int64), np.array([VERTICES[v] for v in ids], np.int32),
                        np.array([k[1] for k in keys], np.int64),
                        np.array([k[0] for k in keys], np.int64),
                        np.array([EDGES[k] for k in keys], np.int32))


def make_graph(config=None) -> DynamicGraph:
    return DynamicGraph.from_labeled(labeled(), config or EngineConfig.tiny())


def ref_graph() -> RefGraph:
    return RefGraph.build(VERTICES, [(a, b, lab) for (a, b), lab in EDGES.items()])


def stream(records) -> UpdateStream:
    return UpdateStream.from_records(records, SOURCE)


def snapshot(g: DynamicGraph) -> tuple:
    u, v, lab = g.edges()
    ids = np.array(sorted(VERTICES) + [7, 8, 99], np.int64)
    return (u.tolist(), v.tolist(), lab.tolist(), g.ids.lookup(ids).tolist(),
            g.alive[: g.num_slots].tolist(), g.label[: g.num_slots].tolist(),
            g.num_vertices, g.num_edges, g.num_slots, g.top, g.garbage, list(g._free),
            g.rank[: g.top].tolist(), g.reserve_slots(3).tolist())


def ext_of(g: DynamicGraph, batch, slot: int) -> int:
    """External id of a slot, including the slots the batch reserved for new vertices."""
    new = dict(zip(batch.add_slots.tolist(), batch.add_ids.tolist()))
    if slot in new:
        return new[slot]
    assert g.alive[slot]
    return int(g.ext[slot])


def ext_edges(g: DynamicGraph, batch, us, vs, labels) -> dict[tuple[int, int], int]:
    out = {}
    for u, v, lab in zip(us.tolist(), vs.tolist(), labels.tolist()):
        assert u < v
        a, b = sorted((ext_of(g, batch, u), ext_of(g, batch, v)))
        assert (a, b) not in out
        out[(a, b)] = lab
    return out


def counts(**kw) -> dict[str, int]:
    out = dict.fromkeys(COUNT_KEYS, 0)
    out.update(kw)
    return out


def ref_counts(records):
    recs = [(_REF_KIND[k], a, b, lab) for k, a, b, lab in records]
    return ref_graph().apply(recs)


def run(records):
    g = make_graph()
    before = snapshot(g)
    batch = normalize(stream(records), g)
    assert snapshot(g) == before, "normalize changed the graph"
    return g, batch


# --------------------------------------------------------------------------- accounting

CASES = {
    "new edge": ([(E, 1, 4, 0)],
                 counts(edges_inserted=1), counts(), {(1, 4): 0}, {}),
    "duplicate inserts": ([(E, 1, 4, 3), (E, 4, 1, 3), (E, 1, 4, 3)],
                          counts(edges_inserted=1), counts(edges_inserted=2), {(1, 4): 3}, {}),
    "cancel pair on a missing edge": ([(E, 1, 5, 0), (DE, 5, 1, NO_LABEL)],
                                      counts(), counts(edges_inserted=1, edges_deleted=1), {},
                                      {}),
    "cancel pair on an existing edge": ([(DE, 2, 1, NO_LABEL), (E, 1, 2, 0)],
                                        counts(), counts(edges_inserted=1, edges_deleted=1),
                                        {}, {}),
    "insert of an existing edge": ([(E, 2, 1, 0), (E, 3, 2, 9)],
                                   counts(), counts(edges_inserted=2), {}, {}),
    "delete of a missing edge": ([(DE, 1, 4, NO_LABEL), (DE, 6, 1, 0)],
                                 counts(), counts(edges_deleted=2), {}, {}),
    "delete with the wrong label": ([(DE, 2, 3, 0)],
                                    counts(), counts(edges_deleted=1), {}, {}),
    "delete with the right label or none": ([(DE, 3, 2, 1), (DE, 4, 5, NO_LABEL)],
                                            counts(edges_deleted=2), counts(), {},
                                            {(2, 3): 1, (4, 5): 2}),
    "duplicate deletes": ([(DE, 3, 2, 1), (DE, 2, 3, NO_LABEL)],
                          counts(edges_deleted=1), counts(edges_deleted=1), {}, {(2, 3): 1}),
    "add of an existing vertex, same label": ([(V, 3, 0, 1), (V, 2**63 - 1, 0, 2)],
                                              counts(), counts(vertices_added=2), {}, {}),
    "add of a new vertex twice": ([(V, 7, 0, 4), (V, 7, 0, 4), (E, 7, 1, 0)],
                                  counts(vertices_added=1, edges_inserted=1),
                                  counts(vertices_added=1), {(1, 7): 0}, {}),
    "delete of a missing vertex": ([(DV, 99, 0, NO_LABEL), (DV, 8, 0, 0)],
                                   counts(), counts(vertices_deleted=2), {}, {}),
    "delete of an isolated vertex": ([(DV, 6, 0, NO_LABEL), (DV, 6, 0, 0)],
                                     counts(vertices_deleted=1), counts(vertices_deleted=1),
                                     {}, {}),
    "edge deletes covered by a vertex delete": (
        [(DV, 6, 0, NO_LABEL), (DE, 6, 1, NO_LABEL), (DE, 1, 6, 0), (DE, 1, 2, 0)],
        counts(vertices_deleted=1, edges_deleted=1), counts(edges_deleted=2), {},
        {(1, 2): 0}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_applied_and_ignored(name):
    records, applied, ignored, inserts, deletes = CASES[name]
    g, b = run(records)
    assert b.applied == applied
    assert b.ignored == ignored
    assert (b.applied, b.ignored) == ref_counts(records)
    assert ext_edges(g, b, b.insert_u, b.insert_v, b.insert_labels) == inserts
    assert ext_edges(g, b, b.delete_u, b.delete_v, b.delete_labels) == deletes
    # every record is accounted for exactly once
    assert sum(applied.values()) + sum(ignored.values()) == len(records)


def test_vertex_delete_takes_its_edges():
    g, b = run([(DV, 3, 0, NO_LABEL), (DE, 2, 3, NO_LABEL), (DE, 3, 4, 0)])
    slot3 = int(g.ids.lookup(np.array([3]))[0])
    assert b.delete_slots.tolist() == [slot3]
    # all three edges of 3, with their stored labels, once each
    assert ext_edges(g, b, b.delete_u, b.delete_v, b.delete_labels) == {(2, 3): 1, (3, 4): 0,
                                                                         (1, 3): 0}
    assert b.applied["vertices_deleted"] == 1
    assert b.ignored["edges_deleted"] == 2


def test_edges_of_a_deleted_vertex_count_as_applied_deletions():
    """Vertex 3 has edges (2,3), (3,4), (1,3): all three leave the graph with it, and the
    explicit delete of one of them is covered by the vertex deletion (ignored)."""
    records = [(DV, 3, 0, NO_LABEL), (DE, 3, 4, NO_LABEL)]
    _, b = run(records)
    assert b.applied["vertices_deleted"] == 1
    assert b.applied["edges_deleted"] == 3
    assert b.ignored["edges_deleted"] == 1
    assert (b.applied, b.ignored) == ref_counts(records)


def test_new_vertices_get_the_reserved_slots():
    g, b = run([(V, 8, 0, 1), (V, 7, 0, 0), (E, 7, 8, 5), (E, 8, 2, 0)])
    assert b.add_ids.tolist() == [7, 8]
    assert b.add_labels.tolist() == [0, 1]
    assert b.add_slots.tolist() == g.reserve_slots(2).tolist()
    slot = dict(zip([7, 8], b.add_slots.tolist()))
    pairs = {tuple(sorted(p)): lab for p, lab in
             zip(zip(b.insert_u.tolist(), b.insert_v.tolist()), b.insert_labels.tolist())}
    s2 = int(g.ids.lookup(np.array([2]))[0])
    assert pairs == {tuple(sorted((slot[7], slot[8]))): 5, tuple(sorted((slot[8], s2))): 0}
    assert (b.insert_u < b.insert_v).all()


@pytest.mark.parametrize("records", [
    [(DE, 4, 3, 5), (DE, 3, 4, NO_LABEL)],
    [(DE, 3, 4, NO_LABEL), (DE, 4, 3, 5)],
    [(DE, 3, 4, 1), (DE, 3, 4, 0)],
    [(DE, 3, 4, 0), (DE, 3, 4, 1)],
], ids=["wrong-then-bare", "bare-then-wrong", "wrong-then-right", "right-then-wrong"])
def test_duplicate_deletes_with_different_labels_are_order_independent(records):
    """A batch is a set: of `-e 3 4 5` (wrong label: no-op) and `-e 3 4` (deletes), the
    edge goes whatever the record order.  Edge (3, 4) is stored with label 0."""
    g, b = run(records)
    assert ext_edges(g, b, b.delete_u, b.delete_v, b.delete_labels) == {(3, 4): 0}
    assert b.applied == counts(edges_deleted=1)
    assert b.ignored == counts(edges_deleted=1)
    assert (b.applied, b.ignored) == ref_counts(records)


def test_vertex_delete_naming_another_label_is_ignored():
    """`-v id label` names the vertex it means: another label is a missing vertex (the
    engine's rule; tests/reference.py ignores the label of a vertex delete)."""
    _, b = run([(DV, 3, 0, 2), (DV, 6, 0, 1)])
    assert b.applied == counts()
    assert b.ignored == counts(vertices_deleted=2)
    assert len(b.delete_slots) == 0 and len(b.delete_u) == 0


def test_empty_batch():
    _, b = run([])
    assert b.applied == counts() and b.ignored == counts()
    for arr in (b.add_ids, b.delete_slots, b.insert_u, b.delete_u):
        assert len(arr) == 0


# --------------------------------------------------------------------------- rejections

REJECTIONS = {
    "vertex added twice with different labels": (
        [(E, 1, 2, 0), (V, 7, 0, 0), (V, 7, 0, 1)], 3,
        "vertex 7 is added twice with different labels"),
    "vertex added and deleted": (
        [(DV, 6, 0, NO_LABEL), (V, 6, 0, 0)], 2,
        "vertex 6 is both added and deleted in one batch"),
    "vertex re-added with another label": (
        [(E, 1, 4, 0), (V, 3, 0, 2)], 2, "vertex 3 already exists with label 1"),
    "self-loop": ([(E, 1, 4, 0), (E, 2, 2, 0)], 2, "edge (2, 2) is a self-loop"),
    "self-loop delete": ([(DE, 5, 5, NO_LABEL)], 1, "edge (5, 5) is a self-loop"),
    "missing endpoint": (
        [(E, 1, 4, 0), (E, 1, 99, 0)], 2,
        "edge (1, 99): vertex 99 does not exist and is not added in this batch"),
    "missing endpoint of a delete": (
        [(DE, 98, 1, NO_LABEL)], 1,
        "edge (98, 1): vertex 98 does not exist and is not added in this batch"),
    "endpoint deleted earlier in the stream": (
        [(DV, 6, 0, NO_LABEL), (E, 6, 1, 0)], 2,
        "edge (6, 1) touches a vertex deleted in this batch"),
    "edge inserted twice with different labels": (
        [(E, 1, 4, 0), (E, 4, 1, 2)], 2, "edge (4, 1) is inserted twice with different labels"),
}


@pytest.mark.parametrize("name", sorted(REJECTIONS))
@pytest.mark.parametrize("config", [EngineConfig.tiny, EngineConfig], ids=["tiny", "default"])
def test_rejections_name_the_line_and_change_nothing(name, config):
    records, line, reason = REJECTIONS[name]
    g = make_graph(config())
    before = snapshot(g)
    with pytest.raises(BatchRejected) as info:
        normalize(stream(records), g)
    err = info.value
    assert str(err) == f"{SOURCE}:{line}: {reason}"
    assert (err.source, err.line, err.reason) == (SOURCE, line, reason)
    assert snapshot(g) == before
    # a rejected batch may be followed by a valid one as if nothing happened
    b = normalize(stream([(E, 1, 4, 0)]), g)
    assert b.applied["edges_inserted"] == 1
    assert snapshot(g) == before
    # the reference rejects these too (except: it ignores inserts touching deleted vertices)
    if name != "endpoint deleted earlier in the stream":
        with pytest.raises(Rejected):
            ref_counts(records)


# --------------------------------------------------------------------------- random


def random_records(rng: random.Random, g: RefGraph) -> list[tuple]:
    """Specified behaviour only: no inserts touching deleted vertices, no cancel pair whose
    delete names another label than the insert."""
    ids = sorted(g.vertices)
    recs = []
    new = [7, 8]
    dead = set(rng.sample(ids, rng.randint(0, 2)))
    for v in dead:
        recs.append((DV, v, 0, rng.choice([NO_LABEL, g.vertices[v]])))
    for v in new:
        if rng.random() < 0.5:
            recs += [(V, v, 0, 1)] * rng.randint(1, 2)
    recs += [(V, v, 0, g.vertices[v]) for v in rng.sample(ids, 2) if v not in dead]
    live = [v for v in ids if v not in dead] + [r[1] for r in recs if r[0] == V]
    live = sorted(set(live))
    inserted: dict[frozenset, int] = {}
    for _ in range(rng.randint(0, 8)):
        a, b = rng.sample(live, 2)
        k = frozenset((a, b))
        lab = inserted.setdefault(k, g.edges.get(k, rng.randrange(2)))
        recs += [(E, a, b, lab)] * rng.randint(1, 2)
    everyone = sorted(set(ids) | set(live))
    deleted: dict[frozenset, int] = {}
    for _ in range(rng.randint(0, 8)):
        a, b = rng.sample(everyone, 2)
        k = frozenset((a, b))
        if k in inserted:
            lab = rng.choice([NO_LABEL, inserted[k]])
        else:
            lab = rng.choice([NO_LABEL, g.edges.get(k, 0), 5])
        # repeats name the same label (test_duplicate_deletes_... covers mixed labels)
        lab = deleted.setdefault(k, lab)
        recs += [(DE, a, b, lab)] * rng.randint(1, 2)
    rng.shuffle(recs)
    return recs


def test_random_batches_net_effect_matches_reference():
    rng = random.Random(2024)
    for _ in range(150):
        records = random_records(rng, ref_graph())
        r = ref_graph()
        r.apply([(_REF_KIND[k], a, b, lab) for k, a, b, lab in records])
        g, b = run(records)
        # apply the effective batch to plain containers and compare with the reference
        verts = dict(VERTICES)
        for x, lab in zip(b.add_ids.tolist(), b.add_labels.tolist()):
            assert x not in verts
            verts[x] = lab
        edges = {frozenset(k): lab for k, lab in EDGES.items()}
        for u, v in zip(b.delete_u.tolist(), b.delete_v.tolist()):
            del edges[frozenset((ext_of(g, b, u), ext_of(g, b, v)))]
        for s in b.delete_slots.tolist():
            del verts[int(g.ext[s])]
        for u, v, lab in zip(b.insert_u.tolist(), b.insert_v.tolist(),
                             b.insert_labels.tolist()):
            k = frozenset((ext_of(g, b, u), ext_of(g, b, v)))
            assert k not in edges and k <= verts.keys()
            edges[k] = lab
        assert verts == r.vertices, records
        assert edges == r.edges, records
        # accounting (implicit deletions are test_implicit_edge_deletions_are_not_counted's)
        applied, ignored = ref_counts(records)
        assert b.ignored == ignored, records
        implicit = any(k & (VERTICES.keys() - r.vertices.keys()) for k in map(frozenset, EDGES))
        for key in COUNT_KEYS:
            if key != "edges_deleted" or not implicit:
                assert b.applied[key] == applied[key], (key, records)


_ONE_RECORD = st.tuples(st.sampled_from([V, DV, E, DE]),
                        st.sampled_from(sorted(VERTICES) + [7, 99]),
                        st.sampled_from(sorted(VERTICES) + [7, 99]),
                        st.sampled_from([NO_LABEL, 0, 1, 2]))


def _effect_or_error(batch, graph, prep=None):
    try:
        effect = normalize(batch, graph, prep)
    except BatchRejected as exc:
        return str(exc)
    # `device` (the edge arrays' device copy) is the device path's alone:
    # tests/gpu/cuda/test_batch_prep.py checks it against the host arrays.
    return {name: (value.dtype.str, value.tolist()) if isinstance(value, np.ndarray)
            else value for name, value in vars(effect).items() if name != "device"}


@settings(max_examples=300, deadline=None)
@given(record=_ONE_RECORD)
def test_one_record_scalar_path_equals_general_path(record):
    """A one-record batch takes _single_edge (scalar code) where it applies: the effect
    (every array, value and dtype, and the counts) or the rejection is the general path's."""
    kind, a, b, label = record
    if kind in (V, E) and label == NO_LABEL:
        label = 0
    batch = stream([(kind, a, b, label)])
    g = make_graph(EngineConfig())
    fast = _effect_or_error(batch, g)
    real = gpu.batch._single_edge
    gpu.batch._single_edge = lambda stream, graph: None
    try:
        general = _effect_or_error(batch, g)
    finally:
        gpu.batch._single_edge = real
    assert fast == general


def test_one_record_scalar_path_is_taken():
    g = make_graph(EngineConfig())
    assert gpu.batch._single_edge(stream([(E, 1, 4, 0)]), g) is not None
    assert gpu.batch._single_edge(stream([(DE, 2, 1, NO_LABEL)]), g) is not None
    assert gpu.batch._single_edge(stream([(E, 1, 7, 0)]), g) is None      # 7 is missing
    assert gpu.batch._single_edge(stream([(V, 7, 0, 1)]), g) is None      # not an edge


@pytest.mark.parametrize("records", [
    [(E, 1, 4, -1)],                                  # the one-record path
    [(E, 1, 4, 0), (E, 2, 4, -5), (V, 7, 0, 1)],      # the general path
])
def test_negative_insert_label_is_refused(records):
    # Stored edge labels are never negative: the device graph marks ranks with them.  The
    # parsers refuse such records; an UpdateStream built in Python reaches normalize.
    g = make_graph()
    before = snapshot(g)
    kinds, a, b, labels = (np.array(column) for column in zip(*records, strict=True))
    raw = UpdateStream(kinds, a, b, labels, np.arange(1, len(records) + 1), SOURCE)
    with pytest.raises(BatchRejected, match="must be >= 0") as info:
        normalize(raw, g)
    assert info.value.line == (1 if len(records) == 1 else 2)
    assert snapshot(g) == before


def test_negative_delete_label_still_means_any_label():
    g, b = run([(DE, 1, 2, NO_LABEL)])
    assert ext_edges(g, b, b.delete_u, b.delete_v, b.delete_labels) == {(1, 2): 0}


_EDGE_RECORDS = st.lists(st.tuples(st.sampled_from(sorted(VERTICES) + [7]),
                                   st.sampled_from(sorted(VERTICES) + [7]),
                                   st.sampled_from([NO_LABEL, 0, 1, 2])),
                         min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(records=_EDGE_RECORDS, inserting=st.booleans())
def test_pending_edges_resolve_as_normalize_does(records, inserting):
    """A batch group member's deferred validation (pending_edges, then resolve with the
    stored labels) gives normalize's effect exactly; a batch it does not take (None) is
    one with a missing endpoint, a self-loop or an edge twice."""
    kind = E if inserting else DE
    if inserting:   # the parsers refuse negative insert labels (tested above)
        records = [(a, b, max(label, 0)) for a, b, label in records]
    batch = stream([(kind, a, b, label) for a, b, label in records])
    g = make_graph(EngineConfig())
    pending = gpu.batch.pending_edges(batch, g, limit=6)
    pairs = [frozenset((a, b)) for a, b, _ in records]
    takes = (all(a in VERTICES and b in VERTICES and a != b for a, b, _ in records)
             and len(set(pairs)) == len(pairs))
    assert (pending is not None) == takes
    if pending is None:
        return
    assert gpu.batch.pending_edges(batch, g, limit=len(records) - 1) is None
    effect = pending.resolve(gpu.batch.stored_labels(g, pending.u, pending.v))
    want = normalize(batch, g)
    assert (effect.applied, effect.ignored) == (want.applied, want.ignored)
    for side in ("insert", "delete"):
        got = sorted(zip(*(getattr(effect, f"{side}_{x}").tolist() for x in ("u", "v", "labels"))))
        assert got == sorted(zip(*(getattr(want, f"{side}_{x}").tolist()
                                   for x in ("u", "v", "labels"))))


def test_pending_edges_takes_one_kind_of_edge_record_only():
    g = make_graph(EngineConfig())
    assert gpu.batch.pending_edges(stream([(E, 1, 4, 0), (DE, 1, 2, NO_LABEL)]), g, 8) is None
    assert gpu.batch.pending_edges(stream([(V, 7, 0, 1)]), g, 8) is None
    assert gpu.batch.pending_edges(stream([(DV, 1, 0, NO_LABEL)]), g, 8) is None
    assert gpu.batch.pending_edges(UpdateStream.from_records([]), g, 8) is None
    assert gpu.batch.pending_edges(stream([(E, 1, 4, 0), (E, 2, 4, 1)]), g, 8) is not None


class _HostPrep:
    """The device's side of normalize (DevicePrep) played on the host: edge records from
    `min_records` on go to edge_changes through it, as on CUDA."""

    def __init__(self, min_records: int) -> None:
        self.min_records, self.calls = min_records, 0

    def edge_changes(self, graph, host, inserts=None):
        from gpu.batch_edges import edge_changes
        self.calls += 1
        return edge_changes(np, gpu.batch._HostLookups(graph), *host, inserts=inserts)


def test_normalize_hands_large_batches_to_the_device_side():
    rng = random.Random(11)
    prep = _HostPrep(min_records=3)
    for _ in range(60):
        records = random_records(rng, ref_graph())
        batch = stream(records)
        edges = sum(kind in (E, DE) for kind, _, _, _ in records)
        before = prep.calls
        assert _effect_or_error(batch, make_graph(EngineConfig())) == \
            _effect_or_error(batch, make_graph(EngineConfig()), prep)
        assert prep.calls - before == (1 if edges >= 3 and len(records) > 1 else 0)

