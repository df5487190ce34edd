"""Builds the HTTP app: settings, lifespan-owned services, routers, error mapping."""
from __future__ import annotations

import asyncio
import gc
import ipaddress
import logging
import os
import socket
import sys
import time
from contextlib import asynccontextmanager
from http import HTTPStatus
from urllib.parse import quote

import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpu.config import EngineConfig
from gpu.cpu import interpreted
from gpu.io.records import FormatError
from gpu.plan.query import QueryError
from service.deps import require_api_key
from service.engine_service import (Conflict, EngineService, IdempotencyKeyInFlight,
                                    IdempotencyKeyReused, QueryNotFound, ServiceUnavailable)
from service.hub import Hub, SubscriptionGone
from service.ingest import InputError, PayloadTooLarge, UnsupportedMediaType
from service.labels import LabelError
from service.logs import HEADER as REQUEST_ID_HEADER
from service.logs import log_config, request_id, request_id_middleware
from service.metrics import Metrics
from service.openapi import app_routes, openapi_document
from service.retention import start_pruning, stop_pruning
from service.kafka import KafkaDeliverer
from service.routes import (batches, docs, events, graph, health, kafka, queries, snapshots,
                            webhooks)
from service.settings import Settings
from service.state import ServiceState
from service.webhooks import Deliverer
from storage import Store
from storage.writer_process import Launched

log = logging.getLogger("motifstream.service")

# Exit status when the storage writer process dies under the server (EX_SOFTWARE).
EXIT_WRITER_LOST = 70
# The server's threshold for collecting the youngest generation of objects (see serve).
GC_YOUNG_THRESHOLD = 10_000


@asynccontextmanager
async def lifespan(app: FastAPI):
    settings: Settings = app.state.settings
    warn_if_unprotected(settings)
    store = Store.open(settings.data_dir, synchronous=settings.synchronous,
                       result_retention=settings.result_retention,
                       idempotency_retention=settings.idempotency_retention,
                       prune_every=settings.prune_every,
                       writer_process=settings.store_writer == "process",
                       on_writer_lost=_writer_lost,
                       launched_writer=getattr(app.state, "launched_writer", None))
    app.state.launched_writer = None    # the store's now
    hub = Hub(store, settings.subscriber_buffer)
    metrics: Metrics = app.state.metrics
    engine = EngineService(settings, store, hub, metrics)
    state = ServiceState(settings, store, hub, engine, metrics)
    metrics.attach(state)
    app.state.motifstream = state
    # Recovery runs behind the server: /healthz answers at once, /readyz once it is done,
    # and requests wait their turn on the engine thread.
    startup = asyncio.create_task(_start(state, app.state.freeze_gc_when_ready))
    pruning = start_pruning(store, settings.prune_seconds)
    app.state.webhooks = deliverer = Deliverer(store, hub, settings)
    await deliverer.start()
    app.state.kafka = kafka_deliverer = KafkaDeliverer(
        store, hub, backoff=settings.kafka_backoff_seconds,
        backoff_max=settings.kafka_backoff_max_seconds, timeout=settings.kafka_timeout_seconds)
    await kafka_deliverer.start()
    metrics.attach_outputs(webhook=deliverer, kafka=kafka_deliverer)
    try:
        yield
    finally:
        await stop_pruning(pruning)
        await deliverer.close()
        await kafka_deliverer.close()
        await asyncio.shield(asyncio.gather(startup, return_exceptions=True))
        await asyncio.to_thread(engine.close)
        await hub.close()
        store.close()


def _writer_lost() -> None:
    """The store's writer process died under the server: whether the batches in flight
    were committed is unknown, and nothing more can be made durable.  End the process as
    a crash would (clients see their connection drop, not a 503 claiming that nothing was
    applied); a restart recovers exactly what was committed."""
    log.critical("the storage writer process is gone; exiting so that a restart recovers")
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(EXIT_WRITER_LOST)


