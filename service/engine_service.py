"""Owns the engine thread: every engine call in one total order, durability before
acknowledgement, and recovery from the store.

All engine state (the Engine, the label dictionary, the standing queries, the batch
sequence) is touched only on the one worker thread; async handlers submit work with
`call` and await it.  A batch is applied to the in-memory engine, then its updates,
results and idempotency key are committed in one store transaction, and only then is
it acknowledged and published to subscribers.  If the commit fails the engine is
rebuilt from the durable state (latest snapshot + batch log), so nothing stays
half-applied, and the client gets a 503.

One module past 500 lines on purpose: every method runs on the engine thread and shares
its state (the engine, the batch sequence, the labels, the batches applied but not yet
finished or committed, the Idempotency-Keys in flight), and the invariants that tie them
together (batches handed to the writer in order; after any failure memory is rebuilt to
equal the store) read best in one place.  What a standing query tracks for itself (its
totals, latencies, events and stored form) is service/standing.py.

A first start (the CPU executor's kernels not in Numba's cache, a small store) does not wait
for them to compile: as the CLI's first run does (gpu/compile_ahead.py), it starts a
background process that compiles them into the cache and runs them as plain Python
meanwhile, one batch after another (no batch groups), each engine call with its own
budget of INTERPRET_SECONDS.  When the process is done the engine thread loads the
compiled kernels (the warm-up, before the next request).  A call that runs past its
budget (gpu/cpu/interpreted.OutOfTime) has lost the engine's state with the kernels' work
and changed nothing durable: the engine thread waits for the background process, rebuilds
memory from the store on the compiled kernels and runs the call again, so its client gets
the answer it would have got, later.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timezone

import numba
import orjson

from gpu import compile_ahead
from gpu.batch import BatchRejected
from gpu.config import EngineConfig
from gpu.cpu import interpreted
from gpu.cuda.device import device_memory_bytes
from gpu.engine import Engine, executor_for
from gpu.io.graphs import load_graph
from gpu.io.records import LabeledGraph, UpdateStream
from gpu.warm_up import warm_up
from service.compiling import CompileWatch
from service.ingest import BatchInput, InputError
from service.labels import LabelDictionary, StagedLabels
from service.patterns import pattern_of, to_query
from service.schemas import (GraphPublic, QueryCreate, QueryPage, QueryPublic,
                             QueryValidation)
from service.settings import Settings
from service.standing import Standing
from storage import BatchRecord, QueryRecord, SnapshotCorrupt, SnapshotRecord

log = logging.getLogger("motifstream.engine")

# A first start runs the kernels as plain Python while they compile only for a store this
# small (the snapshot's edges, the batches to replay after it, a --graph file's bytes:
# compile_ahead.INTERPRET_BELOW_BYTES): the plain-Python kernels are ~100x slower.
INTERPRET_BELOW_EDGES = 50_000
INTERPRET_BELOW_BATCHES = 1_000
# Seconds of plain Python an engine call may take before it waits for the compiled kernels.
INTERPRET_SECONDS = compile_ahead.INTERPRET_SECONDS


class ServiceUnavailable(RuntimeError):
    """The request could not be made durable; nothing of it was applied (HTTP 503)."""


class Conflict(RuntimeError):
    """The request conflicts with the service's state (HTTP 409)."""


class IdempotencyKeyInFlight(Conflict):
    """A request with this Idempotency-Key is still being applied (HTTP 409: retry later)."""


class IdempotencyKeyReused(InputError):
    """The Idempotency-Key was used before for a request with another body (HTTP 422)."""


class QueryNotFound(KeyError):
    """No standing query has this id (HTTP 404)."""

    def __str__(self) -> str:
        return f"query {self.args[0]} not found"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class _Done:
    """What a batch's commit callback needs."""
    seq: int
    acknowledged: Future
    events: list
    response_json: str
    result: object
    size: int
    t0: float
    graph: LabeledGraph | None
    key: str | None
    touched: list


@dataclass
class _Started:
    """A batch applied to the engine whose results may still be on the device."""
    pending: object             # Engine.start's: finish() gives the BatchResult
    seq: int
    stream: UpdateStream
    new_labels: dict
    idempotency: tuple[str, str] | None
    acknowledged: Future
    t0: float
    graph: LabeledGraph | None  # the snapshot's graph, when this seq takes one


@dataclass
class IngestResult:
    """What POST /v1/batches answers: the stored response JSON, and whether it is a replay."""
    response: str
    replayed: bool


