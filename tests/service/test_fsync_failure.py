"""A failing fsync under the real server: the batch being committed is neither durable nor
gone, so the server answers nothing false -- it exits as a crash would (status 70) -- and
the restart finds out what is durable; a retry with the Idempotency-Key then gets the one
true answer, and nothing is applied twice or lost."""
from __future__ import annotations

import httpx
import pytest

from benchmarks.chaos import Config, Server
from service.main import EXIT_WRITER_LOST
from tests.failing_fsync import failing_fsync_environment

GRAPH = "v 1 0\nv 2 0\nv 3 0\nv 4 1\ne 1 2 0\n"
TRIANGLE = "v 0 0\nv 1 0\nv 2 0\ne 0 1\ne 1 2\ne 0 2\n"


@pytest.mark.parametrize("writer", ["process", "thread"])
def test_a_failed_fsync_ends_the_server_and_the_retry_gets_the_true_answer(
        tmp_path, monkeypatch, writer):
    env, flag = failing_fsync_environment(tmp_path)
    for name, value in {**env, "MOTIFSTREAM_STORE_WRITER": writer}.items():
        monkeypatch.setenv(name, value)        # inherited by the server and its writer
    (tmp_path / "g.graph").write_text(GRAPH)
    # `full`: only then does each commit sync the WAL (`normal` syncs at checkpoints).
    server = Server(tmp_path / "data", tmp_path / "g.graph", tmp_path / "server.log",
                    Config(synchronous="full"))
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            r = client.post("/v1/queries", content=TRIANGLE,
                            headers={"content-type": "text/plain"})
            assert r.status_code == 201, r.text
            first = client.post("/v1/batches", json={"insert_edges": [[2, 3]]},
                                headers={"Idempotency-Key": "first"})
            assert first.status_code == 200, first.text
            flag.touch()
            with pytest.raises(httpx.TransportError):    # no answer at all: not a 503
                client.post("/v1/batches", json={"insert_edges": [[1, 3]]},
                            headers={"Idempotency-Key": "second"})
        assert server.proc.wait(timeout=60) == EXIT_WRITER_LOST
        assert "whether it is durable is unknown" in (tmp_path / "server.log").read_text()
        flag.unlink()
        server.start()
        with httpx.Client(base_url=server.url, timeout=60) as client:
            again = client.post("/v1/batches", json={"insert_edges": [[1, 3]]},
                                headers={"Idempotency-Key": "second"})
            assert again.status_code == 200, again.text
            # Whether the synced-or-not transaction survived decides if this is its stored
            # answer or a first application; either way batch 2, the triangle closed once.
            assert again.json()["batch"] == 2
            assert again.json()["results"]["1"] == {"positive": 6, "negative": 0}
            graph = client.get("/v1/graph").json()
            assert (graph["batches"], graph["edges"]) == (2, 3)
            replayed = client.post("/v1/batches", json={"insert_edges": [[2, 3]]},
                                   headers={"Idempotency-Key": "first"})
            assert replayed.json() == first.json()
            events = client.get("/v1/queries/1/results", params={"after": 0}).json()["events"]
            assert [(e["id"], e["data"]["positive"]) for e in events] == [(2, 6)]
    finally:
        server.stop()