def warn_if_unprotected(settings: Settings) -> None:
    """Say loudly (a WARNING and a plain line on stderr, which a JSON log pipeline may not
    show) when anyone who can reach the port may change the graph: no API key, and a host
    that is not loopback-only."""
    if settings.api_key is not None or _loopback(settings.host):
        return
    message = (f"no API key is set and the service listens on {settings.host}: anyone who "
               "can reach it may read and change the graph and the queries; set "
               "MOTIFSTREAM_API_KEY, or listen on 127.0.0.1")
    log.warning(message)
    print(f"motifstream: WARNING: {message}", file=sys.stderr, flush=True)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:      # a host name: it may resolve to any interface
        return False


async def _start(state: ServiceState, freeze_gc: bool) -> None:
    """Recovery and the warm-up on the engine thread, then ready.  With `freeze_gc` (the
    server process), the cycle collector, which serve() paused, runs again from recovery
    on: the imports, the app and the store's opening are frozen out of its reach first
    (_freeze_gc at ready freezes the rest)."""
    before = time.process_time()      # imports, the app, uvicorn, the store's opening
    engine = state.engine
    if freeze_gc:
        # What the paused collector would have found so far: ~800 objects the imports
        # dropped, frozen with the rest (collecting them cost 0.13 s).  Recovery runs with
        # it on: replaying the batch log leaves cycles (its batch groups) in proportion to
        # the batches, which must not pile up while it is off.
        gc.freeze()
        gc.enable()
    try:
        await engine.call(engine.start)
    except Exception as exc:
        engine.failure = f"start-up failed: {exc}"
        log.exception("start-up failed")
        return
    if freeze_gc:
        _freeze_gc(collect=engine.compiling.compiled > 0)
    state.ready = True
    # CPU time, not wall time: on a shared machine the wall time says more about the others.
    log.info("ready: batch %d, backend %s, %d kernels compiled%s, %.2f s of CPU since the "
             "process started (%.2f s before recovery began)", engine.seq, engine.backend,
             engine.compiling.compiled,
             " (running as plain Python until the background compile is done)"
             if interpreted.active() else "", time.process_time(), before)


def _freeze_gc(collect: bool) -> None:
    """Move everything start-up left alive (the recovered engine, compiled kernels, the
    app: ~170,000 objects) out of the cycle collector's reach: it has no garbage to find
    there, and scanning it held the GIL for ~100 ms at every full collection, the
    event loop and the engine thread waiting (docs/benchmarks.md).  Later objects are
    collected as before.  The garbage start-up left is collected first when Numba
    compiled (its compiler leaves many cycles); a start that only loaded kernels leaves
    a few hundred objects, not worth a full collection's 0.1-0.3 s before ready."""
    t0 = time.perf_counter()
    found = gc.collect() if collect else 0
    gc.freeze()
    if log.isEnabledFor(logging.DEBUG):     # counting the frozen walks them: 20 ms
        log.debug("start-up's garbage: %d objects collected, %d frozen, in %.2f s", found,
                  gc.get_freeze_count(), time.perf_counter() - t0)


# RFC 9457 media type of every error answer.
PROBLEM_JSON = "application/problem+json"


def _error_body(request: Request, status: int, detail: str, code: str,
                headers: dict | None = None, **extensions) -> JSONResponse:
    """Every error answer, an RFC 9457 problem: `type` (about:blank: the status says what
    kind of error it is), `title` (the status phrase), `status`, `detail` (what was wrong,
    naming the field, line or setting), `instance` (the request's path), `code` (a stable
    name for the case, for clients that must tell two errors of one status apart, such
    as a retry still in flight and a graph already loaded), the request's id (as in
    X-Request-ID and the logs, so that a client's report can be matched with the server's
    log lines) and any `extensions` (`errors`, `earliest`)."""
    body = {"type": "about:blank", "title": _title(status), "status": status,
            "detail": detail, "instance": _uri_path(request), "code": code,
            "request_id": request_id(), **extensions}
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_JSON)


