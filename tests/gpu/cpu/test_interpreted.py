"""gpu/cpu/interpreted.py: the kernels run as plain Python give what the compiled kernels
and the brute-force reference give, and the switch between the two.

The twins run in a fresh interpreter with an empty Numba cache, so that no kernel has a
compiled version and every call from Python goes to a twin (in this process earlier tests
have compiled them).  The workload drives the engine through the paths a batch can take
(hub edges, leaf groups, edge labels, vertex records, listing, the serial and the parallel
region paths, the queue's giving, a static count and listing) under three configs; its
results are compared with the same workload run compiled here and with brute force.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numba as nb
import pytest

import gpu.cpu.executor
from gpu.config import EngineConfig
from gpu.cpu import interpreted
from gpu.engine import Engine
from tests.gpu.cpu.test_leaf_groups import PATTERNS, hub_batch, hub_data
from tests.graphs import embeddings, random_batch

REPO = Path(__file__).resolve().parents[3]

CONFIGS = {
    "default": EngineConfig(),
    "tiny": EngineConfig.tiny(),
    # Every phase in the work-sharing region, its searches giving at every look.
    "region": EngineConfig(shared_region_threads=1, serial_below_tasks=1),
}


def workload(name: str, switch_at: int = -1) -> list:
    """Per batch: each pattern's (positive, negative, added rows or None) from the engine,
    and (positive, negative) by brute force; then each pattern's static count and listing.
    Interpreting stops before batch `switch_at`.  With the "region" config set
    gpu.cpu.executor.SHARE_ALWAYS first."""
    rng = random.Random(11)
    d = hub_data(rng, 50, 3, 2)
    engine = Engine(d.labeled(), backend="cpu", config=CONFIGS[name])
    patterns = list(PATTERNS.values())
    qids = [engine.add_query(p.query()) for p in patterns]
    listed = {qids[0]: 1000, qids[3]: 2, qids[-1]: 1000}
    next_id = [1000]
    out = []
    for step in range(12):
        if step == switch_at:
            interpreted.stop()
        before = [embeddings(d, p) for p in patterns]
        batch = hub_batch(rng, d, 2) if step % 2 else random_batch(rng, d, 3, 2, next_id)
        after = [embeddings(d, p) for p in patterns]
        res = engine.apply(batch, list_limit=listed if step % 3 == 0 else 0)
        for qid, old, new in zip(qids, before, after, strict=True):
            delta = res.queries[qid]
            rows = None if delta.added is None else sorted(map(tuple, delta.added.tolist()))
            out.append([[delta.positive, delta.negative, rows], [len(new - old), len(old - new)]])
    engine.check()
    for qid in qids:
        out.append([engine.count(qid), sorted(map(tuple, engine.matches(qid).rows.tolist()))])
    return json.loads(json.dumps(out))


SCRIPT = textwrap.dedent('''
    import json, sys
    from numba.core import event

    compiled = []

    class Compiles(event.Listener):
        def on_start(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__qualname__)

        def on_end(self, ev):
            pass

    event.register("numba:compile", Compiles())
    import gpu.cpu.executor
    from gpu.cpu import interpreted
    from tests.gpu.cpu.test_interpreted import workload

    gpu.cpu.executor.SHARE_ALWAYS = sys.argv[1] == "region"
    interpreted.interpret()
    results = workload(sys.argv[1], int(sys.argv[2]))
    print(json.dumps({"compiled": compiled, "results": results}))
''')


def _in_a_fresh_interpreter(name: str, switch_at: int) -> dict:
    # Nothing is compiled in a fresh interpreter: every kernel called runs its twin
    # (Numba's cache is read only once interpreting stops).
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, name, str(switch_at)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_twins_give_the_compiled_kernels_and_brute_force(name, monkeypatch):
    monkeypatch.setattr(gpu.cpu.executor, "SHARE_ALWAYS", name == "region")
    compiled = workload(name)
    batches = [r for r in compiled if isinstance(r[0], list)]
    assert batches and all(engine[:2] == brute for engine, brute in batches)
    twins = _in_a_fresh_interpreter(name, -1)
    assert twins["compiled"] == []
    assert twins["results"] == compiled


def test_an_engine_goes_on_compiled_where_its_twins_stopped():
    """Interpreting stops between batches (compile_ahead.poll): the next batches run the
    compiled kernels (here loaded from the cache the test above filled) on the state the
    twins left, with lists of the kind compiled kernels take."""
    assert _in_a_fresh_interpreter("default", 6)["results"] == workload("default")


def test_every_kernel_has_a_twin_without_compiled_code():
    kernels = interpreted.kernels()
    assert len(kernels) > 50
    for kernel in kernels:
        twin = interpreted.twin(kernel)
        used = [twin.__globals__[n] for n in twin.__code__.co_names if n in twin.__globals__]
        assert not any(isinstance(v, nb.core.dispatcher.Dispatcher) or v is nb
                       for v in used), kernel


@nb.njit
def _plus_one(x):
    return x + 1


def test_interpreting_runs_twins_until_stopped_and_keeps_what_is_compiled():
    _plus_one(1)                          # an int version compiled before
    interpreted.interpret(("tests",))
    try:
        assert interpreted.active()
        epoch = interpreted.epoch()
        assert _plus_one(2.5) == 3.5      # a float: its twin, nothing compiled
        assert _plus_one(2) == 3
        assert len(_plus_one.signatures) == 1
        assert interpreted.kernel_list([(1, 2)]) == [(1, 2)]
    finally:
        interpreted.stop()
    assert not interpreted.active() and interpreted.epoch() == epoch + 1
    assert _plus_one(2.5) == 3.5
    assert len(_plus_one.signatures) == 2
    typed = interpreted.kernel_list([(1, 2.0), (3, 4.0)])
    assert type(typed).__name__ == "List" and list(typed) == [(1, 2.0), (3, 4.0)]
