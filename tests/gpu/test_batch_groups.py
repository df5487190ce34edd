"""Batch groups (gpu/pipeline.py BatchGroup): small batches started one after another that
only insert, or only delete, edges share one search; each batch's counts must still be
exactly its own, against the same batches applied one at a time and brute force.

The streams mix runs of inserting and deleting batches with what must end a group: an
edge inserted (or deleted) again, an insert after a delete of the same edge, a delete
naming another label, vertex updates, a full group, listing queries.
"""
from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest

import gpu.pipeline
import gpu.cpu.executor
from gpu.batch import BatchRejected
from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.io.records import ADD_VERTEX, DELETE_EDGE, INSERT_EDGE, NO_LABEL, UpdateStream
from tests.graphs import Data, embeddings, random_data
from tests.gpu.cpu.test_small_batch_queries import _patterns

UNGROUPED = EngineConfig(batch_group_edges=0, device_batch_group_edges=0,
                         shared_region_threads=0)

CONFIGS = {
    "serial": EngineConfig(shared_region_threads=0),
    "small_groups": EngineConfig(shared_region_threads=0, batch_group_edges=3),
    # Every group one parallel region (count_phase); with region_split every task runs
    # as pieces there (the test sets every task heavy).
    "region": EngineConfig(shared_region_threads=1, serial_below_tasks=1,
                           group_region_edges=1),
    "region_split": EngineConfig(shared_region_threads=1, serial_below_tasks=1,
                                 group_region_edges=1),
    # The same with the searches giving half of their open candidates to the region's
    # work queue at every advance (the test sets it).
    "region_give": EngineConfig(shared_region_threads=1, serial_below_tasks=1,
                                group_region_edges=1),
    # On the device: one lookup, one update and one launch per query size for a group,
    # each batch's counts from the per-edge counts of a counting pass.
    "cuda": EngineConfig(),
    "cuda_small": EngineConfig(device_batch_group_edges=3, launch_pairs=4),
    # The same through the general launches (no prepared small phases), with the per-edge
    # counts summed on the device (the test sets it: a large group's way; small ones are
    # summed on the host).
    "cuda_device_sums": EngineConfig(device_batch_group_edges=3, launch_pairs=4,
                                     small_phase_edges=0),
}


@pytest.fixture
def group_sizes(monkeypatch) -> list[int]:
    """The number of batches of every group the engines run."""
    sizes: list[int] = []
    real = gpu.pipeline.BatchGroup._apply_and_search

    def spy(group):
        sizes.append(len(group.members))
        return real(group)

    monkeypatch.setattr(gpu.pipeline.BatchGroup, "_apply_and_search", spy)
    return sizes


def _edge_batch(d: Data, records) -> UpdateStream:
    """A batch of edge records (kind, a, b, label), applied to `d` as its semantics say
    (each record names a distinct edge)."""
    gone, inserted = set(), {}
    for kind, a, b, label in records:
        key = frozenset((a, b))
        if kind == INSERT_EDGE and key not in d.edges:
            inserted[key] = label
        elif kind == DELETE_EDGE and key in d.edges and label in (NO_LABEL, d.edges[key]):
            gone.add(key)
    d.change(set(), {}, gone, inserted)
    return UpdateStream.from_records(records)