def _uri_path(request: Request) -> str:
    """The request's path as a URI reference (`instance`): percent-encoded again where the
    decoded path has what a URI cannot hold (`/v1/queries/é` from `/v1/queries/%C3%A9`)."""
    return quote(request.url.path, safe="/:@!$&'()*+,;=-._~")


# RFC 9110's names where the running Python's HTTPStatus may have an older one (3.13
# renamed them), so that a title does not depend on the server's Python.
_RFC_9110_TITLES = {413: "Content Too Large", 422: "Unprocessable Content"}


def _title(status: int) -> str:
    return _RFC_9110_TITLES.get(status) or HTTPStatus(status).phrase


# The errors the app maps to a status and a `code`, most specific first where one is a
# subclass of another (handlers are found through the exception's MRO).
_MAPPED_ERRORS = (
    (PayloadTooLarge, 413, "payload_too_large"),
    (UnsupportedMediaType, 415, "unsupported_media_type"),
    (IdempotencyKeyReused, 422, "idempotency_key_reused"),
    (InputError, 422, "invalid_input"), (FormatError, 422, "invalid_input"),
    (QueryError, 422, "invalid_input"), (LabelError, 422, "invalid_input"),
    (IdempotencyKeyInFlight, 409, "idempotency_key_in_flight"),
    (Conflict, 409, "conflict"),
    (QueryNotFound, 404, "not_found"),
    (ServiceUnavailable, 503, "unavailable"),
)


def _error(status: int, code: str):
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return _error_body(request, status, str(exc), code)
    return handler


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Starlette's (routing's 404 and 405) and FastAPI's HTTPException (routes and
    dependencies): the status's phrase is the code (not_found, method_not_allowed, ...),
    but for the 422s, which are invalid input as every other."""
    status = exc.status_code
    code = "invalid_input" if status == 422 else \
        _title(status).lower().replace(" ", "_").replace("-", "_")
    detail, headers = str(exc.detail), exc.headers
    if status == 400 and detail == _FASTAPI_BODY_ERROR:
        # A body FastAPI could not even decode (not UTF-8): invalid input, a 422, as every
        # unreadable body the routes read themselves.
        status, code = 422, "invalid_input"
        detail = "body: not a readable JSON document (JSON is UTF-8 text)"
    if status == 405:
        allowed = _allowed_methods(request)
        detail = f"{request.method} {request.url.path}: this path takes {', '.join(allowed)}"
        headers = {**(headers or {}), "Allow": ", ".join(allowed)}
    return _error_body(request, status, detail, code, headers)


# FastAPI's HTTPException(400) detail for a body it could not decode before parsing JSON.
_FASTAPI_BODY_ERROR = "There was an error parsing the body"


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at the request's path.  Starlette's 405 names only
    the methods of the first route that matched the path, and FastAPI has a route per
    method: GET and DELETE /v1/queries/{id} would say `Allow: GET` alone (RFC 9110 wants
    them all)."""
    path = request.scope["path"]
    return sorted({method for route, _ in app_routes(request.app)
                   for method in getattr(route, "methods", None) or ()
                   if route.path_regex.match(path)})


async def _results_gone(request: Request, exc: SubscriptionGone) -> JSONResponse:
    return _error_body(request, 410, str(exc), "results_gone", earliest=exc.earliest)


async def _invalid_body(request: Request, exc: ValidationError) -> JSONResponse:
    return _schema_errors(request, [
        {"loc": ["body", *err["loc"]], "msg": err["msg"], "type": err["type"]}
        for err in exc.errors(include_url=False, include_input=False)])


async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    return _schema_errors(request, [
        {"loc": list(err["loc"]), "msg": err["msg"], "type": err["type"]}
        for err in exc.errors()])


