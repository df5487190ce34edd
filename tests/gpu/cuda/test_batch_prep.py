"""Batches settled on the device (gpu/cuda/batch_prep.py): the same effect, arrays and
dtypes, or the same rejection, as normalize on the host, for every record mix; and the
device's copy of the id map follows vertex adds and deletes."""
from __future__ import annotations

import random

import numpy as np
import pytest

from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.records import NO_LABEL, UpdateStream
from tests.gpu.test_batch import (DE, DV, E, EDGES, SOURCE, V, VERTICES, _effect_or_error,
                                  labeled, random_records, ref_graph)

pytestmark = pytest.mark.gpu


def _engine() -> Engine:
    graph = labeled()
    engine = Engine(graph, backend="cuda", config=EngineConfig.tiny())
    assert engine._prep is not None and engine._prep.min_records == 1
    return engine


_REJECTED = [
    [(E, 1, 1, 0)],                                   # a self-loop
    [(E, 1, 2, 0), (E, 3, 99, 0)],                    # an endpoint missing
    [(DV, 3, 0, NO_LABEL), (E, 3, 4, 0)],             # an insert touching a deleted vertex
    [(E, 1, 4, 0), (E, 4, 1, 1)],                     # inserted twice, two labels
    [(E, 99, 98, 0), (E, 2, 2, 0)],                   # two problems: the first check wins
]


@pytest.mark.parametrize("records", _REJECTED)
def test_rejections_are_the_hosts(records):
    engine = _engine()
    stream = UpdateStream.from_records(records, SOURCE)
    device = _effect_or_error(stream, engine.graph, engine._prep)
    assert isinstance(device, str)
    assert device == _effect_or_error(stream, engine.graph, None)


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


def test_random_batches_settle_as_on_the_host_while_the_graph_changes():
    """Random mixes (vertex adds and deletes, duplicates, cancelling pairs, deletes naming
    other labels), applied one after another so the id map's device copy follows vertex
    changes and the array's edges change."""
    rng = random.Random(5)
    engine = _engine()
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
