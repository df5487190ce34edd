"""Fuzzing of the HTTP API (hypothesis): malformed and oversized inputs never give a 5xx and
never change state.

The requests go to one app per module (small limits, a small graph, two standing queries).
After each one: the status is below 500; a 4xx body is an RFC 9457 problem whose `detail` is
a message (schema errors listed in `errors`, each with a `loc`); and when the request was
refused, only read, or only validated, the observable state is what it was before:
GET /v1/graph (less the store and device-pool sizes), GET /v1/queries
(less the latencies) and every query's results log. Inputs a generator builds with a defect must
be refused; arbitrary ones may be accepted, and then their state is the new baseline (a query
they registered is deleted again). A state machine interleaves valid and invalid batches on a
fresh app and holds it to tests/reference.py after every step, so a refused batch cannot have
left anything behind that a later batch would show.

Inputs that hit a bug found by this file are kept out of the generators; each such bug has
its own regression test at the end.
"""
from __future__ import annotations

import io
import itertools
import json
import pickle
import re
import tempfile
import urllib.parse
import zipfile
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.extra import numpy as hnp
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from pydantic import TypeAdapter, ValidationError
from starlette.websockets import WebSocketDisconnect

from service.ingest import JSON, NPY, TEXT
from service.labels import STRING_LABEL_BASE
from service.routes.events import MAX_PAGE
from tests.reference import (
    ADD_VERTEX,
    DELETE_EDGE,
    DELETE_VERTEX,
    INSERT_EDGE,
    NO_LABEL,
    RefGraph,
    RefQuery,
    Rejected,
)
from tests.service.conftest import HISTORY_DEPENDENT, running

LIMITS = {"max_request_bytes": 4096, "max_batch_updates": 50, "max_query_vertices": 4,
          "max_matches_per_batch": 100}
MAX_BYTES = LIMITS["max_request_bytes"]
MAX_UPDATES = LIMITS["max_batch_updates"]
INT64_MAX = 2**63 - 1
# No generated batch adds this vertex: an edge to it is an edge to a missing vertex.
MISSING = 10**15

# The data graph and the standing queries, as the reference models them.
VERTICES = {0: 0, 1: 0, 2: 1, 3: 0, 4: 1, 5: 0}
EDGES = [(0, 1, 0), (1, 2, 0), (0, 2, 0), (2, 3, 1), (3, 4, 0), (4, 5, 0)]
PATTERNS = {"triangle": RefQuery.build([0, 0, 1], [(0, 1), (1, 2), (0, 2)]),
            "path": RefQuery.build([0, 1, 0], [(0, 1), (1, 2)])}
OPTIONS = {"triangle": {"deliver": "counts", "backfill": True},
           "path": {"deliver": "matches"}}

BODY_ROUTES = [("POST", "/v1/batches"), ("POST", "/v1/queries"),
               ("POST", "/v1/queries:validate"), ("PUT", "/v1/graph")]
MEDIA_OF = {"/v1/batches": {JSON, TEXT, NPY}, "/v1/queries": {JSON, TEXT},
            "/v1/queries:validate": {JSON, TEXT}, "/v1/graph": {JSON, TEXT, "text/csv",
                                                                 "multipart/form-data"}}
CONTENT_TYPES = [JSON, TEXT, NPY, "application/xml", "text/plain; charset=latin-1",
                 "Application/JSON; charset=utf-8", "multipart/form-data; boundary=x",
                 "application/octet-stream", "*/*", "", None]

_INT = TypeAdapter(int)


