"""Owns /v1/graph: the data graph's size, labels and backend, its one-time bulk load and its
export as a graph file."""
from __future__ import annotations

from typing import Annotated, Iterator

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool

from gpu.io.records import LabeledGraph
from service.deps import StateDep, reject_unknown_parameters
from service.ingest import (CSV, JSON, MULTIPART, TEXT, EdgeListLabels, media_type,
                            parse_graph, read_body, read_graph_form)
from service.labels import STRING_LABEL_BASE, text_safe
from service.schemas import GRAPH_TEXT_SCHEMA, LABELS_TEXT_SCHEMA, GraphPublic

router = APIRouter(prefix="/v1", tags=["graph"],
                   dependencies=[Depends(reject_unknown_parameters)])

# The response header naming the batch an export is consistent with.
BATCH_HEADER = "X-Motifstream-Batch"
# Lines formatted per chunk of an export: bounded memory whatever the graph's size.
EXPORT_CHUNK_ROWS = 1 << 16

_BODY = {"requestBody": {"required": True, "content": {
    JSON: {"schema": {"$ref": "#/components/schemas/GraphLoad"}},
    TEXT: {"schema": GRAPH_TEXT_SCHEMA},
    CSV: {"schema": GRAPH_TEXT_SCHEMA},
    MULTIPART: {"schema": {"type": "object", "required": ["graph"],
                           "additionalProperties": False,
                           "properties": {"graph": GRAPH_TEXT_SCHEMA,
                                          "labels": LABELS_TEXT_SCHEMA}}}}}}


@router.get("/graph", response_model=GraphPublic)
async def get_graph(state: StateDep):
    """Vertices, edges, the label dictionary, batches applied, backend and memory."""
    return await state.engine.call(state.engine.graph_info)


@router.put("/graph", response_model=GraphPublic, openapi_extra=_BODY,
            responses={409: {"description": "the graph is not empty"}})
async def load_graph(
        request: Request, state: StateDep,
        num_labels: Annotated[int | None, Query(
            ge=1, le=STRING_LABEL_BASE,
            description="an edge list's vertices get labels drawn uniformly from [0, K)")] = None,
        label_seed: Annotated[int | None, Query(
            ge=0, description="the seed of num_labels' labels (default 0)")] = None,
        directed: Annotated[bool | None, Query(
            description="the graph's kind, fixed with it: edges are arcs u -> v (true) or "
                        "undirected (false); default: the current kind (GET /v1/graph)")
        ] = None):
    """Bulk-load the initial graph; only while the graph is empty and no batch was applied.
    Takes every graph the CLI takes: JSON, a graph file, or an edge list labelled by
    `num_labels` (and `label_seed`) or by a labels file (multipart/form-data parts
    `graph` and `labels`); text may be gzip-compressed.  `directed` sets the graph's kind
    (409 while queries of the other kind are registered)."""
    body = await read_body(request, state.settings.max_request_bytes)
    media = media_type(request.headers)
    labels = EdgeListLabels(num_labels=num_labels, seed=label_seed)
    source = "body"
    if media == MULTIPART:
        body, labels = await read_graph_form(request.headers, body, labels)
        media, source = TEXT, "graph"
    engine = state.engine
    kind = engine.engine.directed if directed is None else directed
    graph = await run_in_threadpool(parse_graph, body, media, labels, source, kind)

    def load():
        staged = engine.labels.stage()
        return engine.load_graph(graph.to_graph(staged), staged, kind)

    return await engine.call(load)


@router.get("/graph/export", response_class=StreamingResponse, responses={200: {
    "content": {TEXT: {"schema": {"type": "string"}}},
    "description": "the graph file: a comment naming the batch, `t n m`, `v <id> <label>` "
                   f"lines, then `e <u> <v> <label>` lines; the {BATCH_HEADER} header names "
                   "the batch too"}})
async def export_graph(state: StateDep):
    """The graph as of the latest batch applied, as a graph file (the format PUT /v1/graph
    and the CLI read), streamed in chunks; string labels are written as their names."""
    seq, graph, names = await state.engine.call(state.engine.graph_now)
    return StreamingResponse(iterate_in_threadpool(graph_file_chunks(graph, names, seq)),
                             media_type=f"{TEXT}; charset=utf-8",
                             headers={BATCH_HEADER: str(seq)})


def graph_file_chunks(graph: LabeledGraph, names: dict[int, str], seq: int) -> Iterator[str]:
    """`graph` as graph-file text, EXPORT_CHUNK_ROWS lines at a time.  A label name that
    cannot stand as one token in text (`text_safe`) is written as its integer id, which
    only a JSON load reads back (docs/service.md)."""
    shown = {label: name if text_safe(name) else label for label, name in names.items()}

    def label_text(labels) -> list:
        return [shown.get(label, label) for label in labels.tolist()]

    yield (f"# motifstream graph export: batch {seq}, {graph.num_vertices} vertices, "
           f"{graph.num_edges} edges\nt {graph.num_vertices} {graph.num_edges}\n")
    for start in range(0, graph.num_vertices, EXPORT_CHUNK_ROWS):
        rows = slice(start, start + EXPORT_CHUNK_ROWS)
        yield "".join(f"v {v} {lab}\n" for v, lab in zip(
            graph.vertex_ids[rows].tolist(), label_text(graph.vertex_labels[rows])))
    for start in range(0, graph.num_edges, EXPORT_CHUNK_ROWS):
        rows = slice(start, start + EXPORT_CHUNK_ROWS)
        yield "".join(f"e {u} {v} {lab}\n" for u, v, lab in zip(
            graph.edge_src[rows].tolist(), graph.edge_dst[rows].tolist(),
            label_text(graph.edge_labels[rows])))
