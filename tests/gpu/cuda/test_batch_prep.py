"""Batches settled on the device (gpu/cuda/batch_prep.py): the same effect, arrays and
dtypes, or the same rejection, as normalize on the host, for every record mix, through
the generic CuPy path and through prep.cu's kernels (one-kind batches); and the device's
copy of the id map follows vertex adds and deletes."""
from __future__ import annotations

import functools
import random
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.batch_edges import Rejection
from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.records import NO_LABEL, UpdateStream
from tests.gpu.test_batch import (DE, DV, E, EDGES, SOURCE, V, VERTICES, _effect_or_error,
                                  labeled, random_records, ref_graph)

pytestmark = pytest.mark.gpu


def _engine(directed: bool = False) -> Engine:
    """A CUDA engine on the fixture graph (its edges read as arcs where `directed`) whose
    every batch of edge records is settled on the device (EngineConfig.tiny:
    device_prep_records 1)."""
    graph = labeled()
    engine = Engine(graph, backend="cuda", config=EngineConfig.tiny(), directed=directed)
    assert engine._prep is not None and engine._prep.min_records == 1
    return engine


_REJECTED = [
    [(E, 1, 1, 0)],                                   # a self-loop
    [(E, 1, 2, 0), (E, 3, 99, 0)],                    # an endpoint missing
    [(DV, 3, 0, NO_LABEL), (E, 3, 4, 0)],             # an insert touching a deleted vertex
    [(E, 1, 4, 0), (E, 4, 1, 1)],                     # inserted twice, two labels
    [(E, 1, 4, 0), (E, 1, 4, 1)],                     # the same, one way round
    [(E, 99, 98, 0), (E, 2, 2, 0)],                   # two problems: the first check wins
]


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("records", _REJECTED)
def test_rejections_are_the_hosts(records, directed):
    engine = _engine(directed)
    stream = UpdateStream.from_records(records, SOURCE)
    device = _effect_or_error(stream, engine.graph, engine._prep)
    assert device == _effect_or_error(stream, engine.graph, None)
    # In a directed graph a pair's two arcs are two edges: two labels are no conflict.
    assert isinstance(device, str) != (directed and records == _REJECTED[3])


def _device_copy_is_the_hosts(stream, engine) -> bool:
    """The batch's `device` edge arrays equal its host arrays entry for entry (int32), or
    are None where the deleted vertices' edges joined on the host."""
    from gpu.batch import BatchRejected, normalize
    try:
        effect = normalize(stream, engine.graph, engine._prep)
    except BatchRejected:
        return True
    if effect.device is None:   # also where the host settled it: no edge record, or one
        edge_records = int(np.isin(stream.kind, (E, DE)).sum())
        return len(effect.delete_slots) > 0 or edge_records == 0 or len(stream) == 1
    for name in ("delete_u", "delete_v", "delete_labels", "insert_u", "insert_v",
                 "insert_labels"):
        copy = getattr(effect.device, name)
        if copy.dtype != np.int32 or copy.get().tolist() != getattr(effect, name).tolist():
            return False
    return True


@pytest.mark.parametrize("directed", [False, True])
def test_random_batches_settle_as_on_the_host_while_the_graph_changes(directed):
    """Random mixes (vertex adds and deletes, duplicates, cancelling pairs, deletes naming
    other labels), applied one after another so the id map's device copy follows vertex
    changes and the array's edges change (directed: both arcs of a pair, one of them)."""
    rng = random.Random(5)
    engine = _engine(directed)
    for step in range(80):
        records = random_records(rng, ref_graph())
        stream = UpdateStream.from_records(records, SOURCE)
        host = _effect_or_error(stream, engine.graph, None)
        assert _effect_or_error(stream, engine.graph, engine._prep) == host, (step, records)
        assert _device_copy_is_the_hosts(stream, engine), (step, records)
        if isinstance(host, str):
            continue
        # Apply a batch that keeps the graph near the fixture (every vertex back).
        engine.apply(stream)
        back = [(V, v, 0, lab) for v, lab in VERTICES.items()]
        back += [(E, a, b, lab) for (a, b), lab in EDGES.items()]
        engine.apply(UpdateStream.from_records(back, SOURCE))
    engine.check()


def test_the_device_id_map_follows_many_vertex_changes():
    import cupy as cp

    engine = _engine()
    for k in range(40):
        new = [(V, 1000 + 7 * k + j, 0, j % 3) for j in range(5)]
        engine.apply(UpdateStream.from_records(new, SOURCE))
        if k % 3 == 0:
            engine.apply(UpdateStream.from_records([(DV, 1000 + 7 * k, 0, NO_LABEL)], SOURCE))
        probe = np.array(sorted(VERTICES) + [1000 + 7 * j + i for j in range(k + 1)
                                             for i in range(5)] + [5, 123456789],
                         dtype=np.int64)
        got = engine._prep.id_map(engine.graph).lookup(cp.asarray(probe)).get()
        assert got.tolist() == engine.graph.ids.lookup(probe).tolist(), k


