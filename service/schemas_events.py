"""Owns the response schemas of the result-subscription endpoints."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ResultEventPublic(BaseModel):
    # One query's result for one batch; `id` is the batch seq and the resume cursor.
    id: int
    data: dict[str, Any] = Field(description="The stored event payload, verbatim: `batch` "
                                 "(its seq), `time` (when it was applied, UTC), `positive`, "
                                 "`negative`, and the matches for deliver=matches")


class ResultsPublic(BaseModel):
    # A page of a query's events (GET /v1/queries/{id}/results).
    query: int
    events: list[ResultEventPublic]
    next: int = Field(description="Pass as `after` to get the events that follow")
    complete_through: int = Field(description="The page holds every event of the query up "
                                  "to this batch, whether the batches touched it or not")
    last_batch: int = Field(description="The last batch committed when the page was read")