def fuzz(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def as_int(text: str) -> int | None:
    """`text` as FastAPI reads an int parameter, or None where it would refuse it."""
    try:
        return _INT.validate_python(text)
    except ValidationError:
        return None


def media_of(content_type: str | None) -> str:
    """The media type the service reads from a Content-Type (JSON when there is none)."""
    return (content_type or JSON).split(";", 1)[0].strip().lower()


def content_type(value: str | None) -> dict[str, str]:
    return {} if value is None else {"content-type": value}


# ---- the app and its observable state -----------------------------------------------------


def graph_body(names: bool = False) -> dict:
    """The data graph as PUT /v1/graph JSON; with `names`, plus a vertex and an edge with
    string labels (so the label dictionary has something to lose)."""
    body = {"vertices": [[v, lab] for v, lab in VERTICES.items()],
            "edges": [[u, v, lab] for u, v, lab in EDGES]}
    if names:
        body["vertices"].append([6, "person"])
        body["edges"].append([5, 6, "knows"])
    return body


def pattern_body(query: RefQuery) -> dict:
    return {"vertices": [{"id": i, "label": lab} for i, lab in enumerate(query.labels)],
            "edges": [{"source": a, "target": b, "label": lab}
                      for a, b, lab in query.edge_list()]}


def register_queries(client) -> dict[str, int]:
    ids = {}
    for name, query in PATTERNS.items():
        r = client.post("/v1/queries", json={"pattern": pattern_body(query), "name": name,
                                             **OPTIONS[name]})
        assert r.status_code == 201, r.text
        ids[name] = r.json()["id"]
    return ids


def load(client, names: bool = False) -> None:
    r = client.put("/v1/graph", json=graph_body(names))
    assert r.status_code == 200, r.text


def get_json(client, url: str, **kwargs):
    r = client.get(url, **kwargs)
    assert r.status_code == 200, (url, r.text)
    return r.json()


def observable(client) -> dict:
    """What a client can see of the service's state, less what changes on its own."""
    graph = get_json(client, "/v1/graph")
    for key in HISTORY_DEPENDENT:
        del graph[key]
    queries = get_json(client, "/v1/queries")["queries"]
    for query in queries:
        del query["stats"]["last_latency_ms"], query["stats"]["p99_latency_ms"]
    results = {q["id"]: get_json(client, f"/v1/queries/{q['id']}/results",
                                 params={"limit": MAX_PAGE}) for q in queries}
    return {"graph": graph, "queries": queries, "results": results}


def request(client, method: str, url: str, **kwargs):
    """The app's answer; what it did not handle (a 500 to a real client) fails the test."""
    try:
        return client.request(method, url, **kwargs)
    except Exception as exc:  # TestClient re-raises what the app raised
        raise AssertionError(f"{method} {url} raised {exc!r}: a 500") from exc


def assert_error_body(response) -> None:
    """A 4xx body: an RFC 9457 problem whose `detail` is a non-empty message, with for schema
    errors a list of `errors` with `loc`."""
    where = f"{response.request.method} {response.request.url} -> {response.status_code}"
    assert response.headers.get("content-type") == "application/problem+json", \
        (where, response.text)
    problem = response.json()
    assert problem["status"] == response.status_code, (where, response.text)
    detail = problem.get("detail")
    assert isinstance(detail, str) and detail.strip(), (where, response.text)
    for error in problem.get("errors", ()):
        assert isinstance(error, dict), (where, response.text)
        assert isinstance(error.get("loc"), list) and error["loc"], (where, response.text)
        assert isinstance(error.get("msg"), str) and error["msg"], (where, response.text)
    text = json.dumps(problem)
    assert "Traceback" not in text and " object at 0x" not in text, (where, text)


class Api:
    """One running app and the state it had after the last request that changed it."""

    def __init__(self, directory: Path, setup) -> None:
        self._directory, self._setup, self._runs = directory, setup, 0
        self._stack = ExitStack()
        self.start()

    def start(self) -> None:
        """A fresh app (after `close`)."""
        self._runs += 1
        self.client = self._stack.enter_context(
            running(self._directory / f"data-{self._runs}", **LIMITS))
        self.queries = self._setup(self.client)
        self.state = observable(self.client)

    def restart(self) -> None:
        self.close()
        self.start()

    def close(self) -> None:
        self._stack.close()

    def send(self, method: str, url: str, read_only: bool = False, **kwargs):
        """Send one request and check the answer and the state after it."""
        response = request(self.client, method, url, **kwargs)
        where = f"{method} {url} -> {response.status_code}"
        if currently_in_test_context():  # for --hypothesis-show-statistics
            event(f"HTTP {response.status_code}")
        assert response.status_code < 500, (where, response.text)
        # A validation (a 200 from POST /v1/queries or :validate) changes nothing either.
        validated = method == "POST" and url.startswith("/v1/queries") \
            and response.status_code == 200
        if response.status_code >= 400 or read_only or validated:
            if response.status_code >= 400:
                assert_error_body(response)
            self.assert_unchanged(where)
        else:
            self._accepted()
        return response

    def assert_unchanged(self, where: str = "") -> None:
        assert observable(self.client) == self.state, f"{where} changed the state"

    def _accepted(self) -> None:
        # A request the app took may change the state: the queries it registered go again,
        # the rest is the new baseline.
        for query in get_json(self.client, "/v1/queries")["queries"]:
            if query["id"] not in self.queries.values():
                assert self.client.delete(f"/v1/queries/{query['id']}").status_code == 204
        self.state = observable(self.client)


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """The graph (with string labels) and both standing queries."""
    def setup(client):
        load(client, names=True)
        return register_queries(client)

    app = Api(tmp_path_factory.mktemp("fuzz"), setup)
    yield app
    app.close()


@pytest.fixture(scope="module")
def empty_api(tmp_path_factory):
    """No graph yet (bulk load open), one standing query."""
    def setup(client):
        r = client.post("/v1/queries", json={"pattern": pattern_body(PATTERNS["triangle"]),
                                             "backfill": True})
        assert r.status_code == 201, r.text
        return {"triangle": r.json()["id"]}

    app = Api(tmp_path_factory.mktemp("fuzz-empty"), setup)
    yield app
    app.close()


# ---- strategies: values ------------------------------------------------------------------

FIELD_NAMES = ["insert_vertices", "delete_vertices", "insert_edges", "delete_edges", "vertices",
               "edges", "pattern", "id", "label", "source", "target", "name", "deliver",
               "max_matches_per_batch", "backfill"]
# Numbers past every limit, and non-integers.
bad_numbers = st.sampled_from([-1, -(2**63), INT64_MAX + 1, 2**64 - 1, 2**64, 10**30,
                               STRING_LABEL_BASE, 2**31, 1.5, -0.5, 1e300, float("inf"),
                               float("nan")])
other_types = st.one_of(st.booleans(), st.none(), st.text(max_size=5),
                        st.lists(st.integers(0, 3), max_size=2),
                        st.dictionaries(st.text(max_size=2), st.integers(0, 2), max_size=1))
ids = st.one_of(st.integers(0, 12), st.integers(0, 12), st.just(INT64_MAX), bad_numbers,
                other_types)
labels = st.one_of(st.integers(0, 3), st.sampled_from([STRING_LABEL_BASE - 1, "person", "",
                                                       "x" * 257]), bad_numbers, other_types)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                         st.text(max_size=10), bad_numbers)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(FIELD_NAMES) | st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def to_json(value) -> bytes:
    return json.dumps(value).encode()


bodies = st.one_of(
    st.binary(max_size=512),
    json_values.map(to_json),
    st.text(max_size=200).map(str.encode),
    st.integers(1, 2000).map(lambda depth: b"[" * depth + b"]" * depth),
)

# Query-string and header values: valid ones, edge cases and junk.
junk = st.one_of(st.text(max_size=8), st.integers(-5, 200).map(str),
                 st.sampled_from(["true", "false", "1", "0", "yes", "-1", "", "matches",
                                  "counts", "101", str(2**64), "1.5", "nan", " 7 ", "1_0"]))


# ---- strategies: batches -----------------------------------------------------------------


def items(*parts):
    return st.tuples(*parts).map(list)


vertex_items = st.one_of(items(ids, labels), st.lists(st.one_of(ids, labels), max_size=4), ids)
edge_items = st.one_of(items(ids, ids), items(ids, ids, labels),
                       st.lists(st.one_of(ids, labels), max_size=5), ids,
                       st.integers(0, 12).map(lambda v: [v, v]))
plausible_batches = st.fixed_dictionaries({}, optional={
    "insert_vertices": st.lists(vertex_items, max_size=4),
    "delete_vertices": st.lists(ids, max_size=4),
    "insert_edges": st.lists(edge_items, max_size=4),
    "delete_edges": st.lists(edge_items, max_size=4),
    "insert_edge": st.lists(edge_items, max_size=2),
    "labels": json_values,
})


def batch_records(vertex: st.SearchStrategy[int]) -> st.SearchStrategy[tuple]:
    """One update as the reference's (kind, a, b, label) record, over the ids `vertex` draws;
    vertex records carry b = 0, edges are no self-loops."""
    def edge(kind, label):
        return st.tuples(st.just(kind), vertex, vertex, label).filter(lambda r: r[1] != r[2])

    return st.one_of(
        st.tuples(st.just(ADD_VERTEX), vertex, st.just(0), st.integers(0, 1)),
        st.tuples(st.just(DELETE_VERTEX), vertex, st.just(0), st.just(NO_LABEL)),
        edge(INSERT_EDGE, st.integers(0, 1)),
        edge(DELETE_EDGE, st.sampled_from([NO_LABEL, 0, 1])))


vertex_ids = st.integers(0, 12)
records = batch_records(vertex_ids)
NPY_KIND = {ADD_VERTEX: 0, DELETE_VERTEX: 1, INSERT_EDGE: 2, DELETE_EDGE: 3}
JSON_FIELD = {ADD_VERTEX: "insert_vertices", DELETE_VERTEX: "delete_vertices",
              INSERT_EDGE: "insert_edges", DELETE_EDGE: "delete_edges"}


def json_batch(batch: list[tuple]) -> dict:
    body = {name: [] for name in JSON_FIELD.values()}
    for kind, a, b, label in batch:
        if kind == ADD_VERTEX:
            item = [a, label]
        elif kind == DELETE_VERTEX:
            item = a
        else:
            item = [a, b] if label == NO_LABEL else [a, b, label]
        body[JSON_FIELD[kind]].append(item)
    return body


def text_line(record: tuple) -> str:
    kind, a, b, label = record
    if kind == ADD_VERTEX:
        return f"v {a} {label}"
    if kind == DELETE_VERTEX:
        return f"-v {a}"
    word = "e" if kind == INSERT_EDGE else "-e"
    return f"{word} {a} {b}" if label == NO_LABEL else f"{word} {a} {b} {label}"