def grouping_stream(rng: random.Random, d: Data, nelabels: int, count: int,
                    next_id: list[int]) -> Iterator[UpdateStream]:
    """`count` batches of 1-3 edge records in runs of one kind, with the cases that end a
    group mixed in (see the module docstring); each changes `d` as it applies before it
    is yielded."""
    made, inserting, last = 0, True, []
    while made < count:
        if rng.random() < 0.2:
            inserting = not inserting
        roll = rng.random()
        vertices = sorted(d.vertices)
        if roll < 0.05:         # a vertex arrives: never grouped
            v = next_id[0]
            next_id[0] += 1
            label = rng.choice(sorted(set(d.vertices.values())))
            d.change(set(), {v: label}, set(), {})
            made += 1
            yield UpdateStream.from_records([(ADD_VERTEX, v, 0, label)])
            continue
        if roll < 0.15 and last:    # the last batch's first edge again, either kind
            a, b = last[0]
            kind = INSERT_EDGE if rng.random() < 0.5 else DELETE_EDGE
            label = rng.randrange(nelabels) if kind == INSERT_EDGE else NO_LABEL
            made += 1
            yield _edge_batch(d, [(kind, a, b, label)])
            continue
        records, keys = [], set()
        for _ in range(rng.randint(1, 3)):
            if inserting:
                a, b = rng.sample(vertices, 2)
                key = frozenset((a, b))
                if key in d.edges or key in keys:
                    continue
                records.append((INSERT_EDGE, a, b, rng.randrange(nelabels)))
            else:
                present = sorted(tuple(sorted(k)) for k in d.edges if k not in keys)
                if not present:
                    continue
                a, b = rng.choice(present)
                key = frozenset((a, b))
                # Sometimes a label that does not name the edge: ignored, never grouped.
                label = rng.choice([NO_LABEL, d.edges[key],
                                    (d.edges[key] + 1) % max(nelabels, 2)])
                records.append((DELETE_EDGE, a, b, label))
            keys.add(key)
        if records:
            last = [(a, b) for _, a, b, _ in records]
            made += 1
            yield _edge_batch(d, records)


def _engines(d: Data, nlabels: int, nelabels: int, config: EngineConfig,
             backend: str = "cpu"):
    grouped = Engine(d.labeled(), backend=backend, config=config)
    single = Engine(d.labeled(), backend="cpu", config=UNGROUPED)
    patterns = {}
    for p in _patterns(nlabels, nelabels):
        qid = grouped.add_query(p.query())
        assert single.add_query(p.query()) == qid
        patterns[qid] = p
    return grouped, single, patterns


def _counts(result) -> dict[int, tuple[int, int]]:
    return {qid: (q.positive, q.negative) for qid, q in result.queries.items()}


# The region modes share one region's work between several threads at once.
MODES = [pytest.param(mode, marks=pytest.mark.parallel) if mode.startswith("region") else
         pytest.param(mode, marks=pytest.mark.gpu) if mode.startswith("cuda") else mode
         for mode in sorted(CONFIGS)]
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(4))
def test_groups_equal_one_batch_at_a_time_and_brute_force(group_sizes, monkeypatch, mode,
                                                         seed):
    if mode == "region_split":
        monkeypatch.setattr(gpu.cpu.executor, "HEAVY_TASK_WEIGHT", 0)
        monkeypatch.setattr(gpu.cpu.executor, "PIECES_PER_THREAD", 50)
    if mode == "region_give":
        monkeypatch.setattr(gpu.cpu.executor, "SHARE_ALWAYS", True)
        monkeypatch.setattr(gpu.cpu.executor, "SHARE_EVERY", 1)
    if mode == "cuda_device_sums":
        from gpu.cuda import shared_launch
        monkeypatch.setattr(shared_launch, "HOST_SUMS_PAIRS", 0)
    rng = random.Random(seed)
    nlabels, nelabels = 1 + seed % 2, 1 + seed // 2
    d = random_data(rng, 13, nlabels, nelabels, 0.3)
    grouped, single, patterns = _engines(d, nlabels, nelabels, CONFIGS[mode],
                                         "cuda" if mode.startswith("cuda") else "cpu")
    # The brute-force deltas of each batch, as the stream is made.
    before = {qid: embeddings(d, p) for qid, p in patterns.items()}
    batches, want = [], []
    for batch in grouping_stream(rng, d, nelabels, 60, [1000]):
        batches.append(batch)
        after = {qid: embeddings(d, p) for qid, p in patterns.items()}
        want.append({qid: (len(after[qid] - before[qid]), len(before[qid] - after[qid]))
                     for qid in patterns})
        before = after
    got = list(grouped.apply_stream(batches))
    ones = [single.apply(batch) for batch in batches]
    assert [_counts(r) for r in ones] == want
    assert [_counts(r) for r in got] == want
    assert [(r.applied, r.ignored) for r in got] == [(r.applied, r.ignored) for r in ones]
    assert any(n > 1 for n in group_sizes), "no batches were grouped"
    limit = grouped.group_edges
    assert max(group_sizes) <= limit
    assert any(sum(c) for r in want for c in r.values())     # matches were found
    grouped.check()
    assert _edges(grouped) == _edges(single)


