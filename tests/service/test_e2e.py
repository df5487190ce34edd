"""End to end: the real server process, SSE and WebSocket followers, SIGKILL mid-stream,
restart, and every acknowledged batch and event exactly once, equal to `motifstream match`."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from importlib import resources
from pathlib import Path

import httpx
import pytest

from gpu.io.streams import read_updates
from service.main import EXIT_WRITER_LOST
from tests.service.conftest import BACKEND

DEMO = Path(str(resources.files("service") / "demo"))
QUERIES = ("triangle.graph", "square.graph", "house.graph")
BATCH_SIZE = 50
KILL_AFTER = 17          # acknowledged batches before the SIGKILL


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`motifstream serve` in a child process."""

    def __init__(self, data_dir: Path, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log, "ab")  # noqa: SIM115 -- closed by kill() or stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--data-dir", str(data_dir),
             "--port", str(self.port), "--backend", BACKEND, "--synchronous", "normal",
             "--graph", str(DEMO / "graph.txt"), "--snapshot-every", "10",
             "--log-level", "warning"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while True:
            assert self.proc.poll() is None, f"server exited: see {log}"
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server not ready in time"
            time.sleep(0.1)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._log.close()

    def kill_writer(self) -> None:
        """SIGKILL the server's storage writer process; the server must then end itself."""
        children = {int(pid) for task in Path(f"/proc/{self.proc.pid}/task").iterdir()
                    for pid in (task / "children").read_text().split()}
        assert len(children) == 1, children     # the writer process, nothing else
        os.kill(children.pop(), signal.SIGKILL)
        assert self.proc.wait(timeout=30) == EXIT_WRITER_LOST
        self._log.close()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        finally:
            self._log.close()


class SseFollower(threading.Thread):
    """Follows one query's SSE stream, resuming with Last-Event-ID after disconnects."""

    def __init__(self, query_id: int) -> None:
        super().__init__(daemon=True)
        self.query_id = query_id
        self.events: list[tuple[int, dict]] = []
        self.url: str | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            url = self.url
            headers = {"Last-Event-ID": str(self.events[-1][0])} if self.events else {}
            try:
                with httpx.stream("GET", f"{url}/v1/queries/{self.query_id}/events",
                                  headers=headers, timeout=httpx.Timeout(5, read=None)) as r:
                    fields: dict[str, str] = {}
                    for line in r.iter_lines():
                        if self.stop.is_set():
                            return
                        if line:   # a field (or a ": ping" comment) of the event being read
                            name, _, value = line.partition(":")
                            fields[name] = value.strip()
                        elif fields.get("event") == "batch":   # a blank line ends an event
                            self.events.append((int(fields["id"]), json.loads(fields["data"])))
                            fields = {}
                        else:
                            fields = {}
            except httpx.TransportError:
                time.sleep(0.1)   # the server is down: retry until it is back


def _ws_events(url: str, query_id: int, after: int) -> list[tuple[int, dict]]:
    """Everything after `after` through the WebSocket, until the stream goes quiet."""
    from websockets.sync.client import connect
    out = []
    ws_url = url.replace("http://", "ws://") + f"/v1/queries/{query_id}/ws?after={after}"
    with connect(ws_url) as ws:
        while True:
            try:
                message = json.loads(ws.recv(timeout=2))
            except TimeoutError:
                return out
            if message["event"] == "progress":  # sent only once nothing was left to send
                return out
            out.append((message["id"], message["data"]))


def _post(client: httpx.Client, url: str, body: str, key: str) -> dict:
    r = client.post(url + "/v1/batches", content=body, timeout=60,
                    headers={"content-type": "text/plain", "Idempotency-Key": key})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("victim", ["server", "writer"])
