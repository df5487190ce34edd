"""benchmarks/start_timing.py's probe: /readyz polled until it answers 200, each poll a new
connection, through one client made once (a client per poll cost the harness 37 ms of CPU
each time, docs/benchmarks.md "Restart, a third time")."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from benchmarks import start_timing


class _Starting(BaseHTTPRequestHandler):
    """/readyz: 503 for the first `not_ready` requests, then 200; counts connections."""

    not_ready = 3
    requests = 0
    connections = 0

    def setup(self) -> None:
        type(self).connections += 1
        super().setup()

    def do_GET(self) -> None:  # noqa: N802 -- BaseHTTPRequestHandler's name
        type(self).requests += 1
        status = 503 if type(self).requests <= type(self).not_ready else 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


class _Running:
    def poll(self):
        return None


class _Exited:
    def poll(self):
        return 1


@pytest.fixture
def server():
    handler = type("Handler", (_Starting,), {"requests": 0, "connections": 0})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_polls_until_ready_on_new_connections_through_one_client(server, monkeypatch,
                                                                  tmp_path):
    handler, url = server
    made = []
    real_init = httpx.Client.__init__

    def counting_init(self, *args, **kwargs):
        made.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(httpx.Client, "__init__", counting_init)
    monkeypatch.setattr(start_timing, "POLL_SECONDS", 0.001)
    start_timing.wait_ready(_Running(), url, tmp_path / "log")
    assert handler.requests == handler.not_ready + 1      # the 503s, then the 200
    assert handler.connections == handler.requests        # none kept between polls
    assert made == []                                     # no client made per poll


def test_a_server_that_exits_stops_the_wait(tmp_path):
    with pytest.raises(SystemExit, match="the server exited"):
        start_timing.wait_ready(_Exited(), "http://127.0.0.1:9", tmp_path / "log")
