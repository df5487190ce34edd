"""Subscriber pressure on the real service: ingest rate, p99 batch latency and server memory
with and without clients that never read, and a well-behaved follower's events beside them.

Starts `motifstream serve` (CPU executor, loopback) on a small random graph with two standing
queries (`edge`: every inserted 0-1 edge, delivered as matches, so nearly every batch is an
event; `triangle`: counts), follows `edge` over SSE, and posts batches (8 new vertices with
an edge each, deleting the previous batch's) from one keep-alive connection, as fast as they
are acknowledged.  Then:

  1. baseline: ingest for --seconds without pressure;
  2. pressure: opens --sse SSE and --ws WebSocket subscriptions that send their request and
     never read (raw sockets with a --rcvbuf receive buffer, so the server's sends back up),
     and --idle keep-alive connections that sent one request and sit idle (reopened when the
     server closes them at its keep-alive timeout, so that --idle are open all along); ingest
     for --settle seconds (reported apart: until their sockets fill, the stalled clients are
     written every event), then for --seconds again, then closes them;
  3. --rounds times over, on the same server (alternating keeps the machine's drift and its
     other tenants out of the comparison; the medians are reported).

Each phase reports batches/s, p50/p99 latency at the client, the server's CPU time per batch
(every thread of the server process; steadier than the rate where the machine is shared)
and the server's RSS (VmRSS of
the server process, sampled every 50 ms): growth is a pressure phase's peak less the RSS
before its clients opened, the largest over the rounds.  At the end the follower must hold
every event of the `edge` query's result log once, in order, and the stalled subscriptions
cut by then are counted (the server's own subscriber count).

    python -m benchmarks.pressure [--sse 50] [--ws 20] [--idle 500] [--seconds 20]
        [--settle 5] [--rounds 3] [--env NAME=VALUE ...] [--json F]

tests/service/test_pressure.py drives the same pieces at small scale.
"""
from __future__ import annotations

import argparse
import base64
import datetime
import http.client
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.service_bench import RawClient

REPO = Path(__file__).resolve().parents[1]

EDGE_QUERY = {"name": "edge", "deliver": "matches", "pattern": {
    "vertices": [{"id": 0, "label": 0}, {"id": 1, "label": 1}],
    "edges": [{"source": 0, "target": 1}]}}
TRIANGLE_QUERY = {"name": "triangle", "pattern": {
    "vertices": [{"id": 0, "label": 0}, {"id": 1, "label": 1}, {"id": 2, "label": 2}],
    "edges": [{"source": 0, "target": 1}, {"source": 1, "target": 2},
              {"source": 0, "target": 2}]}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_graph(path: Path, vertices: int, edges: int, seed: int = 0) -> list[int]:
    """A random graph file with labels 0..2 and no edge labels; the vertices' labels."""
    rng = random.Random(seed)
    labels = [rng.randrange(3) for _ in range(vertices)]
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < edges:
        a, b = rng.randrange(vertices), rng.randrange(vertices)
        if a != b:
            pairs.add((min(a, b), max(a, b)))
    lines = [f"t {vertices} {edges}"] + [f"v {v} {lab}" for v, lab in enumerate(labels)]
    lines += [f"e {a} {b} 0" for a, b in sorted(pairs)]
    path.write_text("\n".join(lines) + "\n")
    return labels


class Server:
    """`motifstream serve` in a child process of its own (process group), on a free port."""

    def __init__(self, data_dir: Path, graph: Path, log: Path,
                 env: dict[str, str] | None = None, ready_timeout: float = 300) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log, "ab")  # noqa: SIM115 -- closed by stop()
        environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--data-dir", str(data_dir),
             "--port", str(self.port), "--backend", "cpu", "--synchronous", "normal",
             "--graph", str(graph), "--log-level", "warning"],
            cwd=REPO, env=environment, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + ready_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: see {log}")
            try:
                # Ready on the compiled kernels (a first start is ready before, running
                # them as plain Python while they compile: not what is measured here).
                status, body = request(self.port, "GET", "/readyz")
                if status == 200 and body["kernels"] == "compiled":
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server not ready in {ready_timeout} s: see {log}")
            time.sleep(0.1)

    def rss_bytes(self) -> int:
        """The server process's resident set (not its store writer child's)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def cpu_seconds(self) -> float:
        """CPU time the server process has used, every thread (not its store writer's)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def request(port: int, method: str, path: str, body: dict | None = None,
            timeout: float = 60) -> tuple[int, dict | str]:
    """One request on a connection of its own; the JSON reply (text if not JSON)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        payload = None if body is None else json.dumps(body)
        conn.request(method, path, body=payload,
                     headers={} if body is None else {"Content-Type": "application/json"})
        response = conn.getresponse()
        text = response.read().decode()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text
    finally:
        conn.close()


def register_queries(port: int) -> dict[str, int]:
    ids = {}
    for query in (EDGE_QUERY, TRIANGLE_QUERY):
        status, reply = request(port, "POST", "/v1/queries", query)
        assert status == 201, reply
        ids[query["name"]] = reply["id"]
    return ids


def query_stats(port: int, query_id: int) -> dict:
    """The query's statistics (GET /v1/queries/{id}): subscribers, max_lag, ..."""
    status, reply = request(port, "GET", f"/v1/queries/{query_id}")
    assert status == 200, reply
    return reply["stats"]