def _schema_errors(request: Request, errors: list[dict]) -> JSONResponse:
    """A 422 for a body or parameter that broke the schema: every error in `errors`
    ({loc, msg, type}, as FastAPI gives them), the first one in `detail`."""
    first = errors[0]
    detail = f"{'.'.join(map(str, first['loc']))}: {first['msg']}"
    if len(errors) > 1:
        detail += f" (and {len(errors) - 1} more in `errors`)"
    return _error_body(request, 422, detail, "invalid_input", errors=errors)


def add_error_handlers(app: FastAPI) -> None:
    """Answer every error the app's routes raise as a problem (_error_body)."""
    for exc_type, status, code in _MAPPED_ERRORS:
        app.add_exception_handler(exc_type, _error(status, code))
    app.add_exception_handler(SubscriptionGone, _results_gone)
    app.add_exception_handler(ValidationError, _invalid_body)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    # Answered by Starlette's outermost middleware, outside the request-id middleware:
    # the header is set here.  (The middleware raises the error on afterwards, and uvicorn
    # logs it, with the request's id.)
    rid = request_id()
    return _error_body(request, 500, "internal server error", "internal_error",
                       {REQUEST_ID_HEADER: rid} if rid is not None else None)


class _BatchRoute:
    """Middleware, innermost of the app's: serves POST /v1/batches through the app's
    `batch_fast_path` (see BatchFastPath for why), inside the request-id, CORS and HTTP
    metrics middleware so that its answers carry and count as every other, and counts
    every refusal of a batch in motifstream_rejected_batches_total, whether the body
    could not be read or parsed, broke a limit or the schema, or the engine refused it."""

    # Answers that refuse a batch for what it is (not 401, which refuses the caller, nor
    # 409, a retry's conflict, nor 503, which is the server's failure).
    REFUSALS = frozenset((400, 413, 415, 422))

    def __init__(self, app: ASGIApp, service: MotifstreamAPI) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (scope["type"] == "http" and scope["path"] == batches.PATH
                and scope["method"] == "POST"):
            await self.app(scope, receive, send)
            return
        service = self.service

        async def counting_send(message: Message) -> None:
            if (message["type"] == "http.response.start"
                    and message["status"] in self.REFUSALS):
                service.state.metrics.rejected()
            await send(message)

        fast = service.batch_fast_path
        if fast is not None and fast.takes(scope):
            await fast(scope, receive, counting_send, fallback=self.app)
        else:
            await self.app(scope, receive, counting_send)


class MotifstreamAPI(FastAPI):
    """FastAPI, except that POST /v1/batches is served first by `batch_fast_path` (see
    BatchFastPath for why; _BatchRoute calls it); set it to None and the route serves it,
    as every other."""

    batch_fast_path: batches.BatchFastPath | None = None


def create_app(settings: Settings | None = None, freeze_gc_when_ready: bool = False
               ) -> MotifstreamAPI:
    """The app; its services start in the lifespan (nothing happens at import).  With
    `freeze_gc_when_ready` (the server process, `serve`), what start-up leaves alive is
    frozen out of the cycle collector's scans (_freeze_gc): a process that builds many
    apps (tests) would keep their cycles for good."""
    app = MotifstreamAPI(title="Motifstream", version="0.1.0", lifespan=lifespan,
                         description="Exact streaming subgraph matching: standing queries "
                                     "over a labeled graph, per-batch match deltas.",
                         docs_url=None, redoc_url=None, openapi_url=None)
    settings = app.state.settings = settings if settings is not None else Settings()
    app.state.freeze_gc_when_ready = freeze_gc_when_ready
    # One registry per app, made here since the HTTP metrics' middleware registers into it
    # when the app first runs (before the lifespan).
    app.state.metrics = metrics = Metrics()
    secured = [Depends(require_api_key)]
    app.include_router(health.health)
    for router in (health.metrics, docs.router, queries.router, batches.router, graph.router,
                   events.router, webhooks.router, kafka.router, snapshots.router):
        app.include_router(router, dependencies=secured)
    add_error_handlers(app)
    app.batch_fast_path = batches.BatchFastPath(app)
    app.openapi = lambda: openapi_document(app, settings.api_key is not None)
    # Added innermost first: request id (outermost, so every answer and log line has one),
    # CORS, HTTP metrics, then the batch route.
    app.add_middleware(_BatchRoute, service=app)
    if settings.http_metrics:
        # The batch route is counted by the metrics middleware itself, not through the
        # instrumentator's route matching (service/metrics.py HttpMetrics).
        metrics.instrument_http(app, direct_routes=[("POST", batches.PATH)])
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                           allow_methods=["*"], allow_headers=["*"],
                           expose_headers=[REQUEST_ID_HEADER, "Idempotent-Replayed"])
    app.add_middleware(request_id_middleware)
    return app