def npy_rows(batch: list[tuple]) -> np.ndarray:
    return np.array([(NPY_KIND[k], a, b, lab) for k, a, b, lab in batch],
                    np.int64).reshape(-1, 4)


def npy_bytes(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def encode_batch(batch: list[tuple], media: str) -> bytes:
    """`batch` as a body of `media`. A JSON body lists the records by kind, the others keep
    the order (a batch is a set, so it means the same)."""
    if media == JSON:
        return to_json(json_batch(batch))
    if media == TEXT:
        return "".join(text_line(r) + "\n" for r in batch).encode()
    return npy_bytes(npy_rows(batch))


BAD_IDS = [-1, -(2**63), INT64_MAX + 1, 2**64, 10**30, 1.5, "x", "", None, [1], {}]
BAD_LABELS = [-2, -1, STRING_LABEL_BASE, 2**31, 2**63, 1.5, "", "x" * 257, None, [0], {}]


def _json_defect(draw, batch: list[tuple]) -> bytes:
    body = json_batch(batch)
    defect = draw(st.sampled_from(["id", "label", "length", "unknown", "self_loop", "missing",
                                   "too_many", "nested", "not_object", "truncated"]))
    edge_field = draw(st.sampled_from(["insert_edges", "delete_edges"]))
    v = draw(vertex_ids)
    if defect == "id":
        bad = draw(st.sampled_from(BAD_IDS))
        field, item = draw(st.sampled_from([
            ("insert_vertices", [bad, 0]), ("delete_vertices", bad), (edge_field, [bad, v]),
            (edge_field, [v, bad])]))
    elif defect == "label":
        bad = draw(st.sampled_from(BAD_LABELS))
        field, item = draw(st.sampled_from([("insert_vertices", [v, bad]),
                                            (edge_field, [v, v + 1, bad])]))
    elif defect == "length":
        # One item too many: an insert takes a fourth, its event time (issue 23).
        too_long = [v, v + 1, 0, 0] + ([0] if edge_field == "insert_edges" else [])
        field, item = draw(st.sampled_from([
            ("insert_vertices", []), ("insert_vertices", [v]), ("insert_vertices", [v, 0, 0]),
            (edge_field, []), (edge_field, [v]), (edge_field, too_long)]))
    elif defect == "self_loop":
        field, item = edge_field, [v, v]
    elif defect == "missing":
        field, item = edge_field, draw(st.sampled_from([[v, MISSING], [MISSING, v]]))
    elif defect == "nested":
        field, item = draw(st.sampled_from([("insert_vertices", [[v, 0]]),
                                            ("delete_vertices", [v]),
                                            (edge_field, [[v, v + 1]])]))
    elif defect == "unknown":
        body[draw(st.sampled_from(["insert_edge", "edges", "", "Insert_Vertices"]))] = []
        return to_json(body)
    elif defect == "too_many":
        body["delete_vertices"] += [v] * (MAX_UPDATES + 1 - len(batch))
        return to_json(body)
    elif defect == "not_object":
        return to_json(draw(st.sampled_from([[], [body], 1, "x", None, True])))
    else:  # truncated: a proper prefix of an object is never JSON
        text = to_json(body)
        return text[:draw(st.integers(0, len(text) - 1))]
    listed = body[field]
    listed.insert(draw(st.integers(0, len(listed))), item)
    return to_json(body)


# (`e 1 2 0 9` is a timed insert since issue 23: a time too many, or a negative one, is not.)
BAD_LINES = ["x 1 2", "v", "v 1", "e 1", "-e 1", "v -1 0", "e -1 2", "v 1 0 9", "e 1 2 0 9 9",
             "e 1 2 0 -9", "-e 1 2 0 9",
             "e 3 3", "-e 4 4", f"v 1 {STRING_LABEL_BASE}", f"e 1 2 {2**31}", f"e 1 {MISSING}",
             f"-e {MISSING} 2", "v 1.5 0", "v 0x1 0", f"v {2**63} 0", "v 1 -1", "V 1 0",
             "v 1 person 9", "e 1 2 " + "x" * 257, "t 1 0"]


def _text_defect(draw, batch: list[tuple]) -> bytes:
    lines = [text_line(r).encode() for r in batch]
    defect = draw(st.sampled_from(["line", "too_many", "bytes"]))
    if defect == "too_many":
        lines += [b"-v 0"] * (MAX_UPDATES + 1 - len(lines))
    else:
        bad = draw(st.sampled_from(BAD_LINES)).encode() if defect == "line" else b"v 1 \xff"
        lines.insert(draw(st.integers(0, len(lines))), bad)
    return b"\n".join(lines) + draw(st.sampled_from([b"", b"\n", b"\r\n"]))


def _npy_defect(draw, batch: list[tuple]) -> bytes:
    rows = npy_rows(batch)
    defect = draw(st.sampled_from(["dtype", "shape", "row", "uint64", "truncated", "too_many",
                                   "object", "pickle"]))
    if defect == "dtype":
        return npy_bytes(rows.astype(draw(st.sampled_from([np.float64, np.float32, np.bool_,
                                                           np.complex64, "U4", "S4"]))))
    if defect == "shape":
        # A fifth column is the event time: -2 is none of them (-1: none, or >= 0).
        shaped = draw(st.sampled_from([rows.reshape(-1), rows[:, :3], rows[None],
                                       np.hstack([rows, np.full_like(rows[:, :1], -2)]),
                                       np.hstack([rows, rows[:, :2]]), rows.T.copy()]))
        # (A transposed batch of 4 or 5 records reads as rows with or without times.)
        assume(shaped.ndim != 2 or shaped.shape[1] != 4)
        assume(shaped.ndim != 2 or shaped.shape[1] != 5 or len(shaped) == 0
               or shaped[0, 4] == -2)
        return npy_bytes(shaped)
    if defect in ("row", "uint64"):
        v = draw(vertex_ids)
        row = draw(st.sampled_from([(4, v, 0, 0), (-1, v, 0, 0), (255, v, 0, 0), (0, -1, 0, 0),
                                    (2, v, -1, 0), (2, -1, v, 0), (0, v, 0, STRING_LABEL_BASE),
                                    (0, v, 0, -1), (2, v, v + 1, -1), (2, v, v + 1, -2),
                                    (3, v, v + 1, -2), (2, v, v, 0), (3, v, v, -1),
                                    (2, v, MISSING, 0), (3, MISSING, v, -1)]))
        if defect == "uint64":
            row = (0, 2**64 - 1, 0, 0) if draw(st.booleans()) else (2, v, 2**63, 0)
        at = draw(st.integers(0, len(rows)))
        dtype = np.uint64 if defect == "uint64" else np.int64
        rows = np.insert(rows.astype(dtype), at, np.array(row, dtype=dtype), axis=0)
        return npy_bytes(rows)
    if defect == "truncated":
        data = npy_bytes(rows)
        return data[:draw(st.integers(0, len(data) - 1))]
    if defect == "too_many":
        extra = np.tile(np.array([1, 0, 0, -1], np.int64), (MAX_UPDATES + 1 - len(rows), 1))
        return npy_bytes(np.vstack([rows, extra]))
    if defect == "object":
        return npy_bytes(rows.astype(object), allow_pickle=True)
    return pickle.dumps(rows.tolist())


@st.composite
def defective_batches(draw) -> tuple[str, bytes]:
    """(media type, body) of a batch with at least one defect: it must be refused.

    Left out, as they hit fixed bugs (regression tests below): JSON booleans and numeric strings as
    ids, .npy headers declaring a huge array, and zip (.npz) bodies."""
    media = draw(st.sampled_from([JSON, TEXT, NPY]))
    batch = draw(st.lists(records, max_size=4))
    if draw(st.sampled_from(["defect"] * 9 + ["oversized"])) == "oversized":
        body = encode_batch(batch, media)
        return media, body + b" " * (MAX_BYTES + 1 - len(body))
    defect = {JSON: _json_defect, TEXT: _text_defect, NPY: _npy_defect}[media]
    return media, defect(draw, batch)


# Tokens of update-stream lines: record words, numbers at and past the limits, lookalikes.
stream_tokens = st.one_of(
    st.sampled_from(["v", "-v", "e", "-e", "t", "#", "x", "V", "+v", "--e", "v#", "e\t"]),
    st.integers(-3, 12).map(str),
    st.sampled_from([str(INT64_MAX), str(2**63), str(2**64), "+3", "-0", "0x1", "1e3", "1.5",
                     "\u0663", "\u0661\u0662", str(STRING_LABEL_BASE), str(2**31), "nan",
                     "00000000000000000000000000001", "9" * 40]),
    st.text(max_size=4))
stream_texts = st.tuples(
    st.lists(st.lists(stream_tokens, max_size=5).map(" ".join), max_size=8),
    st.sampled_from(["\n", "\r\n", "\r", "\n\n"]),
).map(lambda t: t[1].join(t[0]).encode())

NPY_DTYPES = ["<i8", ">i8", "<i4", "|i1", "<u8", "<u4", "|u1", "<f8", "<f4", "|b1", "<c8",
              "<U3", "|S3", "<m8[s]", "<M8[D]"]


@st.composite
def npy_arrays(draw) -> bytes:
    """A .npy file of any dtype and shape (values near every limit), maybe damaged."""
    dtype = np.dtype(draw(st.sampled_from(NPY_DTYPES)))
    n = draw(st.integers(0, 6))
    shape = draw(st.sampled_from([(n, 4), (n, 4), (n,), (n, 3), (n, 5), (n, 4, 1), (), (4, n),
                                  (n, 2, 2)]))
    elements = None
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        edges = [v for v in (-1, 0, 1, 2, 3, STRING_LABEL_BASE, 2**31 - 1, INT64_MAX, 2**63,
                             2**64 - 1) if info.min <= v <= info.max]
        elements = st.one_of(st.integers(max(info.min, -2), min(info.max, 12)),
                             st.integers(int(info.min), int(info.max)), st.sampled_from(edges))
    array = draw(hnp.arrays(dtype, shape, elements=elements))
    data = npy_bytes(np.asfortranarray(array) if draw(st.booleans()) else array)
    damage = draw(st.sampled_from(["none", "none", "cut", "flip", "append"]))
    if damage == "cut":
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif damage == "flip":
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    elif damage == "append":
        data += draw(st.binary(min_size=1, max_size=16))
    return data


def npy_header(header: bytes, version: tuple[int, int] = (1, 0),
               length: int | None = None) -> bytes:
    """A .npy preamble: magic, version, header length (true unless given), header."""
    length = len(header) if length is None else length
    size = length.to_bytes(2 if version[0] == 1 else 4, "little")
    return b"\x93NUMPY" + bytes(version) + size + header


@st.composite
def npy_headers(draw) -> bytes:
    """Hand-written .npy headers: bad descr, shape, order, keys, syntax, version, length.
    Shapes stay small: a huge declared shape has its own regression test below."""
    fields = {"descr": draw(st.sampled_from(["<i8", "|O", "<f8", "zz", "<U2", "|V8", "", 5,
                                             None, [("a", "<i8")], "<i8<i8"])),
              "fortran_order": draw(st.sampled_from([False, True, "yes", 0, None])),
              "shape": draw(st.sampled_from([(), (0, 4), (1, 4), (3, 4), (-1, 4), (2,), "ab",
                                             [1, 4], (1.5, 4), (None,), (1, 4, 1), (4, -4)]))}
    form = draw(st.sampled_from(["dict", "dict", "missing", "extra", "list", "syntax"]))
    if form == "missing":
        del fields[draw(st.sampled_from(sorted(fields)))]
    elif form == "extra":
        fields["extra"] = 1
    header = {"dict": repr(fields), "missing": repr(fields), "extra": repr(fields),
              "list": repr(list(fields.values())), "syntax": repr(fields)[:-1]}[form]
    header = header.encode() + b" " * draw(st.integers(0, 40)) + b"\n"
    version = draw(st.sampled_from([(1, 0), (1, 0), (2, 0), (3, 0), (0, 0), (9, 9)]))
    length = draw(st.one_of(st.none(), st.integers(0, 0xFFFF)))
    return npy_header(header, version, length) + draw(st.binary(max_size=64))


# ---- strategies: queries -----------------------------------------------------------------

small_ids = st.integers(0, 5)
small_labels = st.one_of(st.integers(0, 2), st.sampled_from(["person", "repo"]))
pattern_vertices = st.one_of(
    st.fixed_dictionaries({"id": small_ids, "label": small_labels}),
    st.fixed_dictionaries({}, optional={"id": ids, "label": labels, "weight": json_scalars}))
pattern_edges = st.one_of(
    st.fixed_dictionaries({"source": small_ids, "target": small_ids},
                          optional={"label": small_labels}),
    st.fixed_dictionaries({}, optional={"source": ids, "target": ids, "label": labels,
                                        "weight": json_scalars}))


@st.composite
def connected_patterns(draw, vertex_labels=small_labels) -> dict:
    """A valid pattern: a random spanning tree over 2 to max_query_vertices vertices, plus
    maybe more edges."""
    n = draw(st.integers(2, LIMITS["max_query_vertices"]))
    edges = {(draw(st.integers(0, i - 1)), i) for i in range(1, n)}
    edges |= set(draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(
        lambda e: e[0] < e[1]), max_size=3)))
    return {"vertices": [{"id": i, "label": draw(vertex_labels)} for i in range(n)],
            "edges": [{"source": a, "target": b, "label": draw(st.integers(0, 1))}
                      for a, b in sorted(edges)]}


