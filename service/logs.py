"""Owns request ids and the server's log output: X-Request-ID on every response, JSON log
lines, and the API key kept out of every line (redact)."""
from __future__ import annotations

import logging
import re
from urllib.parse import quote, quote_plus, unquote_plus

from asgi_correlation_id import CorrelationIdMiddleware, correlation_id
from pythonjsonlogger.core import RESERVED_ATTRS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "X-Request-ID"
# A client's own id is kept when it is a plain token (what proxies and tracers send: UUIDs,
# nginx's $request_id, W3C trace ids); anything else (spaces, quotes, newlines, very long)
# could forge or break log lines, so it is replaced by a generated one.
_ACCEPTED_ID = re.compile(r"[A-Za-z0-9._:+/=-]{1,128}")


def request_id() -> str | None:
    """The id of the request being served (None outside one)."""
    return correlation_id.get()


def _acceptable(value: str) -> bool:
    return _ACCEPTED_ID.fullmatch(value) is not None


def request_id_middleware(app: ASGIApp) -> CorrelationIdMiddleware:
    """Takes the request's X-Request-ID (or makes one), echoes it on the response (a
    WebSocket's handshake answer too) and exposes it to log records and error bodies for
    the request's duration."""
    return CorrelationIdMiddleware(_AcceptHeader(app), header_name=HEADER,
                                   validator=_acceptable)


class _AcceptHeader:
    """Adds the request id to a WebSocket's `websocket.accept` (the middleware above only
    adds it to HTTP responses)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return

        async def send_with_id(message: Message) -> None:
            rid = correlation_id.get()
            if message["type"] == "websocket.accept" and rid is not None:
                message = {**message, "headers": [*message.get("headers", ()),
                                                  (HEADER.lower().encode(), rid.encode())]}
            await send(message)

        await self.app(scope, receive, send_with_id)


REDACTED = "[redacted]"
# What a request can carry its key in (service/deps.py presented_key): a query's
# access_token, its name perhaps percent-encoded (the service decodes it: `access%5Ftoken`
# works), and the Authorization header.  Both reach log lines through URLs (uvicorn's
# access log and WebSocket lines hold the path with its query string) and anything that
# prints a request's headers.
_SECRET_PARAMETER = "access_token"
_QUERY_PAIR = re.compile(r"(?<=[?&;])([^=&;?\s\"']+)=([^&\s\"']*)")
_AUTHORIZATION = re.compile(r"(?i)(\bauthorization\b[\"']?\s*[:=,]\s*[\"']?)([^\"'\r\n]+)")
_BEARER = re.compile(r"(?i)(\bbearer\s+)[^\s\"',;]+")


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """`text` with the value of every `access_token` query parameter, every Authorization
    header value and bearer token, and every string of `secrets` (the configured key, as
    sent and URL-encoded) replaced by REDACTED."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    text = _QUERY_PAIR.sub(_redact_pair, text)
    text = _AUTHORIZATION.sub(lambda m: m.group(1) + REDACTED, text)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


def _redact_pair(match: re.Match) -> str:
    name = match.group(1)
    if unquote_plus(name) != _SECRET_PARAMETER:
        return match.group(0)
    return f"{name}={REDACTED}"


def key_forms(key: str | None) -> tuple[str, ...]:
    """The configured key as a log line could hold it: as sent, and URL-encoded."""
    if not key:
        return ()
    return tuple(dict.fromkeys((key, quote(key, safe=""), quote_plus(key))))


class RedactSecrets(logging.Filter):
    """A handler's filter: every record it writes (the service's, uvicorn's, its access
    log's), message, traceback and extra fields, passed through `redact`, so that no API
    key reaches the log whichever way a client sent it, right or wrong.  One place for
    every logger: the records are rewritten before any formatter sees them."""

    def __init__(self, key: str | None = None) -> None:
        super().__init__()
        self.secrets = key_forms(key)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message, self.secrets)
        if clean != message:
            record.msg, record.args = clean, ()
            # uvicorn's copy of the format string for a terminal, useless without the args.
            record.__dict__.pop("color_message", None)
        if record.exc_info:
            # Formatted here, once, so that the formatter writes the redacted text.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        for field in ("exc_text", "stack_info"):
            value = getattr(record, field, None)
            if value:
                setattr(record, field, redact(value, self.secrets))
        for name, value in vars(record).items():
            if name not in _RECORD_FIELDS and isinstance(value, str):
                setattr(record, name, redact(value, self.secrets))
        return True


# A LogRecord's own attributes (the rest are a call's `extra` fields).
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime"}


def log_config(log_format: str, level: str, api_key: str | None = None) -> dict:
    """uvicorn's `log_config`: every record (the service's, uvicorn's, the access log)
    on stderr, as one JSON object a line (`json`) or as plain text (`text`), each with
    the id of the request it was written for (`request_id`, null outside requests), and
    no API key (RedactSecrets: `api_key` is the configured one, redacted wherever it
    appears)."""
    if log_format == "json":
        formatter = {"()": "pythonjsonlogger.json.JsonFormatter",
                     "fmt": "%(levelname)s %(name)s %(message)s %(correlation_id)s",
                     "timestamp": "time",     # ISO 8601, UTC
                     "rename_fields": {"levelname": "level", "name": "logger",
                                       "correlation_id": "request_id"},
                     # uvicorn's copy of its message with terminal colour codes.
                     "reserved_attrs": [*RESERVED_ATTRS, "color_message"]}
    else:
        formatter = {"format": "%(asctime)s %(levelname)s %(name)s [%(correlation_id)s] "
                               "%(message)s"}
    handler = {"class": "logging.StreamHandler", "stream": "ext://sys.stderr",
               "formatter": "default", "filters": ["request_id", "redact"]}
    loggers = {name: {"handlers": ["default"], "level": level.upper(), "propagate": False}
               for name in ("motifstream", "uvicorn", "uvicorn.error", "uvicorn.access",
                            "asgi_correlation_id")}
    return {"version": 1, "disable_existing_loggers": False,
            "filters": {"request_id": {"()": "asgi_correlation_id.CorrelationIdFilter",
                                       "default_value": None},
                        "redact": {"()": RedactSecrets, "key": api_key}},
            "formatters": {"default": formatter},
            "handlers": {"default": handler},
            "loggers": loggers,
            "root": {"handlers": ["default"], "level": "WARNING"}}
