"""gpu/cpu/interpreted.py: the kernels run as plain Python give what the compiled kernels
and the brute-force reference give, and the switch between the two.

The twins run in a fresh interpreter with an empty Numba cache, so that no kernel has a
compiled version and every call from Python goes to a twin (in this process earlier tests
have compiled them).  The workload drives the engine through the paths a batch can take
(hub edges, leaf groups, edge labels, vertex records, listing, the serial and the parallel
region paths, the queue's giving, a static count and listing) under three configs; its
results are compared with the same workload run compiled here and with brute force.

The two-hub workload takes the values a first run's inputs (at most
compile_ahead.INTERPRET_BELOW_BYTES) can hold to their extremes: hubs of ~47,000 leaves
(a degree squared past 2^31), counts past 2^31 and 2^40 made by leaf products, listing
without a bound, ids up to 2^63 - 1 and labels up to 2^31 - 1; brute force is out of
reach there, so closed forms of its counts are checked (and checked against brute force
on a small instance).  In the fresh interpreter any integer overflow inside a twin
raises, so a wrap is caught where it happens, not only where it changes a result.
"""
from __future__ import annotations

import hashlib
import json
import math
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
from gpu.graph.lists import DynamicGraph
from gpu.io.graphs import parse_graph_text
from gpu.io.records import MAX_ID, MAX_LABEL
from gpu.io.streams import parse_updates_text
from tests.gpu.cpu.test_leaf_groups import PATTERNS, hub_batch, hub_data
from tests.gpu.graph.test_lists import Model
from tests.gpu.graph.test_lists import compare as compare_lists
from tests.gpu.graph.test_lists import random_batch as random_lists_batch
from tests import compiles
from tests.graphs import Data, Pattern, embeddings, random_batch

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


SCRIPT = compiles.PRELUDE + textwrap.dedent('''
    import numpy as np
    import gpu.cpu.executor
    import gpu.graph.idmap
    from gpu.cpu import interpreted
    from tests.gpu.cpu import test_interpreted

    def strict(function, *args):
        # Every integer overflow in a twin raises, but the id map's hash's.
        with np.errstate(over="raise"):
            return interpreted.call(function, args)

    def wrapping(function):
        def hash_mod_2_64(*args):
            with np.errstate(over="ignore"):
                return function(*args)
        return hash_mod_2_64

    interpreted._run = strict
    idmap_twins = interpreted._twin_globals(vars(gpu.graph.idmap))
    idmap_twins["_slot"] = wrapping(idmap_twins["_slot"])
    workload, arguments = sys.argv[1], json.loads(sys.argv[2])
    gpu.cpu.executor.SHARE_ALWAYS = arguments["name"] == "region"
    interpreted.interpret()
    results = getattr(test_interpreted, workload)(**arguments)
    print(json.dumps({"compiled": compiled, "results": results}))
''')


def _in_a_fresh_interpreter(workload: str, **arguments) -> dict:
    # Nothing is compiled in a fresh interpreter: every kernel called runs its twin
    # (Numba's cache is read only once interpreting stops).
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, workload, json.dumps(arguments)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1800,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_twins_give_the_compiled_kernels_and_brute_force(name, monkeypatch):
    monkeypatch.setattr(gpu.cpu.executor, "SHARE_ALWAYS", name == "region")
    compiled = workload(name)
    batches = [r for r in compiled if isinstance(r[0], list)]
    assert batches and all(engine[:2] == brute for engine, brute in batches)
    twins = _in_a_fresh_interpreter("workload", name=name)
    assert twins["compiled"] == []
    assert twins["results"] == compiled


def test_an_engine_goes_on_compiled_where_its_twins_stopped():
    """Interpreting stops between batches (compile_ahead.poll): the next batches run the
    compiled kernels (loaded from the cache this run fills) on the state the twins left,
    with lists of the kind compiled kernels take."""
    compiled = workload("default")
    assert _in_a_fresh_interpreter("workload", name="default", switch_at=6) == \
        {"compiled": [], "results": compiled}


# --------------------------------------------------------------------------- two hubs