def pattern_text(pattern: dict) -> str:
    lines = [f"v {v['id']} {v['label']}" for v in pattern["vertices"]]
    lines += [f"e {e['source']} {e['target']} {e['label']}" for e in pattern["edges"]]
    return "\n".join(lines)


query_texts = st.one_of(
    connected_patterns(st.integers(0, 2)).map(pattern_text),
    st.lists(st.one_of(
        st.tuples(small_ids, small_labels).map(lambda t: f"v {t[0]} {t[1]}"),
        st.tuples(small_ids, small_ids).map(lambda t: f"e {t[0]} {t[1]}"),
        st.lists(stream_tokens, max_size=4).map(" ".join)), max_size=7).map("\n".join))
plausible_queries = st.fixed_dictionaries(
    {"pattern": st.one_of(
        connected_patterns(),
        st.fixed_dictionaries({"vertices": st.lists(pattern_vertices, max_size=5)},
                              optional={"edges": st.lists(pattern_edges, max_size=6),
                                        "extra": json_scalars}),
        query_texts, json_values)},
    optional={"name": st.one_of(st.text(min_size=1, max_size=5), st.none(), st.just(""),
                                st.just("n" * 201), st.integers()),
              "deliver": st.one_of(st.sampled_from(["counts", "matches"]),
                                   st.sampled_from(["Counts", "", None, 1])),
              "max_matches_per_batch": st.one_of(st.none(), st.integers(-2, 3),
                                                 st.sampled_from([100, 101, 2**64])),
              "backfill": st.one_of(st.booleans(), st.text(max_size=3), st.integers(-1, 2)),
              "dry_run": st.booleans()})