def test_kill_restart_loses_nothing_and_duplicates_nothing(tmp_path, victim):
    """SIGKILL the server, or its storage writer process (the server then exits: the outcome
    of the batch in flight is unknown), in the middle of the stream; restart."""
    updates = read_updates(DEMO / "updates.txt")
    lines = (DEMO / "updates.txt").read_text().splitlines()
    bodies = ["\n".join(lines[i:i + BATCH_SIZE]) + "\n" for i in range(0, len(lines), BATCH_SIZE)]
    assert len(updates) == len(lines)

    # What `motifstream match` says for the same graph, queries and batches.
    cli = subprocess.run(
        [sys.executable, "-m", "service.cli", "match", "--graph", str(DEMO / "graph.txt"),
         *[a for q in QUERIES for a in ("--query", str(DEMO / q))],
         "--updates", str(DEMO / "updates.txt"), "--batch-size", str(BATCH_SIZE),
         "--backend", "cpu", "-q"], capture_output=True, text=True, check=True)
    expected = {}
    for record in map(json.loads, cli.stdout.splitlines()):
        if "batch" in record:
            expected[record["batch"] + 1, Path(record["query"]).name] = (
                record["positive"], record["negative"])

    data, log = tmp_path / "data", tmp_path / "server.log"
    server = Server(data, log)
    acked: dict[int, dict] = {}
    with httpx.Client() as client:
        ids = {}
        for q in QUERIES:
            r = client.post(server.url + "/v1/queries", content=(DEMO / q).read_text(),
                            params={"name": q}, headers={"content-type": "text/plain"})
            assert r.status_code == 201, r.text
            ids[q] = r.json()["id"]
        follower = SseFollower(ids["triangle.graph"])
        follower.url = server.url
        follower.start()
        for i, body in enumerate(bodies[:KILL_AFTER]):
            acked[i + 1] = _post(client, server.url, body, f"b{i}")
        # One more in flight while the process dies: it may or may not have committed.
        inflight = threading.Thread(target=lambda: _try_post(server.url, bodies[KILL_AFTER],
                                                             f"b{KILL_AFTER}"), daemon=True)
        inflight.start()
        time.sleep(0.05)
        if victim == "server":
            server.kill()
        else:
            server.kill_writer()
        inflight.join()

        server = Server(data, log)
        follower.url = server.url
        try:
            # Retried with the same keys: an already-committed batch is not applied twice.
            for i, body in enumerate(bodies[KILL_AFTER:], start=KILL_AFTER):
                acked[i + 1] = _post(client, server.url, body, f"b{i}")
            graph = client.get(server.url + "/v1/graph").json()
            assert graph["batches"] == len(bodies)
            for seq, response in acked.items():
                assert response["batch"] == seq
                for q, qid in ids.items():
                    result = response["results"][str(qid)]
                    assert (result["positive"], result["negative"]) == expected[seq, q]
            # The result logs hold exactly the nonzero batches, once each.
            for q, qid in ids.items():
                r = client.get(f"{server.url}/v1/queries/{qid}/results",
                               params={"after": 0, "limit": 10000}).json()
                logged = {e["id"]: (e["data"]["positive"], e["data"]["negative"])
                          for e in r["events"]}
                assert len(logged) == len(r["events"])
                assert logged == {seq: pn for (seq, name), pn in expected.items()
                                  if name == q and pn != (0, 0)}
            triangle = ids["triangle.graph"]
            wanted = [(seq, pn) for (seq, name), pn in sorted(expected.items())
                      if name == "triangle.graph" and pn != (0, 0)]
            # The SSE follower saw every event once, across the kill and restart.
            deadline = time.monotonic() + 30
            while len(follower.events) < len(wanted) and time.monotonic() < deadline:
                time.sleep(0.05)
            follower.stop.set()
            seen = [(seq, (d["positive"], d["negative"])) for seq, d in follower.events]
            assert seen == wanted
            # A WebSocket resuming from the middle gets exactly the rest.
            middle = wanted[len(wanted) // 2][0]
            ws = [(seq, (d["positive"], d["negative"]))
                  for seq, d in _ws_events(server.url, triangle, middle)]
            assert ws == [w for w in wanted if w[0] > middle]
        finally:
            server.stop()


def _try_post(url: str, body: str, key: str) -> None:
    try:
        httpx.post(url + "/v1/batches", content=body, timeout=30,
                   headers={"content-type": "text/plain", "Idempotency-Key": key})
    except httpx.TransportError:
        pass


def test_server_module_runs_as_a_program():
    # The e2e test starts the server as `python -m service.cli`; keep that entry point.
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--help"],
                         capture_output=True, text=True, env=env, check=True)
    assert "--data-dir" in out.stdout


def test_sigterm_ends_open_streams_and_the_server_promptly(tmp_path):
    """uvicorn waits for open connections before the lifespan shutdown; the server ends the
    result streams first, so a connected SSE client gets a last `shutdown` event and the
    process exits well within the graceful-shutdown timeout."""
    server = Server(tmp_path / "data", tmp_path / "server.log")
    try:
        r = httpx.post(server.url + "/v1/queries", content=(DEMO / "triangle.graph").read_text(),
                       headers={"content-type": "text/plain"})
        qid = r.json()["id"]
        last_event, opened = [], threading.Event()

        def follow():
            with httpx.stream("GET", f"{server.url}/v1/queries/{qid}/events",
                              timeout=httpx.Timeout(5, read=30)) as stream:
                opened.set()
                for line in stream.iter_lines():
                    if line.startswith("event:"):
                        last_event.append(line[6:].strip())
        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        assert opened.wait(30)
        time.sleep(0.2)   # the subscription is registered
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=30)
        assert time.monotonic() - t0 < 8, "shutdown waited for the open stream"
        follower.join(timeout=10)
        assert last_event[-1:] == ["shutdown"]
        # uvicorn re-raises the signal once its graceful shutdown is done.
        assert server.proc.returncode in (0, -signal.SIGTERM)
        # The lifespan's shutdown ran: the store closed, and SQLite removed its WAL file.
        assert (tmp_path / "data" / "store.db").exists()
        assert not (tmp_path / "data" / "store.db-wal").exists()
    finally:
        if server.proc.poll() is None:
            server.kill()
        else:
            server._log.close()
