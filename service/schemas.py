"""Owns the request and response schemas of the REST API, in one family per resource."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (BaseModel, ConfigDict, Field, StrictInt, StrictStr, WithJsonSchema,
                      model_validator)

from service.labels import MAX_LABEL_NAME, STRING_LABEL_BASE

# Strict: JSON `true` is not vertex 1, nor "5" vertex 5, nor 1.0 label 1.
MAX_VERTEX_ID = 2**63 - 1
VertexId = Annotated[int, Field(strict=True, ge=0, le=MAX_VERTEX_ID)]
# What the OpenAPI document says of ids and labels: as strict as the checks that refuse the
# rest (service/labels.py: an integer below the string labels' ids, or a name of 1 to 256
# characters), so that a schema-valid label is never refused.
VERTEX_ID_SCHEMA = {"type": "integer", "minimum": 0, "maximum": MAX_VERTEX_ID}
LABEL_SCHEMA = {"oneOf": [
    {"type": "integer", "minimum": 0, "maximum": STRING_LABEL_BASE - 1},
    {"type": "string", "minLength": 1, "maxLength": MAX_LABEL_NAME}],
    "description": f"an integer in [0, 2^30) or a name (1 to {MAX_LABEL_NAME} characters)"}
Label = Annotated[StrictInt | StrictStr, WithJsonSchema(LABEL_SCHEMA)]


# ---- text bodies ------------------------------------------------------------------
# The text formats as regular expressions (ECMA 262, as JSON Schema's `pattern`), exactly
# the syntax the readers take (gpu/io/text.py's grammars, label names as service/labels.py
# reads them): lines split at \n, tokens at ASCII whitespace, `#` starts a comment,
# integers with an optional sign (`-0` is 0, anything else negative is refused).  What
# relates tokens to one another (a duplicate id, an edge to an undeclared vertex, a
# self-loop) no expression says; the service's 422 names it.


def decimal_at_most(limit: int) -> str:
    """A regex of the decimal numerals of 0..`limit`, without leading zeros."""
    digits = str(limit)
    width = len(digits)
    alternatives = ["0"]
    if width > 1:   # every shorter numeral
        alternatives.append(f"[1-9][0-9]{{0,{width - 2}}}")
    for i, digit in enumerate(digits):   # `limit`'s first i digits, then a smaller one
        low, high = (1 if i == 0 else 0), int(digit) - 1
        if high >= low:
            rest = width - i - 1
            alternatives.append(digits[:i] + (f"[{low}-{high}]" if high > low else str(low))
                                + (f"[0-9]{{{rest}}}" if rest else ""))
    alternatives.append(digits)
    return "(?:" + "|".join(alternatives) + ")"


def _integer(limit: int) -> str:
    return rf"(?:-0+|\+?0*{decimal_at_most(limit)})"


_SPACE = r"[ \t\r\x0b\x0c]"
_TOKEN = r"[^ \t\r\n\x0b\x0c#]+"
_END = rf"{_SPACE}*(?:#[^\n]*)?"      # the end of every line: spaces, then a comment
_ID = _integer(MAX_VERTEX_ID)
# A label token: an integer label, or a name: a token that is no integer, so a lone sign,
# one with a character besides digits and signs, or one with a sign after its first
# character (at most MAX_LABEL_NAME characters: 127 either side of the one that decides).
_NAME_CHAR = r"[^ \t\r\n\x0b\x0c#]"
_LABEL = (rf"(?:{_integer(STRING_LABEL_BASE - 1)}|[+-]|"
          rf"{_NAME_CHAR}{{0,127}}[^ \t\r\n\x0b\x0c#0-9+-]{_NAME_CHAR}{{0,127}}|"
          rf"[0-9+-]{{1,127}}[+-][0-9+-]{{0,127}})")
_BLANK = _END


def _record(tag: str, *fields: str, optional: str | None = None, extra: bool = False) -> str:
    """One line of a record: its tag and fields, an optional last field, and (`extra`) any
    tokens after them, which the graph grammar ignores."""
    line = rf"{_SPACE}*{tag}" + "".join(rf"{_SPACE}+{f}" for f in fields)
    tail = rf"(?:{_SPACE}+{_TOKEN})*" if extra else ""
    if optional is not None:
        line += rf"(?:{_SPACE}+{optional}{tail})?"
    else:
        line += tail
    return line + _END


def _lines(counted: str, other: str, least: int, most: int | None = None,
           before: str = "") -> str:
    """Text of lines, after `before`: `least` to `most` (no bound: None) lines `counted`,
    any number of lines `other` around them.  One way to match any text (no nested choice
    between two repetitions), so that a backtracking matcher stays linear."""
    gaps = rf"(?:(?:{other})\n)*"
    more = "*" if most is None else f"{{{least - 1},{most - 1}}}"
    return (rf"^{before}{gaps}(?:{counted})(?:\n{gaps}(?:{counted})){more}"
            rf"(?:\n(?:{other}))*$")


_G_VERTEX = _record("v", _ID, _LABEL, extra=True)
_G_EDGE = _record("e", _ID, _ID, optional=_LABEL, extra=True)
_G_HEADER = _record("t", _integer(MAX_VERTEX_ID), _integer(MAX_VERTEX_ID), extra=True)
MAX_PATTERN_VERTICES = 32


def query_text_schema(max_vertices: int = MAX_PATTERN_VERTICES) -> dict:
    """A query file's schema: 2 to `max_vertices` `v` lines (max_query_vertices), an
    optional `t` line before every other."""
    return {"type": "string", "description": "query-file text: an optional "
            "`t <vertices> <edges>` line first, then 2 to "
            f"{max_vertices} `v <id> <label>` lines and `e <u> <v> [label]` lines; `#` comments",
            "pattern": _lines(_G_VERTEX, f"{_BLANK}|{_G_EDGE}", 2, max_vertices,
                              before=rf"(?:(?:{_BLANK})\n)*(?:{_G_HEADER}\n)?")}


QUERY_TEXT_SCHEMA = query_text_schema()
_S_RECORD = "|".join((_record("v", _ID, _LABEL), _record("-v", _ID, optional=_LABEL),
                      # an edge insert's event time (issue 23) follows its label
                      _record("e", _ID, _ID,
                              optional=rf"{_LABEL}(?:{_SPACE}+{_integer(MAX_VERTEX_ID)})?"),
                      _record("-e", _ID, _ID, optional=_LABEL)))
UPDATE_TEXT_SCHEMA = {
    "type": "string", "description": "update stream: `v <id> <label>`, `-v <id>`, "
    "`e <u> <v> [label [time]]`, `-e <u> <v>` lines (at least one); `#` comments",
    "pattern": _lines(_S_RECORD, _BLANK, 1)}


# Graph loads (PUT /v1/graph's text/plain and text/csv bodies, its multipart parts) take a
# graph file, as a query file without the bound on `v` lines, or an edge list: `u v` lines
# (commas or whitespace between fields, later fields ignored, `#` and `%` comments), after
# an optional header line (the first, of two fields or more, none an integer, the first not
# a graph file's t/v/e, which would make it one).  A gzip-compressed body is read too, which
# no text schema can say.
_E_SPACE = r"[ \t\r\x0b\x0c,]"
_E_CHAR = r"[^ \t\r\n\x0b\x0c,#%]"
_E_WORD = r"[^ \t\r\n\x0b\x0c,#%0-9+-]"     # a character that makes a token no integer
_E_END = rf"{_E_SPACE}*(?:[#%][^\n]*)?"
_E_HEADER = (rf"{_E_SPACE}*(?:[^ \t\r\n\x0b\x0c,#%0-9+tve-]|{_E_CHAR}+{_E_WORD}{_E_CHAR}*|"
             rf"{_E_WORD}{_E_CHAR}+)(?:{_E_SPACE}+{_E_CHAR}*{_E_WORD}{_E_CHAR}*)+{_E_END}")
_E_EDGE = rf"{_E_SPACE}*{_ID}{_E_SPACE}+{_ID}(?:{_E_SPACE}+{_E_CHAR}+)*{_E_END}"
_E_LABEL = (rf"{_E_SPACE}*{_ID}{_E_SPACE}+{_integer(STRING_LABEL_BASE - 1)}"
            rf"(?:{_E_SPACE}+{_E_CHAR}+)*{_E_END}")
GRAPH_TEXT_SCHEMA = {
    "type": "string", "description": "a graph file (an optional `t <vertices> <edges>` "
    "line first, `v <id> <label>` lines, at least one, and `e <u> <v> [label]` lines; `#` "
    "comments) or an edge list (`u v` or `u,v` lines, at least one, after an optional "
    "header line; `#` and `%` comments; labelled by num_labels or a labels part)",
    "anyOf": [
        {"pattern": _lines(_G_VERTEX, f"{_BLANK}|{_G_EDGE}", 1,
                           before=rf"(?:(?:{_BLANK})\n)*(?:{_G_HEADER}\n)?")},
        {"pattern": _lines(_E_EDGE, _E_END, 1,
                           before=rf"(?:(?:{_E_END})\n)*(?:{_E_HEADER}\n)?")}]}
LABELS_TEXT_SCHEMA = {
    "type": "string", "description": "`<id> <label>` lines (commas or whitespace between "
    "fields, an optional header line, `#` and `%` comments): a label for every vertex of "
    "the edge list, integers in [0, 2^30)",
    "pattern": rf"^(?:(?:{_E_END})\n)*(?:{_E_HEADER}(?:\n|$))?(?:(?:{_E_END}|{_E_LABEL})"
               rf"(?:\n|$))*$"}


def _tuple_schema(*items: dict, optional: int = 0) -> WithJsonSchema:
    """The schema of a JSON array read as a tuple: `items` in order, the last `optional`
    of them may be left out."""
    return WithJsonSchema({"type": "array", "prefixItems": list(items),
                           "minItems": len(items) - optional, "maxItems": len(items)})


class _Strict(BaseModel):
    # A request body: no field it does not know, and every value of its schema's type (no
    # `0` for false, no "5" for 5), so that the OpenAPI document's types are the checks.
    model_config = ConfigDict(extra="forbid", strict=True)


# ---- operations -------------------------------------------------------------------


class Liveness(BaseModel):
    # GET /healthz: the process is up.
    status: Literal["ok"]


class Readiness(BaseModel):
    # GET /readyz once recovered and warm: the last batch applied, the executor, and how its
    # kernels run: compiled, or as plain Python while a first start compiles them in the
    # background (exact, slower; docs/service.md).
    status: Literal["ready"]
    batch: int
    backend: str
    kernels: Literal["compiled", "interpreted"]


class ReadinessPending(BaseModel):
    # GET /readyz's 503: still starting, or start-up failed (`detail` says why).
    status: Literal["starting", "failed"]
    detail: str | None = None


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
    # A standing query's pattern graph (connected, 2 to 32 vertices).  The counts its schema
    # states are checked by the engine (gpu/plan/query.py), with its own messages; a
    # connected pattern of 2 vertices or more has an edge.
    vertices: list[PatternVertex] = Field(min_length=1, json_schema_extra={
        "minItems": 2, "maxItems": MAX_PATTERN_VERTICES})
    edges: list[PatternEdge] = Field(default_factory=list, json_schema_extra={"minItems": 1})


WINDOW_DESCRIPTION = (
    "a time window (issue 23): a match counts only while every data edge it uses carries "
    "an event time and the largest minus the smallest is at most `window` (untimed edges "
    "are in no window); in the units of the batches' times; default none")


BEFORE_DESCRIPTION = (
    "time order between the pattern's edges (issue 23), with a `window`: each pair [i, j] "
    "of indices into `pattern.edges` (or the text's `e` lines, in order) asks that the data "
    "edge matching edge i be timed strictly before the one matching edge j")
BeforePair = Annotated[list[Annotated[int, Field(strict=True, ge=0)]],
                       Field(min_length=2, max_length=2)]


class QueryOptions(_Strict):
    # How a standing query delivers its results.
    name: str | None = Field(None, min_length=1, max_length=200)
    deliver: Literal["counts", "matches"] = "counts"
    max_matches_per_batch: int | None = Field(None, ge=1)
    backfill: bool = False
    window: int | None = Field(None, ge=0, le=2**63 - 1, description=WINDOW_DESCRIPTION)
    before: list[BeforePair] | None = Field(None, description=BEFORE_DESCRIPTION)


class QueryCreate(QueryOptions):
    # What POST /v1/queries accepts: the pattern as JSON or as query-file text (t/v/e lines).
    # max_matches_per_batch only with deliver=matches (as the engine checks it), `before`
    # pairs only with a window.
    model_config = ConfigDict(json_schema_extra={"allOf": [{"anyOf": [
        {"not": {"required": ["max_matches_per_batch"]}},
        {"properties": {"max_matches_per_batch": {"type": "null"}}},
        {"required": ["deliver"], "properties": {"deliver": {"const": "matches"}}}]},
        {"anyOf": [{"not": {"required": ["before"]}},
                   {"properties": {"before": {"anyOf": [{"type": "null"}, {"maxItems": 0}]}}},
                   {"required": ["window"], "properties": {"window": {"type": "integer"}}}]}],
        "examples": [
        {"pattern": {"vertices": [{"id": 0, "label": 0}, {"id": 1, "label": 1},
                                  {"id": 2, "label": 2}],
                     "edges": [{"source": 0, "target": 1}, {"source": 1, "target": 2}]},
         "name": "path", "deliver": "matches"},
        {"pattern": "v 0 0\nv 1 1\ne 0 1\n", "backfill": True}]})

    pattern: Pattern | Annotated[str, WithJsonSchema(QUERY_TEXT_SCHEMA)]


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
    window: int | None = Field(None, description=WINDOW_DESCRIPTION)
    before: list[list[int]] | None = Field(None, description=BEFORE_DESCRIPTION)
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

# [u, v] or [u, v, label]; an insert also [u, v, label, time]; [id, label].  Checked item by
# item in service/ingest.py.
EdgeItem = Annotated[list[Label], Field(min_length=2, max_length=3),
                     _tuple_schema(VERTEX_ID_SCHEMA, VERTEX_ID_SCHEMA, LABEL_SCHEMA, optional=1)]
TIME_SCHEMA = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1,
               "description": "the edge's event time (issue 23): an integer, e.g. epoch "
                              "seconds or milliseconds"}
InsertEdgeItem = Annotated[list[Label], Field(min_length=2, max_length=4),
                           _tuple_schema(VERTEX_ID_SCHEMA, VERTEX_ID_SCHEMA, LABEL_SCHEMA,
                                         TIME_SCHEMA, optional=2)]
VertexItem = Annotated[list[Label], Field(min_length=2, max_length=2),
                       _tuple_schema(VERTEX_ID_SCHEMA, LABEL_SCHEMA)]
_BATCH_FIELDS = ("insert_vertices", "delete_vertices", "insert_edges", "delete_edges")


class BatchCreate(_Strict):
    # A JSON batch: applied atomically as a set (see README, Semantics); at least one update
    # (an empty batch is refused, docs/service.md).
    model_config = ConfigDict(json_schema_extra={
        "anyOf": [{"required": [name], "properties": {name: {"minItems": 1}}}
                  for name in _BATCH_FIELDS],
        "examples": [{"insert_edges": [[0, 5], [2, 7, 1]]},
                     {"insert_vertices": [[10, 1], [11, "person"]], "insert_edges": [[10, 11]],
                      "delete_edges": [[0, 5]]}]})

    insert_vertices: list[VertexItem] = Field(default_factory=list)
    delete_vertices: list[VertexId] = Field(default_factory=list)
    insert_edges: list[InsertEdgeItem] = Field(default_factory=list)
    delete_edges: list[EdgeItem] = Field(default_factory=list)


class QueryResult(BaseModel):
    positive: int
    negative: int
    expired: int | None = Field(None, description="Of the negative matches, those that used "
                                "an edge retention expired with this batch (on a graph that "
                                "keeps event times)")


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
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"vertices": [[0, 0], [1, 1], [2, "person"]], "edges": [[0, 1], [1, 2, 3]]}]})

    vertices: list[VertexItem] = Field(json_schema_extra={"minItems": 1})
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
    # Event times (issue 23): the largest accepted (null before the first), the edges that
    # carry one, and how far behind the watermark an edge expires (null: never).
    watermark: int | None
    timed_edges: int
    retention: int | None
    labels: dict[str, int]
    batches: int
    backend: str
    queries: int
    device_memory_bytes: int | None
    store_bytes: int