class EngineService:
    """The engine, its standing queries and the store, driven from one worker thread."""

    def __init__(self, settings: Settings, store, hub, metrics) -> None:
        self.settings = settings
        self.store = store
        self.hub = hub
        self.metrics = metrics
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="motifstream-engine")
        self._snapshots = ThreadPoolExecutor(1, thread_name_prefix="motifstream-snapshot")
        self.engine: Engine | None = None
        self.backend = "cpu"
        self.labels = LabelDictionary()
        self.queries: dict[int, Standing] = {}
        self.seq = 0
        self._next_query_id = 1
        self.failure: str | None = None   # why start-up or a rebuild failed
        self.phase = "starting"             # what start-up is doing (starting())
        self.compiling = CompileWatch(interpreted.kernels())
        # The request hash of every batch applied whose commit is still running, by
        # Idempotency-Key.
        self._pending_keys: dict[str, str] = {}
        self._keys_lock = threading.Lock()
        self._last_commit: Future | None = None
        # Batches applied whose results may still be on the device (CUDA), in order: see
        # ingest.
        self._unfinished: deque[_Started] = deque()
        # Whether batches queued behind each other are pipelined (see ingest): None, as
        # `pipelined` decides; tests set True or False to force either way.
        self.pipeline: bool | None = None

    async def call(self, fn, *args):
        """Run `fn(*args)` on the engine thread, after every batch applied before it has
        been handed to the writer, and await its result."""
        return await asyncio.wrap_future(self._pool.submit(self._guarded, self._settled, fn,
                                                           *args))

    def _settled(self, fn, *args):
        self._settle()
        return fn(*args)

    def _caught_up(self, why: str = "a batch before this request could not be persisted"
                   ) -> None:
        """Every batch applied so far handed to the writer (those after a failed one fail
        there: their seq no longer follows) and committed, then memory made equal to the
        store: rebuilt, with `why` logged, unless it already is (an earlier rebuild).
        Runs before a change committed in a transaction of its own (a query registered or
        deleted, a graph loaded), so that it never lands in the store ahead of a batch
        that then fails, and after a failed commit."""
        self._caught_up_to_store()
        if self.seq != self.store.last_seq():
            self._rebuild(why)

    def _caught_up_to_store(self) -> None:
        """Every batch applied so far handed to the writer, and its commit finished."""
        self._settle()
        if self._last_commit is not None:
            wait([self._last_commit])

    async def ingest_async(self, batch: BatchInput, idempotency: tuple[str, str] | None
                           ) -> IngestResult:
        """`ingest` on the engine thread, awaited until the batch is durable (or refused).

        The event loop is woken once per batch, by whichever thread settles it: the engine
        thread for a refusal, the writer's for the commit."""
        loop = asyncio.get_running_loop()
        answer = loop.create_future()

        def settle(outcome: Future) -> None:
            try:
                loop.call_soon_threadsafe(_copy_outcome, outcome, answer)
            except RuntimeError:    # the loop is closed: nobody is left awaiting it
                pass

        def run() -> None:
            try:
                acknowledged = self._guarded(self.ingest, batch, idempotency)
            except BaseException as exc:  # noqa: BLE001 -- handed to the awaiting handler
                acknowledged = Future()
                acknowledged.set_exception(exc)
            acknowledged.add_done_callback(settle)

        self._pool.submit(run)
        return await answer

    def _guarded(self, fn, *args):
        if self.failure is not None:
            raise ServiceUnavailable(f"the engine is not available: {self.failure}")
        return self._compiled_if_out_of_time(fn, *args)

    def _compiled_if_out_of_time(self, fn, *args):
        """`fn(*args)`, with its own budget while the kernels run as plain Python; past it,
        memory is rebuilt from the store on the compiled kernels and `fn` runs again (the
        call changed nothing durable: see the module docstring)."""
        if interpreted.active():
            interpreted.allow(INTERPRET_SECONDS)
        try:
            return fn(*args)
        except interpreted.OutOfTime:     # (start() may begin interpreting inside fn)
            log.warning("an engine call ran past %.0f s as plain Python: waiting for the "
                        "background compile, then rebuilding the engine from the store on "
                        "the compiled kernels and running the call again", INTERPRET_SECONDS)
            self._to_compiled(warm=False)
            self._caught_up_to_store()
            self.recover()
            return fn(*args)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        # The last commits hand snapshots to the snapshot thread when they are done.
        if self._last_commit is not None:
            wait([self._last_commit])
        self._snapshots.shutdown(wait=True)

    # ---- start-up (engine thread) -----------------------------------------------
    def start(self) -> None:
        """Recover from the store, bulk-load --graph into an empty store, warm the kernels."""
        # Numba's thread count is per calling thread: every engine call runs on this one.
        numba.set_num_threads(self.settings.numba_threads())
        # Recovery, a bulk load and the warm-up may all compile (a first start); say so.
        self.compiling.start()
        try:
            self.phase = "recovering the store"
            self._settle_kind()
            self._settle_retention()
            if self._interpret_first_start():
                interpreted.allow(INTERPRET_SECONDS)    # recovery's own budget
            self.recover()
            if self.settings.graph is not None:
                if self._is_empty():
                    self.phase = "bulk-loading the graph"
                    log.info("bulk load: reading %s", self.settings.graph)
                    graph = load_graph(self.settings.graph, labels_path=self.settings.labels,
                                       num_labels=self.settings.num_labels,
                                       seed=self.settings.label_seed,
                                       directed=self.engine.directed)
                    self.load_graph(graph, self.labels.stage())
                else:
                    log.warning("the store already holds a graph; --graph %s is ignored",
                                self.settings.graph)
            if interpreted.active():
                log.info("ready on the kernels as plain Python; the compiled ones take over "
                         "when the background compile is done")
            else:
                self.phase = "warming the kernels"
                self.warm_up()
        finally:
            self.compiling.finish()

    def _interpret_first_start(self) -> bool:
        """On a first start of the CPU executor (its kernels not in Numba's cache) with a
        small store: start the background compile and run the kernels as plain Python
        until it is done (module docstring).  Whether it did."""
        if not compile_ahead.background_wanted():
            return False
        try:
            backend = executor_for(self.settings.backend)
        except ValueError:
            return False            # the engine's construction says why
        snapshot = self.store.latest_snapshot()
        edges = 0 if snapshot is None else snapshot.edges
        replay = self.store.last_seq() - (0 if snapshot is None else snapshot.seq)
        inputs = [str(p) for p in (self.settings.graph, self.settings.labels) if p is not None]
        if backend != "cpu" or edges >= INTERPRET_BELOW_EDGES \
                or replay >= INTERPRET_BELOW_BATCHES or not compile_ahead.small(inputs):
            return False
        if not compile_ahead.interpret_while_compiling(INTERPRET_SECONDS):
            return False
        log.warning("the CPU executor's kernels are not in Numba's cache (a first start, or "
                    "a new version): a background process compiles them (about %.0f s on "
                    "two cores, once; its log: %s); until then they run as plain Python, "
                    "slower, one batch at a time", self.compiling.estimate(),
                    compile_ahead.log_path())
        threading.Thread(target=self._when_compiled, name="motifstream-compile-watch",
                         daemon=True).start()
        return True

    def _when_compiled(self) -> None:
        """(Its own thread.) Once the background compile is done, the engine thread takes
        the compiled kernels, before the requests queued after that moment."""
        compile_ahead.wait_for_background()
        try:
            self._pool.submit(self._to_compiled)
        except RuntimeError:        # shutting down
            pass

    def _to_compiled(self, warm: bool = True) -> None:
        """(Engine thread.) Stop running the kernels as plain Python: wait for the
        background compile, then load its kernels (the warm-up, with `warm`; else each on
        its first call)."""
        if not interpreted.active():
            return
        t0 = time.perf_counter()
        if compile_ahead.wait_for_background():
            log.error("the background compile failed (its log: %s): the kernels compile "
                      "here instead, as each is first called", compile_ahead.log_path())
        interpreted.stop()
        if warm:
            warm_up(self.backend, self._engine_config(), directed=self.engine.directed)
        log.info("the compiled kernels took over from the plain-Python ones (%.2f s)",
                 time.perf_counter() - t0)

    def starting(self) -> str:
        """What start-up is doing, for /readyz: the phase, or the kernels compiling."""
        return self.compiling.status() or self.phase

    def _settle_kind(self) -> None:
        """The `directed` setting against the store (_settle_fixed: its queries and batches mean
        something else as the other kind)."""
        kinds = ("undirected", "directed")
        self._settle_fixed("directed", self.settings.directed, self.store.directed(),
                     self.store.set_directed,
                     lambda held, wanted: f"a {kinds[held]} graph; it cannot be served as "
                                          f"{kinds[wanted]}")

    def _settle_retention(self) -> None:
        """The `retention` setting against the store (_settle_fixed: its batches were applied,
        and are replayed, with the store's)."""
        self._settle_fixed("retention", self.settings.retention, self.store.retention(),
                     self.store.set_retention,
                     lambda held, wanted: f"a graph with retention "
                                          f"{'none' if held is None else held}; it cannot be "
                                          f"served with retention {wanted}")

    def _settle_fixed(self, name: str, wanted, held, take, conflict) -> None:
        """A setting fixed with the store's graph: a store that holds no graph, no batch and
        no query takes the value it names; any other keeps its own, and a setting that
        contradicts it stops the start, saying `conflict(held, wanted)`."""
        store = self.store
        if wanted is None or wanted == held:
            return
        if store.last_seq() == 0 and store.latest_snapshot() is None and not store.queries():
            take(wanted)
            return
        raise RuntimeError(f"the store in {self.settings.data_dir} holds "
                           f"{conflict(held, wanted)} (drop the {name} setting, or use another "
                           f"data directory)")

    def recover(self) -> None:
        """(Re)build every in-memory structure from the durable state."""
        t0 = time.perf_counter()
        store = self.store
        snapshot, graph = self._readable_snapshot()
        engine = Engine(graph, backend=self.settings.backend,
                        config=self._engine_config(), directed=store.directed(),
                        retention=store.retention())
        seq = snapshot.seq if snapshot is not None else 0
        replayed = 0
        # Replayed with no query standing: only the graph is rebuilt, the results are
        # already in the store.
        for batch_seq, stream in store.batches_after(seq):
            if batch_seq != seq + 1:
                raise RuntimeError(f"batch log has a gap: batch {batch_seq} after {seq}")
            engine.apply(stream)
            seq = batch_seq
            replayed += 1
        if seq != store.last_seq():
            raise RuntimeError(f"batch log ends at {seq} but the store says {store.last_seq()}")
        labels = LabelDictionary(store.labels())
        queries = {}
        for record in store.queries():
            queries[record.id] = Standing.restore(engine, labels, record)
        self.engine, self.backend, self.labels, self.queries = engine, engine.backend, labels, \
            queries
        self.seq = seq
        self._next_query_id = store.next_query_id()
        log.info("recovered batch %d (snapshot %s, %d batches replayed), %d vertices, %d edges, "
                 "%d queries, backend %s, in %.2f s", seq,
                 snapshot.seq if snapshot is not None else "none", replayed,
                 engine.graph.num_vertices, engine.graph.num_edges, len(queries), self.backend,
                 time.perf_counter() - t0)

    def _engine_config(self) -> EngineConfig:
        return EngineConfig(device_graph=self.settings.device_graph)

    def _readable_snapshot(self) -> tuple[SnapshotRecord | None, LabeledGraph | None]:
        """The newest snapshot that reads back intact (the batch log reaches back to the
        oldest one kept), or none when none was ever taken."""
        snapshots = self.store.snapshots()
        for snapshot in snapshots:
            try:
                return snapshot, self.store.read_snapshot(snapshot)
            except SnapshotCorrupt as exc:
                log.error("snapshot of batch %d is unreadable (%s); trying an older one",
                          snapshot.seq, exc)
        if snapshots:
            raise RuntimeError("no snapshot reads back intact; the batch log does not reach "
                               "back to an empty graph")
        return None, None

    def warm_up(self) -> None:
        """Compile (or load from cache) every kernel a batch can use, on a throw-away engine."""
        t0 = time.perf_counter()
        warm_up(self.backend, self._engine_config(), directed=self.engine.directed)
        log.info("kernels warm in %.2f s (%d compiled since the start)",
                 time.perf_counter() - t0, self.compiling.compiled)

    def _is_empty(self) -> bool:
        return (self.seq == 0 and self.engine.graph.num_vertices == 0
                and self.store.latest_snapshot() is None)

    # ---- batches (engine thread) ----------------------------------------------------
    def ingest(self, batch: BatchInput, idempotency: tuple[str, str] | None) -> Future:
        """Apply one batch and hand its commit to the writer thread.

        Returns a future that gives the acknowledgement (an IngestResult) once the batch
        is durable, or raises ServiceUnavailable if it cannot be made so.  The engine goes
        on with the next batch while the writer commits this one (each batch still one
        transaction, in order); a failed commit rebuilds the engine from the store, and
        every batch applied after the failed one fails too (its seq no longer follows).
        Raises InputError or Conflict at once when the batch is refused.
        """
        t0 = time.perf_counter()
        if idempotency is not None:
            replay = self._replay(*idempotency)
            if replay is not None:
                return replay
        staged = self.labels.stage()
        stream = batch.to_stream(staged)
        # Only the queries that deliver matches list them; the others keep the count-only
        # search (grouped leaf-rooted tasks, no second listing pass).
        listing = {s.engine_qid: s.max_matches for s in self.queries.values()
                   if s.deliver == "matches"}
        try:
            pending = self.engine.start(stream, list_limit=listing)
        except BatchRejected as exc:
            raise InputError(f"{batch.where(exc.line)}: {exc.reason}") from None
        except interpreted.OutOfTime:
            raise                   # _guarded rebuilds and runs the batch again
        except BaseException:
            self._rebuild("a batch failed inside the engine")
            raise
        # The batch is applied: the in-memory state moves on now (a failed commit rebuilds
        # it from the store), in arrival order.
        seq = self.seq + 1
        acknowledged: Future = Future()
        if idempotency is not None:
            with self._keys_lock:
                self._pending_keys[idempotency[0]] = idempotency[1]
        self.seq = seq
        self.labels.commit(staged)
        every = self.settings.snapshot_every
        # Taken now: the next batch may be applied before this one is finished.
        graph = self.engine.to_labeled() if every and seq % every == 0 else None
        started = _Started(pending, seq, stream, staged.new, idempotency, acknowledged, t0,
                           graph)
        if self.pipelined or self._unfinished:
            # Its counts may still be on the device, or its search wait for its batch
            # group: a batch already queued behind this one starts first (its host work
            # overlapping these kernels, or joining the group), then the batches are
            # finished and handed to the writer in order (Engine.apply_stream's pipeline).
            self._unfinished.append(started)
            if len(self._unfinished) == 1:
                try:
                    self._pool.submit(self._settle)
                except RuntimeError:    # shutting down: nothing is left to overlap with
                    self._settle()
        else:
            try:
                finished = self._finish(started)
            except interpreted.OutOfTime:
                # Not handed to the writer: the key is free again for the run once more.
                if idempotency is not None:
                    with self._keys_lock:
                        self._pending_keys.pop(idempotency[0], None)
                raise
            self._hand_off([finished])
        return acknowledged

    @property
    def pipelined(self) -> bool:
        """Whether a batch queued behind another starts before the other is finished: the
        batches queued then form a batch group (gpu/pipeline.py: one lookup, one update
        and one search for all of them), handed to the writer together, and on CUDA a
        batch's host work overlaps the kernels of the one before.  Always on CUDA; on
        the CPU unless the cpu_batch_groups setting is off; never while the kernels run as
        plain Python (a batch that runs out of time is then run again alone)."""
        if interpreted.active():
            return False
        if self.pipeline is not None:
            return self.pipeline
        return self.backend == "cuda" or self.settings.cpu_batch_groups

    def _settle(self) -> None:
        """Finish the batches still unfinished and hand them to the writer, in order and
        at once; if one cannot be finished, the ones before it are handed over, it and
        every batch after it fail, and the engine is rebuilt from the store."""
        finished = []
        while self._unfinished:
            started = self._unfinished.popleft()
            try:
                finished.append(self._finish(started))
            except BaseException as exc:  # noqa: BLE001 -- answered as unavailable
                self._hand_off(finished)
                failed = [started, *self._unfinished]
                self._unfinished.clear()
                for each in failed:
                    if each.idempotency is not None:
                        with self._keys_lock:
                            self._pending_keys.pop(each.idempotency[0], None)
                    each.acknowledged.set_exception(ServiceUnavailable(
                        f"batch {each.seq} could not be finished ({exc}); it was not applied"))
                self._rebuild(f"batch {started.seq} could not be finished")
                return
        self._hand_off(finished)

    def _finish(self, started: _Started) -> tuple[BatchRecord, _Done]:
        """A started batch's results (waiting for the device if need be), its events and
        statistics, and what its commit needs (engine thread, in seq order)."""
        seq, stream, idempotency = started.seq, started.stream, started.idempotency
        result = started.pending.finish()
        created_at = utc_now()  # the batch log's time of the batch, and its events'
        events, stats, results, touched = [], {}, {}, []
        for standing in self.queries.values():
            delta = result.queries[standing.engine_qid]
            stats[standing.id] = (delta.positive, delta.negative)
            results[str(standing.id)] = {"positive": delta.positive, "negative": delta.negative}
            if delta.expired is not None:
                results[str(standing.id)]["expired"] = delta.expired
            touched.append(standing)
            event = standing.count_batch(seq, delta, created_at)
            if event is not None:
                events.append(event)
        timings = {k: round(v, 6) for k, v in result.timings.items()}
        timings["engine"] = round(time.perf_counter() - started.t0, 6)
        response_json = orjson.dumps({"batch": seq, "applied": result.applied,
                                      "ignored": result.ignored, "results": results,
                                      "timings": timings}).decode()
        record = BatchRecord(seq=seq, updates=stream, applied=result.applied,
                             ignored=result.ignored, created_at=created_at, events=tuple(events),
                             query_stats=stats, new_labels=started.new_labels,
                             idempotency=None if idempotency is None else
                             (idempotency[0], idempotency[1], response_json))
        done = _Done(seq, started.acknowledged, events, response_json, result, len(stream),
                     started.t0, started.graph,
                     idempotency[0] if idempotency is not None else None, touched)
        return record, done

    def _hand_off(self, finished: list[tuple[BatchRecord, _Done]]) -> None:
        """Finished batches' commits handed to the writer, in one hand-off (engine thread,
        in seq order): each hand-off to the writer process lets the other threads take the
        GIL, and waits to get it back."""
        if not finished:
            return
        try:
            commits = self.store.append_batches_async([record for record, _ in finished])
        except BaseException as exc:  # noqa: BLE001 -- answered as failed commits
            failed: Future = Future()
            failed.set_exception(exc)
            commits = [failed] * len(finished)
        self._last_commit = commits[-1]
        for (_, done), commit in zip(finished, commits, strict=True):
            commit.add_done_callback(lambda f, done=done: self._committed(done, f))

    def _replay(self, key: str, request_hash: str) -> Future | None:
        """The stored answer of an earlier request with this Idempotency-Key, or None when
        the key is new.  As the IETF Idempotency-Key draft has it: a key used for another
        body (media type and bytes, `request_hash`) is an IdempotencyKeyReused (422),
        whether that request is done or not; the same request again while the first is
        still being applied (not yet durable) is an IdempotencyKeyInFlight (409), since
        its answer is not known yet."""
        with self._keys_lock:
            pending = self._pending_keys.get(key)
        if pending is not None:
            stored_hash = pending
        else:
            stored = self.store.idempotent(key)
            if stored is None:
                return None
            _, stored_hash, response = stored
        if stored_hash != request_hash:
            raise IdempotencyKeyReused(
                f"Idempotency-Key {key!r} was used for a request with another body; "
                "use a new key for a new request")
        if pending is not None:
            raise IdempotencyKeyInFlight(
                f"a request with Idempotency-Key {key!r} is still being applied; retry "
                "once it is answered to get its answer")
        replay: Future = Future()
        replay.set_result(IngestResult(response, replayed=True))
        return replay

    def _committed(self, done: _Done, commit: Future) -> None:
        """The writer finished a batch's transaction (runs on the writer thread)."""
        if done.key is not None:
            with self._keys_lock:
                self._pending_keys.pop(done.key, None)
        exc = commit.exception()
        if exc is not None:
            # The rebuild is queued on the engine thread before the 503 goes out: a retry
            # sent on the answer then finds memory equal to the store again, instead of
            # being applied after the failed batch and refused for its seq.
            try:
                self._pool.submit(self._caught_up,
                                  f"batch {done.seq} could not be persisted")
            except RuntimeError:    # shutting down: the next start recovers from the store
                pass
            done.acknowledged.set_exception(ServiceUnavailable(
                f"batch {done.seq} could not be persisted ({exc}); it was not applied"))
            return
        try:
            seconds = time.perf_counter() - done.t0
            for standing in done.touched:
                standing.latencies.append(seconds)
            self.hub.publish(done.seq, done.events)
            self.metrics.batch(done.size, done.result, seconds)
            if done.graph is not None:
                self._snapshots.submit(self._snapshot, done.seq, done.graph)
        except Exception:   # the batch is durable whatever happens here: acknowledge it
            log.exception("after committing batch %d", done.seq)
        done.acknowledged.set_result(IngestResult(done.response_json, replayed=False))

    def _snapshot(self, seq: int, graph: LabeledGraph) -> None:
        try:
            t0 = time.perf_counter()
            self.store.record_snapshot(seq, graph)
            log.info("snapshot after batch %d (%d vertices, %d edges) in %.2f s", seq,
                     graph.num_vertices, graph.num_edges, time.perf_counter() - t0)
        except Exception:  # the batch log still holds everything; the next one may succeed
            log.exception("snapshot after batch %d failed", seq)

    def _rebuild(self, why: str) -> None:
        log.error("%s; rebuilding the engine from the store", why)
        try:
            # The batches applied before: handed to the writer and committed first, so
            # that the store the engine is rebuilt from holds them (memory equals store).
            self._caught_up_to_store()
            self._compiled_if_out_of_time(self.recover)
        except BaseException as exc:
            self.failure = f"rebuild after '{why}' failed: {exc}"
            log.exception("rebuild failed; the service stops taking requests")
            raise

    # ---- queries (engine thread) ----------------------------------------------------
    def register(self, create: QueryCreate, dry_run: bool) -> QueryPublic | QueryValidation:
        pattern = pattern_of(create.pattern)
        staged = self.labels.stage()
        qid = self._next_query_id
        name = create.name or f"query-{qid}"
        query = to_query(pattern, name, staged, self.settings.max_query_vertices,
                         self.engine.directed)
        max_matches = None
        if create.deliver == "matches":
            cap = self.settings.max_matches_per_batch
            max_matches = create.max_matches_per_batch or cap
            if max_matches > cap:
                raise InputError(f"max_matches_per_batch: {max_matches} is above the server's "
                                 f"limit {cap}")
        elif create.max_matches_per_batch is not None:
            raise InputError("max_matches_per_batch: only for deliver=matches")
        if create.window is not None or create.before:
            problem = self.engine.window_problem(create.window, create.before or (), query)
            if problem is not None:
                field = "" if problem.startswith(("before", "window ")) else "window: "
                raise InputError(f"{field}{problem}")
        if dry_run:
            return QueryValidation(pattern=pattern, vertices=query.num_vertices,
                                   edges=query.num_edges)
        self._caught_up()
        standing = Standing(id=qid, name=name, pattern=pattern, deliver=create.deliver,
                            max_matches=max_matches, backfill=create.backfill,
                            created_seq=self.seq, created_at=utc_now(), engine_qid=-1,
                            query=query, window=create.window, before=create.before)
        standing.attach(self.engine)
        try:
            backfill = standing.backfill_event(self.engine, self.seq) if create.backfill else None
            record = QueryRecord(id=qid, name=name, pattern=pattern.model_dump_json(),
                                 options=standing.options_json(), created_seq=self.seq,
                                 created_at=standing.created_at)
            self.store.register_query(record, staged.new, backfill)
        except interpreted.OutOfTime:
            raise                   # _guarded rebuilds and registers it again
        except BaseException as exc:
            self.engine.remove_query(standing.engine_qid)
            raise ServiceUnavailable(f"query could not be persisted ({exc}); it was not "
                                     "registered") from exc
        self.labels.commit(staged)
        self._next_query_id = qid + 1
        self.queries[qid] = standing
        log.info("registered query %d %r (%d vertices, %d edges)", qid, name,
                 query.num_vertices, query.num_edges)
        return standing.public()

    def delete(self, qid: int) -> None:
        standing = self._standing(qid)
        self._caught_up()
        self.store.delete_query(qid)
        self.engine.remove_query(standing.engine_qid)
        del self.queries[qid]
        self.hub.query_deleted(qid)
        log.info("deleted query %d %r", qid, standing.name)

    def _standing(self, qid: int) -> Standing:
        try:
            return self.queries[qid]
        except KeyError:
            raise QueryNotFound(qid) from None

    def describe(self, qid: int) -> QueryPublic:
        standing = self._standing(qid)
        return standing.public(standing.stats(self.hub))

    def list_queries(self, after: int | None, limit: int) -> QueryPage:
        """The standing queries with an id above `after` (all without one), at most `limit`,
        by id; `next` is the last one's id when more follow.  Raises InputError for a cursor
        above every id given out, which no page can have returned."""
        if after is not None and after >= self._next_query_id:
            raise InputError(f"after: {after} is past the end: no query id above "
                             f"{self._next_query_id - 1} has been given out")
        # Ids are given out in increasing order and `queries` keeps insertion order.
        listed = [s for s in self.queries.values() if after is None or s.id > after]
        page = listed[:limit]
        return QueryPage(queries=[s.public(s.stats(self.hub)) for s in page],
                         next=page[-1].id if len(listed) > limit else None)

    # ---- graph (engine thread) --------------------------------------------------------
    def graph_info(self) -> GraphPublic:
        g = self.engine.graph
        return GraphPublic(vertices=g.num_vertices, edges=g.num_edges,
                           directed=self.engine.directed,
                           watermark=self.engine.watermark, timed_edges=len(self.engine.times),
                           retention=self.engine.retention,
                           labels=self.labels.names(), batches=self.seq, backend=self.backend,
                           queries=len(self.queries), device_memory_bytes=device_memory_bytes(),
                           store_bytes=self.store.size_bytes())

    def load_graph(self, graph: LabeledGraph, staged: StagedLabels,
                   directed: bool | None = None) -> GraphPublic:
        """Bulk-load `graph` into the empty service (snapshot 0); `directed` (None: the
        graph's current kind) fixes its kind with it."""
        self._caught_up()
        if not self._is_empty():
            raise Conflict("the graph can be bulk-loaded only while it is empty and no batch "
                           "has been applied; use POST /v1/batches")
        if directed is None:
            directed = self.engine.directed
        if directed != self.engine.directed and self.queries:
            kinds = ("undirected", "directed")
            raise Conflict(f"directed: {len(self.queries)} queries are registered as "
                           f"{kinds[self.engine.directed]}; delete them before loading a "
                           f"{kinds[directed]} graph")
        t0 = time.perf_counter()
        old = self.engine
        log.info("bulk load: indexing %d vertices, %d edges", graph.num_vertices,
                 graph.num_edges)
        engine = Engine(graph, backend=self.settings.backend,
                        config=self._engine_config(), directed=directed,
                        retention=self.store.retention())
        log.info("bulk load: indexed in %.2f s; re-planning %d standing queries",
                 time.perf_counter() - t0, len(self.queries))
        for standing in self.queries.values():
            standing.attach(engine)
        old_backend = self.backend
        self.engine, self.backend = engine, engine.backend
        try:
            if staged.new:
                self.store.add_labels(staged.new)
            log.info("bulk load: writing snapshot 0")
            self.store.record_snapshot(0, graph, directed=directed)
        except BaseException as exc:
            self.engine, self.backend = old, old_backend
            self._rebuild("the bulk load could not be persisted")
            raise ServiceUnavailable(f"the graph could not be persisted ({exc})") from exc
        self.labels.commit(staged)
        log.info("bulk-loaded %d vertices, %d edges in %.2f s", graph.num_vertices,
                 graph.num_edges, time.perf_counter() - t0)
        if engine.directed != old.directed and not interpreted.active():
            # The start warmed the kernels of the other kind (on CUDA, directed plans and
            # arc keys are other paths): this kind's are warmed before the first batch comes.
            self.warm_up()
        return self.graph_info()

    def graph_now(self) -> tuple[int, LabeledGraph, dict[int, str]]:
        """(batch, a copy of the graph, label names by id) as of the last batch, once
        committed: GET /v1/graph/export."""
        self._caught_up()
        return self.seq, self.engine.to_labeled(), self.labels.by_id()

    def take_snapshot(self) -> Future:
        """Snapshot the graph as of the last batch, once committed, on the snapshot thread
        (after any periodic snapshot queued there, which may be of the same batch); the
        future's result is its SnapshotRecord.  POST /v1/snapshots."""
        self._caught_up()
        if self._is_empty():
            # A snapshot would count as a loaded graph, and refuse PUT /v1/graph.
            raise Conflict("there is nothing to snapshot: no graph was loaded and no batch "
                           "applied")
        latest = self.store.latest_snapshot()
        if latest is not None and latest.seq == self.seq:
            taken: Future = Future()
            taken.set_result(latest)
            return taken
        return self._snapshots.submit(self.store.record_snapshot, self.seq,
                                      self.engine.to_labeled())


def _copy_outcome(source: Future, target: asyncio.Future) -> None:
    if target.cancelled():
        return
    exc = source.exception()
    if exc is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


__all__ = ["Conflict", "EngineService", "IdempotencyKeyInFlight", "IdempotencyKeyReused",
           "IngestResult", "QueryNotFound", "ServiceUnavailable"]
