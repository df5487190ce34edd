"""Sustained ingest through the real HTTP service: batches/s and latency per batch size.

Starts `motifstream serve` on the GH graph (5 random labels, 10% of the edges held out),
registers the dense 6-vertex query set (as `benchmarks.gh_table`), opens SSE subscribers,
then posts batches of each size for a fixed time from a few keep-alive client connections.
The update stream cycles through the held-out edges: all inserted, then all deleted, then
inserted again, so every batch is valid and changes the graph.  Latency is measured at the
client, from sending the request to reading the acknowledgement (durable, fsynced unless
--synchronous normal).  Bulk ingest posts NumPy .npy batches with no query standing.

The clients share the machine with the server, so their own CPU time is taken from it:
batches are posted through a minimal HTTP/1.1 client (`--client raw`, the default: one
keep-alive socket, the request written whole, the response read by its Content-Length,
about 0.06 ms of CPU a request) rather than `http.client` (`--client http.client`, ~0.2 ms
a request, plus its share of the GIL among the client threads).

    python -m benchmarks.service_bench [--sizes 1 100 10000] [--seconds 20] [--json F]
        [--profile F]   (the server's per-thread profile, benchmarks/sampler.py)
"""
from __future__ import annotations

import argparse
import datetime
import http.client
import io
import json
import os
import platform
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.gh_table import DEFAULT_GRAPH, INSERT_FRACTION
from benchmarks.plots import PLOT_HELP
from benchmarks.querygen import QueryGenerator, write_query_set
from gpu.io.graphs import load_graph, write_graph
from gpu.io.streams import split_stream
from service.settings import Settings

REPO = Path(__file__).resolve().parents[1]


def _parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.service_bench",
                                description=__doc__.split("\n", 1)[0])
    p.add_argument("--graph", type=Path, default=DEFAULT_GRAPH)
    p.add_argument("--queries", type=int, default=10, help="dense 6-vertex queries (default 10)")
    p.add_argument("--queries-dir", type=Path,
                   default=REPO / "bench-out" / "queries" / "gh_k6_seed0_labels5x0")
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 100, 10_000])
    p.add_argument("--seconds", type=float, default=20.0, help="per batch size")
    p.add_argument("--max-batches", type=int, default=100_000, help="per batch size")
    p.add_argument("--clients", type=int, default=4, help="concurrent client connections")
    p.add_argument("--client", default="raw", choices=("raw", "http.client"),
                   help="HTTP client that posts the batches (default raw: see above)")
    p.add_argument("--subscribers", type=int, default=3, help="SSE subscribers")
    p.add_argument("--bulk-size", type=int, default=28_900,
                   help="records per bulk .npy batch (no query standing); 0: skip")
    p.add_argument("--bulk-batches", type=int, default=6)
    p.add_argument("--backend", default="cpu", choices=("cpu", "cuda", "auto"))
    p.add_argument("--synchronous", default="full", choices=("full", "normal"))
    p.add_argument("--port", type=int, default=18080)
    p.add_argument("--json", type=Path, help="append one JSON line per measurement")
    p.add_argument("--profile", type=Path,
                   help="run the server under benchmarks.sampler and write its per-thread "
                        "profile of the load (start-up left out) here when it stops")
    p.add_argument("--sections", type=Path,
                   help="run the server under benchmarks.sections and write each engine and "
                        "service step's wall time per call during the load here when it "
                        "stops (not with --profile)")
    p.add_argument("--plot", action="store_true", help=PLOT_HELP)
    p.add_argument("--log", type=Path, default=REPO / "bench-out" / "service-bench-server.log",
                   help="the server's log")
    args = p.parse_args(argv)
    if args.plot and not args.json:
        p.error("--plot draws the --json file: give --json")
    if args.profile and args.sections:
        p.error("--profile and --sections each run the server under their own wrapper: "
                "give one")
    return args


