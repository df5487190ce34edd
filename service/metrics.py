"""Owns the Prometheus registry: batch latency histogram, throughput counters, state gauges,
and beside them the process's (CPU, memory, file descriptors, GC) and the per-route request
metrics (http_*) with the middleware that records them (HttpMetrics)."""
from __future__ import annotations

from collections.abc import Iterable
from time import perf_counter

from prometheus_client import (GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR,
                               CollectorRegistry, Counter, Histogram, Summary, generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_fastapi_instrumentator.metrics import Info
from prometheus_fastapi_instrumentator.middleware import PrometheusInstrumentatorMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpu.cuda.device import device_memory_bytes

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                    5.0, 10.0, 30.0, 60.0)


class Metrics:
    """One registry per app (tests build many apps); gauges are read at scrape time."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.batch_seconds = Histogram(
            "motifstream_batch_seconds", "Engine-thread time per accepted batch, from start to "
            "durable (apply + persist)", buckets=_LATENCY_BUCKETS, registry=r)
        self.batches = Counter("motifstream_batches", "Batches accepted and durable", registry=r)
        self.rejections = Counter("motifstream_rejected_batches",
                                  "Batches refused (nothing applied): unreadable, over a "
                                  "limit, malformed or rejected by the engine", registry=r)
        self.updates = Counter("motifstream_updates", "Update records in accepted batches",
                               registry=r)
        self.edges = Counter("motifstream_edges_changed", "Edges inserted or deleted", ["op"],
                             registry=r)
        self.matches = Counter("motifstream_matches",
                               "Incremental matches reported, over all queries", ["sign"],
                               registry=r)
        # The labelled children, looked up once (each lookup takes a lock).
        self._inserted, self._deleted = self.edges.labels("insert"), self.edges.labels("delete")
        self._positive = self.matches.labels("positive")
        self._negative = self.matches.labels("negative")
        self._service = None
        self._outputs: dict = {}        # push outputs by name (service/query_tasks.py)
        r.register(_StateCollector(self))
        # The process's own metrics (process_*, python_*): the collectors are stateless
        # readers of /proc and the interpreter, so the default registry's are shared.
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            r.register(collector)

    def attach(self, state) -> None:
        """Read the state gauges from `state` (a ServiceState) from now on."""
        self._service = state

    def attach_outputs(self, **outputs) -> None:
        """Report these push outputs (name=QueryTasks: webhook, kafka) from now on."""
        self._outputs = outputs

    def batch(self, updates: int, result, seconds: float) -> None:
        self.batch_seconds.observe(seconds)
        self.batches.inc()
        self.updates.inc(updates)
        self._inserted.inc(result.applied.get("edges_inserted", 0))
        self._deleted.inc(result.applied.get("edges_deleted", 0))
        self._positive.inc(sum(d.positive for d in result.queries.values()))
        self._negative.inc(sum(d.negative for d in result.queries.values()))

    def instrument_http(self, app, direct_routes: Iterable[tuple[str, str]] = ()) -> None:
        """Per-route HTTP metrics (HttpRequestMetrics) into this registry, recorded by the
        HttpMetrics middleware; `direct_routes` are (method, path) of routes without path
        parameters that it counts itself (see HttpMetrics)."""
        app.add_middleware(HttpMetrics, metrics=HttpRequestMetrics(self.registry),
                           direct_routes=tuple(direct_routes))

    def rejected(self) -> None:
        """One batch refused (counted by service/main.py's _BatchRoute, for every cause)."""
        self.rejections.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class HttpRequestMetrics:
    """The per-route request metrics, named, labelled and documented as
    prometheus-fastapi-instrumentator's defaults (`handler` the route's template, `status`
    grouped as 2xx...), less its in-progress gauge (registered process-wide whatever the
    registry given, so a second app in one process fails), with the latency to the first
    byte of the answer (a stream's life is not its latency) and a request size that skips a
    Content-Length that is not a number (the default's int() of it raises: a 500)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("http_requests", "Total number of requests by method, status "
                                "and handler.", ["handler", "method", "status"],
                                registry=registry)
        self.latency = Histogram("http_request_duration_seconds", "Duration of HTTP requests "
                                 "in seconds", ["handler", "method", "status"],
                                 buckets=_LATENCY_BUCKETS, registry=registry)
        self.request_size = Summary("http_request_size_bytes", "Content bytes of requests.",
                                    ["handler"], registry=registry)
        self.response_size = Summary("http_response_size_bytes", "Content bytes of "
                                     "responses.", ["handler"], registry=registry)

    def observe(self, info: Info) -> None:
        """One request the instrumentator's middleware saw (its instrumentation callback)."""
        handler, method, status = info.modified_handler, info.method, info.modified_status
        self.requests.labels(handler, method, status).inc()
        self.latency.labels(handler, method, status).observe(
            info.modified_duration_without_streaming)
        declared = info.request.headers.get("content-length", "0")
        if declared.isdigit():
            self.request_size.labels(handler).observe(int(declared))
        self.response_size.labels(handler).observe(
            int(info.response.headers.get("content-length", 0)))


class HttpMetrics:
    """Pure ASGI middleware recording HttpRequestMetrics.  Most routes go through
    prometheus-fastapi-instrumentator's middleware, which finds each request's route template
    (`/v1/queries/{query_id}`, `none` for an unknown path) as the router does.  That costs
    every request a Request and a Response object, a walk over the routes and an
    asyncio.gather: a sixth to a quarter of the service's one-edge batch rate on two cores
    when the batch route went through it (docs/benchmarks.md).  The `direct_routes` (the batch
    route) have no path parameter, so their template is their path: their requests are
    recognised by method and path and recorded here into the same metrics, with the
    labelled series looked up once."""

    def __init__(self, app: ASGIApp, metrics: HttpRequestMetrics,
                 direct_routes: tuple[tuple[str, str], ...]) -> None:
        self.app = app
        self.instrumented = PrometheusInstrumentatorMiddleware(
            app, should_group_status_codes=True, instrumentations=[metrics.observe])
        self.direct = {(method, path): _DirectRoute(metrics, method, path)
                       for method, path in direct_routes}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.direct.get((scope["method"], scope["path"])) \
            if scope["type"] == "http" else None
        if route is None:
            await self.instrumented(scope, receive, send)
            return
        start = perf_counter()
        # As the instrumentator: a request whose answer never started is a 500 of no time.
        status, first_byte, response_bytes = 500, start, 0

        async def timed_send(message: Message) -> None:
            nonlocal status, first_byte, response_bytes
            if message["type"] == "http.response.start":
                first_byte = perf_counter()
                status = message["status"]
                response_bytes = _content_length(message.get("headers", ())) or 0
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            route.record(status, first_byte - start, _content_length(scope["headers"]),
                         response_bytes)


class _DirectRoute:
    """One direct route's series of HttpRequestMetrics, labelled once (a `labels()` call
    takes a lock and builds a key) and per status class on its first use."""

    def __init__(self, metrics: HttpRequestMetrics, method: str, template: str) -> None:
        self.metrics, self.method, self.template = metrics, method, template
        self.request_size = metrics.request_size.labels(template)
        self.response_size = metrics.response_size.labels(template)
        self.by_status: dict[int, tuple] = {}

    def record(self, status: int, seconds: float, request_bytes: int | None,
               response_bytes: int) -> None:
        series = self.by_status.get(status)
        if series is None:
            labels = (self.template, self.method, f"{str(status)[0]}xx")
            series = self.by_status[status] = (self.metrics.requests.labels(*labels),
                                               self.metrics.latency.labels(*labels))
        series[0].inc()
        series[1].observe(seconds)
        if request_bytes is not None:
            self.request_size.observe(request_bytes)
        self.response_size.observe(response_bytes)


def _content_length(headers) -> int | None:
    """The Content-Length of raw ASGI headers (lower-case names): 0 when absent, None when
    it is not a number (HttpRequestMetrics.observe's rule)."""
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return 0


class _StateCollector:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self):
        state = self.metrics._service
        if state is None:
            return
        engine = state.engine
        graph = engine.engine.graph if engine.engine is not None else None
        subscribers = state.hub.totals()
        values = {
            "motifstream_graph_vertices": ("Vertices in the data graph",
                                           graph.num_vertices if graph else 0),
            "motifstream_graph_edges": ("Undirected edges in the data graph",
                                        graph.num_edges if graph else 0),
            "motifstream_last_batch": ("Sequence number of the last durable batch", engine.seq),
            "motifstream_queries": ("Standing queries", len(engine.queries)),
            "motifstream_subscribers": ("Open result subscriptions", subscribers.subscribers),
            "motifstream_subscriber_lag_max": ("Batches the slowest subscriber is behind",
                                               subscribers.max_lag),
            "motifstream_store_bytes": ("Bytes of the store: database, WAL and snapshots",
                                        state.store.size_bytes()),
            "motifstream_device_memory_bytes": ("Bytes held by the CUDA memory pool (0 on CPU)",
                                                device_memory_bytes() or 0),
            "motifstream_ready": ("1 once recovery and warm-up are done", int(state.ready)),
        }
        for name, (doc, value) in values.items():
            yield GaugeMetricFamily(name, doc, value=value)
        yield from _push_metrics(self.metrics._outputs, engine.seq)


def _push_metrics(outputs: dict, last_batch: int):
    """The push outputs' counts (service/query_tasks.py QueryTasks) by output kind."""
    events = CounterMetricFamily("motifstream_push_events", "Result events pushed out, by "
                                 "output and outcome (delivered; dead_letter: given up on)",
                                 labels=["output", "outcome"])
    failures = CounterMetricFamily("motifstream_push_failures", "Failed delivery attempts "
                                   "(each one retried or given up on)", labels=["output"])
    running = GaugeMetricFamily("motifstream_push_outputs", "Push outputs delivering",
                                labels=["output"])
    lag = GaugeMetricFamily("motifstream_push_lag_max", "Batches the furthest-behind push "
                            "output's cursor is behind the last durable batch",
                            labels=["output"])
    for name, output in outputs.items():
        events.add_metric([name, "delivered"], output.delivered)
        events.add_metric([name, "dead_letter"], output.dead_letters)
        failures.add_metric([name], output.failures)
        running.add_metric([name], len(output.cursors))
        lag.add_metric([name], output.lag(last_batch))
    yield from (events, failures, running, lag)