PATTERN_DEFECTS = ["disconnected", "too_large", "duplicate_id", "undeclared", "self_loop",
                   "duplicate_edge", "bad_label", "bad_id", "empty", "single", "unknown_key",
                   "missing_key"]
OPTION_DEFECTS = [{"name": ""}, {"name": "n" * 201}, {"name": 5}, {"name": []},
                  {"deliver": "all"}, {"deliver": ""}, {"deliver": None}, {"deliver": 1},
                  {"max_matches_per_batch": 0}, {"max_matches_per_batch": -1},
                  {"max_matches_per_batch": 1.5}, {"max_matches_per_batch": "x"},
                  {"backfill": "maybe"}, {"backfill": 2}, {"backfill": None}, {"backfill": []}]
# Options only registration checks: test_validation_refuses_what_registration_refuses.
REGISTRATION_ONLY = [{"deliver": "matches", "max_matches_per_batch": 101},
                     {"deliver": "counts", "max_matches_per_batch": 5}]


@st.composite
def defective_queries(draw) -> dict:
    """A QueryCreate with exactly one defect (in its pattern or its options).

    Left out, as they hit fixed bugs (regression tests below): booleans as ids or labels."""
    n = draw(st.integers(2, LIMITS["max_query_vertices"]))
    vids = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n, unique=True))
    vertices = [{"id": v, "label": draw(small_labels)} for v in vids]
    edges = [{"source": a, "target": b} for a, b in itertools.pairwise(vids)]  # a path
    options = {"deliver": draw(st.sampled_from(["counts", "matches"]))}
    if draw(st.booleans()):
        options.update(draw(st.sampled_from(OPTION_DEFECTS + REGISTRATION_ONLY)))
        return {"pattern": {"vertices": vertices, "edges": edges}, **options}
    defect = draw(st.sampled_from(PATTERN_DEFECTS))
    if defect == "disconnected":
        del edges[draw(st.integers(0, len(edges) - 1))]
    elif defect == "too_large":
        more = LIMITS["max_query_vertices"] + draw(st.integers(1, 3)) - n
        vertices += [{"id": 100 + i, "label": 0} for i in range(more)]
        edges += [{"source": vids[0], "target": 100 + i} for i in range(more)]
    elif defect == "duplicate_id":
        vertices.append({"id": vids[-1], "label": draw(small_labels)})
    elif defect == "undeclared":
        edges.append({"source": vids[0], "target": 99})
    elif defect == "self_loop":
        edges.append({"source": vids[0], "target": vids[0]})
    elif defect == "duplicate_edge":
        edges.append(draw(st.sampled_from([dict(edges[0]), {"source": vids[1],
                                                            "target": vids[0]}])))
    elif defect == "bad_label":
        where = draw(st.sampled_from(vertices + edges))
        where["label"] = draw(st.sampled_from(BAD_LABELS))
    elif defect == "bad_id":
        key = draw(st.sampled_from(["id", "source", "target"]))
        where = draw(st.sampled_from(vertices if key == "id" else edges))
        where[key] = draw(st.sampled_from([-1, INT64_MAX + 1, 1.5, "a", None]))
    elif defect == "empty":
        vertices.clear()
    elif defect == "single":
        del vertices[1:]
        edges.clear()
    elif defect == "unknown_key":
        draw(st.sampled_from(vertices + edges))["weight"] = 1
    elif draw(st.booleans()):  # missing_key: one a vertex or an edge cannot do without
        del draw(st.sampled_from(edges))[draw(st.sampled_from(["source", "target"]))]
    else:
        del draw(st.sampled_from(vertices))[draw(st.sampled_from(["id", "label"]))]
    return {"pattern": {"vertices": vertices, "edges": edges}, **options}


# ---- strategies: graph loads -------------------------------------------------------------


@st.composite
def defective_graphs(draw) -> tuple[str, bytes]:
    """(media type, body) of a bulk load with at least one defect, its valid part with string
    labels (which a refused load must not add to the dictionary).

    Left out, as it hit a fixed bug (regression test below): an empty text/plain graph."""
    n = draw(st.integers(1, 5))
    vids = draw(st.lists(st.integers(0, 20), min_size=n, max_size=n, unique=True))
    vlabels = [draw(st.sampled_from([0, 1, "person", "repo"])) for _ in vids]
    edges = [[a, b, draw(st.sampled_from([0, "knows"]))] for a, b in itertools.pairwise(vids)]
    if draw(st.booleans()):
        body = {"vertices": [[v, lab] for v, lab in zip(vids, vlabels)], "edges": edges}
        defect = draw(st.sampled_from(["duplicate", "self_loop", "undeclared", "id", "label",
                                       "length", "unknown", "empty", "not_object",
                                       "truncated"]))
        v = vids[0]
        if defect == "duplicate":
            body["vertices"].append([v, "other"])
        elif defect == "self_loop":
            body["edges"].append([v, v])
        elif defect == "undeclared":
            body["edges"].append([v, 99])
        elif defect == "id":
            body["vertices"].append([draw(st.sampled_from(BAD_IDS)), 0])
        elif defect == "label":
            bad = draw(st.sampled_from(BAD_LABELS))
            if draw(st.booleans()):
                body["vertices"].append([98, bad])
            else:
                body["vertices"].append([98, 0])
                body["edges"].append([v, 98, bad])
        elif defect == "length":
            body[draw(st.sampled_from(["vertices", "edges"]))].append(
                draw(st.sampled_from([[], [v], [v, 0, 0, 0]])))
        elif defect == "unknown":
            body["labels"] = {}
        elif defect == "empty":
            body["vertices"] = []
            body["edges"] = []
        elif defect == "not_object":
            return JSON, to_json(draw(st.sampled_from([[], 1, None, "v 1 0"])))
        else:
            text = to_json(body)
            return JSON, text[:draw(st.integers(0, len(text) - 1))]
        return JSON, to_json(body)
    lines = [f"v {v} {draw(st.integers(0, 3))}" for v in vids]
    lines += [f"e {a} {b}" for a, b, _ in edges]
    bad = draw(st.sampled_from([f"v {vids[0]} 1", f"e {vids[0]} {vids[0]}", f"e {vids[0]} 99",
                                f"v 30 {STRING_LABEL_BASE}", f"v 30 {2**31}", "v -1 0", "v 1",
                                "x 1 2", "e 1", "v 30 " + "n" * 257, "v 30 0\ne 30 31"]))
    lines.insert(draw(st.integers(n, len(lines))), bad)
    return TEXT, "\n".join(lines).encode()


