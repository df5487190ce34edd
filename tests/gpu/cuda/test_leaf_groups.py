"""Grouped search of leaf-rooted tasks on the CUDA executor (gpu/cuda/group_launchers.py,
groups.cu, match.cu's match_groups) against a brute-force matcher, the one-by-one search
and the CPU executor.

The batches and patterns are the CPU grouped search's (tests/gpu/cpu/test_leaf_groups.py):
update edges around hubs form groups, one or two labels let prefix and last-level
vertices take a member's leaf (the collision paths), and the patterns' tails are the
counted last level after enumerated levels (the grouped search counts no other tail).
Configurations force every launch to group (device_leaf_group_edges 1, no prepared small
phases), hand out work-sharing records at every step (records carry a group and its
prefix's lowest rank), read the lists' layout, cut the edges into slices, and group only
runs of three.  A spy on
form_groups reads back how many groups each launch made.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.records import DELETE_EDGE, UpdateStream
from gpu.io.streams import split_stream
from tests.graphs import Pattern, skewed_graph
from tests.gpu.cpu.test_leaf_groups import PATTERNS, SKEWED, check_hub_batches, hub_data

pytestmark = pytest.mark.gpu

GROUPED = dict(device_leaf_group_edges=1, small_phase_edges=0)
CONFIGS = {
    "grouped": EngineConfig(**GROUPED),
    "sharing": EngineConfig(**GROUPED, share_every=1, share_capacity=64),
    "lists": EngineConfig(**GROUPED, device_graph="lists"),
    "one_by_one": EngineConfig(**GROUPED, leaf_groups=False),
}


@pytest.fixture
def made_groups(monkeypatch):
    """The number of groups each form_groups call made (read back after it)."""
    from gpu.cuda import group_launchers
    from gpu.cuda.match_launchers import TASKS_WORD

    seen = []
    real = group_launchers.form_groups

    def spy(*args):
        groups = real(*args)
        gctl = args[-1]
        seen.append(int(gctl[TASKS_WORD].get()))
        return groups

    monkeypatch.setattr(group_launchers, "form_groups", spy)
    return seen


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("nlabels,nelabels", [(1, 1), (2, 1), (2, 2)])
def test_hub_batches_equal_brute_force(config, nlabels, nelabels, made_groups):
    rng = random.Random(31 * nlabels + nelabels)
    d = hub_data(rng, 13, nlabels, nelabels)
    engine = Engine(d.labeled(), backend="cuda", config=CONFIGS[config])
    check_hub_batches(engine, rng, d, nlabels, nelabels, 12)
    if config == "one_by_one":
        assert not made_groups, "leaf_groups=False must not group"
    else:
        assert sum(made_groups) > 0, "no group formed: the test would not exercise them"


@pytest.mark.parametrize("labels", [1, 2])
def test_skewed_graph_grouped_equals_one_by_one_and_cpu(labels, made_groups):
    """Big groups around hubs (a quarter of a skewed graph inserted at once, then taken
    out again), default sharing, in slices of the edges (the ranks of the other slices'
    edges still set) and in groups of three or more, against the one-by-one search and
    the CPU executor."""
    full = skewed_graph(labels, n=300, hubs=4, labels=labels)
    initial, stream = split_stream(full, 0.25, labels)
    engines = [Engine(initial, backend="cpu"),
               Engine(initial, backend="cuda", config=EngineConfig(
                   small_phase_edges=0, device_leaf_group_edges=1, launch_pairs=4000)),
               Engine(initial, backend="cuda", config=EngineConfig(leaf_groups=False)),
               Engine(initial, backend="cuda", config=EngineConfig(
                   small_phase_edges=0, device_leaf_group_edges=1, leaf_group_min=3))]
    rng = random.Random(labels)
    for name in SKEWED:
        p = PATTERNS[name]
        q = Pattern([rng.randrange(labels) for _ in p.labels], list(p.edges)).query()
        assert len({e.add_query(q) for e in engines}) == 1
    undo = UpdateStream(np.full(len(stream), DELETE_EDGE), stream.a, stream.b, stream.label,
                        stream.line, "undo")
    for batch in (stream, undo, stream):
        got = [{k: (d.positive, d.negative) for k, d in e.apply(batch).queries.items()}
               for e in engines]
        assert all(g == got[0] for g in got[1:]), batch.source
    for qid in engines[0].query_ids():
        assert len({e.count(qid) for e in engines}) == 1
    assert max(made_groups) >= 4, "expected groups around the hubs"


def test_form_groups_keeps_every_task_once():
    """Singles plus members are exactly make_tasks' tasks; a group's members share type and
    parent, are listed by rank and by leaf with the same ranks, and number min_size or
    more, and no run of min_size tasks of one type and parent stays single."""
    import cupy as cp

    from gpu.cuda import group_launchers
    from gpu.cuda import match_launchers as ml
    from gpu.plan.planner import build_plan

    types = build_plan(Pattern([1, 0, 0, 0], [(0, 1), (1, 2), (2, 3)]).query()).incremental
    count, n, min_size = types.count, 30, 3
    rng = np.random.default_rng(5)
    pairs = rng.permutation([(u, v) for u in range(5) for v in range(5, n)])[:80]
    us, vs = pairs[:, 0].astype(np.int32), pairs[:, 1].astype(np.int32)   # few parents
    ranks = (rng.permutation(len(us)) + 1).astype(np.int32)
    cand = cp.full(n, 0xF, dtype=np.uint32)
    fields = {name: cp.zeros(4, dtype=dtype) for name, dtype in ml.PLAN_DTYPES.items()}
    fields.update(cand_row=cp.zeros(count, np.int32),
                  roots=cp.asarray(types.roots.astype(np.int32)),
                  root_labels=cp.asarray(types.root_labels.astype(np.int32)),
                  leaf_root=cp.asarray(types.leaf_root.astype(np.int32)))
    plan = ml.DevicePlan(**fields)
    edges = ml.UpdateEdges(*(cp.asarray(a) for a in (us, vs, np.zeros_like(us), ranks)))
    tasks = cp.zeros(count * len(us), np.int32)
    ctl = cp.zeros(ml.CTL_WORDS, np.uint64)
    ml.make_tasks(cp.asarray(np.array([cand.data.ptr], np.uint64)), plan, edges, tasks, ctl)
    made = sorted(tasks[:int(ctl[ml.TASKS_WORD].get())].get().tolist())
    singles = cp.full(len(tasks), -1, np.int32)
    gctl = cp.zeros(ml.CTL_WORDS, np.uint64)
    g = group_launchers.form_groups(tasks, ctl, plan, edges, n, min_size, singles, gctl)
    groups, left = int(gctl[ml.TASKS_WORD].get()), int(ctl[ml.TASKS_WORD].get())
    assert groups > 0
    rebuilt = singles[:left].get().tolist()
    rank_of = {int(r): e for e, r in enumerate(ranks)}
    seen_runs = set()
    key, by_id, rank_by_id = g.key.get(), g.leaf_by_id.get(), g.rank_by_id.get()
    for i in range(groups):
        t, p = int(g.type[i].get()), int(g.parent[i].get())
        lo, hi = int(g.lo[i].get()), int(g.hi[i].get())
        assert hi - lo >= min_size and types.leaf_root[t] >= 0
        seen_runs.add((t, p))
        member_ranks = (key[lo:hi] & 0x7FFFFFFF).astype(np.int64)
        assert (np.diff(member_ranks) > 0).all()
        assert (np.diff(by_id[lo:hi]) > 0).all()
        assert sorted(rank_by_id[lo:hi].tolist()) == member_ranks.tolist()
        for leaf, r in zip(by_id[lo:hi].tolist(), rank_by_id[lo:hi].tolist()):
            e = rank_of[r]
            ends = (p, leaf) if types.leaf_root[t] == 1 else (leaf, p)
            assert (int(us[e]), int(vs[e])) == ends
            rebuilt.append(e * count + t)
    assert sorted(rebuilt) == made
    runs: dict = {}
    for pair in singles[:left].get().tolist():
        e, t = divmod(pair, count)
        if types.leaf_root[t] >= 0:
            parent = int(us[e]) if types.leaf_root[t] == 1 else int(vs[e])
            runs[(t, parent)] = runs.get((t, parent), 0) + 1
    assert all(size < min_size and run not in seen_runs for run, size in runs.items())
