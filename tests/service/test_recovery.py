"""Restarts: the store rebuilds the same graph, queries and stats; a failed commit applies
nothing."""
from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future

from tests.graphs import random_data
from tests.service.conftest import (
    BACKEND,
    batch_json,
    graph_json,
    graph_state,
    pattern_json,
    random_service_batch,
    running,
)
from tests.service.test_batches import PATTERNS



def _each(per_record):
    """A stand-in for Store.append_batches_async from one for a single record."""
    return lambda records: [per_record(record) for record in records]


def _one_by_one(append_batches_async):
    """Store.append_batch_async as the real append_batches_async does it."""
    return lambda record: append_batches_async([record])[0]

def _stream(seed: int, batches: int):
    rng = random.Random(seed)
    data = random_data(rng, 14, 2, 2, 0.3)
    start = data.labeled()
    next_id = [100]
    return start, [batch_json(random_service_batch(rng, data, 2, 2, next_id))
                   for _ in range(batches)]


def _register(client) -> list[int]:
    return [client.post("/v1/queries", json={"pattern": pattern_json(p), "name": n}).json()["id"]
            for n, p in PATTERNS.items()]


def test_restart_resumes_exactly_where_it_stopped(tmp_path):
    start, batches = _stream(seed=11, batches=16)
    # Reference: one uninterrupted run.
    with running(tmp_path / "ref") as client:
        client.put("/v1/graph", json=graph_json(start))
        ids = _register(client)
        reference = [client.post("/v1/batches", json=b).json()["results"] for b in batches]
        ref_graph = graph_state(client)
        ref_queries = client.get("/v1/queries").json()["queries"]
    # The same stream across three restarts, with snapshots every 5 batches.
    data = tmp_path / "restarted"
    got = []
    for part in range(3):
        with running(data, snapshot_every=5) as client:
            if part == 0:
                client.put("/v1/graph", json=graph_json(start))
                assert _register(client) == ids
            for b in batches[part * 6:(part + 1) * 6]:
                got.append(client.post("/v1/batches", json=b).json()["results"])
    assert got == reference
    with running(data, snapshot_every=5) as client:
        assert graph_state(client) == ref_graph
        queries = client.get("/v1/queries").json()["queries"]
        for q, ref in zip(queries, ref_queries):
            for key in ("batches_seen", "total_positive", "total_negative", "last_batch"):
                assert q["stats"][key] == ref["stats"][key], key
        assert [q["id"] for q in queries] == ids


def test_failed_commit_is_503_and_applies_nothing(tmp_path):
    start, batches = _stream(seed=12, batches=4)
    with running(tmp_path / "ref") as client:
        client.put("/v1/graph", json=graph_json(start))
        _register(client)
        reference = [client.post("/v1/batches", json=b).json() for b in batches]
    with running(tmp_path / "data") as client:
        client.put("/v1/graph", json=graph_json(start))
        ids = _register(client)
        state = client.app.state.motifstream
        assert client.post("/v1/batches", json=batches[0]).status_code == 200
        graph = graph_state(client)

        def broken(record):
            raise OSError("disk full")
        state.store.append_batches_async = _each(broken)
        r = client.post("/v1/batches", json=batches[1])
        assert r.status_code == 503 and "not applied" in r.json()["detail"]
        del state.store.append_batches_async     # the class's again
        assert graph_state(client) == graph
        for qid in ids:
            assert client.get(f"/v1/queries/{qid}").json()["stats"]["batches_seen"] == 1
        # The rebuilt engine goes on exactly as the uninterrupted one.
        for b, ref in zip(batches[1:], reference[1:]):
            r = client.post("/v1/batches", json=b).json()
            assert (r["batch"], r["results"]) == (ref["batch"], ref["results"])


def test_graph_flag_loads_an_empty_store_only(tmp_path):
    graph = tmp_path / "g.graph"
    graph.write_text("v 1 0\nv 2 0\nv 3 0\ne 1 2\ne 2 3\n")
    with running(tmp_path / "data", graph=graph) as client:
        assert client.get("/v1/graph").json()["edges"] == 2
        client.post("/v1/batches", json={"delete_edges": [[1, 2]]})
    with running(tmp_path / "data", graph=graph) as client:
        info = client.get("/v1/graph").json()
        assert (info["edges"], info["batches"]) == (1, 1)


