"""Owns the service's settings: one pydantic-settings class, read from flags and MOTIFSTREAM_*
env."""
from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

MIB = 1 << 20
# The labeled GH slice shipped with the package (`motifstream match` without inputs).
DEMO_GRAPH = Path(str(resources.files("service") / "demo" / "graph.txt"))


class Settings(BaseSettings):
    """Every tunable of `motifstream serve`; environment variables are MOTIFSTREAM_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="MOTIFSTREAM_", extra="forbid")

    # Where the SQLite store and the graph snapshots live.
    data_dir: Path = Path("motifstream-data")
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    backend: Literal["auto", "cpu", "cuda"] = "auto"
    # The CUDA executor's graph layout on the device (gpu/config.py's DEVICE_GRAPHS).
    device_graph: Literal["pma", "lists"] = "pma"
    # The graph's kind for a store that holds none yet: edges are arcs u -> v (true) or
    # undirected (false).  A store that holds a graph keeps its kind; a contradicting
    # setting stops the start.  Unset: the store's kind (undirected for a new one).
    directed: bool | None = None
    # Edges expire (issue 23): a batch that moves the watermark (the largest event time
    # accepted) to T deletes every edge timed <= T - retention with it.  Fixed with the
    # store's graph like its kind; unset: the store's (never, for a new one).
    retention: int | None = Field(default=None, ge=0)
    # When set, every route but /healthz and /readyz needs `Authorization: Bearer <key>`.
    api_key: SecretStr | None = None
    # Initial bulk load (only into an empty store): a graph file or an edge list.
    graph: Path | None = None
    # Bulk-load the embedded demo graph (service/demo/graph.txt, the one `motifstream
    # match` replays) instead: the README's tour.  An explicit flag, not what a bare
    # `serve` does, since a server started without a graph is one waiting for PUT /v1/graph.
    demo: bool = False
    labels: Path | None = None
    num_labels: int | None = Field(None, ge=1)
    label_seed: int = 0
    # full: a commit survives power loss (fsync per batch); normal: survives process crashes.
    synchronous: Literal["full", "normal"] = "full"
    # Where the store's write transactions run: a child process (their CPU time and GIL
    # hand-offs leave the server's process) or a thread of the server.
    store_writer: Literal["process", "thread"] = "process"
    max_request_bytes: int = Field(64 * MIB, ge=1024)
    max_batch_updates: int = Field(1_000_000, ge=1)
    max_query_vertices: int = Field(32, ge=2, le=32)
    # Cap (and default) for a query's max_matches_per_batch when it delivers matches.
    max_matches_per_batch: int = Field(10_000, ge=1)
    # Batches of events kept per query; older ones are pruned (resuming past them is a 410).
    result_retention: int = Field(100_000, ge=1)
    idempotency_retention: int = Field(100_000, ge=1)
    # A graph snapshot every this many batches bounds recovery (0: only at bulk load).
    snapshot_every: int = Field(10_000, ge=0)
    # Live events buffered per subscriber; a subscriber that falls further behind reads
    # from the result log instead (ingest never waits for it).
    subscriber_buffer: int = Field(1024, ge=1)
    # A result stream (SSE, WebSocket) whose client has not taken a write for this long
    # (its socket stopped draining) is cut: its subscription is released and its last
    # event, `lagging`, waits behind what the socket already holds (docs/service.md).
    subscriber_stall_seconds: float = Field(30.0, gt=0)
    # A result stream more than this many batches behind the last committed one when its
    # live buffer overflows is cut the same way.  Unset: it reads the log until it catches
    # up (its memory stays bounded either way).
    subscriber_max_lag: int | None = Field(None, ge=1)
    # The kernel's send buffer of each connection, in bytes (Linux doubles it); unset (an
    # empty variable): the kernel sizes it, up to net.ipv4.tcp_wmem's maximum (4 MiB by
    # default).  It is what a client that stopped reading is written before its stream
    # stalls: autotuned, the buffer of such a client grew to 4 MiB and the server went on
    # writing it every event for tens of seconds (docs/benchmarks.md, "Subscriber
    # pressure").  Large responses over a long round trip want more (a bandwidth-delay
    # product's worth).
    socket_send_buffer: int | None = Field(128 * 1024, ge=4096)
    # How long an idle keep-alive connection stays open after its last response (uvicorn's
    # timeout_keep_alive, 5 s by default).  Longer than a load balancer's idle timeout (60
    # s on AWS ALB) so that the balancer, not the service, closes a pooled connection (else
    # a request it sends as the service closes gets a 502); and idle clients that reconnect
    # when closed cost a connection and a request each time: 500 of them at 5 s took 17% of
    # the batch rate and doubled its p99 on two cores (docs/benchmarks.md).
    keep_alive_seconds: float = Field(75.0, gt=0)
    # A result stream (SSE, WebSocket) that sent nothing for this long sends a `progress`
    # event, "complete through batch N", even for a query no batch touched; on SSE it is
    # also the keep-alive (it replaced the `: ping` comment and its sse_ping_seconds).
    heartbeat_seconds: float = Field(1.0, gt=0)
    # The reconnection delay SSE asks EventSource to wait (its `retry:` field).
    sse_retry_ms: int = Field(1000, ge=0)
    # The result log and the idempotency keys are pruned to their retention every
    # prune_every batches (in that batch's transaction) and every prune_seconds seconds
    # from a timer in the lifespan (0: no timer), so that a stream that stops short of
    # the next multiple is pruned too.
    prune_every: int = Field(1000, ge=1)
    prune_seconds: float = Field(60.0, ge=0)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # On the CPU executor, let batches queued behind each other share one search (batch
    # groups, gpu/pipeline.py): with many concurrent clients it raises one-edge batches/s
    # by a fifth or more, with few it changes little (docs/benchmarks.md).  The CUDA
    # executor always pipelines.
    cpu_batch_groups: bool = True
    # Numba threads of the CPU executor's parallel regions (None: three quarters of the
    # CPUs, at least one).  The rest are the event loop's, the store writer's and the
    # clients': on a 16-CPU host with the workers sharing their work, 12 threads gave
    # 100-edge batches a p99 of 41 ms against 53-61 with 8, and one-edge batches the same
    # 1,465 batches/s with 32 clients (docs/benchmarks.md).
    engine_threads: int | None = Field(None, ge=1)
    # One log line per HTTP request (uvicorn's access log): off by default, since at
    # hundreds of batches per second it is a measurable share of the event loop's time.
    access_log: bool = False
    # Server log lines: one JSON object each (time, level, logger, message, request_id), or
    # plain text for a terminal.
    log_format: Literal["json", "text"] = "json"
    # Origins (scheme://host[:port]) whose browser pages may call the API (CORS); "*" for
    # any.  Empty (the default): no CORS headers, browsers allow only same-origin calls.
    # The environment takes a comma-separated list or a JSON list.
    cors_origins: Annotated[list[str], NoDecode] = []
    # Per-route HTTP metrics (http_* in /metrics).  Off saves each request a few tens of
    # microseconds of the event loop's time (docs/service.md): for the highest batch rates.
    http_metrics: bool = True
    # Webhooks (service/webhooks.py): a delivery is tried at most webhook_attempts times,
    # waiting webhook_backoff_seconds after the first failure, twice that after the second,
    # and so on up to webhook_backoff_max_seconds; then the event is a dead letter.  Each
    # POST may take webhook_timeout_seconds.
    webhook_attempts: int = Field(8, ge=1)
    webhook_backoff_seconds: float = Field(0.5, ge=0)
    webhook_backoff_max_seconds: float = Field(60.0, ge=0)
    webhook_timeout_seconds: float = Field(10.0, gt=0)
    # Kafka sinks (service/kafka.py): after a failure (broker unreachable, a transaction
    # refused) a sink starts again after kafka_backoff_seconds, twice that after the next,
    # up to kafka_backoff_max_seconds, for as long as it takes (Kafka is the log of
    # record: no dead letters).  A broker call may take kafka_timeout_seconds.
    kafka_backoff_seconds: float = Field(0.5, ge=0)
    kafka_backoff_max_seconds: float = Field(60.0, ge=0)
    kafka_timeout_seconds: float = Field(30.0, gt=0)

    def numba_threads(self) -> int:
        """The engine thread's Numba thread count: engine_threads, or three quarters of
        the CPUs, at most the threads Numba was started with."""
        import numba
        wanted = self.engine_threads or max(1, (os.cpu_count() or 1) * 3 // 4)
        return min(wanted, numba.config.NUMBA_NUM_THREADS)

    @field_validator("api_key", "graph", "labels", "num_labels", "engine_threads",
                     "subscriber_max_lag", "socket_send_buffer", mode="before")
    @classmethod
    def _empty_is_unset(cls, value):
        # Compose passes `VAR: ${VAR:-}` as an empty string: that means "not set".
        return None if value == "" else value

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value):
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("cors_origins")
    @classmethod
    def _check_origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            if origin == "*":
                continue
            parts = urlsplit(origin)
            if (parts.scheme not in ("http", "https") or not parts.netloc
                    or parts.path not in ("", "/") or parts.query or parts.fragment):
                raise ValueError(f"cors_origins: {origin!r} is not an origin "
                                 "(scheme://host[:port], or *)")
        return [origin.rstrip("/") for origin in origins]

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> Settings:
        if self.api_key is not None and len(self.api_key.get_secret_value()) < 16:
            raise ValueError("api_key must be at least 16 characters")
        if self.labels is not None and self.num_labels is not None:
            raise ValueError("give labels or num_labels, not both")
        if self.demo:
            if (self.graph not in (None, DEMO_GRAPH) or self.labels is not None
                    or self.num_labels is not None):
                raise ValueError("demo loads the embedded demo graph: give demo or graph "
                                 "(with labels or num_labels), not both")
            self.graph = DEMO_GRAPH
        return self
