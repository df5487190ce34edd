"""Owns the chaos run: `motifstream serve` SIGKILLed at random moments under sustained mixed
ingest, and the proof that nothing acknowledged was lost, duplicated or changed.

One run: a random small graph is loaded, three standing queries registered (one delivering
its matches), a webhook points at a local receiver, and an SSE and a WebSocket follower
subscribe.  Client threads then post batches without pause -- edge inserts and deletes,
vertex adds and deletes, and about 5% batches that must be rejected whole (a self-loop, an
edge to a vertex that does not exist, a vertex added and deleted in one batch) -- each with
its own Idempotency-Key and retried with that key after any connection error until it is
answered.  Meanwhile the server's process group (the server and its storage writer child;
webhook delivery runs in the server) is SIGKILLed at random moments, or only the storage
writer (the server must then exit with status 70 by itself), and restarted on the same data
directory and port; a tenth of the restarts are killed again before they are ready; and
now and then, for 0.2-1 s, every write of the storage writer fails (its RLIMIT_FSIZE set to
0: SQLite's disk I/O error), so batches are 503s and retried.  The followers resume with
Last-Event-ID and the WebSocket's `after`.

At the end (`Run.check`): the batch numbers acknowledged are exactly 1..N, one key each; the
batch log and the idempotency keys hold exactly the acknowledged batches (their updates, in
acknowledgement order); a service that never crashed, fed the acknowledged batches in that
order, answers every batch identically (applied, ignored, every query's counts) and ends
with the same graph, result logs and query totals; both followers saw every event exactly
once; the webhook delivered every event (at least once, in order, correctly signed); and no
valid batch was refused nor any invalid one accepted.

    python -m benchmarks.chaos --kills 100 --writer-kills 10 [--write-faults 10] [--seed S]
        [--synchronous normal|full] [--json F]

tests/service/test_chaos.py runs a shorter run (about 20 kills) in CI.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import hmac
import json
import os
import platform
import random
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
EXIT_WRITER_LOST = 70   # service.main's (importing it would load the engine here)
WEBHOOK_SECRET = "chaos-webhook-secret-0123456789"
MISSING_VERTEX = 999_999_999     # never added: an edge to it rejects its batch
# The standing queries: (name, query file, deliver).  Labels 0..2, edge label 0.
QUERIES = (
    ("triangle", "v 0 0\nv 1 1\nv 2 2\ne 0 1\ne 1 2\ne 0 2\n", "counts"),
    ("path", "v 0 1\nv 1 0\nv 2 2\ne 0 1\ne 1 2\n", "matches"),
    ("square", "v 0 0\nv 1 1\nv 2 0\nv 3 1\ne 0 1\ne 1 2\ne 2 3\ne 3 0\n", "counts"),
)
# With retention (Config.retention), the path also stands windowed (Config.window).
WINDOWED = ("recent-path", "v 0 1\nv 1 0\nv 2 2\ne 0 1\ne 1 2\n", "matches")


def standing_queries(cfg: "Config") -> list[tuple[str, str, str, dict]]:
    """The queries a run registers: (name, query file, deliver, extra query parameters)."""
    queries = [(*q, {}) for q in QUERIES]
    if cfg.retention is not None:
        queries.append((*WINDOWED, {"window": cfg.window}))
    return queries
LABELS = 3


@dataclass
class Config:
    """One chaos run's knobs."""
    kills: int = 20               # SIGKILLs of the server's process group
    writer_kills: int = 2         # SIGKILLs of the storage writer child only
    seed: int = 1
    clients: int = 2              # ingest threads (each owns its own vertices)
    vertices: int = 240
    degree: float = 5.0
    max_updates: int = 8          # per batch, at least 1
    reject_rate: float = 0.05
    repeat_rate: float = 0.02     # acknowledged batches posted again with their key
    up_seconds: tuple[float, float] = (0.3, 1.2)   # time between ready and the next kill
    synchronous: str = "normal"   # survives SIGKILL (not power loss), and commits faster
    snapshot_every: int = 40      # recovery from a snapshot plus the batch log after it
    webhook: bool = True
    startup_kill_rate: float = 0.1   # after a group kill: the restart killed before ready
    write_faults: int = 2         # spells of failing writes (the server lives on)
    fault_seconds: tuple[float, float] = (0.2, 1.0)
    ready_timeout: float = 240.0  # a first start on a cold Numba cache compiles
    # Event times on the inserted edges (each client's clock, some late), edges expiring
    # this far behind the newest time (`serve --retention`), and a windowed query; None:
    # untimed, nothing expires.
    retention: int | None = None
    window: int = 12


# ------------------------------------------------------------------------ the workload


