"""A first start of the service does not wait for the CPU executor to compile
(service/engine_service.py): it is ready at once on the kernels run as plain Python while a
background process compiles them, answers exactly what a compiled service answers, takes the
compiled kernels when the process is done, and a call that runs past its plain-Python budget
is run again on the compiled kernels, once, with nothing lost or doubled.

The first tests stand in for the background process (the kernels this test process compiled
earlier are used where they fit; the rest run as plain Python); the last (slow) starts the
real server on an empty Numba cache.
"""
from __future__ import annotations

import json
import threading
import time
from importlib import resources
from pathlib import Path

import httpx
import pytest

import service.engine_service
from gpu import compile_ahead
from gpu.cpu import interpreted
from tests.service.conftest import BACKEND, ServerProcess, running

pytestmark = pytest.mark.skipif(BACKEND != "cpu", reason="only the CPU executor's kernels run "
                                "as plain Python")

DEMO = Path(str(resources.files("service") / "demo"))
GRAPH = {"vertices": [[v, v % 2] for v in range(12)],
         "edges": [[v, (v + 1) % 12] for v in range(12)] + [[0, 2], [4, 6], [1, 5]]}
TRIANGLE = {"pattern": {"vertices": [{"id": 0, "label": 0}, {"id": 1, "label": 0},
                                     {"id": 2, "label": 1}],
                        "edges": [{"source": 0, "target": 1}, {"source": 1, "target": 2},
                                  {"source": 0, "target": 2}]},
            "backfill": True, "deliver": "matches"}
BATCHES = [{"insert_edges": [[2, 3], [0, 3]]}, {"insert_edges": [[8, 10], [9, 10]]},
           {"delete_edges": [[0, 1]], "insert_vertices": [[20, 0]],
            "insert_edges": [[20, 1], [20, 0]]},
           {"delete_vertices": [2]}]


class _Compiling:
    """The background process: done when `done` is set."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.returncode = None

    def poll(self):
        return self.returncode

    def wait(self) -> int:
        self.done.wait()
        self.returncode = 0
        return 0


@pytest.fixture
def cold(monkeypatch, tmp_path):
    """A first start: the kernels not in Numba's cache (as compile_ahead sees it), the
    background mode on, the background process a stand-in; yields the stand-ins started."""
    monkeypatch.setattr(compile_ahead, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(compile_ahead, "cache_filled", lambda: False)
    monkeypatch.setattr(compile_ahead, "search_cached", lambda: False)
    monkeypatch.setenv(compile_ahead.MODE_VARIABLE, "background")
    started: list[_Compiling] = []

    def start() -> bool:
        started.append(_Compiling())
        monkeypatch.setattr(compile_ahead, "_background", started[-1])
        return True

    monkeypatch.setattr(compile_ahead, "_start_background", start)
    yield started
    for process in started:         # the watcher thread ends with it
        process.done.set()
    interpreted.stop()


def _session(client) -> list:
    """Load GRAPH, register TRIANGLE, apply BATCHES: every answer that says something."""
    answers = [client.put("/v1/graph", json=GRAPH).json()["edges"]]
    r = client.post("/v1/queries", json=TRIANGLE)
    assert r.status_code == 201, r.text
    answers.append(client.get("/v1/queries/1/results").json()["events"][0]["data"]["positive"])
    for batch in BATCHES:
        r = client.post("/v1/batches", json=batch)
        assert r.status_code == 200, r.text
        body = r.json()
        answers.append((body["batch"], body["applied"], body["results"]))
    answers.append(_events(client))
    return answers


def _events(client) -> list[dict]:
    """Query 1's events (its matches, added and removed) less their times."""
    events = client.get("/v1/queries/1/results").json()["events"]
    return [{k: v for k, v in e["data"].items() if k != "time"} for e in events]


@pytest.fixture(scope="module")
def compiled_answers(tmp_path_factory):
    """What a service on compiled kernels answers to _session."""
    with running(tmp_path_factory.mktemp("compiled") / "data") as client:
        return _session(client)


def _kernels(client) -> str:
    return client.get("/readyz").json()["kernels"]


