"""Owns the request and response schemas of the REST API, in one family per resource."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

# Strict: JSON `true` is not vertex 1, nor "5" vertex 5, nor 1.0 label 1.
VertexId = Annotated[int, Field(strict=True, ge=0, le=2**63 - 1)]
Label = StrictInt | StrictStr


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- queries ----------------------------------------------------------------------


class PatternVertex(_Strict):
    # One vertex of a pattern: the id edges refer to, and its label.
    id: VertexId
    label: Label


class PatternEdge(_Strict):
    # One undirected pattern edge; label 0 when omitted.
    source: VertexId
    target: VertexId
    label: Label = 0


class Pattern(_Strict):
    # A standing query's pattern graph (connected, 2 to 32 vertices).
    vertices: list[PatternVertex] = Field(min_length=1)
    edges: list[PatternEdge] = Field(default_factory=list)


class QueryOptions(_Strict):
    # How a standing query delivers its results.
    name: str | None = Field(None, min_length=1, max_length=200)
    deliver: Literal["counts", "matches"] = "counts"
    max_matches_per_batch: int | None = Field(None, ge=1)
    backfill: bool = False


class QueryCreate(QueryOptions):
    # What POST /v1/queries accepts: the pattern as JSON or as query-file text (t/v/e lines).
    pattern: Pattern | str


class QueryStats(BaseModel):
    # What a query has seen since it was registered (latencies since the server started).
    batches_seen: int
    total_positive: int
    total_negative: int
    last_batch: int
    last_latency_ms: float | None
    p99_latency_ms: float | None
    subscribers: int
    max_lag: int


class QueryPublic(BaseModel):
    # A registered standing query as the API returns it.
    id: int
    name: str
    pattern: Pattern
    deliver: Literal["counts", "matches"]
    max_matches_per_batch: int | None
    backfill: bool
    created_batch: int
    created_at: str
    vertices: int
    edges: int
    stats: QueryStats | None = None


# GET /v1/queries: queries per page by default, and at most.
QUERY_PAGE_DEFAULT = 100
QUERY_PAGE_MAX = 1000


class QueryPage(BaseModel):
    # A page of GET /v1/queries, by id.
    queries: list[QueryPublic]
    next: int | None = Field(description="Pass as `after` to get the following page; null "
                                         "on the last page")


class QueryValidation(BaseModel):
    # The answer of a validation-only call: the pattern as it would be registered.
    valid: Literal[True] = True
    pattern: Pattern
    vertices: int
    edges: int


# ---- batches ----------------------------------------------------------------------

EdgeItem = Annotated[list[Label], Field(min_length=2, max_length=3)]


class BatchCreate(_Strict):
    # A JSON batch: applied atomically as a set (see README, Semantics).
    insert_vertices: list[Annotated[list[Label], Field(min_length=2, max_length=2)]] = \
        Field(default_factory=list)
    delete_vertices: list[VertexId] = Field(default_factory=list)
    insert_edges: list[EdgeItem] = Field(default_factory=list)
    delete_edges: list[EdgeItem] = Field(default_factory=list)


class QueryResult(BaseModel):
    positive: int
    negative: int


class BatchPublic(BaseModel):
    # The acknowledgement of a durable batch.
    batch: int
    applied: dict[str, int]
    ignored: dict[str, int]
    results: dict[str, QueryResult]
    timings: dict[str, float]


# ---- graph ------------------------------------------------------------------------


class GraphLoad(_Strict):
    # PUT /v1/graph as JSON: vertices [[id, label]], edges [[u, v] | [u, v, label]].
    vertices: list[Annotated[list[Label], Field(min_length=2, max_length=2)]]
    edges: list[EdgeItem] = Field(default_factory=list)

    @model_validator(mode="after")
    def _not_empty(self) -> GraphLoad:
        if not self.vertices:
            raise ValueError("vertices: a graph load needs at least one vertex")
        return self


class GraphPublic(BaseModel):
    # GET /v1/graph.
    vertices: int
    edges: int
    # The graph's kind: edges are arcs u -> v (fixed while the store holds a graph).
    directed: bool
    labels: dict[str, int]
    batches: int
    backend: str
    queries: int
    device_memory_bytes: int | None
    store_bytes: int