class Partition:
    """One client's share of the graph (its own vertex ids), as acknowledged so far: the
    batches it draws are valid against it, or invalid on purpose."""

    def __init__(self, index: int, vertices: dict[int, int], edges: set[tuple[int, int]]):
        self.index = index
        self.labels = dict(vertices)
        self.adjacent: dict[int, set[int]] = {v: set() for v in vertices}
        for u, v in edges:
            self.adjacent[u].add(v)
            self.adjacent[v].add(u)
        self.next_id = 1_000_000 * (index + 1)
        self._pending_next_id = self.next_id      # after the batch last drawn valid
        self.clock = 0          # event times drawn so far (timed runs), never going back

    def edges(self) -> set[tuple[int, int]]:
        return {(min(u, v), max(u, v)) for u, n in self.adjacent.items() for v in n}

    def draw(self, rng: random.Random, max_updates: int, reject: bool,
             timed: bool = False) -> tuple[str, list]:
        """A batch as update-stream text, and its updates as applied (for `apply`); with
        `timed`, each edge insert carries an event time (the partition's clock, now and
        then a late one).  The partition does not follow expiry: an edge it still holds
        may be gone, so its deletion is a no-op and its insertion new, both valid."""
        ops: list[tuple] = []
        touched_v: set[int] = set()
        touched_e: set[tuple[int, int]] = set()
        added: dict[int, int] = {}
        next_id = self.next_id
        live = sorted(self.labels)
        for _ in range(rng.randint(1, max_updates)):
            kind = rng.random()
            if kind < 0.45 and len(live) >= 2:                      # insert an edge
                u, v = rng.sample(live + list(added), 2)
                e = (min(u, v), max(u, v))
                if e in touched_e or u in touched_v or v in touched_v:
                    continue
                if v in self.adjacent.get(u, ()) and rng.random() > 0.2:
                    continue            # now and then an existing edge: ignored, counted
                ops.append(("e", u, v))
                touched_e.add(e)
            elif kind < 0.75:                                       # delete an edge
                u = rng.choice(live) if live else None
                if u is None or not self.adjacent[u]:
                    continue
                v = rng.choice(sorted(self.adjacent[u]))
                e = (min(u, v), max(u, v))
                if e in touched_e or u in touched_v or v in touched_v:
                    continue
                ops.append(("-e", u, v))
                touched_e.add(e)
            elif kind < 0.95:                            # add a vertex, with an edge
                vid, next_id = next_id, next_id + 1
                added[vid] = rng.randrange(LABELS)
                ops.append(("v", vid, added[vid]))
                u = rng.choice(live)
                if u not in touched_v:
                    ops.append(("e", vid, u))
                    touched_e.add((min(u, vid), max(u, vid)))
            elif live:                                              # delete a vertex
                v = rng.choice(live)
                if v in touched_v or any(v in e for e in touched_e):
                    continue
                ops.append(("-v", v))
                touched_v.add(v)
        if not ops:
            vid, next_id = next_id, next_id + 1
            added[vid] = rng.randrange(LABELS)
            ops.append(("v", vid, added[vid]))
        if reject:
            u = rng.choice(live)
            ops.insert(rng.randrange(len(ops) + 1), rng.choice([
                ("e", u, u),                                   # a self-loop
                ("e", u, MISSING_VERTEX),                      # an endpoint that does not exist
                ("v+-v", next_id),                             # added and deleted together
            ]))
        lines = []
        for op in ops:
            if op[0] == "e":
                time = ""
                if timed:
                    self.clock += rng.randint(0, 2)
                    time = f" {max(0, self.clock - rng.choice((0, 0, 0, 1, 6)))}"
                lines.append(f"e {op[1]} {op[2]} 0{time}")
            elif op[0] == "-e":
                lines.append(f"-e {op[1]} {op[2]}")
            elif op[0] == "v":
                lines.append(f"v {op[1]} {op[2]}")
            elif op[0] == "-v":
                lines.append(f"-v {op[1]}")
            else:
                lines += [f"v {op[1]} 1", f"-v {op[1]}"]
        if not reject:
            self._pending_next_id = next_id
        return "\n".join(lines) + "\n", ops

    def apply(self, ops: list) -> None:
        """The batch was acknowledged: the partition as the service now has it."""
        for op in ops:
            if op[0] == "v":
                self.labels[op[1]] = op[2]
                self.adjacent[op[1]] = set()
        for op in ops:
            if op[0] == "e":
                self.adjacent[op[1]].add(op[2])
                self.adjacent[op[2]].add(op[1])
            elif op[0] == "-e":
                self.adjacent[op[1]].discard(op[2])
                self.adjacent[op[2]].discard(op[1])
            elif op[0] == "-v":
                for n in self.adjacent.pop(op[1]):
                    self.adjacent[n].discard(op[1])
                del self.labels[op[1]]
        self.next_id = self._pending_next_id


