"""Directed graphs on the CUDA executor against the CPU executor, on digraphs larger and more
skewed than the oracle's (tests/gpu/test_directed.py runs both executors against the oracle
on small ones): hubs whose arcs run both ways put the level-1 check of reciprocal root
arcs, per-direction list segments, ranks and signatures, work sharing and listings under
load.  Each batch's deltas, counts and listed rows must be equal."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.records import LabeledGraph
from tests import reference as ref
from tests.gpu.test_directed import SHAPES
from tests.gpu.test_oracle import to_query, to_stream
from tests.gpu.test_reference_directed import random_directed_query

pytestmark = pytest.mark.gpu

CONFIGS = {
    # The packed memory array and its read view.
    "default": EngineConfig,
    # Every task shared at every step, tiny buffers and launches (EngineConfig.tiny).
    "tiny": EngineConfig.tiny,
    "lists": lambda: dataclasses.replace(EngineConfig(), device_graph="lists"),
    # The array without its view: a directed engine takes the lists instead.
    "pma-direct": lambda: dataclasses.replace(EngineConfig(), pma_view=False),
}
# The device graph each config's directed engine runs on.
LAYOUTS = {"default": "pma", "tiny": "pma", "lists": "lists", "pma-direct": "lists"}


def skewed_arcs(rng: random.Random, n: int, count: int, exclude=frozenset()) -> list:
    """`count` distinct arcs u -> v, u != v, ends drawn with weight 1 / (rank + 1) (a few
    hubs), none of `exclude`."""
    weights = [1.0 / (i + 1) for i in range(n)]
    arcs: set[tuple[int, int]] = set()
    while len(arcs) < count:
        u, v = rng.choices(range(n), weights, k=2)
        if u != v and (u, v) not in exclude:
            arcs.add((u, v))
    return sorted(arcs)


def labeled(n: int, vlabels: list[int], arcs: dict) -> LabeledGraph:
    src = np.array([a for a, _ in arcs], dtype=np.int64)
    dst = np.array([b for _, b in arcs], dtype=np.int64)
    return LabeledGraph(np.arange(n, dtype=np.int64), np.array(vlabels, dtype=np.int32),
                        src, dst, np.array(list(arcs.values()), dtype=np.int32))


def queries(rng: random.Random) -> dict:
    chosen = {name: SHAPES[name] for name in ("cycle3", "cycle4", "reciprocal_tail",
                                              "bowtie", "fan_mixed", "tree", "transitive3")}
    for i in range(3):
        chosen[f"rand{i}"] = random_directed_query(rng, rng.randint(3, 5), 0.3, 2, 1)
    return chosen


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_cuda_equals_cpu_on_a_skewed_digraph(config):
    rng = random.Random(22)
    n = 300
    vlabels = [rng.randrange(2) for _ in range(n)]
    arcs = {arc: 0 for arc in skewed_arcs(rng, n, 2500)}
    # Reverse arcs of a third of them: many reciprocal pairs, most at the hubs.
    for u, v in rng.sample(sorted(arcs), len(arcs) // 3):
        arcs.setdefault((v, u), 0)
    graph = labeled(n, vlabels, arcs)
    engines = [Engine(graph, backend=backend, config=CONFIGS[config](), directed=True)
               for backend in ("cpu", "cuda")]
    assert engines[1].config.device_graph == LAYOUTS[config]
    chosen = queries(rng)
    qids = [[engine.add_query(to_query(q, name)) for name, q in chosen.items()]
            for engine in engines]
    assert qids[0] == qids[1]
    counts = [[engine.count(q) for q in qids[0]] for engine in engines]
    assert counts[0] == counts[1] and sum(counts[0]) > 0
    listed = {qids[0][0], qids[0][2]}       # cycle3 and reciprocal_tail listed
    present = set(arcs)
    for step in range(6):
        if step % 3 == 2:       # deletions: one direction of many pairs among them
            gone = rng.sample(sorted(present), 300)
            records = [(ref.DELETE_EDGE, u, v, ref.NO_LABEL) for u, v in gone]
            present -= set(gone)
        else:                   # insertions: reverses of stored arcs among them
            reverse = [(v, u) for u, v in rng.sample(sorted(present), 150)
                       if (v, u) not in present]
            new = skewed_arcs(rng, n, 250, exclude=present | set(reverse))
            records = [(ref.INSERT_EDGE, u, v, 0) for u, v in reverse + new]
            present |= set(reverse + new)
        stream = to_stream(records)
        limits = {q: 1_000_000 for q in listed}
        results = [engine.apply(stream, list_limit=limits) for engine in engines]
        for qid in qids[0]:
            a, b = (r.queries[qid] for r in results)
            assert (a.positive, a.negative) == (b.positive, b.negative), (step, qid)
            if qid in listed:
                for rows in ((a.added, b.added), (a.removed, b.removed)):
                    assert sorted(map(tuple, rows[0].tolist())) == \
                        sorted(map(tuple, rows[1].tolist())), (step, qid)
    engines[1].check()
    assert [engines[0].count(q) for q in qids[0]] == [engines[1].count(q) for q in qids[0]]
    for qid in listed:
        found = [engine.matches(qid) for engine in engines]
        assert sorted(map(tuple, found[0].rows.tolist())) == \
            sorted(map(tuple, found[1].rows.tolist()))


def test_labels_that_outgrow_the_keys_re_key_the_arcs():
    """New vertex labels, brought by batches and by queries, past what the array's label
    bits hold with the direction bit (4 labels under MIN_LABEL_BITS): the array is re-keyed
    with its arcs' directions, and every batch still equals the CPU executor's."""
    rng = random.Random(5)
    n = 60
    arcs = {arc: rng.randrange(2) for arc in skewed_arcs(rng, n, 400)}
    graph = labeled(n, [rng.randrange(2) for _ in range(n)], arcs)
    engines = [Engine(graph, backend=backend, directed=True) for backend in ("cpu", "cuda")]
    assert engines[1].config.device_graph == "pma"
    before = engines[1]._device.graph.relayouts
    qids = [[engine.add_query(to_query(SHAPES["cycle3"], "c3")) for engine in engines]]
    next_id = n
    for label in range(2, 12):
        # Three vertices of the new label in a cycle of arcs, tied to old vertices.
        new = list(range(next_id, next_id + 3))
        next_id += 3
        records = [(ref.ADD_VERTEX, v, 0, label) for v in new]
        records += [(ref.INSERT_EDGE, a, b, 0) for a, b in zip(new, new[1:] + new[:1])]
        records += [(ref.INSERT_EDGE, new[0], rng.randrange(n), 1),
                    (ref.INSERT_EDGE, rng.randrange(n), new[1], 0)]
        results = [engine.apply(to_stream(records)) for engine in engines]
        if label % 3 == 0:
            # A 3-cycle of the new label (the batch's), and one naming the next label too,
            # which no vertex has yet: its registration re-keys the array.
            for name, labels in ((f"c{label}", [label] * 3),
                                 (f"n{label}", [label + 1, label, label])):
                query = to_query(ref.RefQuery.build(labels, [(0, 1), (1, 2), (2, 0)],
                                                    directed=True), name)
                qids.append([engine.add_query(query) for engine in engines])
        for cpu_qid, cuda_qid in qids:
            if cpu_qid in results[0].queries:
                a, b = results[0].queries[cpu_qid], results[1].queries[cuda_qid]
                assert (a.positive, a.negative) == (b.positive, b.negative), (label, cpu_qid)
    assert sum(engines[0].count(q) for q, _ in qids[1:]) > 0
    assert engines[1]._device.graph.relayouts > before
    engines[1].check()
    assert [engines[0].count(q) for q, _ in qids] == [engines[1].count(q) for _, q in qids]
