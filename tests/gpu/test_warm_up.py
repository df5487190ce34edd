"""gpu.warm_up leaves nothing for a batch to compile.

The check runs in a fresh interpreter: in the test process earlier tests have compiled
every function already.  There it runs `warm_up(backend)`, notes how many compiled
signatures each Numba dispatcher of the `gpu` package holds, then drives an engine with
the default config through a varied workload (hubs, leaf groups, edge labels, vertex
records, one-edge batches, batches past the serial threshold, one-edge batches started
together as a batch group, counting, listing, a backfill, a tail counted at a hub of
1,199 neighbours; timed batches with retention and, undirected, windowed queries) and
reports every dispatcher
that gained a signature: each would have been compiled (or loaded from Numba's cache)
while a client waited.  On CUDA it also reports every CuPy module built after the
warm-up (a kernel of its own or one of CuPy's, compiled by NVRTC where CuPy's disk cache
does not hold it: 0.7 s inside the first batch after the queries changed, on a fresh
device, before plans were stacked on the host).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
import json, random, sys
import numba.core.dispatcher

from gpu.warm_up import warm_up

def signatures():
    out = {}
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] != "gpu":
            continue
        for attr, value in vars(module).items():
            if isinstance(value, numba.core.dispatcher.Dispatcher):
                out[f"{name}.{attr}"] = len(value.overloads)
    return out

def undirected_workload(backend):
    from gpu.engine import Engine
    from gpu.io.records import DELETE_EDGE, INSERT_EDGE, NO_LABEL, UpdateStream
    from tests.gpu.cpu.test_leaf_groups import PATTERNS, hub_batch, hub_data
    from tests.graphs import random_batch
    rng = random.Random(5)
    d = hub_data(rng, 120, 3, 2)
    engine = Engine(d.labeled(), backend=backend)
    qids = [engine.add_query(p.query()) for p in PATTERNS.values()]
    listed = {qids[0]: 10, qids[-1]: 3}
    next_id = [1000]
    for step in range(40):
        batch = (hub_batch(rng, d, 2) if step % 2 else
                 random_batch(rng, d, 3, 2, next_id))
        engine.apply(batch, list_limit=listed if step % 3 == 0 else 0)
    absent = [(a, b) for a in range(2, 120) for b in range(a + 1, 120)
              if a in d.vertices and b in d.vertices and frozenset((a, b)) not in d.edges]
    absent = absent[:150]
    for a, b in absent[:2]:             # one-edge batches, in and out again
        for kind, label in ((INSERT_EDGE, 1), (DELETE_EDGE, NO_LABEL)):
            engine.apply(UpdateStream.from_records([(kind, a, b, label)]))
    for kind, label in ((INSERT_EDGE, 0), (DELETE_EDGE, NO_LABEL)):
        engine.apply(UpdateStream.from_records([(kind, a, b, label) for a, b in absent]),
                     list_limit=listed)
    started = [engine.start(UpdateStream.from_records([(INSERT_EDGE, a, b, 1)]))
               for a, b in absent[2:6]]  # a batch group
    for pending in started:
        pending.finish()
    for qid in qids:
        engine.count(qid)
        engine.matches(qid, limit=5)
    # A hub of 1,199 neighbours and a 300-edge batch among them: on CUDA a general launch
    # whose tails are counted at the hub (EngineConfig.leaf_count_degree).
    from gpu.io.records import LabeledGraph
    from gpu.plan.query import QueryGraph
    import numpy as np
    star = Engine(LabeledGraph(np.arange(1200), np.zeros(1200), np.zeros(1199, np.int64),
                               np.arange(1, 1200), np.zeros(1199)), backend=backend)
    star.add_query(QueryGraph.build("tail", [0, 1, 2, 3], [0, 0, 0, 0],
                                    [(0, 1), (1, 2), (0, 2), (2, 3)]))
    for kind, label in ((INSERT_EDGE, 0), (DELETE_EDGE, NO_LABEL)):
        star.apply(UpdateStream.from_records([(kind, a, a + 1, label)
                                              for a in range(1, 601, 2)]))


def directed_workload(backend):
    """Random digraphs' batches of every kind (reverse arcs, one direction of a pair
    deleted, vertex records), counted and listed, one-arc batches, a batch group, a batch
    of 1,200 arcs, the static count and listing."""
    from gpu.engine import Engine
    from tests.gpu.test_directed import BATCH_KINDS, SHAPES, gen_batch, random_graph
    from tests.gpu.test_oracle import to_labeled, to_query, to_stream
    from tests import reference as ref
    rng = random.Random(22)
    g = random_graph(rng)
    engine = Engine(to_labeled(g), backend=backend, directed=True)
    qids = [engine.add_query(to_query(SHAPES[name], name)) for name in sorted(SHAPES)]
    for step in range(30):
        records = gen_batch(rng, g, BATCH_KINDS[step % len(BATCH_KINDS)])
        engine.apply(to_stream(records), list_limit={qids[0]: 5} if step % 3 == 0 else 0)
        g.apply(records)
    absent = [(u, v) for u in sorted(g.vertices) for v in sorted(g.vertices)
              if u != v and (u, v) not in g.edges]
    for arc in absent[:2]:
        engine.apply(to_stream([(ref.INSERT_EDGE, *arc, 0)]))
        engine.apply(to_stream([(ref.DELETE_EDGE, *arc, ref.NO_LABEL)]))
    started = [engine.start(to_stream([(ref.INSERT_EDGE, *arc, 0)])) for arc in absent[2:6]]
    for pending in started:
        pending.finish()
    big = [(u, v) for u in range(10_000, 10_040) for v in range(10_000, 10_040) if u != v]
    vertices = [(ref.ADD_VERTEX, u, 0, 0) for u in range(10_000, 10_040)]
    engine.apply(to_stream(vertices + [(ref.INSERT_EDGE, u, v, 0) for u, v in big[:1200]]))
    engine.apply(to_stream([(ref.DELETE_EDGE, u, v, ref.NO_LABEL) for u, v in big[:1200]]))
    for qid in qids:
        engine.count(qid)
        engine.matches(qid, limit=5)


def timed_workload(backend, directed):
    """Timed batches with retention (refreshes, late arrivals, expiry), and on an
    undirected graph windowed queries (with and without `before` pairs) counted, listed
    and searched whole; one batch refreshes 150 edges (the CPU's parallel windowed
    search)."""
    from gpu.engine import Engine
    from tests import reference as ref
    from tests.gpu.test_event_time import timed_stream, with_times
    from tests.gpu.test_oracle import to_labeled, to_query
    rng = random.Random(31)
    if directed:
        from tests.gpu.test_directed import BATCH_KINDS, SHAPES, gen_batch, random_graph
        g = random_graph(rng)
        engine = Engine(to_labeled(g), backend=backend, directed=True, retention=20)
        qids = [engine.add_query(to_query(SHAPES[name], name)) for name in sorted(SHAPES)]
        windowed = []
    else:
        from tests.gpu.test_oracle import BATCH_KINDS, gen_batch, random_graph, random_queries
        g = random_graph(rng, n=30, p=0.4)
        engine = Engine(to_labeled(g), backend=backend, retention=20)
        queries = [q for q in random_queries(rng, g).values() if q.edges]
        qids = [engine.add_query(to_query(queries[0], "standing"))]
        windowed = [engine.add_query(to_query(q, f"w{i}"), window=6,
                                     before=[(0, 1)] if i % 2 and len(q.edges) > 1 else [])
                    for i, q in enumerate(queries[:4])]
    clock = [0]
    listed = dict.fromkeys(qids + windowed, 5)
    ends = (lambda key: key) if directed else (lambda key: tuple(sorted(key)))
    edges = sorted((ends(key), label) for key, label in g.edges.items())[:150]
    engine.apply(timed_stream([(ref.INSERT_EDGE, *key, label, i % 7)
                               for i, (key, label) in enumerate(edges)]), list_limit=listed)
    for step in range(24):
        records = gen_batch(rng, g, BATCH_KINDS[step % len(BATCH_KINDS)])
        engine.apply(timed_stream(with_times(rng, records, clock)),
                     list_limit=listed if step % 3 == 0 else 0)
        g.apply(records)
    for qid in windowed:
        engine.count(qid)
        engine.matches(qid, limit=5)


def main():
    backend, kind = sys.argv[1], sys.argv[2]
    warm_up(backend, directed=kind == "directed")
    before = signatures()
    built = []
    if backend == "cuda":
        from cupy.cuda import compiler
        real = compiler._compile_module_with_cache

        def counting(source, *args, **kwargs):
            # Where it was asked for: the engine's frames, innermost last.
            import traceback
            frames = [f"{f.filename.split('/gpu/')[-1]}:{f.lineno} {f.name}"
                      for f in traceback.extract_stack() if "/gpu/" in f.filename]
            name = source.split("__global__ void ")[-1].split("(")[0]
            built.append(f"{name} from {' < '.join(reversed(frames[-4:]))}")
            return real(source, *args, **kwargs)

        compiler._compile_module_with_cache = counting

    if kind == "directed":
        directed_workload(backend)
    else:
        undirected_workload(backend)
    timed_workload(backend, kind == "directed")
    after = signatures()
    compiled = {name: after[name] - before.get(name, 0) for name in after
                if after[name] != before.get(name, 0)}
    if built:
        compiled["cupy modules"] = built
    print(json.dumps(compiled))


main()
''')


@pytest.mark.parametrize("kind", ["undirected", "directed"])
@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_nothing_compiles_after_the_warm_up(backend, kind):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, backend, kind], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    compiled = json.loads(proc.stdout.strip().splitlines()[-1])
    assert compiled == {}, f"compiled after the warm-up: {compiled}"
