"""Service test fixtures: an app on a temporary data dir, driven through Starlette's TestClient."""
from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from gpu.io.records import ADD_VERTEX, DELETE_EDGE, DELETE_VERTEX, INSERT_EDGE, NO_LABEL
from service.main import create_app
from service.settings import Settings
from tests.graphs import random_batch

# The executor the service tests run on: cpu by default; the device run sets cuda (and may
# set the device graph's layout).
BACKEND = os.environ.get("MOTIFSTREAM_TEST_BACKEND", "cpu")
DEVICE_GRAPH = os.environ.get("MOTIFSTREAM_TEST_DEVICE_GRAPH", "pma")


@contextmanager
def running(data_dir, **overrides):
    """A started app (recovered and warm) on `data_dir`, as a TestClient."""
    settings = Settings(**{"data_dir": data_dir, "synchronous": "normal", "backend": BACKEND,
                           "device_graph": DEVICE_GRAPH, **overrides})
    with TestClient(create_app(settings)) as client:
        wait_ready(client)
        yield client


def wait_ready(client, timeout: float = 120.0) -> None:
    """Until /readyz says ready, failing after `timeout` s without progress: a kernel
    compiled counts as progress.  Every kernel compiles again at the first start after any
    gpu/ source file changed (gpu/kernel_cache.py), which took 287 s on the 2-vCPU VM
    under load (2026-11-29), far past a fixed limit."""
    deadline = time.monotonic() + timeout
    compiled = 0
    while True:
        r = client.get("/readyz")
        if r.status_code == 200:
            return
        body = r.json()
        assert body["status"] == "starting", body
        now = kernels_compiled(body["detail"])
        if now > compiled:
            compiled, deadline = now, time.monotonic() + timeout
        assert time.monotonic() < deadline, f"service did not become ready: {body}"
        time.sleep(0.02)


def kernels_compiled(detail: str) -> int:
    """How many kernels a starting service's /readyz detail says it has compiled (0 when
    it is not compiling)."""
    found = re.search(r"(\d+) kernels compiled", detail)
    return int(found.group(1)) if found else 0


def settled(client, timeout: float = 60.0) -> dict:
    """/readyz's body once start-up is over (ready or failed)."""
    deadline = time.monotonic() + timeout
    while (body := client.get("/readyz").json())["status"] == "starting":
        assert time.monotonic() < deadline, "start-up did not end"
        time.sleep(0.02)
    return body


@pytest.fixture
def client(tmp_path):
    with running(tmp_path / "data") as c:
        yield c


# Sizes that depend on history, not on the state: the store's files, the device memory pool.
HISTORY_DEPENDENT = ("store_bytes", "device_memory_bytes")


def graph_state(client) -> dict:
    """GET /v1/graph less the history-dependent sizes."""
    info = client.get("/v1/graph").json()
    return {k: v for k, v in info.items() if k not in HISTORY_DEPENDENT}


def batch_json(stream) -> dict:
    """An UpdateStream as a JSON batch body."""
    body = {"insert_vertices": [], "delete_vertices": [], "insert_edges": [],
            "delete_edges": []}
    for kind, a, b, label in zip(stream.kind.tolist(), stream.a.tolist(), stream.b.tolist(),
                                 stream.label.tolist()):
        if kind == ADD_VERTEX:
            body["insert_vertices"].append([a, label])
        elif kind == DELETE_VERTEX:
            body["delete_vertices"].append(a)
        else:
            field = "insert_edges" if kind == INSERT_EDGE else "delete_edges"
            assert kind in (INSERT_EDGE, DELETE_EDGE)
            body[field].append([a, b] if label == NO_LABEL else [a, b, label])
    return body


def graph_json(graph) -> dict:
    """A LabeledGraph as a PUT /v1/graph JSON body."""
    return {"vertices": [[int(v), int(lab)] for v, lab in zip(graph.vertex_ids,
                                                                graph.vertex_labels)],
            "edges": [[int(u), int(v), int(lab)] for u, v, lab in zip(
                graph.edge_src, graph.edge_dst, graph.edge_labels)]}


def pattern_json(pattern) -> dict:
    """A tests.graphs.Pattern as an API pattern (vertex ids 0..n-1)."""
    return {"vertices": [{"id": i, "label": lab} for i, lab in enumerate(pattern.labels)],
            "edges": [{"source": a, "target": b, "label": lab}
                      for (a, b), lab in sorted(pattern.edges.items())]}


def random_service_batch(rng, data, nlabels: int, nelabels: int, next_id: list[int]):
    """tests.graphs.random_batch drawn again until it has an update: the service refuses an
    empty batch (a 422, tests/service/test_http_conventions.py)."""
    while True:
        stream = random_batch(rng, data, nlabels, nelabels, next_id)
        if len(stream):
            return stream


class ServerProcess:
    """`motifstream serve` in a child process running this checkout, its output in `log`;
    ready (its /readyz 200) when built.  `starting` holds the /readyz bodies seen before."""

    def __init__(self, data_dir, log, *args: str, env: dict | None = None,
                 timeout: float = 180.0) -> None:
        import subprocess
        import sys
        from pathlib import Path

        import httpx

        from tests.service.test_e2e import _free_port

        root = Path(__file__).resolve().parents[2]
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(log)
        self.starting: list[dict] = []
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "serve", "--data-dir", str(data_dir),
                 "--port", str(self.port), "--backend", BACKEND, "--synchronous", "normal",
                 *args], stdout=out, stderr=subprocess.STDOUT, cwd=root,
                env={**os.environ, "PYTHONPATH": str(root), **(env or {})})
        deadline, compiled = time.monotonic() + timeout, 0
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                r = httpx.get(self.url + "/readyz", timeout=1)
                if r.status_code == 200:
                    break
                self.starting.append(r.json())
                # A kernel compiled is progress (wait_ready).
                now = kernels_compiled(self.starting[-1].get("detail", ""))
                if now > compiled:
                    compiled, deadline = now, time.monotonic() + timeout
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server not ready in time"
            time.sleep(0.05)

    def stop(self) -> str:
        """SIGTERM (SIGKILL after 30 s); the whole log."""
        import subprocess
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.log.read_text()