def subscribers(port: int, query_id: int) -> int:
    """The server's count of open subscriptions to the query."""
    return query_stats(port, query_id)["subscribers"]


def logged_ids(port: int, query_id: int) -> list[int]:
    """The ids of every event in the query's result log, oldest first."""
    ids: list[int] = []
    after = None
    while True:
        path = f"/v1/queries/{query_id}/results?limit=10000"
        if after is not None:
            path += f"&after={after}"
        status, page = request(port, "GET", path)
        assert status == 200, page
        ids += [event["id"] for event in page["events"]]
        if not page["events"]:
            return ids
        after = page["next"]


class EdgeBatches:
    """JSON batch bodies over a graph whose vertices have `labels`: each adds `per_batch` new
    vertices (the first labelled 1), each joined by `fan` edges to vertices of the graph (a 1
    to 0s: `fan` new matches of the `edge` query, so every batch is an event for it), and
    deletes the vertices the previous batch added; every batch is valid and the graph keeps
    its size."""

    def __init__(self, labels: list[int], per_batch: int, seed: int = 1, fan: int = 1) -> None:
        self.rng = random.Random(seed)
        self.labels = labels
        self.per_batch = per_batch
        self.fan = fan  # edges of each new vertex (a 1 with `fan` edges is `fan` matches)
        self.zeros = [v for v, lab in enumerate(labels) if lab == 0]
        self.ones = [v for v, lab in enumerate(labels) if lab == 1]
        self.previous: list[int] = []  # the vertices the last batch added
        # New vertices take ids past the graph's: their edges never collide with its own.
        self.next_vertex = len(labels)

    def next_body(self) -> bytes:
        vertices, edges = [], []
        for i in range(self.per_batch):
            new = self.next_vertex
            self.next_vertex += 1
            label = 1 if i == 0 else self.rng.randrange(3)
            vertices.append([new, label])
            # A new vertex labelled 1 joined to 0s: `fan` new `edge` matches.
            for other in self.rng.sample(self.zeros if label == 1 else self.ones, self.fan):
                edges.append([other, new])
        body = {"insert_vertices": vertices, "insert_edges": edges,
                "delete_vertices": self.previous}
        self.previous = [vertex for vertex, _ in vertices]
        return json.dumps(body).encode()


@dataclass
class Phase:
    """One ingest phase's figures."""

    batches: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    rss_start: int = 0
    rss_peak: int = 0
    rss_end: int = 0
    cpu_seconds: float = 0.0  # the server's

    def summary(self) -> dict:
        lat = sorted(self.latencies)
        return {"batches": self.batches, "seconds": round(self.seconds, 2),
                "batches_per_s": round(self.batches / self.seconds, 1),
                "server_cpu_ms_per_batch": round(self.cpu_seconds / self.batches * 1e3, 3),
                "p50_ms": round(statistics.median(lat) * 1e3, 2),
                "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, 2),
                "rss_start_mib": round(self.rss_start / 2**20, 1),
                "rss_peak_mib": round(self.rss_peak / 2**20, 1),
                "rss_end_mib": round(self.rss_end / 2**20, 1)}


