"""The README's tour works when copied: its shell blocks run as written, and every `→ text`
claim in a command's comment is in that command's output.

The `motifstream` commands run through the installed console script (a shim running
`python -m service.cli` where there is none) from the repository root, as the README says;
`motifstream serve` runs in a temporary directory (its ./motifstream-data lands there) on a
free port, which the `curl` lines are pointed at in place of the README's 8080.  Without
curl installed, each curl line is sent by httpx as curl would send it (`_CurlRequest`,
checked against curl itself where curl exists).
"""
from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from service.cli import EXIT_INTERRUPTED

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TOUR_HEADING = "## A 5-minute tour"
README_PORT = "localhost:8080"
# A cold Numba cache compiles the CPU executor (tens of seconds on 2 cores) in the first
# command and in the server's warm-up; warm, the whole tour takes ~15 s.
COMMAND_SECONDS = 300
# How long the server's event stream is read for its first event.
STREAM_SECONDS = 30


def tour_commands() -> list[str]:
    """The commands of the tour's shell blocks, continuation lines joined, in order."""
    text = README.read_text()
    assert TOUR_HEADING in text, f"README.md has no {TOUR_HEADING!r} section"
    section = text.split(TOUR_HEADING, 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line.strip())
    return commands


def claim_of(command: str) -> str | None:
    """The `→ text` a command's comment promises its output contains, whitespace removed."""
    found = re.search(r"\s#[^#]*→(.+)$", command)
    return None if found is None else _squeezed(found.group(1))


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def command_path(tmp_path_factory) -> str:
    """PATH with `motifstream` first: this interpreter's console script, or a shim."""
    scripts = Path(sys.executable).parent
    if not (scripts / "motifstream").exists():
        scripts = tmp_path_factory.mktemp("bin")
        shim = scripts / "motifstream"
        # The server runs outside the repository: the source tree goes on its path.
        shim.write_text(f'#!/bin/sh\nexport PYTHONPATH={shlex.quote(str(ROOT))}'
                        '${PYTHONPATH:+:$PYTHONPATH}\n'
                        f'exec {shlex.quote(sys.executable)} -m service.cli "$@"\n')
        shim.chmod(0o755)
    return f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}"


def test_the_tour_has_the_commands_it_promises():
    commands = tour_commands()
    kinds = [c.split()[0:2] for c in commands]
    assert ["motifstream", "match"] in kinds and ["motifstream", "count"] in kinds
    assert sum(c.startswith("motifstream serve") for c in commands) == 1
    assert any(c.startswith("curl") for c in commands)
    assert all(claim_of(c) for c in commands if "→" in c)


def test_every_tour_command_works_as_written(tmp_path, command_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOTIFSTREAM_")}
    env["PATH"] = command_path
    server = None
    stopped_cleanly = None
    try:
        for command in tour_commands():
            if command.startswith("motifstream serve"):
                assert server is None, "the tour starts a second server"
                server = _Server(command, tmp_path, env)
            elif command.startswith("motifstream "):
                output = _run_cli(command, env)
                _check_claim(command, output)
            elif command.startswith("curl "):
                assert server is not None, f"{command!r} runs before the tour starts a server"
                assert README_PORT in command, f"{command!r} does not talk to {README_PORT}"
                url = f"localhost:{server.port}"
                output = _curl(command.replace(README_PORT, url), env)
                _check_claim(command, output)
            else:
                pytest.fail(f"the tour has a command this test does not know: {command!r}")
    finally:
        if server is not None:
            stopped_cleanly = server.stop()
    assert stopped_cleanly, (f"the server did not stop cleanly (status {server.proc.returncode}): "
                             f"{server.log.read_text()}")


def _run_cli(command: str, env: dict) -> str:
    done = subprocess.run(["bash", "-c", "exec " + command], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=COMMAND_SECONDS)
    assert done.returncode == 0, f"{command!r} exited {done.returncode}: {done.stderr}"
    lines = done.stdout.splitlines()
    assert lines, f"{command!r} printed nothing"
    for line in lines:
        json.loads(line)   # every line of a command's output is one JSON record
    return done.stdout


def _check_claim(command: str, output: str) -> None:
    claim = claim_of(command)
    if claim is not None:
        assert claim in _squeezed(output), f"{command!r} promises {claim!r}; it printed {output}"


def _interruptible() -> None:
    # Ctrl-C reaches a server started from a terminal; a test run in the background of a
    # non-interactive shell (CI, say) inherits SIGINT ignored, and the server's Python
    # would then not turn uvicorn's re-raised signal into the interrupt status.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class _Server:
    """The tour's `motifstream serve` line, run as written in `workdir` on a free port."""

    def __init__(self, command: str, workdir: Path, env: dict) -> None:
        assert "--port" not in command, "the test gives the server its port"
        assert claim_of(command) is None, "a server's output is its log: nothing to claim"
        self.port = _free_port()
        self.log = workdir / "serve.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                ["bash", "-c", "exec " + command], cwd=workdir, stdout=log,
                stderr=subprocess.STDOUT, env={**env, "MOTIFSTREAM_PORT": str(self.port)},
                start_new_session=True, preexec_fn=_interruptible)
        deadline = time.monotonic() + COMMAND_SECONDS
        while True:
            assert self.proc.poll() is None, f"the server exited: {self.log.read_text()}"
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"not ready in time: {self.log.read_text()}"
            time.sleep(0.1)

    def stop(self) -> bool:
        """End the server as Ctrl-C would; whether it shut down cleanly."""
        self.proc.send_signal(signal.SIGINT)
        try:
            status = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return False
        # uvicorn shuts down, then re-raises the signal: the CLI's status for an interrupt.
        return status == EXIT_INTERRUPTED and "Application shutdown complete" in \
            self.log.read_text()