def test_a_first_start_is_ready_at_once_and_exact_then_takes_the_compiled_kernels(
        compiled_answers, cold, tmp_path):
    with running(tmp_path / "data") as client:
        assert len(cold) == 1 and _kernels(client) == "interpreted"
        engine = client.app.state.motifstream.engine
        assert not engine.pipelined         # one batch at a time while interpreting
        assert _session(client) == compiled_answers
        cold[0].done.set()                  # the background compile is done
        deadline = time.monotonic() + 60
        while _kernels(client) != "compiled":
            assert time.monotonic() < deadline, "the compiled kernels never took over"
            time.sleep(0.02)
        assert not interpreted.active() and engine.pipelined
        r = client.post("/v1/batches", json={"insert_edges": [[3, 5]]})
        assert r.status_code == 200 and r.json()["batch"] == len(BATCHES) + 1, r.text


def _out_of_time_once(monkeypatch, target, name: str, process: _Compiling) -> list[int]:
    """`target.name` runs past its budget on its first call: the background compile is done
    then (as it will be once waited for), and the call raises OutOfTime."""
    calls: list[int] = []
    real = getattr(target, name)

    def once(*args, **kwargs):
        calls.append(len(calls))
        if len(calls) == 1:
            process.done.set()
            raise interpreted.OutOfTime("the kernels ran past their time as plain Python")
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, once)
    return calls


class _FinishOutOfTime:
    """An engine whose batches run past their budget when finished (the search's second
    half), the first time."""

    def __init__(self, start, process: _Compiling, calls: list) -> None:
        self.real_start, self.process, self.calls = start, process, calls

    def start(self, *args, **kwargs):
        pending = self.real_start(*args, **kwargs)
        real = pending.finish

        def finish():
            self.calls.append(len(self.calls))
            if len(self.calls) == 1:
                self.process.done.set()
                raise interpreted.OutOfTime("the kernels ran past their time as plain Python")
            return real()

        pending.finish = finish
        return pending


@pytest.mark.parametrize("where", ["start", "finish"])
def test_a_batch_out_of_time_is_applied_once_on_the_compiled_kernels(
        where, compiled_answers, cold, tmp_path, monkeypatch, caplog):
    with running(tmp_path / "data") as client:
        client.put("/v1/graph", json=GRAPH)
        assert client.post("/v1/queries", json=TRIANGLE).status_code == 201
        engine = client.app.state.motifstream.engine
        if where == "start":
            calls = _out_of_time_once(monkeypatch, engine.engine, "start", cold[0])
        else:
            calls = []
            monkeypatch.setattr(engine.engine, "start",
                                _FinishOutOfTime(engine.engine.start, cold[0], calls).start)
        key = {"Idempotency-Key": "first-batch"}
        with caplog.at_level("WARNING", logger="motifstream.engine"):
            r = client.post("/v1/batches", json=BATCHES[0], headers=key)
        assert r.status_code == 200, r.text
        assert "ran past" in caplog.text
        # Tried once on the plain-Python kernels; that engine is gone, rebuilt from the
        # store on the compiled kernels, which applied the batch.
        assert len(calls) == 1
        assert not interpreted.active() and _kernels(client) == "compiled"
        body = r.json()
        assert (body["batch"], body["applied"], body["results"]) == compiled_answers[2]
        again = client.post("/v1/batches", json=BATCHES[0], headers=key)
        assert again.headers.get("idempotent-replayed") == "true", again.text
        assert again.json() == body
        for batch, expected in zip(BATCHES[1:], compiled_answers[3:-1], strict=True):
            b = client.post("/v1/batches", json=batch).json()
            assert (b["batch"], b["applied"], b["results"]) == expected
        assert _events(client) == compiled_answers[-1]


