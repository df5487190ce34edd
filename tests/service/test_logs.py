"""The server's log output (service/logs.py): one JSON object a line, with the request's id."""
from __future__ import annotations

import json
import logging
import logging.config
import re

import pytest
from asgi_correlation_id import correlation_id

from service.logs import log_config

_LOGGERS = ("motifstream", "uvicorn", "uvicorn.error", "uvicorn.access",
            "asgi_correlation_id")


@pytest.fixture
def configured():
    """Applies a log_config as `serve` does, and puts the loggers back afterwards."""
    loggers = [logging.getLogger(name) for name in ("", *_LOGGERS)]
    saved = [(lg, lg.handlers[:], lg.level, lg.propagate, lg.filters[:]) for lg in loggers]

    def apply(log_format: str) -> None:
        logging.config.dictConfig(log_config(log_format, "info"))

    yield apply
    for lg, handlers, level, propagate, filters in saved:
        lg.handlers[:], lg.filters[:] = handlers, filters
        lg.setLevel(level)
        lg.propagate = propagate


def test_json_lines_carry_the_request_id(configured, capsys):
    configured("json")
    token = correlation_id.set("req-42")
    try:
        logging.getLogger("motifstream.service").warning("batch %d refused", 7)
    finally:
        correlation_id.reset(token)
    logging.getLogger("uvicorn.error").info("outside any request",
                                            extra={"color_message": "\x1b[36mcoloured"})
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(r["level"], r["logger"], r["message"], r["request_id"]) for r in lines] == [
        ("WARNING", "motifstream.service", "batch 7 refused", "req-42"),
        ("INFO", "uvicorn.error", "outside any request", None)]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00", r["time"])
               for r in lines)
    assert all(set(r) == {"time", "level", "logger", "message", "request_id"} for r in lines)


def test_text_lines_for_a_terminal(configured, capsys):
    configured("text")
    token = correlation_id.set("req-43")
    try:
        logging.getLogger("motifstream.service").info("ready")
    finally:
        correlation_id.reset(token)
    line, = capsys.readouterr().err.splitlines()
    assert line.endswith("INFO motifstream.service [req-43] ready")