class EdgeCycle:
    """An endless valid update stream: insert every held-out edge, delete them all, repeat."""

    def __init__(self, us: np.ndarray, vs: np.ndarray) -> None:
        self.us, self.vs = us, vs
        self.position = 0
        self.lock = threading.Lock()

    def take(self, size: int) -> np.ndarray:
        """(size, 4) int64 rows: kind, a, b, label."""
        if size == 1:   # without NumPy's per-call overhead (one-edge batches, many per second)
            with self.lock:
                step = self.position
                self.position += 1
            n = len(self.us)
            index, inserting = step % n, (step // n) % 2 == 0
            return [(2 if inserting else 3, int(self.us[index]), int(self.vs[index]),
                     0 if inserting else -1)]
        with self.lock:
            n = len(self.us)
            steps = np.arange(self.position, self.position + size)
            self.position += size
        index = steps % n
        inserting = (steps // n) % 2 == 0
        rows = np.empty((size, 4), dtype=np.int64)
        rows[:, 0] = np.where(inserting, 2, 3)
        rows[:, 1], rows[:, 2] = self.us[index], self.vs[index]
        rows[:, 3] = np.where(inserting, 0, -1)
        return rows


def _json_body(rows) -> tuple[bytes, str]:
    """A JSON batch of (n, 4) rows (an array, or a list of tuples)."""
    ins = [[int(a), int(b)] for kind, a, b, _ in rows if kind == 2]
    dels = [[int(a), int(b)] for kind, a, b, _ in rows if kind == 3]
    return json.dumps({"insert_edges": ins, "delete_edges": dels}).encode(), "application/json"


def _npy_body(rows: np.ndarray) -> tuple[bytes, str]:
    buf = io.BytesIO()
    np.save(buf, rows)
    return buf.getvalue(), "application/x-npy"


class Client:
    """One keep-alive HTTP/1.1 connection (http.client: the lightest client at hand)."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def request(self, method: str, path: str, body: bytes | None = None,
                content_type: str = "application/json") -> tuple[int, bytes]:
        headers = {"Content-Type": content_type} if body is not None else {}
        try:
            self.conn.request(method, path, body=body, headers=headers)
            response = self.conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            if method == "POST":
                raise
            # The server closes keep-alive connections idle for KEEP_ALIVE_SECONDS; GET/DELETE
            # can be resent.
            self.conn.close()
            self.conn.request(method, path, body=body, headers=headers)
            response = self.conn.getresponse()
        return response.status, response.read()

    def close(self) -> None:
        self.conn.close()


class RawClient:
    """One keep-alive HTTP/1.1 connection that writes each request whole and reads the
    response by its Content-Length: a load generator light enough not to take the CPU
    the server is measured on (http.client parses every response's headers with the
    email package)."""

    def __init__(self, port: int) -> None:
        self.host = f"127.0.0.1:{port}".encode()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=600)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def request(self, method: str, path: str, body: bytes | None = None,
                content_type: str = "application/json") -> tuple[int, bytes]:
        body = body or b""
        self.sock.sendall(b"%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (
                              method.encode(), path.encode(), self.host,
                              content_type.encode(), len(body), body))
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self._receive()
        head, self.buffer = self.buffer[:end], self.buffer[end + 4:]
        status = int(head[9:12])
        length = None
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise RuntimeError(f"response without Content-Length: {head[:200]!r}")
        while len(self.buffer) < length:
            self._receive()
        reply, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, reply

    def _receive(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionResetError("the server closed the connection")
        self.buffer += data

    def close(self) -> None:
        self.sock.close()


class SseSubscriber(threading.Thread):
    """Reads one query's event stream and counts events."""

    def __init__(self, port: int, query_id: int) -> None:
        super().__init__(daemon=True)
        self.port, self.query_id = port, query_id
        self.events = 0
        self.last_id = 0

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port)
        conn.request("GET", f"/v1/queries/{self.query_id}/events")
        response = conn.getresponse()
        batch_event = False  # progress events carry an id too: only batch events count
        for line in response:
            if line.startswith(b"event:"):
                batch_event = line[6:].strip() == b"batch"
            elif line.startswith(b"id:") and batch_event:
                self.last_id = int(line[3:])
                self.events += 1


def _server(args, graph_file: Path, data_dir: Path, log) -> subprocess.Popen:
    # With --profile the server runs under the ptrace-free sampler (benchmarks/sampler.py),
    # with --sections under the per-call timers (benchmarks/sections.py); either writes its
    # report when the server stops.
    wrapper = (["-m", "benchmarks.sampler", "--top", "150", "--out", str(args.profile)]
               if args.profile is not None else
               ["-m", "benchmarks.sections", "--out", str(args.sections)]
               if args.sections is not None else [])
    command = [sys.executable, *wrapper, "-m", "service.cli", "serve",
               "--data-dir", str(data_dir), "--port", str(args.port), "--backend", args.backend,
               "--graph", str(graph_file),
               "--synchronous", args.synchronous, "--log-level", "warning"]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    print(f"server log: {log.name}")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            # Ready on the compiled kernels (a first start is ready before, running them
            # as plain Python while they compile: not what is measured here).
            status, body = Client(args.port).request("GET", "/readyz")
            if status == 200 and json.loads(body)["kernels"] == "compiled":
                return proc
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("server not ready in 600 s")


def _query_texts(args, initial) -> list[tuple[str, str]]:
    paths = [args.queries_dir / f"dense_{i}.graph" for i in range(args.queries)]
    if not all(p.exists() for p in paths):
        queries = QueryGenerator(initial).generate("dense", 6, args.queries, 0)
        paths = write_query_set(queries, args.queries_dir, {"kind": "dense", "size": 6,
                                                            "seed": 0})
    return [(p.stem, p.read_text()) for p in paths]


def _run_size(args, cycle: EdgeCycle, size: int, encode) -> dict:
    """Post batches of `size` from args.clients connections for args.seconds."""
    latencies: list[float] = []
    server_seconds: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + args.seconds
    budget = [args.max_batches]

    def worker():
        client = RawClient(args.port) if args.client == "raw" else Client(args.port)
        try:
            while time.perf_counter() < stop_at:
                with lock:
                    if budget[0] <= 0:
                        return
                    budget[0] -= 1
                body, media = encode(cycle.take(size))
                t0 = time.perf_counter()
                status, reply = client.request("POST", "/v1/batches", body, media)
                elapsed = time.perf_counter() - t0
                if status != 200:
                    failures.append(f"{status}: {reply[:200]!r}")
                    return
                with lock:
                    latencies.append(elapsed)
                    server_seconds.append(json.loads(reply)["timings"]["engine"])
        finally:
            client.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if failures:
        raise SystemExit(f"batch of {size} failed: {failures[0]}")
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    return {"batch_size": size, "batches": len(latencies), "seconds": wall,
            "batches_per_s": len(latencies) / wall, "edges_per_s": len(latencies) * size / wall,
            "p50_ms": statistics.median(latencies) * 1e3, "p99_ms": q[98] * 1e3,
            "max_ms": max(latencies) * 1e3,
            "engine_p50_ms": statistics.median(server_seconds) * 1e3}


def main(argv=None) -> int:
    args = _parse_args(argv)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    graph = load_graph(args.graph, num_labels=5, seed=0)
    initial, held_out = split_stream(graph, INSERT_FRACTION, 0)
    cycle = EdgeCycle(held_out.a, held_out.b)
    header = {"date": started, "command": "python -m benchmarks.service_bench " +
              shlex.join(argv if argv is not None else sys.argv[1:]),
              "machine": f"{platform.node()}, {platform.processor() or platform.machine()}, "
                         f"Python {platform.python_version()}",
              "backend": args.backend,
              # The server reads its layout from the environment (service/settings.py).
              "device_graph": os.environ.get("MOTIFSTREAM_DEVICE_GRAPH",
                                             Settings.model_fields["device_graph"].default),
              "synchronous": args.synchronous,
              "clients": args.clients, "client": args.client, "subscribers": args.subscribers,
              "graph": f"{args.graph.name}: {initial.num_vertices} vertices, "
                       f"{initial.num_edges} edges (+{len(held_out)} cycled)"}
    for key, value in header.items():
        print(f"{key}: {value}")
    results = []
    with tempfile.TemporaryDirectory(prefix="motifstream-bench-") as tmp:
        graph_file = Path(tmp) / "initial.graph"
        write_graph(initial, graph_file)
        args.log.parent.mkdir(parents=True, exist_ok=True)
        with open(args.log, "wb") as log:
            proc = _server(args, graph_file, Path(tmp) / "data", log)
            try:
                client = Client(args.port)
                ids = []
                for name, text in _query_texts(args, initial):
                    status, reply = client.request("POST", f"/v1/queries?name={name}",
                                                   text.encode(), "text/plain")
                    assert status == 201, reply
                    ids.append(json.loads(reply)["id"])
                subscribers = [SseSubscriber(args.port, qid) for qid in ids[: args.subscribers]]
                for s in subscribers:
                    s.start()
                if args.profile is not None or args.sections is not None:
                    proc.send_signal(signal.SIGUSR1)    # the report counts the load only
                for size in args.sizes:
                    encode = _json_body if size <= 1000 else _npy_body
                    row = _run_size(args, cycle, size, encode)
                    row["queries"] = len(ids)
                    results.append(row)
                    print(json.dumps(row), flush=True)
                stats = [json.loads(client.request("GET", f"/v1/queries/{qid}")[1])["stats"]
                         for qid in ids[: args.subscribers]]
                print(json.dumps({"subscriber_events": [s.events for s in subscribers],
                                  "subscriber_max_lag": [s["max_lag"] for s in stats]}))
                if args.bulk_size:
                    for qid in ids:
                        client.request("DELETE", f"/v1/queries/{qid}")
                    bulk = argparse.Namespace(**{**vars(args), "seconds": 1e9,
                                                 "max_batches": args.bulk_batches, "clients": 1})
                    row = _run_size(bulk, cycle, args.bulk_size, _npy_body)
                    row["queries"] = 0
                    results.append(row)
                    print(json.dumps(row), flush=True)
                client.close()
            finally:
                proc.terminate()
                proc.wait(timeout=60)
    print()
    print("| batch size | queries | batches | batches/s | edges/s | p50 ms | p99 ms | "
          "engine p50 ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['batch_size']} | {r['queries']} | {r['batches']} | "
              f"{r['batches_per_s']:.0f} | {r['edges_per_s']:.3g} | {r['p50_ms']:.2f} | "
              f"{r['p99_ms']:.2f} | {r['engine_p50_ms']:.2f} |")
    if args.json:
        with args.json.open("a") as f:
            for r in results:
                f.write(json.dumps({**header, **r}) + "\n")
    if args.plot:
        from benchmarks.plots import plot_beside
        plot_beside(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
