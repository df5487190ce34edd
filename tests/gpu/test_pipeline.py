"""gpu/pipeline.py: a batch's seconds run from its start to its result being known, and
Numba's compiling is no batch's time.

The CPU executor answers at once, so the tests stand in for the device: they wrap each
phase's results in `Deferred` values of a shared launch whose first `resolve()` sleeps,
as `PendingMatches.resolve` waits for the kernels, or hold Numba's compiler lock for a
while inside a batch, as a first call's compilation does.  Lower bounds only, so a
loaded machine cannot fail them.
"""
from __future__ import annotations

import time

import pytest
from numba.core.compiler_lock import global_compiler_lock

from gpu import clock
from gpu.config import EngineConfig
from gpu.engine import Engine
from gpu.pipeline import Deferred
from tests.gpu.cuda.test_executor import QUERIES
from tests.gpu.test_apply_stream import mixed_batches, summary
from tests.graphs import skewed_graph

WAIT = 0.25


class _SlowLaunch:
    """A shared launch whose results take WAIT seconds to come back (the first resolve)."""

    def __init__(self, results: list) -> None:
        self.results, self.resolved = results, 0

    def resolve(self) -> list:
        if not self.resolved:
            time.sleep(WAIT)
        self.resolved += 1
        return self.results


@pytest.fixture
def deferring(monkeypatch) -> list[_SlowLaunch]:
    """Every deferred phase's results come from one _SlowLaunch; the launches made."""
    launches: list[_SlowLaunch] = []
    real = Engine._incremental

    def incremental(self, us, vs, labels, list_limit, defer=False, on_device=None):
        results, seconds = real(self, us, vs, labels, list_limit, defer, on_device)
        if not defer:
            return results, seconds
        qids = list(results)
        launch = _SlowLaunch([results[qid] for qid in qids])
        launches.append(launch)
        return {qid: Deferred(launch, i) for i, qid in enumerate(qids)}, seconds

    monkeypatch.setattr(Engine, "_incremental", incremental)
    return launches


def _engines(count: int = 2):
    initial, batches = mixed_batches(skewed_graph(3, n=120), 3, 4, 12)
    # No batch groups: every batch goes through Engine._incremental itself.
    config = EngineConfig(batch_group_edges=0)
    engines = [Engine(initial, backend="cpu", config=config) for _ in range(count)]
    for engine in engines:
        for q in QUERIES[:3]:
            engine.add_query(q)
    return engines, batches


def test_a_streamed_batch_waits_for_its_results_in_its_own_seconds(deferring):
    (alone, streamed), batches = _engines()
    want = [summary(alone.apply(b)) for b in batches]
    got = list(streamed.apply_stream(iter(batches)))
    assert [summary(r) for r in got] == want
    # Each batch has a negative and a positive phase, each one launch that waits WAIT.
    assert len(deferring) == 2 * len(batches)
    assert all(launch.resolved for launch in deferring)
    for result in got:
        assert result.seconds >= 2 * WAIT
        assert result.timings["match"] >= 2 * WAIT
        # The launch's wait is split evenly among the queries that share it.
        for delta in result.queries.values():
            assert delta.seconds >= 2 * WAIT / len(result.queries)


def test_started_batches_finished_later_count_their_wait(deferring):
    (engine,), batches = _engines(1)
    pending = [engine.start(b) for b in batches[:2]]
    time.sleep(WAIT)                        # the caller does other work meanwhile
    first, second = (p.finish() for p in pending)
    # The first batch's result was known only after the second batch started and the
    # caller's work: it waited for both of its launches after all of that.
    assert first.seconds >= 3 * WAIT
    assert second.seconds >= 3 * WAIT


def test_compiling_is_no_batchs_time(monkeypatch):
    (engine,), batches = _engines(1)
    engine.apply(batches[0])                # whatever the batches compile, compiled here
    compile_time = 1.0
    real = Engine._mutate

    def mutate_while_compiling(self, batch):
        # Held as Numba holds it to compile a kernel (or load one from its cache).
        with global_compiler_lock:
            time.sleep(compile_time)
        return real(self, batch)

    monkeypatch.setattr(Engine, "_mutate", mutate_while_compiling)
    before = clock.compile_seconds()
    t0 = time.perf_counter()
    result = engine.apply(batches[1])
    wall = time.perf_counter() - t0
    compiled = clock.compile_seconds() - before
    assert compiled >= compile_time
    assert result.seconds <= wall - compiled
    assert result.timings["update"] <= wall - compiled


def test_the_clock_stands_still_while_compiling_in_this_thread_only():
    import threading

    t0 = clock.now()
    other = threading.Thread(target=lambda: (global_compiler_lock.acquire(),
                                             time.sleep(WAIT), global_compiler_lock.release()))
    other.start()
    other.join()
    # Another thread compiled: this thread's clock ran on.
    assert clock.now() - t0 >= WAIT
    t1 = clock.now()
    with global_compiler_lock:
        time.sleep(WAIT)
    assert clock.now() - t1 < WAIT