def test_a_failed_commit_fails_the_batches_applied_behind_it(tmp_path):
    """The engine applies the next batch while the writer commits the last one; when that
    commit fails, the batches behind it fail too and memory goes back to the store's state."""
    start, batches = _stream(seed=13, batches=5)
    with running(tmp_path / "ref") as client:
        client.put("/v1/graph", json=graph_json(start))
        _register(client)
        client.post("/v1/batches", json=batches[0])
        after_first = graph_state(client)
        reference = [client.post("/v1/batches", json=b).json() for b in batches[3:]]
    with running(tmp_path / "data") as client:
        client.put("/v1/graph", json=graph_json(start))
        _register(client)
        state = client.app.state.motifstream
        assert client.post("/v1/batches", json=batches[0]).status_code == 200
        real, gate = _one_by_one(state.store.append_batches_async), threading.Event()
        submitted = set()

        def held_then_failed(record):
            submitted.add(record.seq)
            if record.seq != 2:
                return real(record)
            failed = Future()
            threading.Thread(target=lambda: (gate.wait(), failed.set_exception(
                OSError("device gone")))).start()
            return failed
        state.store.append_batches_async = _each(held_then_failed)
        answers = {}

        def post(i):
            answers[i] = client.post("/v1/batches", json=batches[i])
        threads = []
        try:
            for i, seq in ((1, 2), (2, 3)):
                threads.append(threading.Thread(target=post, args=(i,)))
                threads[-1].start()
                # Applied in memory and handed to the writer.  (Not read from engine.seq:
                # batch 3's commit fails at once and the rebuild may already have reset it.)
                _until(lambda seq=seq: seq in submitted)
        finally:
            gate.set()
            for t in threads:
                t.join()
        del state.store.append_batches_async     # the class's again
        assert [answers[i].status_code for i in (1, 2)] == [503, 503]
        assert graph_state(client) == after_first
        # Memory is the store's again: what follows matches the uninterrupted run.
        for b, ref in zip(batches[3:], reference):
            r = client.post("/v1/batches", json=b).json()
            assert (r["batch"], r["results"]) == (ref["batch"], ref["results"])


def _until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_a_corrupt_snapshot_falls_back_to_the_older_one(tmp_path):
    start, batches = _stream(seed=14, batches=12)
    with running(tmp_path / "ref") as client:
        client.put("/v1/graph", json=graph_json(start))
        _register(client)
        for b in batches:
            client.post("/v1/batches", json=b)
        reference = graph_state(client)
    data = tmp_path / "data"
    with running(data, snapshot_every=4) as client:
        client.put("/v1/graph", json=graph_json(start))
        _register(client)
        for b in batches:
            assert client.post("/v1/batches", json=b).status_code == 200
        _until(lambda: [s.seq for s in client.app.state.motifstream.store.snapshots()]
               == [12, 8])
    newest = max((data / "snapshots").glob("*.npz"))
    newest.write_bytes(newest.read_bytes()[:-100])    # torn
    with running(data, snapshot_every=4) as client:
        assert graph_state(client) == reference


def test_concurrent_batches_equal_the_same_batches_one_by_one(tmp_path, groups=True):
    """Batches posted from many threads at once are numbered in arrival order, and each
    one's results, events and the final state equal posting them one by one in that order
    (by default the engine thread pipelines them: a batch queued behind another starts
    before the one before it is finished and handed to the writer; on the CPU executor
    they form batch groups).  The batches were made
    for one order, so some are refused in another (422, nothing applied): those are left
    out of the one-by-one run."""
    start, batches = _stream(seed=13, batches=24)
    with running(tmp_path / "together", cpu_batch_groups=groups) as client:
        assert client.app.state.motifstream.engine.pipelined == (groups or BACKEND == "cuda")
        client.put("/v1/graph", json=graph_json(start))
        ids = _register(client)
        answers = _post_concurrently(client, batches)
        assert {a["status"] for a in answers.values()} <= {200, 422}, answers
        order = sorted((i for i in answers if answers[i]["status"] == 200),
                       key=lambda i: answers[i]["batch"])
        # How many are accepted depends on the arrival order (11 and 12 of 24 were seen
        # under load): a quarter keeps the check from being vacuous without a coin toss.
        assert len(order) >= len(batches) // 4
        assert [answers[i]["batch"] for i in order] == list(range(1, len(order) + 1))
        together = _results(client, ids)
    _check_one_by_one(tmp_path / "one-by-one", start, ids, batches, order, answers, together)


def _post_concurrently(client, batches, started=None) -> dict[int, dict]:
    """Every batch posted from a thread of its own, all at once: {index: status and
    answer}; `started()`, if given, runs once the threads are started."""
    answers: dict[int, dict] = {}

    def post(i: int) -> None:
        r = client.post("/v1/batches", json=batches[i])
        answers[i] = {"status": r.status_code, **r.json()}

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    if started is not None:
        started()
    for t in threads:
        t.join()
    return answers


def _results(client, ids) -> dict:
    """The state and every query's events, less the events' times (two runs' differ)."""
    pages = [client.get(f"/v1/queries/{q}/results").json() for q in ids]
    for page in pages:
        for event in page["events"]:
            del event["data"]["time"]
    return {"state": graph_state(client), "events": pages}