@functools.cache
def _shared_engine(directed: bool = False) -> Engine:
    return _engine(directed)    # only normalized against below: its graph never changes


def _normalized_through_kernels(records, directed: bool = False):
    """normalize of edge records (kind, a, b, label) on the device, with the number of
    batches prep.cu's path (DevicePrep.edge_records) settled, and on the host."""
    from gpu.cuda.batch_prep import DevicePrep

    engine = _shared_engine(directed)
    stream = UpdateStream.from_records(records, SOURCE)
    calls = []
    edge_records = DevicePrep.edge_records

    def spy(self, *args):
        calls.append(args)
        return edge_records(self, *args)

    with mock.patch.object(DevicePrep, "edge_records", spy):
        device = _effect_or_error(stream, engine.graph, engine._prep)
        copies_agree = _device_copy_is_the_hosts(stream, engine)
    return device, _effect_or_error(stream, engine.graph, None), len(calls), copies_agree


_ENDS = st.sampled_from(sorted(VERTICES) + [7])      # 7: no such vertex


@settings(max_examples=300, deadline=None)
@given(records=st.lists(st.tuples(st.booleans(), _ENDS, _ENDS,
                                  st.sampled_from([NO_LABEL, 0, 1, 2])),
                        min_size=2, max_size=12),
       kinds=st.sampled_from(["inserts", "deletes", "both"]), directed=st.booleans())
def test_edge_records_settle_in_the_kernels_as_on_the_host(records, kinds, directed):
    """Edge records alone (inserts only, deletes only, or both): duplicates, conflicting
    labels, inserts and deletes of one edge cancelling, existing and missing edges,
    deletes naming the stored label, another or none, self-loops, missing endpoints,
    negative insert labels; the effect (arrays, dtypes, counts) or the rejection is the
    host's, and the device copies are its arrays.  `directed`: the records are arcs (a
    record and its reverse two edges)."""
    from gpu.batch import _HostLookups
    from gpu.batch_edges import edge_changes

    if kinds != "both":
        records = [(kinds == "inserts", a, b, label) for _, a, b, label in records]
    # The kernels themselves, on raw arrays (the parsers refuse negative insert labels).
    engine = _shared_engine(directed)
    flags = np.array([r[0] for r in records])
    a, b, labels = (np.array(column, dtype=np.int64) for column in zip(*(r[1:] for r in records)))
    none = np.empty(0, dtype=np.int64)
    want = edge_changes(np, _HostLookups(engine.graph), a, b, labels.astype(np.int32), flags,
                        none, none, none, directed=directed, inserts=int(flags.sum()))
    got = engine._prep.edge_records(engine.graph, a, b, labels, flags)
    assert type(got) is type(want)
    if isinstance(want, Rejection):
        assert got == want
    else:
        for name in ("delete_u", "delete_v", "delete_labels", "insert_u", "insert_v",
                     "insert_labels"):
            assert getattr(got, name).dtype == getattr(want, name).dtype == np.int32
            assert getattr(got, name).tolist() == getattr(want, name).tolist(), name
        assert (got.ignored_inserts, got.ignored_deletes) == \
            (want.ignored_inserts, want.ignored_deletes)
    # And through normalize, as batches come (inserts with labels the parsers take).
    stream = [(E, a, b, max(label, 0)) if inserting else (DE, a, b, label)
              for inserting, a, b, label in records]
    device, host, calls, copies_agree = _normalized_through_kernels(stream, directed)
    assert calls == 2       # the batch, then again for its device copies
    assert device == host
    assert copies_agree


@pytest.mark.parametrize("kinds", ["inserts", "deletes", "both"])
def test_long_runs_of_one_edge_over_many_blocks(kinds):
    """Hundreds of records over the fixture's few vertices: runs of one edge dozens of
    records long, spread over several thread blocks; the first conflicting insert (in
    record order) is the one named; with both kinds most runs cancel."""
    rng = random.Random(3)
    ids = sorted(VERTICES)
    pairs = [(a, b) for a in ids for b in ids if a != b]
    for round_ in range(6):
        labels = {frozenset(p): EDGES.get(p, EDGES.get(p[::-1], rng.randrange(3)))
                  for p in pairs}
        records = []
        for _ in range(700):
            a, b = rng.choice(pairs)
            inserting = kinds == "inserts" or (kinds == "both" and rng.random() < 0.5)
            label = labels[frozenset((a, b))] if inserting else rng.choice(
                [NO_LABEL, labels[frozenset((a, b))], 2])
            records.append((E if inserting else DE, a, b, label))
        conflict = round_ % 2 and kinds != "deletes"
        if conflict:                # one late conflicting insert
            at = next(i for i in range(rng.randrange(350, 700), 700) if records[i][0] == E)
            kind, a, b, label = records[at]
            records[at] = (kind, a, b, label + 1)
        device, host, calls, copies_agree = _normalized_through_kernels(records)
        assert calls == 2 and device == host and copies_agree, round_
        assert isinstance(host, str) == bool(conflict)
