"""Times `motifstream serve` from process start to /readyz 200: restarts on a store with a
3,000-vertex graph, and first starts on an empty Numba cache, with the server's own phase
lines (recovery, warm-up, compiling) beside each figure.  A first start is ready on the
kernels run as plain Python while a background process compiles them: `compiled_s` is
when /readyz says the compiled ones took over (`--foreground` sets
MOTIFSTREAM_FIRST_RUN=compile, the start that waits for them).

    python -m benchmarks.start_timing --restarts 5 --cold 1

The store: a random graph (`--vertices`, `--edges`, 5 labels) bulk-loaded, the demo's
triangle, square and house queries, then `--batches` one-edge batches, so that a restart
loads the snapshot and replays the batches after it.  Cold starts use a fresh
`NUMBA_CACHE_DIR` and an empty store.  One JSON line per start, then a summary.

/readyz is polled every POLL_SECONDS, each poll on a new connection (as an orchestrator's
probe), through one client.  `httpx.get`, used until 2026-11-28, made a client (and its TLS
context) per poll: 37 ms of this process's CPU each time, ~80% of a core for the whole
start, on the 2-vCPU VM half of what the server, its store's writer process and this harness
share, and all of it when another tenant holds the other core.  The interval keeps the polls
about as frequent as they were then (10 ms of sleep + 37 ms), so the server answers as many:
each answer costs it ~1.7 ms of CPU, its connection included (docs/benchmarks.md, "Restart,
a third time").
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "service" / "demo"
# The server's lines that say where start-up time goes.
_PHASES = {
    "recovery_s": re.compile(r"recovered batch .* in ([\d.]+) s"),
    "warm_up_s": re.compile(r"kernels warm in ([\d.]+) s"),
    "compiled": re.compile(r"ready: batch \d+, backend \w+, (\d+) kernels compiled"),
    "cpu_before_recovery_s": re.compile(r"\(([\d.]+) s before recovery began\)"),
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) of process `pid` so far (Linux: /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


POLL_SECONDS = 0.05
# The probe's client: made once, no connection kept between polls.
_PROBE = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))


def start(data_dir: Path, env: dict, log: Path) -> tuple[subprocess.Popen, str, float]:
    """Start the server; (process, url, seconds from launch to /readyz 200).  `t0` is kept
    on the process (proc.t0)."""
    port = _port()
    url = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--data-dir", str(data_dir),
             "--port", str(port), "--backend", "cpu", "--log-level", "info"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            stdout=out, stderr=subprocess.STDOUT)
    proc.t0 = t0
    wait_ready(proc, url, log)
    return proc, url, time.perf_counter() - t0


def wait_ready(proc: subprocess.Popen, url: str, log: Path) -> None:
    """Poll `url`/readyz until it answers 200 (refused connections and 503s are polled
    again); SystemExit if the server exits first."""
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: see {log}")
        try:
            if _PROBE.get(url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(POLL_SECONDS)


def compiled(proc: subprocess.Popen, url: str) -> float:
    """Seconds from launch until /readyz says the kernels run compiled."""
    while _PROBE.get(url + "/readyz", timeout=5).json()["kernels"] != "compiled":
        if proc.poll() is not None:
            raise SystemExit("the server exited")
        time.sleep(0.05)
    return time.perf_counter() - proc.t0


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=60)


def phases(log: Path) -> dict:
    text = log.read_text()
    found = {}
    for name, pattern in _PHASES.items():
        match = pattern.search(text)
        if match:
            found[name] = float(match.group(1)) if "." in match.group(1) else \
                int(match.group(1))
    return found


def build_store(data_dir: Path, env: dict, log: Path, vertices: int, edges: int,
                batches: int) -> None:
    rng = random.Random(27)
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < edges:
        a, b = rng.randrange(vertices), rng.randrange(vertices)
        if a != b:
            pairs.add((min(a, b), max(a, b)))
    proc, url, _ = start(data_dir, env, log)
    try:
        r = httpx.put(url + "/v1/graph", timeout=120, json={
            "vertices": [[v, rng.randrange(5)] for v in range(vertices)],
            "edges": [list(p) for p in sorted(pairs)]})
        r.raise_for_status()
        for name in ("triangle", "square", "house"):
            httpx.post(url + "/v1/queries", headers={"content-type": "text/plain"},
                       content=(DEMO / f"{name}.graph").read_text()).raise_for_status()
        done = 0
        while done < batches:
            a, b = rng.randrange(vertices), rng.randrange(vertices)
            if a != b and (min(a, b), max(a, b)) not in pairs:
                pairs.add((min(a, b), max(a, b)))
                httpx.post(url + "/v1/batches", json={"insert_edges": [[a, b]]},
                           timeout=30).raise_for_status()
                done += 1
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--cold", type=int, default=0, help="first starts on an empty cache")
    parser.add_argument("--foreground", action="store_true",
                        help="first starts compile before ready (MOTIFSTREAM_FIRST_RUN=compile)")
    parser.add_argument("--vertices", type=int, default=3000)
    parser.add_argument("--edges", type=int, default=12000)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--work", type=Path,
                        help="keep the store (and logs) here, built only if missing: to "
                             "time two versions of the code on one store")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="start-timing-") as folder:
        work = args.work or Path(folder)
        work.mkdir(parents=True, exist_ok=True)
        results = {"restart": [], "cold": []}
        if args.restarts and not (work / "data" / "store.db").exists():
            build_store(work / "data", {}, work / "build.log", args.vertices, args.edges,
                        args.batches)
        for i in range(args.restarts):
            log = work / f"restart-{i}.log"
            proc, _, seconds = start(work / "data", {}, log)
            cpu = cpu_seconds(proc.pid)
            stop(proc)
            row = {"start": "restart", "ready_s": round(seconds, 2), "cpu_s": round(cpu, 2),
                   **phases(log), "load": os.getloadavg()[0]}
            results["restart"].append(seconds)
            print(json.dumps(row), flush=True)
        for i in range(args.cold):
            log = work / f"cold-{i}.log"
            env = {"NUMBA_CACHE_DIR": str(work / f"numba-{i}"),
                   "MOTIFSTREAM_FIRST_RUN": "compile" if args.foreground else "background"}
            proc, url, seconds = start(work / f"cold-data-{i}", env, log)
            cpu = cpu_seconds(proc.pid)
            kernels = httpx.get(url + "/readyz", timeout=5).json()["kernels"]
            compiled_s = compiled(proc, url)
            stop(proc)
            row = {"start": "cold", "ready_s": round(seconds, 2), "cpu_s": round(cpu, 2),
                   "kernels_at_ready": kernels, "compiled_s": round(compiled_s, 2),
                   **phases(log),
                   "load": os.getloadavg()[0]}
            results["cold"].append(seconds)
            print(json.dumps(row), flush=True)
        print(json.dumps({"summary": True, **{
            kind: {"min": round(min(v), 2), "median": round(sorted(v)[len(v) // 2], 2)}
            for kind, v in results.items() if v}}))


if __name__ == "__main__":
    main()