def _check_one_by_one(data_dir, start, ids, batches, order, answers, together) -> None:
    """The batches posted one by one in `order` on a fresh service give each the same
    results as `answers`, and the state and events `together`."""
    with running(data_dir) as client:
        client.put("/v1/graph", json=graph_json(start))
        assert _register(client) == ids
        for i in order:
            assert client.post("/v1/batches", json=batches[i]).json()["results"] == \
                answers[i]["results"], i
        assert together == _results(client, ids)


def test_concurrent_batches_without_batch_groups(tmp_path):
    """The cpu_batch_groups setting off: on the CPU executor each batch is finished before
    the next starts (CUDA pipelines anyway); the same check as above."""
    test_concurrent_batches_equal_the_same_batches_one_by_one(tmp_path, groups=False)


def test_queued_one_edge_batches_share_a_search_and_keep_their_own_results(tmp_path,
                                                                           monkeypatch):
    """With the pipeline on (forced; the CPU executor's default), one-edge batches queued
    behind each other on the engine thread run as batch groups (gpu/pipeline.py
    BatchGroup: one search for the group); each batch's results, its events and the
    final state equal the same batches posted one by one.  (On CUDA: its own pipeline,
    no groups, the same check.)"""
    from gpu.pipeline import BatchGroup

    sizes: list[int] = []
    real = BatchGroup._apply_and_search
    monkeypatch.setattr(BatchGroup, "_apply_and_search",
                        lambda group: (sizes.append(len(group.members)), real(group))[1])
    rng = random.Random(15)
    data = random_data(rng, 14, 2, 2, 0.3)
    start = data.labeled()
    present = sorted(tuple(sorted(k)) for k in data.edges)
    absent = [(a, b) for a in range(14) for b in range(a + 1, 14)
              if frozenset((a, b)) not in data.edges]
    batches = [{"insert_edges": [[a, b, rng.randrange(2)]]} for a, b in rng.sample(absent, 16)]
    batches += [{"delete_edges": [[a, b]]} for a, b in rng.sample(present, 16)]
    with running(tmp_path / "grouped") as client:
        client.put("/v1/graph", json=graph_json(start))
        ids = _register(client)
        service = client.app.state.motifstream.engine
        service.pipeline = True
        gate = threading.Event()
        service._pool.submit(gate.wait)     # the batches queue up behind this

        def release() -> None:
            deadline = time.monotonic() + 30
            while service._pool._work_queue.qsize() < len(batches) and \
                    time.monotonic() < deadline:
                time.sleep(0.01)
            gate.set()

        answers = _post_concurrently(client, batches, release)
        assert {a["status"] for a in answers.values()} == {200}, answers
        order = sorted(answers, key=lambda i: answers[i]["batch"])
        together = _results(client, ids)
    if BACKEND == "cpu":    # the CUDA executor pipelines without groups
        assert max(sizes) > 1, sizes
    sizes.clear()
    _check_one_by_one(tmp_path / "one-by-one", start, ids, batches, order, answers, together)
    assert set(sizes) <= {1}, "batches posted one by one were grouped"   # or none (CUDA)
    assert any(r["positive"] or r["negative"] for a in answers.values()
               for r in a["results"].values())


def test_query_registered_while_the_commit_before_it_fails(tmp_path):
    """A query registered while the commit of the batch before it runs, and then fails,
    is stored after that batch's fate is known: created at the last committed batch, and
    the batches after it (which take the failed batch's number) go on normally."""
    start, batches = _stream(seed=14, batches=5)
    with running(tmp_path / "data") as client:
        client.put("/v1/graph", json=graph_json(start))
        _register(client)
        state = client.app.state.motifstream
        assert client.post("/v1/batches", json=batches[0]).status_code == 200

        def fails_later(record):
            failed: Future = Future()
            threading.Timer(0.4, failed.set_exception, args=(OSError("disk full"),)).start()
            return failed
        state.store.append_batches_async = _each(fails_later)
        answer = {}
        poster = threading.Thread(target=lambda: answer.update(
            r=client.post("/v1/batches", json=batches[1])))
        poster.start()
        time.sleep(0.1)     # the batch is applied, its commit running
        del state.store.append_batches_async     # the class's again
        late = client.post("/v1/queries", json={"pattern": pattern_json(PATTERNS["triangle"]),
                                                "name": "late", "backfill": True})
        poster.join()
        assert answer["r"].status_code == 503
        assert late.status_code == 201, late.text
        assert late.json()["created_batch"] == 1
        for b in batches[1:]:
            r = client.post("/v1/batches", json=b)
            assert r.status_code == 200, r.text
