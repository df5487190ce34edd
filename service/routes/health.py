"""Owns the operations routes: liveness, readiness and Prometheus metrics."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse

from gpu.cpu import interpreted
from service.deps import StateDep, reject_unknown_parameters
from service.metrics import CONTENT_TYPE
from service.schemas import Liveness, Readiness

# Unknown query parameters are refused here as on every route (a probe's typo is a 422 too).
health = APIRouter(tags=["operations"], dependencies=[Depends(reject_unknown_parameters)])
metrics = APIRouter(tags=["operations"], dependencies=[Depends(reject_unknown_parameters)])


@health.get("/healthz", response_model=Liveness)
async def healthz():
    """The process is up (it may still be recovering: see /readyz)."""
    return {"status": "ok"}


@health.get("/readyz", response_model=Readiness, responses={503: {
    "description": "Not ready: still starting (recovery, kernel warm-up), or start-up failed",
    "content": {"application/json": {"schema": {
        "$ref": "#/components/schemas/ReadinessPending"}}}}})
async def readyz(state: StateDep):
    """200 once recovery and kernel warm-up are done; 503 before (or if recovery failed)."""
    engine = state.engine
    if state.ready:
        return {"status": "ready", "batch": engine.seq, "backend": engine.backend,
                "kernels": "interpreted" if interpreted.active() else "compiled"}
    if engine.failure is not None:
        return JSONResponse({"status": "failed", "detail": engine.failure}, status_code=503)
    # What it is doing: recovering, compiling kernels (a first start: how far), warming.
    return JSONResponse({"status": "starting", "detail": engine.starting()}, status_code=503)


class PrometheusText(Response):
    """The Prometheus text exposition format (its media type is what the OpenAPI document
    declares for /metrics)."""

    media_type = CONTENT_TYPE


@metrics.get("/metrics", response_class=PrometheusText, responses={200: {
    "description": "the metrics, in the Prometheus text exposition format",
    "content": {CONTENT_TYPE: {"schema": {"type": "string"}}}}})
async def prometheus(state: StateDep) -> PrometheusText:
    """Prometheus text format: batch latency histogram, throughput counters, state gauges."""
    return PrometheusText(state.metrics.render())
