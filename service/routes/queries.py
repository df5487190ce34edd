"""Owns /v1/queries: register (or only validate), list, inspect and delete standing queries."""
from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request, Response

from service.deps import StateDep, reject_unknown_parameters
from service.ingest import JSON, TEXT, UnsupportedMediaType, media_type, read_body
from service.schemas import (QUERY_PAGE_DEFAULT, QUERY_PAGE_MAX, QUERY_TEXT_SCHEMA, QueryCreate,
                             QueryPage, QueryPublic, QueryValidation, WINDOW_DESCRIPTION)

router = APIRouter(prefix="/v1", tags=["queries"],
                   dependencies=[Depends(reject_unknown_parameters)])

_BODY = {"requestBody": {"required": True, "content": {
    JSON: {"schema": {"$ref": "#/components/schemas/QueryCreate"}},
    TEXT: {"schema": QUERY_TEXT_SCHEMA}}}}


async def _create(request: Request, state, name, deliver, max_matches_per_batch,
                  backfill, window=None) -> QueryCreate:
    body = await read_body(request, state.settings.max_request_bytes)
    media = media_type(request.headers)
    if media == JSON:
        return QueryCreate.model_validate_json(body)
    if media == TEXT:
        return QueryCreate(pattern=body.decode("utf-8", "replace"), name=name, deliver=deliver,
                           max_matches_per_batch=max_matches_per_batch, backfill=backfill,
                           window=window)
    raise UnsupportedMediaType(f"Content-Type {media!r}: send {JSON} (QueryCreate) or {TEXT} "
                               "(query-file text, options as query parameters)")


@router.post("/queries", status_code=201, response_model=None, openapi_extra=_BODY,
             responses={201: {"model": QueryPublic, "description": "Registered",
                              "headers": {"Location": {"description": "the new query's URL",
                                                       "schema": {"type": "string",
                                                                  "format": "uri-reference"}}}},
                        200: {"model": QueryValidation,
                              "description": "dry_run: valid, nothing registered"}})
async def register_query(
        request: Request, response: Response, state: StateDep,
        dry_run: bool = Query(False, description="only validate the pattern"),
        name: str | None = Query(None, min_length=1, max_length=200,
                                 description="for text/plain bodies"),
        deliver: Literal["counts", "matches"] = Query("counts", description="text/plain only"),
        max_matches_per_batch: int | None = Query(None, ge=1, description="text/plain only"),
        backfill: bool = Query(False, description="text/plain only"),
        window: int | None = Query(None, ge=0, le=2**63 - 1,
                                   description="text/plain only: " + WINDOW_DESCRIPTION)):
    """Register a standing query (JSON `QueryCreate`, or query-file text with the options as
    query parameters); answered 201 with the query and its URL in `Location`.  Matches list
    data vertex ids in the order of `pattern.vertices`."""
    create = await _create(request, state, name, deliver, max_matches_per_batch, backfill,
                           window)
    result = await state.engine.call(state.engine.register, create, dry_run)
    if dry_run:
        response.status_code = 200
    else:
        response.headers["Location"] = \
            f"{request.scope.get('root_path', '')}/v1/queries/{result.id}"
    return result


@router.post("/queries:validate", response_model=QueryValidation, openapi_extra=_BODY)
async def validate_query(request: Request, state: StateDep):
    """Check a pattern without registering it (same body as POST /v1/queries)."""
    create = await _create(request, state, None, "counts", None, False)
    return await state.engine.call(state.engine.register, create, True)


@router.get("/queries", response_model=QueryPage)
async def list_queries(
        state: StateDep,
        limit: Annotated[int, Query(ge=1, le=QUERY_PAGE_MAX, description=(
            f"queries per page (at most {QUERY_PAGE_MAX})"))] = QUERY_PAGE_DEFAULT,
        after: Annotated[int | None, Query(ge=0, description=(
            "cursor: only queries with an id above it (a page's `next`); default: from the "
            "first"))] = None):
    """A page of the standing queries with their statistics, by id: at most `limit`, those
    after `after`.  `next` is the cursor of the following page, null on the last one.  A
    cursor above every id ever given out is a 422."""
    return await state.engine.call(state.engine.list_queries, after, limit)


@router.get("/queries/{query_id}", response_model=QueryPublic)
async def get_query(query_id: int, state: StateDep):
    """One standing query with its statistics (batches seen, totals, latencies, subscribers)."""
    return await state.engine.call(state.engine.describe, query_id)


@router.delete("/queries/{query_id}", status_code=204)
async def delete_query(query_id: int, state: StateDep) -> Response:
    """Stop a standing query; its result log goes and its subscribers are told."""
    await state.engine.call(state.engine.delete, query_id)
    return Response(status_code=204)
