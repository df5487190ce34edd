"""Owns request ids and the server's log output: X-Request-ID on every response, JSON log lines."""
from __future__ import annotations

import re

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


def log_config(log_format: str, level: str) -> dict:
    """uvicorn's `log_config`: every record (the service's, uvicorn's, the access log)
    on stderr, as one JSON object a line (`json`) or as plain text (`text`), each with
    the id of the request it was written for (`request_id`, null outside requests)."""
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
               "formatter": "default", "filters": ["request_id"]}
    loggers = {name: {"handlers": ["default"], "level": level.upper(), "propagate": False}
               for name in ("motifstream", "uvicorn", "uvicorn.error", "uvicorn.access",
                            "asgi_correlation_id")}
    return {"version": 1, "disable_existing_loggers": False,
            "filters": {"request_id": {"()": "asgi_correlation_id.CorrelationIdFilter",
                                       "default_value": None}},
            "formatters": {"default": formatter},
            "handlers": {"default": handler},
            "loggers": loggers,
            "root": {"handlers": ["default"], "level": "WARNING"}}
