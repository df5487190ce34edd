"""Owns /v1/graph: the data graph's size, labels and backend, and its one-time bulk load."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from service.deps import StateDep, reject_unknown_parameters
from service.ingest import JSON, TEXT, media_type, parse_graph, read_body
from service.schemas import GraphPublic

router = APIRouter(prefix="/v1", tags=["graph"],
                   dependencies=[Depends(reject_unknown_parameters)])

_BODY = {"requestBody": {"required": True, "content": {
    JSON: {"schema": {"$ref": "#/components/schemas/GraphLoad"}},
    TEXT: {"schema": {"type": "string", "description": "graph file: v <id> <label>, "
                                                       "e <u> <v> [label] lines"}}}}}


@router.get("/graph", response_model=GraphPublic)
async def get_graph(state: StateDep):
    """Vertices, edges, the label dictionary, batches applied, backend and memory."""
    return await state.engine.call(state.engine.graph_info)


@router.put("/graph", response_model=GraphPublic, openapi_extra=_BODY,
            responses={409: {"description": "the graph is not empty"}})
async def load_graph(request: Request, state: StateDep):
    """Bulk-load the initial graph; only while the graph is empty and no batch was applied."""
    body = await read_body(request, state.settings.max_request_bytes)
    graph = await run_in_threadpool(parse_graph, body, media_type(request.headers))
    engine = state.engine

    def load():
        staged = engine.labels.stage()
        return engine.load_graph(graph.to_graph(staged), staged)

    return await engine.call(load)