# --------------------------------------------------------------------------- curl


def _curl(command: str, env: dict) -> str:
    """Run one curl line; returns what it printed (a stream: up to its first event).
    Fails on an HTTP status of 400 or more."""
    if shutil.which("curl", path=env["PATH"]) is None:
        return _CurlRequest.parse(command).send()
    if _CurlRequest.parse(command).stream:
        return _first_event(command, env)
    # The status after the body, on a line of its own: the README's command otherwise as is.
    with_status = command.replace("curl ", "curl -sS -w '\\n%{http_code}' ", 1)
    done = subprocess.run(["bash", "-c", "exec " + with_status], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{command!r}: curl exited {done.returncode}: {done.stderr}"
    body, _, status = done.stdout.rpartition("\n")
    assert int(status) < 400, f"{command!r}: HTTP {status}: {body}"
    return body


def _first_event(command: str, env: dict) -> str:
    """Read a `curl -N` event stream until its first event's data, then end it."""
    proc = subprocess.Popen(["bash", "-c", "exec " + command], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True)
    timer = threading.Timer(STREAM_SECONDS, proc.kill)
    timer.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("data:"):
                break
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert lines and lines[-1].startswith("data:"), f"{command!r}: no event in {lines}"
    return "".join(lines)


# What curl sends for `-d` without a Content-Type.
_CURL_FORM = "application/x-www-form-urlencoded"


@dataclass
class _CurlRequest:
    """The request one README curl line sends, for machines without curl: the options the
    README uses, with curl's meaning (`-d` posts a form unless a content type is given, and
    strips the newlines of an @file; `--data-binary` sends it as it is)."""
    url: str = ""
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    stream: bool = False

    @classmethod
    def parse(cls, command: str) -> _CurlRequest:
        words = shlex.split(command, comments=True)
        assert words[0] == "curl", command
        request, rest = cls(), iter(words[1:])
        for word in rest:
            if word == "-H":
                name, _, value = next(rest).partition(":")
                request.headers[name.strip().lower()] = value.strip()
            elif word in ("-d", "--data", "--data-binary"):
                data = next(rest)
                if data.startswith("@"):
                    raw = (ROOT / data[1:]).read_bytes()
                    data = raw if word == "--data-binary" else raw.replace(b"\r", b"").replace(
                        b"\n", b"")
                request.body = data if isinstance(data, bytes) else data.encode()
                request.method = "POST" if request.method == "GET" else request.method
            elif word == "-X":
                request.method = next(rest)
            elif word == "-N":
                request.stream = True
            elif word.startswith("-"):
                pytest.fail(f"{command!r}: the curl stand-in does not know {word}")
            else:
                request.url = word if "://" in word else "http://" + word
        if request.body is not None:
            request.headers.setdefault("content-type", _CURL_FORM)
        return request

    def send(self) -> str:
        with httpx.Client(timeout=httpx.Timeout(60, read=STREAM_SECONDS)) as client:
            with client.stream(self.method, self.url, headers=self.headers,
                               content=self.body) as response:
                assert response.status_code < 400, (self, response.read())
                if not self.stream:
                    return response.read().decode()
                lines = []
                for line in response.iter_lines():
                    lines.append(line)
                    if line.startswith("data:"):
                        return "\n".join(lines)
                pytest.fail(f"{self.url}: no event in {lines}")


def test_the_curl_stand_in_sends_what_curl_sends(tmp_path):
    """Each tour curl line against a server that records requests: curl's request and the
    stand-in's are the same (method, path, content type, body)."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed: nothing to compare the stand-in with")
    seen: list[tuple] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"   # answers curl's `Expect: 100-continue` at once

        def _record(self):
            length = int(self.headers.get("content-length") or 0)
            seen.append((self.command, self.path, self.headers.get("content-type"),
                         self.rfile.read(length)))
            body = b"data: {}\n\n"
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _record

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"localhost:{server.server_address[1]}"
        for command in tour_commands():
            if not command.startswith("curl "):
                continue
            command = command.replace(README_PORT, url)
            subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, check=True,
                           timeout=30)
            _CurlRequest.parse(command).send()
            assert len(seen) == 2 and seen[0] == seen[1], (command, seen)
            seen.clear()
    finally:
        server.shutdown()
        server.server_close()
