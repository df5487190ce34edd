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
    "default": EngineConfig,
    # Every task shared at every step, tiny buffers and launches (EngineConfig.tiny).
    "tiny": EngineConfig.tiny,
    # The layout in the config is the array's: a directed engine takes the lists anyway.
    "pma": lambda: dataclasses.replace(EngineConfig(), device_graph="pma"),
}


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
    assert engines[1].config.device_graph == "lists"
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
