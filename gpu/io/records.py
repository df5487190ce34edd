"""The records every format reads into and writes from: `LabeledGraph`, `UpdateStream`,
the update kinds, the value ranges and `FormatError`.

Every reader returns a complete record or raises `FormatError`; nothing is half-loaded.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

ADD_VERTEX = np.int8(0)
DELETE_VERTEX = np.int8(1)
INSERT_EDGE = np.int8(2)
DELETE_EDGE = np.int8(3)
NO_LABEL = -1
# An untimed record's event time (issue 23: times are optional, untimed input keeps working).
NO_TIME = np.iinfo(np.int64).min

MAX_ID = 2**63 - 1
MAX_LABEL = 2**31 - 1


class FormatError(ValueError):
    """A malformed input line."""

    def __init__(self, path: str | os.PathLike, line: int, reason: str):
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {reason}")

    def __reduce__(self):
        # ValueError pickles by args (the message); rebuild from the fields instead.
        return (FormatError, (self.path, self.line, self.reason))


@dataclass(frozen=True, eq=False)
class LabeledGraph:
    """A vertex- and edge-labelled graph keyed by external vertex ids; `edge_times`, when
    given, is each edge's event time (NO_TIME: untimed) and `watermark` the largest event
    time accepted so far (issue 23: a timed graph's state, as engines and snapshots keep
    it)."""

    vertex_ids: np.ndarray
    vertex_labels: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_labels: np.ndarray
    edge_times: np.ndarray | None = None
    watermark: int | None = None

    def __post_init__(self):
        _coerce(self, vertex_ids=np.int64, vertex_labels=np.int32)
        _coerce(self, edge_src=np.int64, edge_dst=np.int64, edge_labels=np.int32)
        if self.edge_times is not None:
            _coerce(self, edge_src=np.int64, edge_times=np.int64)

    @property
    def num_vertices(self) -> int:
        return int(self.vertex_ids.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.shape[0])


@dataclass(frozen=True, eq=False)
class UpdateStream:
    """A sequence of update records, one per source line, as parallel arrays; `time`, when
    given, is each record's event time (NO_TIME: untimed; read on edge inserts only)."""

    kind: np.ndarray
    a: np.ndarray
    b: np.ndarray
    label: np.ndarray
    line: np.ndarray
    source: str
    time: np.ndarray | None = None

    def __post_init__(self):
        _coerce(self, kind=np.int8, a=np.int64, b=np.int64, label=np.int32, line=np.int64)
        if self.time is not None:
            _coerce(self, kind=np.int8, time=np.int64)

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    @property
    def timed(self) -> bool:
        """Whether any edge insert carries an event time."""
        return self.time is not None and bool(
            ((self.kind == INSERT_EDGE) & (self.time != NO_TIME)).any())

    def slice(self, start: int, stop: int) -> UpdateStream:
        s = slice(start, stop)
        return UpdateStream(
            self.kind[s], self.a[s], self.b[s], self.label[s], self.line[s], self.source,
            None if self.time is None else self.time[s]
        )

    def batches(self, size: int | None) -> Iterator[UpdateStream]:
        """Consecutive slices of ``size`` records; ``None``/0 means one batch.

        An empty stream yields no batches.
        """
        if size is not None and size < 0:
            raise ValueError(f"batch size must be >= 0 or None, got {size}")
        step = size or max(len(self), 1)
        for start in range(0, len(self), step):
            yield self.slice(start, start + step)

    @staticmethod
    def empty(source: str = "<empty>") -> UpdateStream:
        return UpdateStream.from_records((), source)

    @staticmethod
    def from_records(records: Iterable, source: str = "<records>") -> UpdateStream:
        """Build from ``(kind, a, b, label)`` tuples, or ``(kind, a, b, label, time)`` ones
        (time an int, or None: untimed); ``b`` is stored as 0 for vertex records."""
        rows, times = [], []
        for pos, record in enumerate(records):
            kind, a, b, label = (int(x) for x in record[:4])
            time = record[4] if len(record) > 4 else None
            problem = _record_problem(kind, a, b, label)
            if problem:
                raise FormatError(source, pos + 1, problem)
            is_edge = kind in (INSERT_EDGE, DELETE_EDGE)
            rows.append((kind, a, b if is_edge else 0, label))
            times.append(NO_TIME if time is None else int(time))
        cols = np.array(rows, dtype=np.int64).reshape(-1, 4)
        timed = any(t != NO_TIME for t in times)
        return UpdateStream(
            cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3],
            np.arange(1, len(rows) + 1), source,
            np.array(times, dtype=np.int64) if timed else None,
        )


def _coerce(obj, **dtypes) -> None:
    """Normalise array fields of a frozen dataclass to their dtypes; check equal lengths."""
    lengths = set()
    for name, dtype in dtypes.items():
        arr = np.asarray(getattr(obj, name), dtype=dtype).reshape(-1)
        object.__setattr__(obj, name, arr)
        lengths.add(arr.shape[0])
    if len(lengths) > 1:
        raise ValueError(f"{type(obj).__name__}: fields {list(dtypes)} differ in length")


def _record_problem(kind: int, a: int, b: int, label: int) -> str | None:
    if kind not in (ADD_VERTEX, DELETE_VERTEX, INSERT_EDGE, DELETE_EDGE):
        return f"unknown record kind {kind}"
    is_edge = kind in (INSERT_EDGE, DELETE_EDGE)
    for value in (a, b) if is_edge else (a,):
        if not 0 <= value <= MAX_ID:
            return f"vertex id {value} out of range [0, 2**63)"
    # Only deletions may omit the label: an insert/add needs one to be stored.
    lowest = NO_LABEL if kind in (DELETE_VERTEX, DELETE_EDGE) else 0
    if not lowest <= label <= MAX_LABEL:
        return f"label {label} not allowed on a kind-{kind} record"
    return None