def test_a_registration_out_of_time_registers_the_query_once(compiled_answers, cold, tmp_path,
                                                             monkeypatch):
    with running(tmp_path / "data") as client:
        client.put("/v1/graph", json=GRAPH)
        engine = client.app.state.motifstream.engine
        calls = _out_of_time_once(monkeypatch, engine.engine, "add_query", cold[0])
        r = client.post("/v1/queries", json=TRIANGLE)
        assert r.status_code == 201 and r.json()["id"] == 1, r.text
        assert len(calls) == 1 and not interpreted.active()
        assert [q["id"] for q in client.get("/v1/queries").json()["queries"]] == [1]
        assert client.get("/v1/queries/1/results").json()["events"][0]["data"]["positive"] \
            == compiled_answers[1]


@pytest.mark.parametrize("why", ["compile mode", "cache filled", "large store", "cuda"])
def test_no_plain_python_where_it_does_not_pay(why, cold, tmp_path, monkeypatch):
    if why == "compile mode":
        monkeypatch.setenv(compile_ahead.MODE_VARIABLE, "compile")
    elif why == "cache filled":
        monkeypatch.setattr(compile_ahead, "cache_filled", lambda: True)
    elif why == "large store":
        with running(tmp_path / "data") as client:    # (interpreting, then compiled)
            client.put("/v1/graph", json=GRAPH)
        cold[0].done.set()
        interpreted.stop()
        monkeypatch.setattr(service.engine_service, "INTERPRET_BELOW_EDGES", len(GRAPH["edges"]))
    else:       # the CUDA executor would run: its kernels are not Numba's
        monkeypatch.setattr(service.engine_service, "executor_for",
                            lambda requested: "cuda")
    started = len(cold)
    with running(tmp_path / "data") as client:
        assert _kernels(client) == "compiled" and len(cold) == started


@pytest.mark.slow
def test_the_real_first_start_on_an_empty_cache(tmp_path):
    """`serve --demo` on an empty Numba cache with the background mode on: ready while the
    kernels compile, exact, then on the compiled kernels; a restart compiles nothing."""
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba-cache"),
           compile_ahead.MODE_VARIABLE: "background"}
    compiled = ServerProcess(tmp_path / "compiled", tmp_path / "compiled.log", "--demo",
                             env={compile_ahead.MODE_VARIABLE: "compile"})
    try:
        expected = _demo_session(compiled.url)
    finally:
        compiled.stop()
    t0 = time.monotonic()
    first = ServerProcess(tmp_path / "data", tmp_path / "first.log", "--demo", "--log-level",
                          "info", env=env, timeout=120)
    try:
        ready_after = time.monotonic() - t0
        assert httpx.get(first.url + "/readyz").json()["kernels"] == "interpreted"
        assert _demo_session(first.url) == expected
        deadline = time.monotonic() + 1800
        while httpx.get(first.url + "/readyz").json()["kernels"] != "compiled":
            assert time.monotonic() < deadline, "the background compile never finished"
            time.sleep(1)
        r = httpx.post(first.url + "/v1/batches", json={"insert_edges": [[3712, 74]]})
        assert r.status_code == 200, r.text
    finally:
        log = first.stop()
    assert "a background process compiles them" in log and "took over" in log, log
    assert "compiling the CPU executor's kernels:" not in log, log     # nothing here
    print(f"first start ready in {ready_after:.1f} s")
    again = ServerProcess(tmp_path / "data", tmp_path / "again.log", "--log-level", "info",
                          env=env)
    try:
        assert httpx.get(again.url + "/readyz").json()["kernels"] == "compiled"
    finally:
        log = again.stop()
    assert "0 kernels compiled" in log, log


def _demo_session(url: str) -> list:
    """The README tour's requests on the demo graph: their answers."""
    answers = []
    r = httpx.post(url + "/v1/queries", headers={"content-type": "text/plain"},
                   content=(DEMO / "triangle.graph").read_text())
    assert r.status_code == 201, r.text
    for body, kind in ((json.dumps({"insert_edges": [[3712, 73]]}), "application/json"),
                       ((DEMO / "updates.txt").read_text(), "text/plain")):
        r = httpx.post(url + "/v1/batches", content=body, headers={"content-type": kind},
                       timeout=600)
        assert r.status_code == 200, r.text
        answers.append({k: r.json()[k] for k in ("batch", "applied", "ignored", "results")})
    return answers

