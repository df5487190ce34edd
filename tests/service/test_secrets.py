"""The API key is never written: the real server with its access log on, authenticated every
way the documentation allows (and with wrong keys), leaves it in no log line, no response
body or header and no metric label."""
from __future__ import annotations

import json
import logging
import sys
from urllib.parse import quote, quote_plus

import httpx
import pytest

from service.logs import REDACTED, RedactSecrets, redact
from tests.service.conftest import ServerProcess

# Characters that URL encoding changes, so that the encoded forms are searched for too.
KEY = "s3cret+key/with=signs-0123456789"
WRONG_KEYS = ("wrong-bearer-key-0123456789", "wrong+query/key=0123456789",
              "wrong-lowercase-bearer-0123456789")


def _forms(secret: str) -> set[str]:
    """`secret` as a log line or body could hold it: as sent and URL-encoded."""
    return {secret, quote(secret, safe=""), quote_plus(secret)}


SECRETS = set().union(*map(_forms, (KEY, *WRONG_KEYS)))


def _q(**params) -> str:
    return "?" + "&".join(f"{name}={quote(str(value), safe='')}"
                          for name, value in params.items())


def _sse_first_event(client: httpx.Client, url: str, **headers) -> str:
    """The SSE stream's text up to the end of its first `batch` event."""
    seen = []
    with client.stream("GET", url, headers=headers, timeout=httpx.Timeout(10, read=10)) as r:
        seen.append(f"{r.status_code} {r.headers}")
        if r.status_code != 200:
            seen.append(r.read().decode())
            return "\n".join(seen)
        for line in r.iter_lines():
            seen.append(line)
            if line.startswith(("event: batch", "event:batch")):
                break
    return "\n".join(seen)


def _websocket(url: str, **headers) -> str:
    """A WebSocket's handshake answer, first message and close code and reason."""
    from websockets.exceptions import ConnectionClosed, InvalidStatus
    from websockets.sync.client import connect
    try:
        with connect(url, additional_headers=headers, open_timeout=10) as ws:
            seen = [str(ws.response.headers)]
            try:
                seen.append(ws.recv(timeout=10))
            except ConnectionClosed as closed:
                seen.append(f"closed {closed.rcvd.code if closed.rcvd else None} "
                            f"{closed.rcvd.reason if closed.rcvd else ''}")
            return "\n".join(seen)
    except InvalidStatus as refused:
        return f"{refused.response.status_code} {refused.response.headers} " \
               f"{refused.response.body!r}"