HUB, LEAF, OTHER = MAX_LABEL, MAX_LABEL - 1, MAX_LABEL - 2   # labels at the top of their range
FAR = MAX_LABEL                          # an edge label at the top of its range
H1, H2 = 10**18 - 1, 10**18 - 2          # the largest ids the compiled scan reads (18 digits)
NEW = [MAX_ID - j for j in range(6)]     # ids the batches add: 19 digits, up to 2^63 - 1

# The graph: LEAF vertices 0..n-1, each joined to H1 by a FAR edge and to H2 by a 0 edge;
# H1 - H2 by a 0 edge.  The batches add OTHER leaves to H1 (by FAR edges).  Each query's
# count is a closed form in the state (two_hub_counts).  flag and kite are searched in leaf
# groups (their OTHER leaf's label is in no tail): a leaf product, a non-adjacent pair;
# diamond's and kite's pair has |A||B| = (shared leaves)^2.
TWO_HUB_QUERIES = {
    "star2": Pattern([HUB, LEAF, LEAF], [(0, 1, 0), (0, 2, 0)]),
    "star3": Pattern([HUB] + [LEAF] * 3, [(0, i, FAR) for i in (1, 2, 3)]),
    "star4": Pattern([HUB] + [LEAF] * 4, [(0, i, FAR) for i in (1, 2, 3, 4)]),
    "star5": Pattern([HUB] + [LEAF] * 5, [(0, i, FAR) for i in (1, 2, 3, 4, 5)]),
    "flag": Pattern([HUB, OTHER] + [LEAF] * 3, [(0, i, FAR) for i in (1, 2, 3, 4)]),
    "flag4": Pattern([HUB, OTHER] + [LEAF] * 4, [(0, i, FAR) for i in (1, 2, 3, 4, 5)]),
    "square": Pattern([HUB, LEAF, HUB, LEAF], [(0, 1, FAR), (1, 2, 0), (2, 3, 0), (0, 3, FAR)]),
    "diamond": Pattern([HUB, LEAF, HUB, LEAF],
                       [(0, 1, FAR), (1, 2, 0), (2, 3, 0), (0, 3, FAR), (0, 2, 0)]),
    "kite": Pattern([HUB, LEAF, HUB, LEAF, OTHER],
                    [(0, 1, FAR), (1, 2, 0), (2, 3, 0), (0, 3, FAR), (0, 2, 0), (0, 4, FAR)]),
    "tree": Pattern([HUB, LEAF, HUB, LEAF, LEAF],
                    [(0, 1, FAR), (1, 2, 0), (0, 3, FAR), (2, 4, 0)]),
    "triangle": Pattern([HUB, HUB, LEAF], [(0, 2, FAR), (1, 2, 0), (0, 1, 0)]),
}
# What a first run's input (about 1 MB: 94,000 edges of an edge list) can hold: a degree
# squared past 2^31, leaf products past 2^31 within one task, star4's count past 2^62.
# star5's and flag4's pass 2^63 there, which no int64 count holds; the static counts of
# the queries not in LARGE_STATIC search every shared leaf per edge: an hour of twins.
LARGE_N = 47_000
LARGE_QUERIES = [name for name in TWO_HUB_QUERIES if name not in ("star5", "flag4")]
LARGE_STATIC = ["star2", "star3", "star4", "flag"]
# Small enough that every query is counted statically too; star5's and flag4's leaf
# products still pass 2^31 within a task (299 * 298 * 297 * 296), grouped or not.
SMALL_N = 300


def _falling(n: int, k: int) -> int:
    return math.prod(range(n - k + 1, n + 1)) if n >= k else 0


def two_hub_counts(far: set, zero: set, other: set, joined: bool) -> dict[str, int]:
    """Each query's count: far and other = H1's LEAF and OTHER leaves (by FAR edges),
    zero = H2's LEAF leaves (by 0 edges), joined = whether H1 - H2 is an edge."""
    c = len(far & zero)
    square = c * (c - 1)
    return {"star2": _falling(len(zero), 2), "star3": _falling(len(far), 3),
            "star4": _falling(len(far), 4), "star5": _falling(len(far), 5),
            "flag": len(other) * _falling(len(far), 3),
            "flag4": len(other) * _falling(len(far), 4), "square": square,
            "diamond": square * joined, "kite": len(other) * square * joined,
            "tree": c * ((len(far) - 1) * (len(zero) - 1) - (c - 1)),
            "triangle": c * joined}