def _key(settings: Settings) -> str | None:
    return settings.api_key.get_secret_value() if settings.api_key is not None else None


class _Server(uvicorn.Server):
    """uvicorn waits for open connections before the lifespan's shutdown runs, and a
    result stream never ends by itself: end the subscriptions first (each gets a last
    `shutdown` event), then shut down as usual.  The listening sockets get the
    socket_send_buffer setting, which the connections they accept inherit."""

    def __init__(self, config: uvicorn.Config, send_buffer: int | None) -> None:
        super().__init__(config)
        self.send_buffer = send_buffer

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets=sockets)
        if self.send_buffer is not None:
            for server in getattr(self, "servers", ()):
                for sock in server.sockets:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)

    async def shutdown(self, sockets=None) -> None:
        state = getattr(self.config.app.state, "motifstream", None)
        if state is not None:
            await state.hub.close()
        await super().shutdown(sockets=sockets)


def serve(settings: Settings, launched_writer: Launched | None = None) -> None:
    """Run the app under uvicorn until SIGINT/SIGTERM; its store takes over
    `launched_writer` (Store.launch_writer), started beforehand for it."""
    # OpenMP workers (Numba's parallel layer) spin after each parallel region by default;
    # on a small machine they would spin on the cores the event loop and the store writer
    # need.  On one with enough cores for the CPU executor's shared parallel region
    # (EngineConfig.shared_region_threads) they spin on spare cores, and passive workers
    # would make every region wait for them to wake (a one-edge batch 0.25 -> 6.5 ms
    # median on a 16-core host, docs/benchmarks.md).  Read when the layer loads, at the
    # first parallel call, so setting it now is in time.
    if settings.numba_threads() < EngineConfig().shared_region_threads:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # The event loop, the engine thread and the store writer hand each request on to one
    # another; with the default 5 ms GIL switch interval every hand-off can wait that long.
    sys.setswitchinterval(0.0005)
    # The youngest generation collected after 10,000 net allocations instead of 700.
    # Requests leave cyclic garbage (asyncio's coroutines, futures and their callbacks)
    # that only the collector frees, so at the default it ran every ~20 batches; less
    # often, it frees the same garbage with fewer passes over what survives, and every
    # pass holds the GIL.
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    # Off until recovery begins (_start turns it on): the imports, the app and uvicorn's
    # start make ~190,000 objects that stay alive, and the collector's passes over them
    # found next to nothing to free (docs/benchmarks.md).
    gc.disable()
    app = create_app(settings, freeze_gc_when_ready=True)
    app.state.launched_writer = launched_writer
    config = uvicorn.Config(app,
                            host=settings.host, port=settings.port,
                            log_level=settings.log_level, access_log=settings.access_log,
                            log_config=log_config(settings.log_format, settings.log_level,
                                                  _key(settings)),
                            timeout_keep_alive=settings.keep_alive_seconds,
                            timeout_graceful_shutdown=10)
    _Server(config, settings.socket_send_buffer).run()