def test_the_key_is_in_no_log_line_response_or_metric(tmp_path):
    server = ServerProcess(tmp_path / "data", tmp_path / "server.log", "--log-level", "debug",
                           "--access-log", env={"MOTIFSTREAM_API_KEY": KEY})
    bearer = {"Authorization": f"Bearer {KEY}"}
    answers: list[str] = []      # every status, header and body the server sent
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            def call(method: str, path: str, expect: int, **options) -> httpx.Response:
                r = client.request(method, path, **options)
                answers.append(f"{r.status_code} {r.headers}\n{r.text}")
                assert r.status_code == expect, (method, path, r.text)
                return r

            token = _q(access_token=KEY)
            # REST, the key in the Authorization header and in the query (both ways a
            # client may name the parameter: plain and percent-encoded).
            call("POST", "/v1/batches", 200, headers=bearer,
                 json={"insert_vertices": [[1, 0], [2, 0], [3, 0], [4, 0]],
                       "insert_edges": [[1, 2], [2, 3]]})
            call("POST", "/v1/queries" + token, 201,
                 json={"pattern": "v 0 0\nv 1 0\nv 2 0\ne 0 1\ne 1 2\ne 0 2\n"})
            call("POST", "/v1/batches" + token, 200, json={"insert_edges": [[1, 3]]})
            call("POST", "/v1/batches" + _q(access_token=KEY).replace("_", "%5F"), 200,
                 json={"insert_edges": [[3, 4]]})
            for path in ("/v1/graph", "/v1/queries", "/v1/queries/1", "/v1/queries/1/results",
                         "/metrics", "/openapi.json", "/docs", "/redoc",
                         "/docs-assets/favicon.png"):
                call("GET", path, 200, headers=bearer)
                call("GET", path + token, 200)
            call("GET", "/v1/graph", 200, headers={"Authorization": f"bearer {KEY}"})
            # Errors with the key in the URL: unknown query, path and parameter, a
            # parameter and a body that break the schema, a method the path does not take.
            call("GET", "/v1/queries/99" + token, 404)
            call("GET", "/no/such/path" + token, 404)
            call("GET", "/v1/queries" + _q(limt=1, access_token=KEY), 422)
            call("GET", "/v1/queries" + _q(limit="many", access_token=KEY), 422)
            call("GET", "/v1/queries/1/results" + _q(after=10**6, access_token=KEY), 422)
            call("POST", "/v1/batches" + token, 422, json={"insert_edges": [[1, 99]]})
            call("POST", "/v1/batches" + token, 422, content=b"{not json")
            call("DELETE", "/v1/graph" + token, 405)
            # Wrong keys, every way: 401s.
            call("GET", "/v1/graph", 401, headers={"Authorization": f"Bearer {WRONG_KEYS[0]}"})
            call("GET", "/v1/graph" + _q(access_token=WRONG_KEYS[1]), 401)
            call("GET", "/v1/graph", 401, headers={"Authorization": f"bearer {WRONG_KEYS[2]}"})
            call("POST", "/v1/batches" + _q(access_token=WRONG_KEYS[1]), 401,
                 json={"insert_edges": [[1, 4]]})
            call("GET", "/metrics" + _q(access_token=WRONG_KEYS[1]), 401)
            call("GET", "/docs" + _q(access_token=WRONG_KEYS[1]), 401)
            # SSE, both ways and with a wrong key.
            answers.append(_sse_first_event(client, "/v1/queries/1/events" + token))
            answers.append(_sse_first_event(client, "/v1/queries/1/events", **bearer))
            answers.append(_sse_first_event(
                client, "/v1/queries/1/events" + _q(access_token=WRONG_KEYS[1])))
            assert answers[-1].startswith("401"), answers[-1]
            # WebSocket, both ways, a wrong key (the handshake's 401), a bad cursor (4422).
            ws = server.url.replace("http://", "ws://") + "/v1/queries/1/ws"
            answers.append(_websocket(ws + _q(after=0, access_token=KEY)))
            assert '"event": "batch"' in answers[-1] or '"event":"batch"' in answers[-1]
            answers.append(_websocket(ws + "?after=0", **bearer))
            answers.append(_websocket(ws + _q(after=0, access_token=WRONG_KEYS[1])))
            assert answers[-1].startswith("401"), answers[-1]
            answers.append(_websocket(ws + "?after=0",
                                      Authorization=f"Bearer {WRONG_KEYS[0]}"))
            assert answers[-1].startswith("401"), answers[-1]
            answers.append(_websocket(ws + _q(after="x", access_token=KEY)))
            assert "closed 4422" in answers[-1], answers[-1]
            metrics = call("GET", "/metrics", 200, headers=bearer).text
    finally:
        log = server.stop()

    # No key, right or wrong, in any form, in the log or an answer ...
    lines = log.splitlines()
    for secret in SECRETS:
        leaks = [line for line in lines if secret in line]
        assert not leaks, f"{secret!r} in the log: {leaks[:3]}"
        leaks = [answer[:300] for answer in answers if secret in answer]
        assert not leaks, f"{secret!r} in an answer: {leaks[:3]}"
    # ... though the lines were written (the access log was on and saw the requests), and
    # the metrics were recorded (per route template, no query string).
    assert sum(f"access_token={REDACTED}" in line for line in lines) >= 20, log
    assert sum(f"access%5Ftoken={REDACTED}" in line for line in lines) == 1, log
    assert any("WebSocket" in line and REDACTED in line for line in lines), log
    assert 'handler="/v1/queries/{query_id}"' in metrics


@pytest.mark.parametrize("text, expected", [
    ('127.0.0.1:5 - "GET /v1/graph?access_token=abc&limit=2 HTTP/1.1" 200',
     f'127.0.0.1:5 - "GET /v1/graph?access_token={REDACTED}&limit=2 HTTP/1.1" 200'),
    ("/v1/x?limit=2&access%5Ftoken=abc", f"/v1/x?limit=2&access%5Ftoken={REDACTED}"),
    ("/v1/x?access_token=", f"/v1/x?access_token={REDACTED}"),
    ("/v1/x?my_access_token=abc&token=abc", "/v1/x?my_access_token=abc&token=abc"),
    ("{'authorization': 'Bearer abc.def'}", f"{{'authorization': '{REDACTED}'}}"),
    ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: {REDACTED}"),
    ("sent bearer abc", f"sent bearer {REDACTED}"),
    ("no secret here", "no secret here"),
])
def test_redact(text, expected):
    assert redact(text) == expected


def test_the_log_filter_redacts_messages_arguments_tracebacks_and_extras():
    key = "configured/key=0123456789"
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1,
                               '%s - "%s %s HTTP/%s" %d',
                               ("1.2.3.4:5", "GET", "/v1/graph?access_token=abc", "1.1", 200),
                               None)
    try:
        raise RuntimeError(f"failed with {key} and {quote(key, safe='')}")
    except RuntimeError:
        failure = sys.exc_info()
    crashed = logging.LogRecord("motifstream", logging.ERROR, __file__, 1, "boom %s",
                                (key,), failure)
    crashed.url = f"/v1/graph?access_token={key}"
    only = RedactSecrets(key)
    assert only.filter(record) and only.filter(crashed)
    assert record.getMessage() == \
        f'1.2.3.4:5 - "GET /v1/graph?access_token={REDACTED} HTTP/1.1" 200'
    formatted = logging.Formatter().format(crashed)
    assert "RuntimeError" in formatted and key not in formatted
    assert quote(key, safe="") not in formatted
    assert crashed.url == f"/v1/graph?access_token={REDACTED}"
    # The JSON formatter writes the same.
    from pythonjsonlogger.json import JsonFormatter
    line = json.loads(JsonFormatter("%(message)s").format(crashed))
    assert key not in json.dumps(line) and "RuntimeError" in line["exc_info"]