def two_hub_batches(n: int) -> list[tuple[list[str], dict[str, int], object]]:
    """Per batch: its records, list limits by query, and its effect on the state (far,
    zero, other, joined).  n >= 8.  Few edges change at a time: a query whose tasks
    search every shared leaf costs a second of twins per update edge at LARGE_N."""
    new, k = NEW[:min(6, n // 2)], min(3, n // 4)
    return [
        # OTHER leaves join H1 at once (leaf groups on H1), with ids of 19 digits
        ([f"v {y} {OTHER}" for y in new] + [f"e {H1} {y} {FAR}" for y in new], {},
         lambda far, zero, other, joined: (far, zero, other | set(new), joined)),
        # deletes; the last names a label its edge has not: ignored
        ([f"-e {H2} {i} 0" for i in range(k)] + [f"-e {H2} {k} {FAR}"], {},
         lambda far, zero, other, joined: (far, zero - set(range(k)), other, joined)),
        # vertex deletes: a shared leaf and a new one
        ([f"-v {k + 1}", f"-v {new[0]}"], {},
         lambda far, zero, other, joined: (far - {k + 1}, zero - {k + 1}, other - {new[0]},
                                           joined)),
        # one-edge batches (of ids of 18 and 19 digits), one listed without a bound
        ([f"e {H2} 0 0"], {"star2": 1 << 40},
         lambda far, zero, other, joined: (far, zero | {0}, other, joined)),
        ([f"-e {H1} {new[1]} {FAR}"], {},
         lambda far, zero, other, joined: (far, zero, other - {new[1]}, joined)),
        ([f"-e {H1} {k + 2}"], {},
         lambda far, zero, other, joined: (far - {k + 2}, zero, other, joined)),
        # the hubs parted and joined again: pairs of (shared leaves)^2
        ([f"-e {H1} {H2}"], {},
         lambda far, zero, other, joined: (far, zero, other, False)),
        ([f"e {H1} {H2} 0"], {"triangle": 1 << 40},
         lambda far, zero, other, joined: (far, zero, other, True)),
    ]


def two_hub_states(n: int) -> list[tuple[set, set, set, bool]]:
    """The state before the first batch and after each."""
    states = [(set(range(n)), set(range(n)), set(), True)]
    for _, _, effect in two_hub_batches(n):
        states.append(effect(*states[-1]))
    return states


def two_hubs(name: str, n: int, queries: list[str], static: list[str],
             switch_at: int = -1) -> list:
    """The static counts of `static`; per batch, each query's [positive, negative, rows
    listed, their digest]; the static counts again.  The graph is read from text and the
    batches are parsed (the readers' kernels run too); interpreting stops before batch
    `switch_at`."""
    text = [f"v {H1} {HUB}", f"v {H2} {HUB}", f"e {H1} {H2} 0"]
    text += [f"v {i} {LEAF}" for i in range(n)]
    text += [f"e {H1} {i} {FAR}" for i in range(n)] + [f"e {H2} {i} 0" for i in range(n)]
    engine = Engine(parse_graph_text("\n".join(text)), backend="cpu", config=CONFIGS[name])
    qids = {query: engine.add_query(TWO_HUB_QUERIES[query].query()) for query in queries}
    out = [[engine.count(qids[query]) for query in static]]
    for step, (records, listed, _) in enumerate(two_hub_batches(n)):
        if step == switch_at:
            interpreted.stop()
        res = engine.apply(parse_updates_text("\n".join(records)),
                           list_limit={qids[q]: limit for q, limit in listed.items() if q in qids})
        for qid in qids.values():
            delta = res.queries[qid]
            rows = None if delta.added is None else sorted(map(tuple, delta.added.tolist()))
            out.append([delta.positive, delta.negative] + ([None, None] if rows is None else
                       [len(rows), hashlib.sha256(repr(rows).encode()).hexdigest()]))
    out.append([engine.count(qids[query]) for query in static])
    engine.check()
    return out


def _check_closed_forms(results: list, n: int, queries: list[str], static: list[str]) -> int:
    """Assert that two_hubs's counts are the closed forms' (each batch's net change;
    every listing whole, its limit being larger); returns the largest count."""
    states = two_hub_states(n)
    assert results[0] == [two_hub_counts(*states[0])[name] for name in static]
    assert results[-1] == [two_hub_counts(*states[-1])[name] for name in static]
    per_batch = len(queries)
    for step, (before, after) in enumerate(zip(states, states[1:])):
        old, new = two_hub_counts(*before), two_hub_counts(*after)
        rows = results[1 + step * per_batch: 1 + (step + 1) * per_batch]
        for name, (positive, negative, listed, _) in zip(queries, rows, strict=True):
            assert (name, step, positive - negative) == (name, step, new[name] - old[name])
            assert listed is None or listed == positive
    return max(results[0] + results[-1] + [row[0] for row in results[1:-1]])


def test_the_two_hub_closed_forms_are_brute_force():
    """The closed forms two_hubs is held to, against brute-force matching on a small
    instance after every batch."""
    for far, zero, other, joined in two_hub_states(8):
        data = Data({H1: HUB, H2: HUB, **{v: LEAF for v in far | zero},
                     **{v: OTHER for v in other}},
                    {**{frozenset((H1, v)): FAR for v in far | other},
                     **{frozenset((H2, v)): 0 for v in zero},
                     **({frozenset((H1, H2)): 0} if joined else {})})
        assert two_hub_counts(far, zero, other, joined) == \
            {name: len(embeddings(data, p)) for name, p in TWO_HUB_QUERIES.items()}


@pytest.mark.parametrize("name, switch_at", [("default", -1), ("region", -1), ("default", 3)])
def test_twins_are_exact_where_leaf_products_pass_2_31(name, switch_at, monkeypatch):
    """With switch_at, interpreting stops before the first one-edge batch: the compiled
    kernels the engine goes on with are those a compiled run has, none compiles anew
    (the cache holds them: the compiled run here put them there)."""
    monkeypatch.setattr(gpu.cpu.executor, "SHARE_ALWAYS", name == "region")
    everything = list(TWO_HUB_QUERIES)
    arguments = {"name": name, "n": SMALL_N, "queries": everything, "static": everything}
    compiled = two_hubs(**arguments)
    assert _check_closed_forms(compiled, SMALL_N, everything, everything) > 1 << 40
    assert _in_a_fresh_interpreter("two_hubs", **arguments, switch_at=switch_at) == \
        {"compiled": [], "results": compiled}


@pytest.mark.slow
def test_twins_are_exact_at_the_extremes_of_a_first_runs_input():
    """LARGE_N leaves, interpreting stopping as in the test above.  (Under "region" the
    twins took four minutes: every search giving half its work at every look.)"""
    arguments = {"name": "default", "n": LARGE_N, "queries": LARGE_QUERIES,
                 "static": LARGE_STATIC}
    compiled = two_hubs(**arguments)
    assert _check_closed_forms(compiled, LARGE_N, LARGE_QUERIES, LARGE_STATIC) > 1 << 62
    assert _in_a_fresh_interpreter("two_hubs", **arguments, switch_at=3) == \
        {"compiled": [], "results": compiled}


def list_churn(name: str) -> list:
    """Neighbour lists under `name`'s settings through batches that relocate them and
    compact the pool (tests/gpu/graph/test_lists.py): per batch, the pool's top and
    garbage (with the type of the top) and every edge."""
    graph, model, rng = DynamicGraph(CONFIGS[name]), Model(), random.Random(3)
    out = []
    for step in range(120):
        random_lists_batch(graph, model, rng, 35 if (step // 40) % 2 == 0 else 4)
        compare_lists(graph, model, rng)
        us, vs, labels = graph.edges()
        out.append([type(graph.top).__name__, int(graph.top), int(graph.garbage),
                    us.tolist(), vs.tolist(), labels.tolist()])
    return out


def test_twins_relocate_and_compact_lists_as_the_compiled_kernels():
    compiled = list_churn("tiny")
    assert any(after[2] < before[2] for before, after in zip(compiled, compiled[1:])), \
        "the pool was never compacted"
    assert _in_a_fresh_interpreter("list_churn", name="tiny") == \
        {"compiled": [], "results": compiled}


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