def random_graph(cfg: Config) -> tuple[str, list[Partition]]:
    """The start graph as a graph file, cut into the clients' partitions (no edge between
    two partitions, so each client's batches commute with the others')."""
    rng = random.Random(cfg.seed)
    labels = {v: rng.randrange(LABELS) for v in range(cfg.vertices)}
    edges: set[tuple[int, int]] = set()
    want = int(cfg.vertices * cfg.degree / 2)
    while len(edges) < want:
        u, v = rng.randrange(cfg.vertices), rng.randrange(cfg.vertices)
        if u != v and u % cfg.clients == v % cfg.clients:
            edges.add((min(u, v), max(u, v)))
    text = "".join(f"v {v} {lab}\n" for v, lab in labels.items())
    text += "".join(f"e {u} {v} 0\n" for u, v in sorted(edges))
    parts = [Partition(c, {v: lab for v, lab in labels.items() if v % cfg.clients == c},
                       {e for e in edges if e[0] % cfg.clients == c})
             for c in range(cfg.clients)]
    return text, parts


# ------------------------------------------------------------------------ the server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`motifstream serve` as its own process group, restartable on the same port."""

    def __init__(self, data_dir: Path, graph: Path, log: Path, cfg: Config,
                 port: int | None = None) -> None:
        self.data_dir, self.graph, self.log, self.cfg = data_dir, graph, log, cfg
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.starts: list[float] = []      # seconds from spawn to /readyz 200

    def start(self, kill_at: float | None = None) -> bool:
        """Start and wait for /readyz; with `kill_at`, SIGKILL the group that many
        seconds after the spawn if it is not ready by then (recovery cut short: False)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        env.update(MOTIFSTREAM_HEARTBEAT_SECONDS="0.2", MOTIFSTREAM_WEBHOOK_BACKOFF_SECONDS="0.05",
                   MOTIFSTREAM_WEBHOOK_BACKOFF_MAX_SECONDS="0.5",
                   MOTIFSTREAM_WEBHOOK_ATTEMPTS="1000", MOTIFSTREAM_WEBHOOK_TIMEOUT_SECONDS="5")
        t0 = time.monotonic()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "serve", "--data-dir", str(self.data_dir),
                 "--port", str(self.port), "--backend", "cpu", "--synchronous",
                 self.cfg.synchronous, "--graph", str(self.graph), "--snapshot-every",
                 str(self.cfg.snapshot_every), "--log-level", "warning",
                 *(["--retention", str(self.cfg.retention)]
                   if self.cfg.retention is not None else [])],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)     # its own process group, the writer child in it
        deadline = t0 + self.cfg.ready_timeout
        while True:
            if self.proc.poll() is not None:
                raise ChaosFailure(f"the server exited with {self.proc.returncode} while "
                                   f"starting: see {self.log}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise ChaosFailure(f"the server was not ready in {self.cfg.ready_timeout} s")
            if kill_at is not None and time.monotonic() - t0 > kill_at:
                self.kill_group()
                return False
            time.sleep(0.02)
        self.starts.append(time.monotonic() - t0)
        return True

    def writer_pid(self) -> int:
        """The storage writer child (storage/writer_process.py) of the running server."""
        assert self.proc is not None
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            for pid in (task / "children").read_text().split():
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"storage.writer_process" in cmdline:
                    return int(pid)
        raise ChaosFailure("the server has no storage writer process")

    def refuse_writes(self, seconds: float) -> None:
        """For `seconds`, every write of the storage writer fails (RLIMIT_FSIZE 0: EFBIG,
        SQLite's disk I/O error), as on a failing disk: batches are 503s meanwhile."""
        pid = self.writer_pid()
        limits = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, limits[1]))
        try:
            time.sleep(seconds)
        finally:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, limits)

    def kill_group(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def kill_writer(self) -> None:
        """SIGKILL only the writer; the server must notice and exit with status 70."""
        assert self.proc is not None
        os.kill(self.writer_pid(), signal.SIGKILL)
        try:
            status = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill_group()
            raise ChaosFailure("the server lived on for 30 s after its writer was killed")
        if status != EXIT_WRITER_LOST:
            raise ChaosFailure(f"the server exited with {status} after its writer was "
                               f"killed, not {EXIT_WRITER_LOST}")
        # What is left of the group (nothing, normally) goes too.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill_group()


class ChaosFailure(AssertionError):
    """The run found something acknowledged lost, duplicated or changed (or could not run)."""


# ------------------------------------------------------------------------ the clients


@dataclass
class Posted:
    """One batch and every answer it got."""
    key: str
    body: str
    valid: bool
    client: int
    # (status, body, whether Idempotent-Replayed: the stored answer of an earlier try)
    answers: list[tuple[int, str, bool]] = field(default_factory=list)
    retries: int = 0
    repeated: bool = False    # posted again after its acknowledgement


class Ingest(threading.Thread):
    """Posts one partition's batches one after another, each until answered."""

    def __init__(self, run: Run, part: Partition, seed: int) -> None:
        super().__init__(name=f"chaos-client-{part.index}", daemon=True)
        self.run_, self.part, self.rng = run, part, random.Random(seed)
        self.posted: list[Posted] = []
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # noqa: BLE001 -- reported by Run.check
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def _loop(self) -> None:
        cfg = self.run_.cfg
        with httpx.Client(timeout=httpx.Timeout(60, connect=2)) as client:
            n = 0
            while not self.run_.stop_ingest.is_set():
                reject = self.rng.random() < cfg.reject_rate
                body, ops = self.part.draw(self.rng, cfg.max_updates, reject,
                                           timed=cfg.retention is not None)
                p = Posted(f"c{self.part.index}-{n}", body, not reject, self.part.index)
                n += 1
                self.posted.append(p)
                status = self._post(client, p)
                if status == 200 and p.valid:
                    self.part.apply(ops)
                    if self.rng.random() < cfg.repeat_rate:
                        # Posted again on purpose (maybe after a restart): the stored answer.
                        p.repeated = True
                        status = self._post(client, p)
                        if status != 200 or not p.answers[-1][2]:
                            self.errors.append(f"batch {p.key} posted again was answered "
                                               f"{status}, not replayed: {p.answers[-1][1]}")
                            return
                elif status == 200 or (status == 422) == p.valid:
                    self.errors.append(f"batch {p.key} ({'valid' if p.valid else 'invalid'}) "
                                       f"answered {status}: {p.answers[-1][1][:300]}\n{body}")
                    return

    def _post(self, client: httpx.Client, p: Posted) -> int:
        url = self.run_.server.url + "/v1/batches"
        headers = {"content-type": "text/plain", "Idempotency-Key": p.key}
        while True:
            try:
                r = client.post(url, content=p.body, headers=headers)
            except httpx.TransportError:
                p.retries += 1
                time.sleep(0.02)        # the server is down or restarting: same key again
                continue
            p.answers.append((r.status_code, r.text,
                              r.headers.get("idempotent-replayed") == "true"))
            if r.status_code in (409, 503):     # in flight, or not durable: retry
                p.retries += 1
                time.sleep(0.02)
                continue
            return r.status_code


# ------------------------------------------------------------------------ the followers


class SseFollower(threading.Thread):
    """One query's SSE stream, resumed with Last-Event-ID (the last batch or progress id)."""

    def __init__(self, run: Run, query_id: int) -> None:
        super().__init__(name="chaos-sse", daemon=True)
        self.run_, self.query_id = run, query_id
        self.events: list[tuple[int, dict]] = []
        self.through = 0
        self.cursor: int | None = None
        self.reconnects = 0
        self.anomalies: list[str] = []

    def run(self) -> None:
        while not self.run_.stop_followers.is_set():
            headers = {} if self.cursor is None else {"Last-Event-ID": str(self.cursor)}
            try:
                with httpx.stream("GET", f"{self.run_.server.url}/v1/queries/{self.query_id}"
                                  "/events", headers=headers,
                                  timeout=httpx.Timeout(5, read=10)) as r:
                    if r.status_code != 200:
                        self.anomalies.append(f"SSE answered {r.status_code}")
                        time.sleep(0.1)
                        continue
                    fields: dict[str, str] = {}
                    for line in r.iter_lines():
                        if self.run_.stop_followers.is_set():
                            return
                        if line:
                            name, _, value = line.partition(":")
                            fields[name] = value.removeprefix(" ")
                            continue
                        self._event(fields)
                        fields = {}
            except (httpx.TransportError, httpx.StreamError):
                pass
            except Exception as exc:  # noqa: BLE001 -- reported by Run.check
                self.anomalies.append(f"{type(exc).__name__}: {exc}")
            self.reconnects += 1
            time.sleep(0.05)

    def _event(self, fields: dict[str, str]) -> None:
        kind = fields.get("event")
        if kind == "batch":
            seq = int(fields["id"])
            self.events.append((seq, json.loads(fields["data"])))
            self.cursor = seq
        elif kind == "progress":
            self.through = max(self.through, json.loads(fields["data"])["through"])
            self.cursor = int(fields["id"])
        elif kind is not None and kind != "shutdown":
            self.anomalies.append(f"SSE event {kind}: {fields.get('data')}")


class WsFollower(threading.Thread):
    """One query's WebSocket, resumed with ?after= the last id seen."""

    def __init__(self, run: Run, query_id: int) -> None:
        super().__init__(name="chaos-ws", daemon=True)
        self.run_, self.query_id = run, query_id
        self.events: list[tuple[int, dict]] = []
        self.through = 0
        self.cursor = 0
        self.reconnects = 0
        self.anomalies: list[str] = []

    def run(self) -> None:
        from websockets.exceptions import ConnectionClosed, WebSocketException
        from websockets.sync.client import connect
        while not self.run_.stop_followers.is_set():
            url = (self.run_.server.url.replace("http://", "ws://")
                   + f"/v1/queries/{self.query_id}/ws?after={self.cursor}")
            try:
                with connect(url, open_timeout=5, close_timeout=1) as ws:
                    while not self.run_.stop_followers.is_set():
                        try:
                            message = json.loads(ws.recv(timeout=1))
                        except TimeoutError:
                            continue
                        if message["event"] == "batch":
                            self.events.append((message["id"], message["data"]))
                        elif message["event"] == "progress":
                            self.through = max(self.through, message["data"]["through"])
                        else:
                            self.anomalies.append(f"WebSocket event {message}")
                        self.cursor = message["id"]
            except ConnectionClosed as exc:
                # 1006 (no close frame): the server died; 1012: it restarts.  A 4xxx code
                # (a cursor refused, the events gone) must not happen.
                if exc.rcvd is not None and exc.rcvd.code >= 4000:
                    self.anomalies.append(f"WebSocket closed with {exc.rcvd.code}: "
                                          f"{exc.rcvd.reason}")
            except (OSError, WebSocketException):
                pass
            except Exception as exc:  # noqa: BLE001 -- reported by Run.check
                self.anomalies.append(f"{type(exc).__name__}: {exc}")
            self.reconnects += 1
            time.sleep(0.05)


class Receiver:
    """A webhook receiver on 127.0.0.1 that records every delivery."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[int, int, bytes, bool]] = []   # query, batch, body, signed
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers["Content-Length"])
                body = self.rfile.read(size)
                if len(body) < size:    # the sender died mid-request: it got no answer
                    return
                mac = "sha256=" + hmac.new(WEBHOOK_SECRET.encode(), body,
                                           hashlib.sha256).hexdigest()
                signed = hmac.compare_digest(mac, self.headers.get("X-Motifstream-Signature", ""))
                with receiver.lock:
                    receiver.deliveries.append((int(self.headers["X-Motifstream-Query"]),
                                                int(self.headers["X-Motifstream-Batch"]), body,
                                                signed))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/hook"
        threading.Thread(target=self.http.serve_forever, name="chaos-webhook",
                         daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


# ------------------------------------------------------------------------ the run


@dataclass
class Report:
    """What a run did and found (docs/benchmarks.md quotes these)."""
    kills: int = 0
    writer_kills: int = 0
    startup_kills: int = 0             # extra: a restart killed before it was ready
    write_faults: int = 0              # spells of failing writes
    unavailable_answers: int = 0       # 503s (writes failing, or still recovering)
    acknowledged: int = 0
    rejected: int = 0
    retries: int = 0
    replayed_answers: int = 0          # first acknowledgements with Idempotent-Replayed
    repeats: int = 0                   # acknowledged batches posted again on purpose
    events: int = 0                    # result-log events across the queries
    expired: int = 0                   # matches retention took, over the acknowledged batches
    follower_reconnects: int = 0
    webhook_deliveries: int = 0
    webhook_redeliveries: int = 0      # at least once: an event sent again after a kill
    restart_seconds_median: float = 0.0
    restart_seconds_max: float = 0.0
    seconds: float = 0.0
    mismatches: int = 0
    lost: int = 0
    duplicates: int = 0
    gaps: int = 0
    problems: list[str] = field(default_factory=list)


class Run:
    """One chaos run in `workdir` (kept: the server's log is there)."""

    def __init__(self, cfg: Config, workdir: Path, say=lambda line: None) -> None:
        self.cfg, self.workdir, self.say = cfg, Path(workdir), say
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.graph_text, self.parts = random_graph(cfg)
        self.graph = self.workdir / "start.graph"
        self.graph.write_text(self.graph_text)
        self.server = Server(self.workdir / "data", self.graph, self.workdir / "server.log", cfg)
        self.stop_ingest = threading.Event()
        self.stop_followers = threading.Event()
        self.report = Report()
        self.query_ids: dict[str, int] = {}

    def execute(self) -> Report:
        t0 = time.monotonic()
        rng = random.Random(self.cfg.seed + 1)
        receiver = Receiver() if self.cfg.webhook else None
        self.server.start()
        self._setup(receiver)
        followers = [SseFollower(self, self.query_ids["path"]),
                     WsFollower(self, self.query_ids["path"])]
        clients = [Ingest(self, part, self.cfg.seed * 1000 + part.index) for part in self.parts]
        try:
            for thread in (*followers, *clients):
                thread.start()
            victims = (["group"] * self.cfg.kills + ["writer"] * self.cfg.writer_kills
                       + ["writes"] * self.cfg.write_faults)
            rng.shuffle(victims)
            for i, victim in enumerate(victims):
                time.sleep(rng.uniform(*self.cfg.up_seconds))
                if any(c.errors for c in clients) or not all(c.is_alive() for c in clients):
                    break
                if victim == "writes":
                    self.server.refuse_writes(rng.uniform(*self.cfg.fault_seconds))
                    self.report.write_faults += 1
                    continue
                if victim == "group":
                    self.server.kill_group()
                    self.report.kills += 1
                else:
                    self.server.kill_writer()
                    self.report.writer_kills += 1
                ready = False
                if victim == "group" and rng.random() < self.cfg.startup_kill_rate:
                    # Killed again in the middle of its recovery (or warm-up).
                    ready = self.server.start(kill_at=rng.uniform(0.1, self.server.starts[-1]))
                    self.report.startup_kills += not ready
                if not ready:
                    self.server.start()
                if (i + 1) % 10 == 0:
                    self.say(f"{i + 1} kills, {self._acknowledged(clients)} batches acknowledged")
            time.sleep(rng.uniform(*self.cfg.up_seconds))
            self.stop_ingest.set()
            for c in clients:
                c.join(timeout=120)
            self._check(clients, followers, receiver)
        finally:
            self.stop_ingest.set()
            self.stop_followers.set()
            for f in followers:
                f.join(timeout=15)
            self.server.stop()
            if receiver is not None:
                receiver.close()
            starts = sorted(self.server.starts[1:])
            if starts:
                self.report.restart_seconds_median = round(starts[len(starts) // 2], 2)
                self.report.restart_seconds_max = round(starts[-1], 2)
            self.report.seconds = round(time.monotonic() - t0, 1)
        return self.report

    def _acknowledged(self, clients: list[Ingest]) -> int:
        return sum(1 for c in clients for p in list(c.posted) if p.valid and p.answers
                   and p.answers[-1][0] == 200)

    def _setup(self, receiver: Receiver | None) -> None:
        with httpx.Client(base_url=self.server.url, timeout=30) as client:
            for name, text, deliver, extra in standing_queries(self.cfg):
                r = client.post("/v1/queries", content=text,
                                params={"name": name, "deliver": deliver, **extra},
                                headers={"content-type": "text/plain"})
                if r.status_code != 201:
                    raise ChaosFailure(f"registering {name}: {r.status_code} {r.text}")
                self.query_ids[name] = r.json()["id"]
            if receiver is not None:
                for qid in self.query_ids.values():
                    r = client.put(f"/v1/queries/{qid}/webhook",
                                   json={"url": receiver.url, "secret": WEBHOOK_SECRET})
                    if r.status_code not in (200, 201):
                        raise ChaosFailure(f"webhook of query {qid}: {r.status_code} {r.text}")

    # -------------------------------------------------------------------- the checks

    def _check(self, clients: list[Ingest], followers: list, receiver: Receiver | None) -> None:
        rep, problems = self.report, self.report.problems
        for c in clients:
            problems += c.errors
        posted = [p for c in clients for p in c.posted]
        if problems:
            raise ChaosFailure("\n".join(problems))
        unanswered = [p.key for p in posted if not p.answers]
        if unanswered:          # the loop ends only after an answer: cannot happen
            raise ChaosFailure(f"batches never answered: {unanswered}")
        acked: dict[int, Posted] = {}
        for p in posted:
            rep.retries += p.retries
            rep.unavailable_answers += sum(status == 503 for status, _, _ in p.answers)
            oks = [json.loads(text) for status, text, _ in p.answers if status == 200]
            if not p.valid:
                rep.rejected += 1
                continue
            # The first 200 replayed: the batch committed before a kill lost its answer.
            rep.replayed_answers += next(r for s, _, r in p.answers if s == 200)
            rep.repeats += p.repeated
            first = oks[0]
            if any(o != first for o in oks[1:]):
                problems.append(f"{p.key}: answered differently when posted again: {oks}")
            if first["batch"] in acked:
                rep.duplicates += 1
                problems.append(f"batch {first['batch']} acknowledged for "
                                f"{acked[first['batch']].key} and {p.key}")
            acked[first["batch"]] = p
        rep.acknowledged = len(acked)
        n = len(acked)
        for c in clients:       # one client's batches, posted one by one, in its order
            mine = [json.loads(next(t for s, t, _ in p.answers if s == 200))["batch"]
                    for p in c.posted if p.valid]
            if mine != sorted(mine):
                problems.append(f"client {c.part.index}'s batches acknowledged out of order")
        if sorted(acked) != list(range(1, n + 1)):
            problems.append(f"acknowledged batch numbers are not 1..{n}: "
                            f"missing {sorted(set(range(1, n + 1)) - set(acked))[:20]}")
        answers = {seq: _comparable(json.loads(next(t for s, t, _ in p.answers if s == 200)))
                   for seq, p in acked.items()}

        with httpx.Client(base_url=self.server.url, timeout=60) as client:
            last = client.get("/v1/graph").json()["batches"]
            if last != n:
                rep.lost += max(0, n - last)
                problems.append(f"the service holds {last} batches, {n} were acknowledged")
            state = _service_state(client, self.query_ids)
            # The followers catch up (progress says how far they are complete).
            deadline = time.monotonic() + 60
            while (any(f.through < last for f in followers)
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            wanted_hooks = {(qid, e["id"]) for qid in self.query_ids.values()
                            for e in state["events"][str(qid)]}
            while (receiver is not None and time.monotonic() < deadline
                   and not wanted_hooks <= {(q, b) for q, b, _, _ in receiver.deliveries}):
                time.sleep(0.05)
        self.stop_followers.set()
        rep.events = sum(len(e) for e in state["events"].values())

        # Followers: every event of the path query once, in order, equal to the log's.
        log = [(e["id"], e["data"]) for e in state["events"][str(self.query_ids["path"])]]
        for f in followers:
            rep.follower_reconnects += f.reconnects
            problems += [f"{type(f).__name__}: {a}" for a in f.anomalies]
            if f.through < last:
                problems.append(f"{type(f).__name__} complete through {f.through} only, of {last}")
            seen = [seq for seq, _ in f.events]
            dup = len(seen) - len(set(seen))
            missing = sorted({seq for seq, _ in log} - set(seen))
            rep.duplicates += dup
            rep.gaps += len(missing)
            if f.events != log:
                problems.append(f"{type(f).__name__}: {dup} duplicates, missing {missing[:20]}; "
                                f"first difference at {_first_difference(f.events, log)}")

        # The webhook: every event delivered (at least once), in order, signed.
        if receiver is not None:
            with receiver.lock:
                deliveries = list(receiver.deliveries)
            rep.webhook_deliveries = len(deliveries)
            by_query: dict[int, list[int]] = {}
            for qid, batch, body, signed in deliveries:
                if not signed:
                    problems.append(f"webhook delivery of batch {batch} badly signed")
                by_query.setdefault(qid, []).append(batch)
                events = {e["id"]: e["data"] for e in state["events"][str(qid)]}
                if _drop_time(json.loads(body)) != _drop_time(events.get(batch, {})):
                    problems.append(f"webhook delivery of query {qid} batch {batch} is not "
                                    "the logged event")
            for qid in self.query_ids.values():
                got = by_query.get(qid, [])
                firsts = list(dict.fromkeys(got))
                rep.webhook_redeliveries += len(got) - len(firsts)
                logged = [e["id"] for e in state["events"][str(qid)]]
                # At least once: a batch may come again after a kill, but the first
                # delivery of each is in the log's order and none is missing.
                if firsts != logged:
                    rep.gaps += len(set(logged) - set(firsts))
                    problems.append(f"webhook of query {qid}: delivered {len(firsts)} "
                                    f"distinct batches of {len(logged)}, first difference at "
                                    f"{_first_difference(firsts, logged)}")

        self.server.stop()
        rep.expired = sum(result.get("expired", 0) for answer in answers.values()
                          for result in answer.get("results", {}).values())
        self._check_store(acked, problems)
        self._check_replay(acked, answers, state, problems)
        if problems:
            raise ChaosFailure(f"{len(problems)} problems:\n" + "\n".join(problems[:50]))

    def _check_store(self, acked: dict[int, Posted], problems: list[str]) -> None:
        """The batch log and the idempotency keys: exactly the acknowledged batches."""
        from service.ingest import parse_batch
        from storage.codec import decode_updates
        db = sqlite3.connect(f"file:{self.server.data_dir / 'store.db'}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT seq, updates FROM batches ORDER BY seq").fetchall()
            keys = dict(db.execute("SELECT key, seq FROM idempotency").fetchall())
        finally:
            db.close()
        seqs = [seq for seq, _ in rows]
        # Snapshots prune the log before the oldest kept one; what is left runs to the end.
        # (With no batch acknowledged the log is empty.)
        if seqs != list(range(seqs[0] if seqs else 1, len(acked) + 1)):
            problems.append(f"the batch log holds {seqs[:5]}...{seqs[-5:]}, not ...{len(acked)}")
        for seq, blob in rows:
            p = acked.get(seq)
            if p is None:
                problems.append(f"batch {seq} is in the log but was never acknowledged")
                continue
            stored = decode_updates(blob, f"batch {seq}")
            posted = parse_batch(p.body.encode(), "text/plain", 10**6).to_stream(None)
            if not _same_stream(stored, posted):
                self.report.mismatches += 1
                problems.append(f"batch {seq}: the log's updates are not {p.key}'s")
        want = {p.key: seq for seq, p in acked.items()}
        if keys != want:
            extra = sorted(set(keys) - set(want))[:10]
            wrong = sorted(k for k in set(keys) & set(want) if keys[k] != want[k])[:10]
            missing = sorted(set(want) - set(keys))[:10]
            problems.append(f"idempotency keys: extra {extra}, missing {missing}, "
                            f"wrong batch {wrong}")

    def _check_replay(self, acked: dict[int, Posted], answers: dict[int, dict], state: dict,
                      problems: list[str]) -> None:
        """A service that never crashed, fed the acknowledged batches in their order."""
        replay = Server(self.workdir / "replay", self.graph, self.workdir / "replay.log",
                        self.cfg)
        replay.start()
        try:
            with httpx.Client(base_url=replay.url, timeout=60) as client:
                for name, text, deliver, extra in standing_queries(self.cfg):
                    r = client.post("/v1/queries", content=text,
                                    params={"name": name, "deliver": deliver, **extra},
                                    headers={"content-type": "text/plain"})
                    if r.json()["id"] != self.query_ids[name]:
                        raise ChaosFailure(f"replay: query {name} got another id")
                for seq in sorted(acked):
                    r = client.post("/v1/batches", content=acked[seq].body,
                                    headers={"content-type": "text/plain"})
                    if r.status_code != 200:
                        problems.append(f"replay: batch {seq} answered {r.status_code}: {r.text}")
                        self.report.mismatches += 1
                        continue
                    if _comparable(r.json()) != answers[seq]:
                        self.report.mismatches += 1
                        if self.report.mismatches <= 10:
                            problems.append(f"batch {seq}: answered {answers[seq]}, a run that "
                                            f"never crashed answers {_comparable(r.json())}")
                want = _service_state(client, self.query_ids)
        finally:
            replay.stop()
        if state != want:       # kept beside the server logs, to read what differs
            for name, value in (("chaos", state), ("replay", want)):
                (self.workdir / f"state-{name}.json").write_text(json.dumps(value, indent=1))
        for part in ("graph", "export", "totals"):
            if state[part] != want[part]:
                self.report.mismatches += 1
                problems.append(f"final {part} differs from the run that never crashed")
        for qid, events in want["events"].items():
            if [_drop_time(e) for e in state["events"][qid]] != [_drop_time(e) for e in events]:
                self.report.mismatches += 1
                problems.append(f"query {qid}'s result log differs from the run that never "
                                "crashed")


def _comparable(answer: dict) -> dict:
    """A batch's answer less its timings."""
    return {k: v for k, v in answer.items() if k != "timings"}


def _drop_time(event: dict) -> dict:
    """An event less its time, its listed matches as sets (their order within a batch
    follows the engine's memory layout, as the export's does)."""
    return {k: (_drop_time(v) if isinstance(v, dict) else
                sorted(v) if k in ("added", "removed") else v)
            for k, v in event.items() if k != "time"}


def _canonical_line(line: str) -> str:
    fields = line.split()
    if fields[0] == "e":
        u, v = sorted(map(int, fields[1:3]))
        return " ".join(["e", str(u), str(v), *fields[3:]])
    return line


def _first_difference(a: list, b: list):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"#{i}: {str(x)[:120]} / {str(y)[:120]}"
    return f"#{min(len(a), len(b))} (lengths {len(a)}, {len(b)})"


def _same_stream(a, b) -> bool:
    import numpy as np
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("kind", "a", "b", "label"))


def _service_state(client: httpx.Client, query_ids: dict[str, int]) -> dict:
    """What must equal between the chaos run and the replay: the graph, its export, every
    query's totals and its whole result log."""
    graph = client.get("/v1/graph").json()
    graph = {k: v for k, v in graph.items() if k in ("vertices", "edges", "batches", "labels")}
    # The graph as a set: the export's line order and an edge's orientation follow the
    # engine's memory layout, which a recovery from a snapshot may change.
    export = sorted(_canonical_line(line) for line in
                    client.get("/v1/graph/export").text.splitlines()[1:])
    totals, events = {}, {}
    for qid in query_ids.values():
        stats = client.get(f"/v1/queries/{qid}").json()["stats"]
        totals[qid] = (stats["total_positive"], stats["total_negative"], stats["last_batch"])
        page, after = [], 0
        while after is not None:
            r = client.get(f"/v1/queries/{qid}/results", params={"after": after, "limit": 1000})
            body = r.json()
            page += body["events"]
            after = body["next"] if body["events"] else None
        events[str(qid)] = page
    return {"graph": graph, "export": export, "totals": totals, "events": events}


# ------------------------------------------------------------------------ the command


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--kills", type=int, default=100, help="SIGKILLs of the server's group")
    p.add_argument("--writer-kills", type=int, default=10, help="SIGKILLs of the writer only")
    p.add_argument("--write-faults", type=int, default=10,
                   help="spells of 0.2-1 s in which every write of the store fails")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--synchronous", choices=("full", "normal"), default="normal")
    p.add_argument("--no-webhook", action="store_true")
    p.add_argument("--retention", type=int, default=None, metavar="R",
                   help="timed edges, expiring R behind the newest time, and a windowed query")
    p.add_argument("--workdir", type=Path, default=None,
                   help="where the stores and server logs go (default: a new temporary one)")
    p.add_argument("--json", type=Path, default=None, help="write the report here too")
    args = p.parse_args(argv)
    import tempfile
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="motifstream-chaos-"))
    cfg = Config(kills=args.kills, writer_kills=args.writer_kills,
                 write_faults=args.write_faults, seed=args.seed,
                 clients=args.clients, synchronous=args.synchronous, webhook=not args.no_webhook,
                 retention=args.retention)
    started = datetime.datetime.now(datetime.timezone.utc)
    run = Run(cfg, workdir, say=lambda line: print(line, file=sys.stderr, flush=True))
    print(f"chaos: {cfg.kills} kills + {cfg.writer_kills} writer kills + "
          f"{cfg.write_faults} write faults, seed {cfg.seed}, in {workdir}", file=sys.stderr,
          flush=True)
    failure = None
    try:
        run.execute()
    except ChaosFailure as exc:
        failure = str(exc)
    report = {**asdict(run.report), "config": asdict(cfg),
              "started": started.isoformat(timespec="seconds"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "failure": failure}
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 1 if failure else 0


if __name__ == "__main__":
    sys.exit(main())