def _edges(engine: Engine) -> set[tuple[int, int, int]]:
    g = engine.to_labeled()
    return set(zip(np.minimum(g.edge_src, g.edge_dst).tolist(),
                   np.maximum(g.edge_src, g.edge_dst).tolist(), g.edge_labels.tolist()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_started_batches_wait_for_their_group_and_any_other_call_runs_it(group_sizes,
                                                                        backend):
    """Engine.start of groupable batches returns before their search; finishing any of
    them, or an engine call that reads the graph or the queries, runs the group."""
    rng = random.Random(7)
    d = random_data(rng, 12, 1, 1, 0.35)
    grouped, single, patterns = _engines(d, 1, 1, CONFIGS["serial"], backend)
    batches = list(grouping_stream(rng, d, 1, 40, [1000]))
    want = [_counts(single.apply(b)) for b in batches]
    pending = []
    qid_extra = None
    for i, batch in enumerate(batches):
        pending.append((i, grouped.start(batch)))
        if i == 20:
            # A query registered now must see every batch started before it.
            qid_extra = grouped.add_query(next(iter(patterns.values())).query())
            assert grouped.count(qid_extra) == grouped.count(1)
    results = [(i, p.finish()) for i, p in pending]
    for i, result in results:
        got = _counts(result)
        if i > 20:
            assert got.pop(qid_extra) == want[i][1]     # the same pattern as query 1
        assert got == want[i]
    assert any(n > 1 for n in group_sizes)
    # The graph holds every batch: one count of the whole graph equals brute force.
    for qid, p in patterns.items():
        assert grouped.count(qid) == len(embeddings(d, p)), qid


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rejected_batch_leaves_the_open_group_and_the_stream_goes_on(group_sizes, backend):
    rng = random.Random(8)
    d = random_data(rng, 12, 2, 1, 0.3)
    grouped, single, _ = _engines(d, 2, 1, CONFIGS["serial"], backend)
    batches = list(grouping_stream(rng, d, 1, 30, [1000]))
    bad = UpdateStream.from_records([(INSERT_EDGE, 10**9, 0, 0)])
    want = [_counts(single.apply(b)) for b in batches]
    got = []
    with pytest.raises(BatchRejected, match="does not exist"):
        for result in grouped.apply_stream(batches[:15] + [bad] + batches[15:]):
            got.append(_counts(result))
    assert got == want[:15]
    got += [_counts(r) for r in grouped.apply_stream(batches[15:])]
    assert got == want
    grouped.check()


def test_listing_queries_keep_batches_apart(group_sizes):
    rng = random.Random(9)
    d = random_data(rng, 12, 1, 1, 0.3)
    grouped, single, patterns = _engines(d, 1, 1, CONFIGS["serial"])
    batches = list(grouping_stream(rng, d, 1, 30, [1000]))
    listed = {next(iter(patterns)): 100}
    want = [_counts(single.apply(b, listed)) for b in batches]
    assert [_counts(r) for r in grouped.apply_stream(batches, listed)] == want
    assert group_sizes == []


def test_a_failed_group_fails_every_batch_in_it(monkeypatch):
    rng = random.Random(10)
    d = random_data(rng, 12, 1, 1, 0.3)
    grouped, _, _ = _engines(d, 1, 1, CONFIGS["serial"])
    inserts = [UpdateStream.from_records([(INSERT_EDGE, a, b, 0)])
               for a, b in [(0, 100), (1, 101), (2, 102)] if a in d.vertices]
    grouped.apply(UpdateStream.from_records(
        [(ADD_VERTEX, v, 0, 0) for v in (100, 101, 102)]))

    def broken(*args, **kwargs):
        raise MemoryError("no room for the search")

    monkeypatch.setattr(gpu.pipeline, "count_small_cpu", broken)
    pending = [grouped.start(batch) for batch in inserts]
    with pytest.raises(MemoryError):
        pending[0].finish()
    for later in pending[1:]:
        with pytest.raises(RuntimeError, match="batch group of this batch failed"):
            later.finish()


def test_batch_group_edges_is_checked():
    with pytest.raises(ValueError, match="batch_group_edges"):
        EngineConfig(batch_group_edges=-1)
