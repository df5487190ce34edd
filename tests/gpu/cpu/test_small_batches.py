"""The small-batch path of the CPU executor (phases.count_small) against the general
path (make_tasks, group_leaf_tasks, run_tasks) and a brute-force matcher.

Two engines take the same random batches: one with the default config, which sends
batches of fewer than `serial_below_tasks` update edges through count_small, and one
with `serial_below_tasks=1`, which never does.  Their counts must equal each other and
the brute-force deltas.  Hub batches make count_small hand batches back (a leaf group
would form), and a spy proves both outcomes happened.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu.cpu.phases
from gpu.config import EngineConfig
from gpu.engine import Engine
from tests.gpu.cpu.test_leaf_groups import PATTERNS, hub_batch, hub_data
from tests.graphs import embeddings, random_batch, random_data


# Never the shared call: every query through the general path (make_tasks, run_tasks).
GENERAL = EngineConfig(serial_below_tasks=1, shared_call=False)


@pytest.fixture
def small_spy(monkeypatch):
    """Records each query's count_small total (-1: handed back to the general path)."""
    seen: list[int] = []
    real = gpu.cpu.phases.count_small

    def spy(*args):
        totals = real(*args)
        # One batch per call here (Engine.apply): its counts are column 0.
        assert totals.shape[1] == 1
        seen.extend(totals[:, 0].tolist())
        return totals

    monkeypatch.setattr(gpu.cpu.phases, "count_small", spy)
    return seen


def _engines(d, nlabels: int, nelabels: int, config: EngineConfig):
    """(small-path engine, general-path engine, {qid: pattern}) with every usable pattern."""
    small = Engine(d.labeled(), backend="cpu", config=config)
    general = Engine(d.labeled(), backend="cpu", config=GENERAL)
    patterns = {}
    for name in sorted(PATTERNS):
        p = PATTERNS[name]
        if max(p.edges.values()) >= nelabels:
            continue
        p = type(p)([lab % nlabels for lab in p.labels],
                    [(a, b, lab) for (a, b), lab in p.edges.items()])
        qid = small.add_query(p.query())
        assert general.add_query(p.query()) == qid
        patterns[qid] = p
    return small, general, patterns


def _check_batch(small, general, patterns, d, batch, before, limits=0):
    """Apply `batch` to both engines; their counts must agree with each other and with the
    brute-force embeddings before and after.  Returns the embeddings after, and the small
    engine's result."""
    res, ref = small.apply(batch, limits), general.apply(batch, limits)
    after = {qid: embeddings(d, p) for qid, p in patterns.items()}
    for qid in patterns:
        got, want = res.queries[qid], ref.queries[qid]
        assert (got.positive, got.negative) == (want.positive, want.negative), qid
        assert got.positive == len(after[qid] - before[qid]), qid
        assert got.negative == len(before[qid] - after[qid]), qid
    assert res.applied == ref.applied and res.ignored == ref.ignored
    return after, res


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), nlabels=st.sampled_from([1, 2, 3]),
       nelabels=st.sampled_from([1, 2]), group_min=st.sampled_from([0, 2, 3]))
def test_random_batches_equal_general_path_and_brute_force(small_spy, seed, nlabels, nelabels,
                                                           group_min):
    rng = random.Random(seed)
    d = random_data(rng, 12, nlabels, nelabels, 0.3)
    config = EngineConfig(leaf_groups=group_min > 0, leaf_group_min=max(group_min, 1),
                          shared_region_threads=0)
    small, general, patterns = _engines(d, nlabels, nelabels, config)
    before = {qid: embeddings(d, p) for qid, p in patterns.items()}
    next_id = [1000]
    for _ in range(6):
        batch = random_batch(rng, d, nlabels, nelabels, next_id)
        before, _ = _check_batch(small, general, patterns, d, batch, before)
    small.check()


def test_hub_batches_hand_groups_back(small_spy):
    """Batches around two hubs: count_small searches some itself and hands back those
    where a leaf group would form; counts stay equal either way."""
    rng = random.Random(5)
    d = hub_data(rng, 13, 1, 1)
    small, general, patterns = _engines(d, 1, 1, EngineConfig(shared_region_threads=0))
    before = {qid: embeddings(d, p) for qid, p in patterns.items()}
    for _ in range(25):
        before, _ = _check_batch(small, general, patterns, d, hub_batch(rng, d, 1), before)
    small.check()
    assert any(total >= 0 for total in small_spy), "count_small never searched"
    assert any(total > 0 for total in small_spy), "count_small never found a match"
    assert -1 in small_spy, "count_small never handed a batch back"


def test_many_tasks_go_to_the_general_path(small_spy):
    """More tasks than serial_below_tasks: handed back (the general path runs them in a
    parallel region), with the same counts."""
    rng = random.Random(9)
    d = random_data(rng, 12, 1, 1, 0.5)
    small, general, patterns = _engines(d, 1, 1, EngineConfig(serial_below_tasks=3,
                                                              shared_region_threads=0))
    before = {qid: embeddings(d, p) for qid, p in patterns.items()}
    next_id = [1000]
    for _ in range(8):
        batch = random_batch(rng, d, 1, 1, next_id)
        before, _ = _check_batch(small, general, patterns, d, batch, before)
    assert -1 in small_spy and any(total >= 0 for total in small_spy)

