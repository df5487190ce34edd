"""gpu.warm_up leaves nothing for a batch to compile.

The check runs in a fresh interpreter: in the test process earlier tests have compiled
every function already.  There it runs `warm_up("cpu")`, notes how many compiled
signatures each Numba dispatcher of the `gpu` package holds, then drives an engine with
the default config through a varied workload (hubs, leaf groups, edge labels, vertex
records, one-edge batches, batches past the serial threshold, counting, listing, a
backfill) and reports every dispatcher that gained a signature: each would have been
compiled (or loaded from Numba's cache) while a client waited.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

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

    warm_up("cpu")
    before = signatures()

    from gpu.engine import Engine
    from gpu.io.records import DELETE_EDGE, INSERT_EDGE, NO_LABEL, UpdateStream
    from tests.gpu.cpu.test_leaf_groups import PATTERNS, hub_batch, hub_data
    from tests.graphs import random_batch

    rng = random.Random(5)
    d = hub_data(rng, 120, 3, 2)
    engine = Engine(d.labeled(), backend="cpu")
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
    for qid in qids:
        engine.count(qid)
        engine.matches(qid, limit=5)
    after = signatures()
    print(json.dumps({name: after[name] - before.get(name, 0) for name in after
                      if after[name] != before.get(name, 0)}))
''')


def test_nothing_compiles_after_the_warm_up():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    compiled = json.loads(proc.stdout.strip().splitlines()[-1])
    assert compiled == {}, f"compiled after the warm-up: {compiled}"