def ingest(server: Server, batches: EdgeBatches, seconds: float | None = None,
           count: int | None = None) -> Phase:
    """Post batches back to back for `seconds` (or `count` batches), sampling the server's
    RSS every 50 ms meanwhile."""
    phase = Phase(rss_start=server.rss_bytes())
    phase.rss_peak = phase.rss_start
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            phase.rss_peak = max(phase.rss_peak, server.rss_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    client = RawClient(server.port)
    cpu_start = server.cpu_seconds()
    start = time.perf_counter()
    try:
        while True:
            now = time.perf_counter()
            if (seconds is not None and now - start >= seconds) or phase.batches == count:
                break
            status, reply = client.request("POST", "/v1/batches", batches.next_body())
            if status != 200:
                raise RuntimeError(f"batch refused: {status} {reply[:300]!r}")
            phase.latencies.append(time.perf_counter() - now)
            phase.batches += 1
        phase.seconds = time.perf_counter() - start
        phase.cpu_seconds = server.cpu_seconds() - cpu_start
    finally:
        client.close()
        done.set()
        sampler.join()
    phase.rss_end = server.rss_bytes()
    phase.rss_peak = max(phase.rss_peak, phase.rss_end)
    return phase


def stalled_socket(port: int, rcvbuf: int) -> socket.socket:
    """A connected socket with a small receive buffer that will never be read."""
    sock = socket.socket()
    # Set before connecting: the window the server sees is sized from it.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    return sock


def stalled_sse(port: int, query_id: int, rcvbuf: int, last_event_id: int | None = None
                ) -> socket.socket:
    """An SSE subscription that sent its request and reads nothing."""
    sock = stalled_socket(port, rcvbuf)
    resume = b"" if last_event_id is None else b"Last-Event-ID: %d\r\n" % last_event_id
    # Connection: close: when the stream ends, the server closes the connection.
    sock.sendall(b"GET /v1/queries/%d/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Accept: text/event-stream\r\nConnection: close\r\n%s\r\n"
                 % (query_id, resume))
    return sock


def stalled_ws(port: int, query_id: int, rcvbuf: int) -> socket.socket:
    """A WebSocket subscription that sent its handshake and reads nothing."""
    sock = stalled_socket(port, rcvbuf)
    key = base64.b64encode(os.urandom(16))
    sock.sendall(b"GET /v1/queries/%d/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                 b"Sec-WebSocket-Version: 13\r\n\r\n" % (query_id, key))
    return sock


def read_all(sock: socket.socket, complete=None, timeout: float = 10.0) -> bytes:
    """What the socket yields until the server closes it, `complete(data)` holds, or nothing
    came for `timeout` seconds."""
    sock.settimeout(timeout)
    data = b""
    while complete is None or not complete(data):
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
    return data


def sse_events(raw: bytes) -> list[tuple[str, str, int | None]]:
    """(event, data, id) of each event in a raw HTTP/1.1 chunked text/event-stream reply."""
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    text = bytearray()
    while body:     # de-chunk; a partial last chunk is kept as far as it goes
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        text += rest[:size]
        body = rest[size + 2:]
    events = []
    for block in bytes(text).decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines()
                      if ": " in line and not line.startswith(":"))
        if "event" in fields:
            events.append((fields["event"], fields["data"],
                           int(fields["id"]) if "id" in fields else None))
    return events


def ws_messages(raw: bytes) -> tuple[list[dict], int | None]:
    """The text messages of a raw server-side WebSocket stream (after the 101 handshake), and
    the close code if a close frame came."""
    head, _, data = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head[:200]
    messages, close_code = [], None
    while len(data) >= 2:
        opcode, length = data[0] & 0x0F, data[1] & 0x7F
        offset = 2
        if length == 126:
            length, offset = int.from_bytes(data[2:4], "big"), 4
        elif length == 127:
            length, offset = int.from_bytes(data[2:10], "big"), 10
        if len(data) < offset + length:
            break   # a frame cut short
        payload, data = data[offset:offset + length], data[offset + length:]
        if opcode == 0x1:
            messages.append(json.loads(payload))
        elif opcode == 0x8:
            close_code = int.from_bytes(payload[:2], "big")
            break
    return messages, close_code


class IdleConnections(threading.Thread):
    """`count` keep-alive connections that each sent one GET /healthz and sit idle; one the
    server closes (its keep-alive timeout) is opened again, so `count` stay open."""

    def __init__(self, port: int, count: int) -> None:
        super().__init__(daemon=True)
        self.port, self.count = port, count
        self.reopened = 0
        self.stop = threading.Event()
        self.sockets: list[socket.socket] = []

    def _open(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        return sock

    def run(self) -> None:
        import selectors
        selector = selectors.DefaultSelector()
        for _ in range(self.count):
            sock = self._open()
            self.sockets.append(sock)
            selector.register(sock, selectors.EVENT_READ)
        while not self.stop.is_set():
            for key, _ in selector.select(timeout=0.2):
                sock = key.fileobj
                try:
                    data = sock.recv(1 << 16)   # the /healthz reply, or the close
                except OSError:
                    data = b""
                if data:
                    continue
                selector.unregister(sock)
                sock.close()
                self.sockets.remove(sock)
                fresh = self._open()
                self.sockets.append(fresh)
                selector.register(fresh, selectors.EVENT_READ)
                self.reopened += 1
        for sock in self.sockets:
            sock.close()


class SseFollower(threading.Thread):
    """Follows a query's SSE stream, resuming with Last-Event-ID whenever it ends (a cut, a
    restart); keeps every batch event's id and every last event."""

    def __init__(self, port: int, query_id: int) -> None:
        super().__init__(daemon=True)
        self.port, self.query_id = port, query_id
        self.ids: list[int] = []
        self.last_events: list[tuple[str, str]] = []
        self.stop = threading.Event()
        self.last_id: int | None = None

    def run(self) -> None:
        while not self.stop.is_set():
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            headers = {} if self.last_id is None else {"Last-Event-ID": str(self.last_id)}
            conn.request("GET", f"/v1/queries/{self.query_id}/events", headers=headers)
            response = conn.getresponse()
            assert response.status == 200, response.status
            fields: dict[str, str] = {}
            while not self.stop.is_set():
                line = response.readline().decode()
                if not line:
                    break
                line = line.rstrip("\n")
                if line:
                    name, _, value = line.partition(": ")
                    fields[name] = value
                    continue
                event = fields.get("event")
                if "id" in fields:
                    self.last_id = int(fields["id"])
                if event == "batch":
                    self.ids.append(int(fields["id"]))
                elif event not in (None, "progress"):
                    self.last_events.append((event, fields["data"]))
                fields = {}
            conn.close()

    def wait_for(self, last_id: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.last_id is not None and self.last_id >= last_id:
                return True
            time.sleep(0.05)
        return False


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


# ---------------------------------------------------------------------------- the run

def run(sse: int, ws: int, idle: int, seconds: float, env: dict[str, str], work: Path,
        rounds: int = 3, settle: float = 5.0, vertices: int = 2000, edges: int = 6000,
        per_batch: int = 8, rcvbuf: int = 4096) -> dict:
    """`rounds` times: a baseline phase, then a pressure phase with fresh pressure clients
    (closed after it); the figures of each and their medians.  Alternating the phases keeps
    the machine's drift (and its other tenants) out of the comparison."""
    if min(seconds, settle) <= 0 or rounds < 1:
        raise ValueError(f"seconds and settle must be > 0 and rounds >= 1, got {seconds}, "
                         f"{settle}, {rounds}")
    graph = work / "graph.txt"
    labels = write_graph(graph, vertices, edges)
    server = Server(work / "data", graph, work / "server.log", env)
    try:
        ids = register_queries(server.port)
        follower = SseFollower(server.port, ids["edge"])
        follower.start()
        wait_until(lambda: subscribers(server.port, ids["edge"]) == 1, 30, "follower")
        batches = EdgeBatches(labels, per_batch)
        ingest(server, batches, seconds=min(5.0, seconds))     # warm-up, not reported
        figures: dict = {"rounds": []}
        for _ in range(rounds):
            baseline = ingest(server, batches, seconds=seconds)
            figures["rounds"].append(
                {"baseline": baseline.summary(),
                 **_pressure_phase(server, ids, batches, sse, ws, idle, seconds, settle,
                                   rcvbuf)})
        last = logged_ids(server.port, ids["edge"])
        caught_up = follower.wait_for(last[-1], 60)
        follower.stop.set()
        figures["follower"] = {"events": len(follower.ids), "log_events": len(last),
                               "caught_up": caught_up,
                               "exactly_once_in_order": follower.ids == last,
                               "cuts": follower.last_events}
    finally:
        server.stop()
    for phase in ("baseline", "settling", "pressure"):
        figures[phase] = {key: round(statistics.median(r[phase][key]
                                                       for r in figures["rounds"]), 2)
                          for key in ("batches_per_s", "p50_ms", "p99_ms",
                                      "server_cpu_ms_per_batch")}
    figures["rate_change_pct"] = round(100 * (figures["pressure"]["batches_per_s"]
                                              / figures["baseline"]["batches_per_s"] - 1), 1)
    figures["p99_change_pct"] = round(100 * (figures["pressure"]["p99_ms"]
                                             / figures["baseline"]["p99_ms"] - 1), 1)
    figures["cpu_change_pct"] = round(100 * (figures["pressure"]["server_cpu_ms_per_batch"]
                                             / figures["baseline"]["server_cpu_ms_per_batch"]
                                             - 1), 1)
    figures["rss_growth_mib"] = max(r["rss_growth_mib"] for r in figures["rounds"])
    figures.update(stalled_sse=sse, stalled_ws=ws, idle=idle, seconds=seconds, settle=settle)
    return figures


def _pressure_phase(server: Server, ids: dict[str, int], batches: EdgeBatches, sse: int,
                    ws: int, idle: int, seconds: float, settle: float, rcvbuf: int) -> dict:
    """Ingest with the pressure clients open (half of the stalled ones on each query)."""
    rss_before = server.rss_bytes()
    stalled = [stalled_sse(server.port, ids["edge" if i % 2 == 0 else "triangle"], rcvbuf)
               for i in range(sse)]
    stalled += [stalled_ws(server.port, ids["edge" if i % 2 == 0 else "triangle"], rcvbuf)
                for i in range(ws)]
    idlers = IdleConnections(server.port, idle)
    idlers.start()
    try:
        on_edge = 1 + (sse + 1) // 2 + (ws + 1) // 2     # with the follower
        wait_until(lambda: subscribers(server.port, ids["edge"]) == on_edge, 60,
                   "stalled subscriptions")
        wait_until(lambda: len(idlers.sockets) == idle, 60, "idle connections")
        # Until their sockets fill, the stalled clients are written every event like any
        # other: their first seconds are reported apart.
        settling = ingest(server, batches, seconds=settle)
        pressure = ingest(server, batches, seconds=seconds)
        still_open = {name: subscribers(server.port, qid) for name, qid in ids.items()}
    finally:
        idlers.stop.set()
        idlers.join()
        for sock in stalled:
            sock.close()
    # Gone from the server too before the next baseline.
    wait_until(lambda: subscribers(server.port, ids["edge"]) == 1, 60, "stalled clients gone")
    return {"settling": settling.summary(), "pressure": pressure.summary(),
            "rss_growth_mib": round((pressure.rss_peak - rss_before) / 2**20, 1),
            "subscriptions_open_at_end": still_open, "idle_reopened": idlers.reopened}


def _parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sse", type=int, default=50, help="stalled SSE subscriptions (50)")
    p.add_argument("--ws", type=int, default=20, help="stalled WebSocket subscriptions (20)")
    p.add_argument("--idle", type=int, default=500, help="idle keep-alive connections (500)")
    p.add_argument("--seconds", type=float, default=20.0, help="seconds per phase (20)")
    p.add_argument("--settle", type=float, default=5.0,
                   help="seconds of ingest after the pressure clients opened, reported apart "
                        "(until their sockets fill, stalled clients are written to) (5)")
    p.add_argument("--rounds", type=int, default=3,
                   help="baseline and pressure phases, alternating (3 of each)")
    p.add_argument("--rcvbuf", type=int, default=4096, help="stalled sockets' SO_RCVBUF")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="server settings, e.g. MOTIFSTREAM_SUBSCRIBER_STALL_SECONDS=10")
    p.add_argument("--json", type=Path, help="also write the figures here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    with tempfile.TemporaryDirectory() as tmp:
        figures = run(args.sse, args.ws, args.idle, args.seconds, env, Path(tmp),
                      rounds=args.rounds, settle=args.settle, rcvbuf=args.rcvbuf)
    figures.update(date=datetime.date.today().isoformat(), machine=platform.machine(),
                   cpus=os.cpu_count(), env=env)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    ok = (figures["follower"]["exactly_once_in_order"] and figures["follower"]["caught_up"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
