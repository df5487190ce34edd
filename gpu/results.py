"""Result types every executor returns and the engine reports."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class MatchSet:
    """An executor's answer for one query and one set of tasks."""
    count: int                 # exact number of matches
    rows: np.ndarray           # int32 [k, n] internal slots, query-vertex order, k <= limit
    truncated: bool            # rows holds fewer than count matches


@dataclass
class MatchList:
    """Matches as external vertex ids, in query-vertex order."""
    rows: np.ndarray           # int64 [k, n]
    truncated: bool
    count: int


@dataclass
class QueryDelta:
    """What one batch did to one standing query."""
    positive: int
    negative: int
    added: np.ndarray | None = None     # int64 [k, n] external ids, when listed
    removed: np.ndarray | None = None
    truncated: bool = False
    seconds: float = 0.0                # this query's matching time in the batch (both phases)
    # On an engine that keeps event times (gpu/event_time.py): how many of the negative
    # matches used an edge that retention expired in this batch, and when listed, which
    # of the removed rows those are (bool per row).  None otherwise.
    expired: int | None = None
    removed_expired: np.ndarray | None = None

    def to_json(self) -> dict:
        out = {"positive": self.positive, "negative": self.negative}
        if self.expired is not None:
            out["expired"] = self.expired
        if self.added is not None:
            out["added"] = self.added.tolist()
            out["removed"] = self.removed.tolist()
            out["truncated"] = self.truncated
            if self.removed_expired is not None:
                out["removed_expired"] = self.removed_expired.tolist()
        return out


@dataclass
class BatchResult:
    """The outcome of one applied batch."""
    applied: dict[str, int]
    ignored: dict[str, int]
    queries: dict[int, QueryDelta]
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)