# ---- any body, any content type ----------------------------------------------------------


@fuzz(150)
@given(route=st.sampled_from(BODY_ROUTES), media=st.sampled_from(CONTENT_TYPES), body=bodies)
def test_arbitrary_bodies_never_fail_the_server(api, route, media, body):
    method, url = route
    r = api.send(method, url, content=body, headers=content_type(media))
    if media_of(media) not in MEDIA_OF[url]:
        assert r.status_code == 415, r.text
    if url == "/v1/graph":  # a graph is loaded: there is nothing a PUT may do
        assert r.status_code >= 400, r.text


@fuzz(60)
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]),
       path=st.sampled_from(["/v1/graph", "/v1/batches", "/v1/queries", "/v1/queries:validate",
                             "/v1/queries/{q}", "/v1/queries/{q}/results", "/metrics",
                             "/healthz", "/readyz", "/v1", "/", "/v1/queries/1/x/y", "/v2/graph",
                             "/openapi.json"]),
       body=st.one_of(st.just(b""), bodies))
def test_any_method_on_any_route(api, method, path, body):
    q = api.queries["path"]
    assume(not (method == "DELETE" and path == "/v1/queries/{q}"))
    api.send(method, path.format(q=q), read_only=method == "GET", content=body)


# ---- batches -----------------------------------------------------------------------------


@fuzz(100)
@given(batch=plausible_batches, media=st.sampled_from([JSON, None, "application/json; x=y"]))
def test_plausible_json_batches(api, batch, media):
    api.send("POST", "/v1/batches", content=to_json(batch), headers=content_type(media))


@fuzz(120)
@given(request=defective_batches())
def test_defective_batches_are_refused(api, request):
    media, body = request
    r = api.send("POST", "/v1/batches", content=body, headers={"content-type": media})
    assert r.status_code in (413, 422), (media, body, r.text)


@fuzz(60)
@given(text=stream_texts, tail=st.binary(max_size=8))
def test_update_stream_text_with_random_tokens(api, text, tail):
    api.send("POST", "/v1/batches", content=text + tail, headers={"content-type": TEXT})


@fuzz(80)
@given(body=st.one_of(npy_arrays(), npy_headers()))
def test_npy_bodies_of_any_dtype_shape_and_damage(api, body):
    api.send("POST", "/v1/batches", content=body, headers={"content-type": NPY})


@fuzz(40)
@given(media=st.sampled_from([JSON, TEXT, NPY]), key=st.one_of(
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=10),
    st.integers(190, 260).map(lambda n: "k" * n)), batch=st.lists(records, max_size=3))
def test_idempotency_keys(api, media, key, batch):
    body = encode_batch(batch, media)
    first = api.send("POST", "/v1/batches", content=body,
                     headers={"content-type": media, "idempotency-key": key})
    if len(key) > 200:
        assert first.status_code == 422, first.text
    if first.status_code == 200:  # the same key and body again: a replay, nothing applied
        again = api.send("POST", "/v1/batches", read_only=True, content=body,
                         headers={"content-type": media, "idempotency-key": key})
        assert again.headers.get("idempotent-replayed") == "true"
        assert again.json() == first.json()


# ---- queries -----------------------------------------------------------------------------


@fuzz(80)
@given(create=plausible_queries)
def test_plausible_queries(api, create):
    dry_run = create.pop("dry_run", None)
    url = "/v1/queries" if dry_run is None else f"/v1/queries?dry_run={str(dry_run).lower()}"
    api.send("POST", url, content=to_json(create))


@fuzz(100)
@given(create=defective_queries(), url=st.sampled_from(["/v1/queries", "/v1/queries:validate",
                                                         "/v1/queries?dry_run=true"]))
def test_defective_queries_are_refused(api, create, url):
    r = api.send("POST", url, json=create)
    assert r.status_code == 422, (create, r.text)


@fuzz(50)
@given(text=query_texts, params=st.fixed_dictionaries({}, optional={
    "dry_run": junk, "name": junk, "deliver": junk, "max_matches_per_batch": junk,
    "backfill": junk, "after": junk}), url=st.sampled_from(["/v1/queries",
                                                            "/v1/queries:validate"]))
def test_query_text_with_junk_parameters(api, text, params, url):
    api.send("POST", url, content=text.encode(), params=params, headers={"content-type": TEXT})


# ---- query-string parameters and paths ---------------------------------------------------

path_ids = st.one_of(st.integers(-(2**63), 2**64).map(str), st.integers(-3, 10).map(str),
                     junk)


def quoted(text: str) -> str:
    return urllib.parse.quote(text, safe="")


@fuzz(80)
@given(query_id=path_ids, params=st.fixed_dictionaries({}, optional={
    "after": junk, "limit": junk, "deliver": junk, "dry_run": junk}),
       which=st.sampled_from(["results", "query", "delete"]))
def test_query_paths_and_parameters(api, query_id, params, which):
    parsed = as_int(query_id)
    if which == "delete":  # never one of the standing queries
        assume(parsed not in api.queries.values())
        api.send("DELETE", f"/v1/queries/{quoted(query_id)}", params=params)
        return
    if which == "results":
        url = f"/v1/queries/{quoted(query_id)}/results"
    else:
        url = f"/v1/queries/{quoted(query_id)}"
    api.send("GET", url, read_only=True, params=params)


def stream_status(api, url: str, **kwargs) -> int:
    """The status of a GET that may start an event stream (which never ends by itself): read
    whole when refused, dropped at once otherwise; checked as `Api.send` checks."""
    try:
        with api.client.stream("GET", url, **kwargs) as r:
            if r.status_code >= 400:
                r.read()
                assert_error_body(r)
    except Exception as exc:  # TestClient re-raises what the app raised
        raise AssertionError(f"GET {url} raised {exc!r}: a 500") from exc
    assert r.status_code < 500, r.status_code
    api.assert_unchanged(url)
    return r.status_code


@fuzz(40)
@given(after=st.one_of(junk, st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                     min_size=1, max_size=8),
                       st.integers(-(2**70), -1).map(str)),
       in_header=st.booleans())
def test_event_stream_cursor_junk_is_422(api, after, in_header):
    parsed = as_int(after)
    assume(parsed is None or parsed < 0)  # a valid cursor streams
    assume(after.isascii() and after.isprintable() and after.strip() == after)
    qid = api.queries["path"]
    kwargs = {"headers": {"last-event-id": after}} if in_header else {"params": {"after": after}}
    assert stream_status(api, f"/v1/queries/{qid}/events", **kwargs) == 422


