"""Owns the Prometheus registry: batch latency histogram, throughput counters, state gauges,
and beside them the process's (CPU, memory, file descriptors, GC) and, registered by the
HTTP instrumentator of service/main.py, the per-route request metrics (http_*)."""
from __future__ import annotations

from prometheus_client import (GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR,
                               CollectorRegistry, Counter, Histogram, generate_latest)
from prometheus_client.core import GaugeMetricFamily
from prometheus_fastapi_instrumentator import Instrumentator
from prometheus_fastapi_instrumentator import metrics as http_metrics

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
        r.register(_StateCollector(self))
        # The process's own metrics (process_*, python_*): the collectors are stateless
        # readers of /proc and the interpreter, so the default registry's are shared.
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            r.register(collector)

    def attach(self, state) -> None:
        """Read the state gauges from `state` (a ServiceState) from now on."""
        self._service = state

    def batch(self, updates: int, result, seconds: float) -> None:
        self.batch_seconds.observe(seconds)
        self.batches.inc()
        self.updates.inc(updates)
        self._inserted.inc(result.applied.get("edges_inserted", 0))
        self._deleted.inc(result.applied.get("edges_deleted", 0))
        self._positive.inc(sum(d.positive for d in result.queries.values()))
        self._negative.inc(sum(d.negative for d in result.queries.values()))

    def instrument_http(self, app) -> None:
        """Per-route HTTP metrics into this registry, as the instrumentator's defaults less
        its in-progress gauge (registered process-wide whatever the registry given, so a
        second app in one process fails) and with a request size that skips a
        Content-Length that is not a number (the default's int() of it raises: a 500)."""
        registry = self.registry
        Instrumentator(registry=registry).add(
            http_metrics.requests(registry=registry),
            http_metrics.latency(should_exclude_streaming_duration=True,
                                 buckets=_LATENCY_BUCKETS, registry=registry),
            _declared_sizes_only(http_metrics.request_size(
                should_include_method=False, should_include_status=False,
                registry=registry)),
            http_metrics.response_size(should_include_method=False,
                                       should_include_status=False, registry=registry),
        ).instrument(app)

    def rejected(self) -> None:
        """One batch refused (counted by service/main.py's _BatchRoute, for every cause)."""
        self.rejections.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _declared_sizes_only(instrumentation):
    def observe(info) -> None:
        if info.request.headers.get("content-length", "0").isdigit():
            instrumentation(info)
    return observe


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
