"""A restart of the real server: it says what it does until ready, recovers the same graph and
queries, and compiles nothing (the kernels come from Numba's cache, written by the first
start or an earlier run)."""
from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.service.conftest import HISTORY_DEPENDENT, ServerProcess

DEMO = Path(str(resources.files("service") / "demo"))
READY = re.compile(r"ready: batch (\d+), backend \w+, (\d+) kernels compiled")


def _state(url: str) -> tuple[dict, list]:
    graph = httpx.get(url + "/v1/graph").json()
    queries = httpx.get(url + "/v1/queries").json()["queries"]
    return ({k: v for k, v in graph.items() if k not in HISTORY_DEPENDENT},
            [{k: q[k] for k in ("id", "name", "pattern")} for q in queries])


@pytest.mark.slow
def test_a_restart_recovers_everything_and_compiles_nothing(tmp_path):
    rng = np.random.default_rng(27)
    n = 3000
    edges = {tuple(sorted(map(int, rng.choice(n, 2, replace=False)))) for _ in range(9000)}
    first = ServerProcess(tmp_path / "data", tmp_path / "first.log", "--log-level", "info")
    try:
        r = httpx.put(first.url + "/v1/graph", timeout=60, json={
            "vertices": [[v, int(rng.integers(3))] for v in range(n)],
            "edges": [list(e) for e in sorted(edges)]})
        assert r.status_code == 200, r.text
        for name in ("triangle", "square", "house"):
            r = httpx.post(first.url + "/v1/queries", headers={"content-type": "text/plain"},
                           content=(DEMO / f"{name}.graph").read_text())
            assert r.status_code == 201, r.text
        for _ in range(20):
            u, v = map(int, rng.choice(n, 2, replace=False))
            r = httpx.post(first.url + "/v1/batches", json={"insert_edges": [[u, v]]})
            assert r.status_code in (200, 422), r.text
        before = _state(first.url)
    finally:
        first.stop()

    again = ServerProcess(tmp_path / "data", tmp_path / "again.log", "--log-level", "info")
    try:
        after = _state(again.url)
    finally:
        log = again.stop()
    assert after == before
    # Until ready, /readyz said what it was doing.
    for body in again.starting:
        assert body["status"] == "starting" and body["detail"], body
    # Nothing compiled: no announcement, and the ready line's count is 0.
    assert "compiling the CPU executor" not in log, log
    (batch, compiled), = READY.findall(log)
    assert int(batch) == before[0]["batches"] and compiled == "0", log