@fuzz(30)
@given(after=st.one_of(junk, st.just("")), unknown=st.booleans())
def test_websocket_cursor_junk_and_unknown_query_close(api, after, unknown):
    if unknown:
        path, code = "/v1/queries/999/ws", 4404
    else:
        assume(not (after.isascii() and after.isdigit()))  # a valid cursor streams (forever)
        path, code = f"/v1/queries/{api.queries['path']}/ws?after={quoted(after)}", 4422
    with api.client.websocket_connect(path) as ws, \
            pytest.raises(WebSocketDisconnect) as closed:
        ws.receive_json()
    assert closed.value.code == code
    api.assert_unchanged(path)


# ---- oversized bodies --------------------------------------------------------------------


@fuzz(40)
@given(route=st.sampled_from(BODY_ROUTES), media=st.sampled_from([JSON, TEXT, NPY, None]),
       size=st.integers(MAX_BYTES + 1, 4 * MAX_BYTES),
       declared=st.sampled_from(["true", "absent", "junk", "too_small", "zero"]),
       fill=st.sampled_from([b" ", b"x", b"\x00", b"["]))
def test_oversized_bodies_are_413(api, route, media, size, declared, fill):
    method, url = route
    body = b"{" + fill * (size - 1)
    headers = content_type(media)
    content = body
    if declared == "absent":  # chunked: the size shows only while reading
        content = iter([body[:MAX_BYTES // 2], body[MAX_BYTES // 2:]])
    elif declared != "true":
        headers["content-length"] = {"junk": "abc", "too_small": "10", "zero": "0"}[declared]
    r = api.send(method, url, content=content, headers=headers)
    assert r.status_code == 413, r.text
    assert "max_request_bytes" in r.json()["detail"]


@fuzz(20)
@given(route=st.sampled_from(BODY_ROUTES), body=st.binary(max_size=64),
       declared=st.integers(MAX_BYTES + 1, 2**64))
def test_declared_oversize_is_413_before_reading(api, route, body, declared):
    method, url = route
    r = api.send(method, url, content=body, headers={"content-length": str(declared)})
    assert r.status_code == 413, r.text


# ---- the bulk load (on an app without a graph) -------------------------------------------


@fuzz(80)
@given(request=defective_graphs())
def test_defective_graph_loads_are_refused(empty_api, request):
    media, body = request
    r = empty_api.send("PUT", "/v1/graph", content=body, headers={"content-type": media})
    assert r.status_code == 422, (media, body, r.text)


@fuzz(40)
@given(media=st.sampled_from(CONTENT_TYPES), body=st.one_of(bodies, query_texts.map(str.encode)))
def test_arbitrary_graph_loads(empty_api, media, body):
    r = empty_api.send("PUT", "/v1/graph", content=body, headers=content_type(media))
    if r.status_code == 200:  # it loaded something: the next example needs an empty app
        empty_api.restart()


# ---- valid and invalid batches interleaved, against the reference -------------------------


def _specified(batch: list[tuple]) -> list[tuple]:
    """`batch` less what tests/reference.py leaves open (UNSPECIFIED there): inserts touching a
    vertex the batch deletes, and labelled deletes of an edge the batch inserts."""
    deleted = {a for kind, a, _, _ in batch if kind == DELETE_VERTEX}
    inserted = {frozenset((a, b)) for kind, a, b, _ in batch if kind == INSERT_EDGE}
    out = []
    for kind, a, b, label in batch:
        if kind == INSERT_EDGE and {a, b} & deleted:
            continue
        if kind == DELETE_EDGE and frozenset((a, b)) in inserted:
            label = NO_LABEL
        out.append((kind, a, b, label))
    return out


def _repaired(batch: list[tuple], vertices: dict[int, int]) -> list[tuple]:
    """`batch` made valid for a graph with `vertices`, mostly: adds keep an id's label, a
    vertex is not also deleted, edges have both ends."""
    labels = dict(vertices)
    for kind, a, _, label in batch:
        if kind == ADD_VERTEX:
            labels.setdefault(a, label)
    added = {a for kind, a, _, _ in batch if kind == ADD_VERTEX}
    out = []
    for kind, a, b, label in batch:
        if kind == ADD_VERTEX:
            out.append((kind, a, b, labels[a]))
        elif kind == DELETE_VERTEX:
            if a not in added:
                out.append((kind, a, b, label))
        elif a in labels and b in labels:
            out.append((kind, a, b, label))
    return _specified(out)


POOL = 10  # vertex ids of the machine's batches: the graph's and a few more
# Where a refused batch's message says the bad record is.
RECORD_AT = {JSON: re.compile(r"(insert_vertices|delete_vertices|insert_edges|delete_edges)"
                              r"\[\d+\]: "),
             TEXT: re.compile(r"body:\d+: "), NPY: re.compile(r"row \d+: ")}


def _event(data: dict) -> dict:
    """A results event with its match lists in a canonical order, less its time (a clock
    reading; tests/service/test_streams.py checks it)."""
    data = dict(data)
    data.pop("time", None)
    for key in ("added", "removed"):
        if key in data:
            data[key] = sorted(map(tuple, data[key]))
    return data


class InterleavedBatches(RuleBasedStateMachine):
    """Valid and invalid batches in any order on a fresh app; after each step its graph,
    results and statistics are what tests/reference.py says the valid ones alone give."""

    def __init__(self) -> None:
        super().__init__()
        self._directory = tempfile.TemporaryDirectory()

        def setup(client):
            load(client)
            return register_queries(client)

        self.api = Api(Path(self._directory.name), setup)
        self.reference = RefGraph.build(VERTICES, EDGES)
        self.seq = 0
        self.events = {name: [] for name in PATTERNS}
        self.events["triangle"].append({"id": 0, "data": {
            "batch": 0, "backfill": True, "negative": 0,
            "positive": len(self.reference.embeddings(PATTERNS["triangle"]))}})
        self.stats = {name: {"batches_seen": 0, "total_positive": 0, "total_negative": 0,
                             "last_batch": 0} for name in PATTERNS}

    def teardown(self) -> None:
        self.api.close()
        self._directory.cleanup()

    def _post(self, media: str, body: bytes):
        """POST /v1/batches, checked by `Api.send` (a refused one changed nothing)."""
        return self.api.send("POST", "/v1/batches", content=body,
                             headers={"content-type": media})

    def _draw_batch(self, data) -> list[tuple]:
        vertex = st.integers(0, POOL - 1)
        if self.reference.vertices:  # mostly vertices that exist
            vertex = st.one_of(st.sampled_from(sorted(self.reference.vertices)), vertex)
        return data.draw(st.lists(batch_records(vertex), max_size=8))

    @rule(data=st.data(), media=st.sampled_from([JSON, TEXT, NPY]))
    def batch(self, data, media):
        self._apply(_specified(self._draw_batch(data)), media)

    @rule(data=st.data(), media=st.sampled_from([JSON, TEXT, NPY]))
    def valid_batch(self, data, media):
        self._apply(_repaired(self._draw_batch(data), self.reference.vertices), media)

    @rule(request=defective_batches())
    def defective_batch(self, request):
        assert self._post(*request).status_code >= 400

    def _apply(self, batch: list[tuple], media: str) -> None:
        """Send `batch`: refused exactly when the reference rejects it, with the record's place
        in the message; else its answer, events and statistics are the reference's."""
        after = RefGraph(self.reference.vertices, self.reference.edges)
        try:
            applied, ignored = after.apply(batch)
        except Rejected:
            event("machine: batch the reference rejects")
            r = self._post(media, encode_batch(batch, media))
            assert r.status_code == 422 and RECORD_AT[media].match(r.json()["detail"]), r.text
            return
        if not batch:   # refused, as documented (docs/service.md, Batches)
            event("machine: empty batch")
            r = self._post(media, encode_batch(batch, media))
            assert r.status_code == 422 and "the batch is empty" in r.json()["detail"], r.text
            return
        event(f"machine: valid batch of {len(batch)}")
        r = self._post(media, encode_batch(batch, media))
        assert r.status_code == 200, (batch, r.text)
        answer = r.json()
        self.seq += 1
        assert answer["batch"] == self.seq
        assert (answer["applied"], answer["ignored"]) == (applied, ignored), batch
        for name, query in PATTERNS.items():
            before, now = self.reference.embeddings(query), after.embeddings(query)
            added, removed = now - before, before - now
            assert answer["results"][str(self.api.queries[name])] == {
                "positive": len(added), "negative": len(removed)}, (name, batch)
            stats = self.stats[name]
            stats["batches_seen"] += 1
            stats["total_positive"] += len(added)
            stats["total_negative"] += len(removed)
            if added or removed:
                stats["last_batch"] = self.seq
                data = {"batch": self.seq, "positive": len(added), "negative": len(removed)}
                if OPTIONS[name]["deliver"] == "matches":
                    data.update(added=sorted(added), removed=sorted(removed), truncated=False)
                self.events[name].append({"id": self.seq, "data": data})
        self.reference = after

    @invariant()
    def matches_the_reference(self):
        state = self.api.state  # as read after the last batch the app took
        graph = state["graph"]
        assert (graph["vertices"], graph["edges"], graph["batches"], graph["labels"]) == (
            len(self.reference.vertices), len(self.reference.edges), self.seq, {})
        stats = {q["name"]: q["stats"] for q in state["queries"]}
        for name, qid in self.api.queries.items():
            seen = {key: stats[name][key] for key in self.stats[name]}
            assert seen == self.stats[name], name
            events = state["results"][qid]["events"]
            assert [{"id": e["id"], "data": _event(e["data"])} for e in events] == [
                {"id": e["id"], "data": _event(e["data"])} for e in self.events[name]], name


TestInterleavedBatches = InterleavedBatches.TestCase
TestInterleavedBatches.settings = settings(
    max_examples=12, stateful_step_count=12, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.data_too_large])


# ---- regression tests: bugs this file found, inputs the generators leave out ----------


def test_results_cursor_past_int64_is_not_500(api):
    r = api.send("GET", f"/v1/queries/{api.queries['path']}/results", read_only=True,
                 params={"after": str(2**63)})
    assert r.status_code in (200, 422)


def test_results_past_int64_is_not_500(api):
    r = api.send("GET", f"/v1/queries/{2**63}/results", read_only=True)
    assert r.status_code == 404


def test_event_stream_of_query_id_past_int64_is_404(api):
    assert stream_status(api, f"/v1/queries/{2**63}/events") == 404


def test_event_stream_cursor_past_int64_is_refused(api):
    url = f"/v1/queries/{api.queries['path']}/events"
    assert stream_status(api, url, headers={"last-event-id": str(2**63)}) == 422


def test_websocket_of_query_id_past_int64_closes_4404(api):
    with api.client.websocket_connect(f"/v1/queries/{2**63}/ws") as ws, \
            pytest.raises(WebSocketDisconnect) as closed:
        ws.receive_json()
    assert closed.value.code == 4404


def test_websocket_cursor_past_int64_closes_4422(api):
    with api.client.websocket_connect(
            f"/v1/queries/{api.queries['path']}/ws?after={2**63}") as ws, \
            pytest.raises(WebSocketDisconnect) as closed:
        ws.receive_json()
    assert closed.value.code == 4422


def _npz() -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, rows=np.zeros((1, 4), np.int64))
    return buffer.getvalue()


def _zip_of_nothing() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w"):
        pass
    return buffer.getvalue()


@pytest.mark.parametrize("body", [b"PK\x03\x04 not a zip", _zip_of_nothing(), _npz()],
                         ids=["zip-magic", "empty-zip", "npz"])
def test_npz_body_is_refused(api, body):
    r = api.send("POST", "/v1/batches", content=body, headers={"content-type": NPY})
    assert r.status_code == 422


@pytest.mark.parametrize("header", [b"{", b"{'descr': '<i8', 'shape': (1, 4)\n"],
                         ids=["length-1", "unclosed"])
def test_unparsable_npy_header_is_refused(api, header):
    r = api.send("POST", "/v1/batches", content=npy_header(header),
                 headers={"content-type": NPY})
    assert r.status_code == 422


def test_npy_header_declaring_a_huge_array_is_refused(api):
    header = repr({"descr": "<i8", "fortran_order": False, "shape": (2**40, 4)}).encode()
    r = api.send("POST", "/v1/batches", content=npy_header(header + b"\n"),
                 headers={"content-type": NPY})
    assert r.status_code in (413, 422)


# These change the state when they fail: each on a fresh app (conftest's `client`).


@pytest.mark.parametrize("body", [b"", b"# nothing\n", b"t 0 0\n"])
def test_empty_text_graph_load_is_refused(client, body):
    r = client.put("/v1/graph", content=body, headers={"content-type": TEXT})
    assert r.status_code == 422, r.text


@pytest.mark.parametrize("body", [{"insert_vertices": [[True, 0]]},
                                  {"insert_vertices": [[40, True]]},
                                  {"delete_vertices": [True]},
                                  {"insert_edges": [[0, 2, True]]}],
                         ids=["vertex-id", "vertex-label", "delete", "edge-label"])
def test_booleans_are_not_ids_or_labels(client, body):
    load(client)
    r = client.post("/v1/batches", json=body)
    assert r.status_code == 422, r.text


def test_numeric_strings_are_not_vertex_ids(client):
    load(client)
    assert client.post("/v1/batches", json={"insert_edges": [["0", 1]]}).status_code == 422
    r = client.post("/v1/batches", json={"delete_vertices": ["5"]})
    assert r.status_code == 422, r.text


@pytest.mark.parametrize("options", REGISTRATION_ONLY, ids=["above-cap", "counts"])
@pytest.mark.parametrize("url", ["/v1/queries:validate", "/v1/queries?dry_run=true"])
def test_validation_refuses_what_registration_refuses(api, url, options):
    create = {"pattern": pattern_body(PATTERNS["path"]), **options}
    assert api.send("POST", "/v1/queries", json=create).status_code == 422
    assert api.send("POST", url, json=create).status_code == 422


def test_pattern_text_errors_name_the_pattern_field(api):
    r = api.send("POST", "/v1/queries:validate", json={"pattern": ""})
    assert r.status_code == 422
    assert r.json()["detail"].startswith("pattern: ")
