"""Owns the batch bodies the API accepts (JSON, update-stream text, NumPy .npy, Arrow IPC)
and their conversion to the engine's UpdateStream, with errors that name the field, index,
line, row or column.

Structure is checked where the request arrives; labels are resolved on the engine
thread (`to_stream`), because the label dictionary changes as batches commit.  pyarrow
is optional (the `arrow` extra): it is imported on the first Arrow body.

Past 500 lines on purpose: the formats share their checks (`_rows_stream`, `_check_size`)
and error classes, and a module per format would import them all back from here.
"""
from __future__ import annotations

import functools

import gzip
import io
import tempfile
import warnings
from dataclasses import dataclass

import numpy as np
from numpy.lib import format as npy_format
from starlette.formparsers import MultiPartException, MultiPartParser

from gpu.io.edge_lists import parse_edge_list
from gpu.io.graphs import parse_graph_text
from gpu.io.records import (
    ADD_VERTEX,
    DELETE_EDGE,
    DELETE_VERTEX,
    INSERT_EDGE,
    MAX_ID,
    NO_LABEL,
    NO_TIME,
    FormatError,
    LabeledGraph,
    UpdateStream,
)
from gpu.io.streams import parse_updates_text
from gpu.io.text import first_content_line
from service.labels import (GRAPH_LABEL_TOKENS, STREAM_LABEL_TOKENS, STRING_LABEL_BASE,
                            StagedLabels, TextLabelNames, parse_named)
from service.schemas import BatchCreate, GraphLoad

JSON = "application/json"
TEXT = "text/plain"
NPY = "application/x-npy"
# Arrow IPC, the stream and the file format (what pandas, polars and DuckDB write).
ARROW_STREAM = "application/vnd.apache.arrow.stream"
ARROW_FILE = "application/vnd.apache.arrow.file"
ARROW = (ARROW_STREAM, ARROW_FILE)
MEDIA_TYPES = (JSON, TEXT, NPY, ARROW_STREAM, ARROW_FILE)
# An Arrow batch's columns, in the .npy array's order: kind, the vertex or the edge's
# endpoints, label; then the optional event time (issue 23), the .npy array's fifth column.
ARROW_COLUMNS = ("kind", "u", "v", "label")
ARROW_TIME = "time"
CSV = "text/csv"
MULTIPART = "multipart/form-data"
GRAPH_MEDIA_TYPES = (JSON, TEXT, CSV, MULTIPART)

# Record order of a JSON batch; a record's line number maps back to (field, index).
_JSON_FIELDS = (("insert_vertices", ADD_VERTEX), ("delete_vertices", DELETE_VERTEX),
                ("insert_edges", INSERT_EDGE), ("delete_edges", DELETE_EDGE))


class InputError(ValueError):
    """A request body is malformed; the message names the field, index or line."""


@dataclass
class BatchInput:
    """One batch body, checked for structure; `to_stream` finishes it on the engine thread."""
    media_type: str
    size: int
    _json: BatchCreate | None = None
    _stream: UpdateStream | None = None
    _names: TextLabelNames | None = None

    def to_stream(self, staged: StagedLabels) -> UpdateStream:
        if self._stream is None:
            return _json_stream(self._json, staged)
        if self._names is None or not self._names.names:
            return self._stream
        s = self._stream
        return UpdateStream(s.kind, s.a, s.b, self._names.resolve(s.label, staged), s.line,
                            s.source)

    def where(self, line: int) -> str:
        """Where record `line` (1-based) came from, for error messages."""
        if self.media_type == JSON:
            for name, _ in _JSON_FIELDS:
                n = len(getattr(self._json, name))
                if line <= n:
                    return f"{name}[{line - 1}]"
                line -= n
            return f"record {line}"
        if self.media_type == NPY or self.media_type in ARROW:
            return f"row {line - 1}"
        return f"body:{line}"   # as the text parser names lines


def parse_batch(body: bytes, media_type: str, max_updates: int) -> BatchInput:
    """Check a batch body's structure; raises InputError, FormatError or pydantic's
    ValidationError."""
    if media_type == JSON:
        batch = BatchCreate.model_validate_json(body)
        size = sum(len(getattr(batch, name)) for name, _ in _JSON_FIELDS)
        _check_size(size, max_updates)
        return BatchInput(JSON, size, _json=batch)
    if media_type == TEXT:
        stream, names = parse_named(parse_updates_text, body, STREAM_LABEL_TOKENS, "body")
        _check_size(len(stream), max_updates)
        # With names, labels from STRING_LABEL_BASE up are their stand-ins.
        bad = [] if names.names else np.flatnonzero(stream.label >= STRING_LABEL_BASE)
        if len(bad):
            raise FormatError("body", int(stream.line[bad[0]]),
                              f"label {int(stream.label[bad[0]])} out of range "
                              f"[0, {STRING_LABEL_BASE})")
        return BatchInput(TEXT, len(stream), _stream=stream, _names=names)
    if media_type == NPY:
        stream = _npy_stream(body, max_updates)
        return BatchInput(NPY, len(stream), _stream=stream)
    if media_type in ARROW:
        stream = _arrow_stream(body, max_updates)
        return BatchInput(media_type, len(stream), _stream=stream)
    raise UnsupportedMediaType(f"Content-Type {media_type!r} is not a batch format; "
                     f"use one of {', '.join(MEDIA_TYPES)}")


def _check_size(size: int, max_updates: int) -> None:
    if size > max_updates:
        raise InputError(f"the batch has {size} updates; the limit is {max_updates} "
                         "(max_batch_updates)")


# ---- JSON -------------------------------------------------------------------------


def _vertex_id(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ID:
        raise InputError(f"{where}: vertex id must be an integer in [0, 2**63), got {value!r}")
    return value


def _json_stream(batch: BatchCreate, staged: StagedLabels) -> UpdateStream:
    kinds, a, b, labels, times = [], [], [], [], []
    for name, kind in _JSON_FIELDS:
        items = getattr(batch, name)
        for i, item in enumerate(items):
            where = f"{name}[{i}]"
            if kind == DELETE_VERTEX:
                a.append(item)
                b.append(0)
                labels.append(NO_LABEL)
            elif kind == ADD_VERTEX:
                a.append(_vertex_id(item[0], f"{where}[0]"))
                b.append(0)
                labels.append(staged.resolve(item[1], f"{where}[1]"))
            else:
                a.append(_vertex_id(item[0], f"{where}[0]"))
                b.append(_vertex_id(item[1], f"{where}[1]"))
                if len(item) >= 3:
                    labels.append(staged.resolve(item[2], f"{where}[2]"))
                else:
                    labels.append(0 if kind == INSERT_EDGE else NO_LABEL)
                if len(item) == 4:
                    times.append(_event_time(item[3], f"{where}[3]"))
                if a[-1] == b[-1]:
                    raise InputError(f"{where}: self-loop on vertex {a[-1]}")
            if len(times) < len(a):
                times.extend([NO_TIME] * (len(a) - len(times)))
        kinds.extend([kind] * len(items))
    n = len(kinds)
    timed = any(t != NO_TIME for t in times)
    return UpdateStream(np.array(kinds, np.int8), np.array(a, np.int64),
                        np.array(b, np.int64), np.array(labels, np.int64),
                        np.arange(1, n + 1), "body",
                        np.array(times, np.int64) if timed else None)


def _event_time(value, where: str) -> int:
    """An insert's event time: an integer in [0, 2^63)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ID:
        raise InputError(f"{where}: event time {value!r} is not an integer in [0, 2^63)")
    return value


# ---- .npy -------------------------------------------------------------------------


def _npy_rows(body: bytes, max_updates: int) -> np.ndarray:
    """The (n, 4) or (n, 5) integer array of a .npy body.  The header is read and checked
    first, so a tiny body declaring a huge array costs nothing; the data is then a view of
    the body."""
    stream = io.BytesIO(body)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # numpy warns about some odd but legal headers
            version = npy_format.read_magic(stream)
            if version not in ((1, 0), (2, 0)):
                raise InputError(f"body: .npy format version {version[0]}.{version[1]}; use "
                                 "1.0 or 2.0")
            read_header = npy_format.read_array_header_1_0 if version == (1, 0) else \
                npy_format.read_array_header_2_0
            shape, fortran, dtype = read_header(stream)
    except InputError:
        raise
    except Exception:  # noqa: BLE001 -- numpy raises several kinds, naming its internals
        raise InputError("body: not a readable .npy array (no .npy magic, or a malformed "
                         "header)") from None
    if len(shape) != 2 or shape[1] not in (4, 5) or dtype.kind not in "iu" or dtype.hasobject:
        raise InputError(f"body: expected an integer array of shape (n, 4), or (n, 5) with "
                         f"event times, got {dtype} {shape}")
    _check_size(shape[0], max_updates)
    expected = stream.tell() + shape[0] * shape[1] * dtype.itemsize
    if len(body) != expected:
        raise InputError(f"body: the .npy header declares {expected} bytes, the body has "
                         f"{len(body)}")
    rows = np.frombuffer(body, dtype=dtype, offset=stream.tell()).reshape(
        shape, order="F" if fortran else "C")
    return rows


def _npy_stream(body: bytes, max_updates: int) -> UpdateStream:
    """An int64 array of shape (n, 4): kind (0 add vertex, 1 delete vertex, 2 insert edge,
    3 delete edge), a, b, label (-1: none, on deletions); or (n, 5), the fifth column an
    edge insert's event time (-1: none, and on every other kind)."""
    rows = _npy_rows(body, max_updates)
    if rows.dtype == np.uint64 and (rows > MAX_ID).any():
        bad = int(np.flatnonzero((rows > MAX_ID).any(axis=1))[0])
        raise InputError(f"row {bad}: value out of range")
    columns = rows.astype(np.int64).T
    return _rows_stream(*columns[:4], names=("a", "b"),
                        time=columns[4] if len(columns) == 5 else None)


def _rows_stream(kind, a, b, label, names: tuple[str, str], time=None) -> UpdateStream:
    """The UpdateStream of int64 columns as the .npy array's, checked row by row; `names`
    are what errors call the a and b columns; `time`, when given, the event times (-1:
    none; only edge inserts may have one), kept only when some row has one."""
    is_edge = (kind == INSERT_EDGE) | (kind == DELETE_EDGE)
    is_delete = (kind == DELETE_VERTEX) | (kind == DELETE_EDGE)
    problems = (
        ((kind < 0) | (kind > 3), ("kind must be 0 (add vertex), 1 (delete vertex), "
                                    "2 (insert edge) or 3 (delete edge)")),
        (a < 0, f"vertex id {names[0]} must be >= 0"),
        (is_edge & (b < 0), f"vertex id {names[1]} must be >= 0"),
        (is_edge & (a == b), "self-loop"),
        ((label < np.where(is_delete, NO_LABEL, 0)) | (label >= STRING_LABEL_BASE),
         f"label out of range [0, {STRING_LABEL_BASE}) (-1 allowed on deletions)"),
    )
    if time is not None:
        problems += ((time < -1, "time must be >= 0 (-1: none)"),
                     ((time >= 0) & (kind != INSERT_EDGE),
                      "a time is only for an edge insert (kind 2); -1 on other rows"))
    first = min(((int(np.argmax(bad)), reason) for bad, reason in problems if bad.any()),
                default=None)
    if first is not None:
        raise InputError(f"row {first[0]}: {first[1]}")
    timed = time is not None and bool((time >= 0).any())
    return UpdateStream(kind, a, np.where(is_edge, b, 0), label, np.arange(1, len(kind) + 1),
                        "body", np.where(time >= 0, time, NO_TIME) if timed else None)


# ---- Arrow IPC ----------------------------------------------------------------------


def _arrow_stream(body: bytes, max_updates: int) -> UpdateStream:
    """The columns ARROW_COLUMNS of an Arrow IPC body, as the .npy array's: kind, u (the
    vertex, or an edge's first endpoint), v (an edge's second; null on vertex rows), label
    (null or -1: none, on deletions), and optionally time (an edge insert's event time;
    null or -1: none).  Any integer type; columns pandas writes for its index
    (`__index_level_0__`) are ignored, other extra columns refused."""
    table = _arrow_table(body, max_updates)
    pa = _pyarrow()
    names = [n for n in table.column_names if not n.startswith("__index_level_")]
    missing = [n for n in ARROW_COLUMNS if n not in names]
    expected = f"the columns {', '.join(ARROW_COLUMNS)} and optionally {ARROW_TIME}"
    if missing:
        raise InputError(f"body: column {missing[0]!r} is missing; an Arrow batch has "
                         f"{expected} (found: {', '.join(names)})")
    extra = [n for n in names if n not in ARROW_COLUMNS and n != ARROW_TIME]
    if extra or len(names) != len(set(names)):
        what = f"unknown column {extra[0]!r}" if extra else "a column given twice"
        raise InputError(f"body: {what}; an Arrow batch has {expected}")
    kind, u, v, label = (_arrow_column(table.column(n), n, pa) for n in ARROW_COLUMNS)
    time = None
    if ARROW_TIME in names:
        column = _arrow_column(table.column(ARROW_TIME), ARROW_TIME, pa)
        time = np.where(column.mask, -1, column.data)
    for name, values in (("kind", kind), ("u", u)):
        if values.mask.any():
            raise InputError(f"row {int(np.argmax(values.mask))}: {name} is null")
    is_edge = (kind.data == INSERT_EDGE) | (kind.data == DELETE_EDGE)
    is_insert = (kind.data == ADD_VERTEX) | (kind.data == INSERT_EDGE)
    for bad, reason in ((v.mask & is_edge, "v is null on an edge row (kind 2 or 3)"),
                        (label.mask & is_insert, "label is null on an insertion (kind 0 or "
                                                 "2); null means no label, on deletions")):
        if bad.any():
            raise InputError(f"row {int(np.argmax(bad))}: {reason}")
    return _rows_stream(kind.data, u.data, np.where(v.mask, 0, v.data),
                        np.where(label.mask, NO_LABEL, label.data), names=("u", "v"), time=time)


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401 -- the submodule, for pyarrow.ipc below
    except ImportError:
        raise UnsupportedMediaType(
            "Arrow bodies need pyarrow, which this server lacks: install the `arrow` extra "
            "(pip install 'motifstream[arrow]'), or send application/x-npy") from None
    return pyarrow


# What an Arrow IPC file starts with; a stream starts with its schema message.
_ARROW_FILE_MAGIC = b"ARROW1"


def _arrow_table(body: bytes, max_updates: int):
    """The body's record batches as one table; the rows are counted batch by batch, so a
    body over max_updates is refused before the rest is read (or decompressed).  The
    stream and the file format are told apart by the file's magic, whichever of the two
    Arrow media types the request named (clients mix them up, and nothing is ambiguous)."""
    pa = _pyarrow()
    is_file = body.startswith(_ARROW_FILE_MAGIC)
    try:
        if is_file:
            reader = pa.ipc.open_file(body)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        else:
            reader = pa.ipc.open_stream(body)
            batches = iter(reader)
        kept, rows = [], 0
        for batch in batches:
            rows += batch.num_rows
            _check_size(rows, max_updates)
            kept.append(batch)
        return pa.Table.from_batches(kept, schema=reader.schema)
    except pa.ArrowException as exc:
        raise InputError(f"body: not a readable Arrow IPC {'file' if is_file else 'stream'} "
                         f"({exc})") from None


@dataclass
class _Column:
    """An Arrow column as int64 values and a null mask (values under nulls are 0)."""
    data: np.ndarray
    mask: np.ndarray


def _arrow_column(column, name: str, pa) -> _Column:
    kind = column.type
    if pa.types.is_null(kind):   # an all-null column (`v` of a vertex-only batch)
        n = len(column)
        return _Column(np.zeros(n, np.int64), np.ones(n, bool))
    if not pa.types.is_integer(kind):
        hint = " (pandas writes float64 for an integer column with NaN: use its Int64 " \
               "dtype)" if pa.types.is_floating(kind) else ""
        raise InputError(f"body: column {name!r} has type {kind}; it must be an integer "
                         f"type{hint}")
    mask = column.is_null().to_numpy(zero_copy_only=False) if column.null_count else \
        np.zeros(len(column), bool)
    values = column.fill_null(0).to_numpy()
    if values.dtype == np.uint64 and (values > MAX_ID).any():
        raise InputError(f"row {int(np.argmax(values > MAX_ID))}: {name} out of range "
                         "[0, 2**63)")
    return _Column(values.astype(np.int64, copy=False), mask)


class UnsupportedMediaType(InputError):
    """The request's Content-Type is not one this route reads (HTTP 415)."""


class PayloadTooLarge(InputError):
    """The request body is above max_request_bytes (HTTP 413)."""


# What `curl -d` sends when no Content-Type is given.  No route reads HTML forms, and a
# JSON body posted with `curl -d '{...}'` is by far the likelier meaning, so it is read as
# JSON (a real form body is then a 422 naming the JSON error), as is a request without one.
CURL_FORM = "application/x-www-form-urlencoded"


def read_media_type(content_type: str | None) -> str:
    """The media type of a Content-Type value, without parameters, lower-case; JSON when
    there is none or it is curl's form default (CURL_FORM)."""
    if not content_type:
        return JSON
    media = content_type.split(";", 1)[0].strip().lower()
    return JSON if media == CURL_FORM else media


def media_type(headers) -> str:
    """The request's media type (read_media_type of its Content-Type header)."""
    return read_media_type(headers.get("content-type"))


async def read_body(request, limit: int) -> bytes:
    """The request body, refused with PayloadTooLarge as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the request body has {declared} bytes; the limit is {limit} "
                              "(max_request_bytes)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the request body is over the limit of {limit} bytes "
                                  "(max_request_bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


# ---- bulk graph load --------------------------------------------------------------


@dataclass
class GraphInput:
    """A PUT /v1/graph body, checked for structure; labels resolve on the engine thread."""
    _json: GraphLoad | None = None
    _graph: LabeledGraph | None = None
    _names: TextLabelNames | None = None
    directed: bool = False      # its edges are arcs (read as such)

    def to_graph(self, staged: StagedLabels) -> LabeledGraph:
        if self._graph is not None:
            g, names = self._graph, self._names
            if names is None or not names.names:
                return g
            return LabeledGraph(g.vertex_ids, names.resolve(g.vertex_labels, staged),
                                g.edge_src, g.edge_dst, names.resolve(g.edge_labels, staged))
        load = self._json
        ids = [_vertex_id(v[0], f"vertices[{i}][0]") for i, v in enumerate(load.vertices)]
        labels = [staged.resolve(v[1], f"vertices[{i}][1]") for i, v in enumerate(load.vertices)]
        src = [_vertex_id(e[0], f"edges[{i}][0]") for i, e in enumerate(load.edges)]
        dst = [_vertex_id(e[1], f"edges[{i}][1]") for i, e in enumerate(load.edges)]
        elabels = [staged.resolve(e[2], f"edges[{i}][2]") if len(e) == 3 else 0
                   for i, e in enumerate(load.edges)]
        # The graph-file reader checks duplicates, self-loops and undeclared endpoints; its
        # line k is vertices[k-1], then the edges.
        lines = [f"v {i} {lab}" for i, lab in zip(ids, labels)]
        lines += [f"e {u} {v} {lab}" for u, v, lab in zip(src, dst, elabels)]
        try:
            return parse_graph_text("\n".join(lines), source="body", directed=self.directed)
        except FormatError as exc:
            line = exc.line - 1
            where = f"vertices[{line}]" if line < len(ids) else f"edges[{line - len(ids)}]"
            raise InputError(f"{where}: {exc.reason}") from None


@dataclass(frozen=True)
class EdgeListLabels:
    """How an edge list's vertices get labels, as the CLI's --labels / --num-labels
    --label-seed: a labels file's bytes (`<id> <label>` lines) or K random labels."""
    file: bytes | None = None
    num_labels: int | None = None
    seed: int | None = None

    @property
    def given(self) -> bool:
        return self.file is not None or self.num_labels is not None or self.seed is not None


def parse_graph(body: bytes, media: str, labels: EdgeListLabels = EdgeListLabels(),
                source: str = "body", directed: bool = False) -> GraphInput:
    """Check a PUT /v1/graph body's structure: JSON, or (text/plain, text/csv, a
    multipart form's `graph` part) a graph file or an edge list, told apart by the first
    line as the CLI does, its edges read as arcs when `directed`; raises InputError,
    FormatError or pydantic's ValidationError."""
    if media == JSON:
        if labels.given:
            raise InputError("num_labels, label_seed and labels apply to edge lists only; "
                             "a JSON graph has its own labels")
        return GraphInput(_json=GraphLoad.model_validate_json(body), directed=directed)
    if media in (TEXT, CSV):
        graph, names = _graph_text(_gunzipped(body), labels, source, directed)
        if graph.num_vertices == 0:
            raise InputError(f"{source}: the graph has no vertices; a bulk load needs at "
                             "least one")
        for name, values in (("vertex", graph.vertex_labels), ("edge", graph.edge_labels)):
            if not names.names and len(values) and int(values.max()) >= STRING_LABEL_BASE:
                raise InputError(f"{source}: {name} label {int(values.max())} out of range "
                                 f"[0, {STRING_LABEL_BASE})")
        return GraphInput(_graph=graph, _names=names, directed=directed)
    raise UnsupportedMediaType(f"Content-Type {media!r} is not a graph format; use one of "
                               f"{', '.join(GRAPH_MEDIA_TYPES)}")


def _gunzipped(data: bytes) -> bytes:
    """As the CLI's reader: a gzip body (sniffed by its magic) is decompressed."""
    if data[:2] != b"\x1f\x8b":
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError) as exc:
        raise InputError(f"not a readable gzip stream ({exc})") from None


def _graph_text(data: bytes, labels: EdgeListLabels, source: str, directed: bool = False
                ) -> tuple[LabeledGraph, TextLabelNames]:
    # As gpu.io.graphs.load_graph tells them apart (it reads from a path only).
    tokens = first_content_line(data, b"#")[2]
    if tokens[:1] in ([b"t"], [b"v"], [b"e"]) and len(tokens) > 1:
        if labels.given:
            raise InputError(f"{source} is a graph file with its own labels; num_labels, "
                             "label_seed and labels apply to edge lists only")
        return parse_named(functools.partial(parse_graph_text, directed=directed), data,
                           GRAPH_LABEL_TOKENS, source)
    if labels.file is None and labels.num_labels is None:
        raise InputError(f"{source} is an edge list without labels; give num_labels=K "
                         "(and label_seed=S), or a `labels` part (multipart/form-data)")
    if labels.file is not None and labels.num_labels is not None:
        raise InputError("give num_labels or a labels file, not both")
    if labels.file is not None and labels.seed is not None:
        raise InputError("label_seed applies to num_labels only, not to a labels file")
    if labels.file is None:
        return parse_edge_list(data, source, None, labels.num_labels, labels.seed or 0,
                               directed), \
            TextLabelNames(source)
    # The labels-file reader reads a path: the part goes through a temporary file, whose
    # name errors then must not show.
    with tempfile.NamedTemporaryFile(prefix="motifstream-labels-") as handle:
        handle.write(_gunzipped(labels.file))
        handle.flush()
        try:
            graph = parse_edge_list(data, source, handle.name, None, 0, directed)
        except FormatError as exc:
            if exc.path != handle.name:
                raise
            raise FormatError("labels", exc.line, exc.reason) from None
    return graph, TextLabelNames(source)


# The parts a multipart/form-data PUT /v1/graph may have: the graph and its labels file.
GRAPH_PARTS = ("graph", "labels")


async def read_graph_form(headers, body: bytes, labels: EdgeListLabels
                          ) -> tuple[bytes, EdgeListLabels]:
    """The `graph` part of a multipart/form-data body and, with the `labels` part, the
    labels to give it (`curl -F graph=@edges.txt -F labels=@labels.txt`)."""
    async def chunks():
        yield body

    parser = MultiPartParser(headers, chunks(), max_files=len(GRAPH_PARTS),
                             max_fields=len(GRAPH_PARTS), max_part_size=len(body) + 1)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InputError(f"body: not a readable multipart/form-data body ({exc.message})"
                         ) from None
    parts = {}
    try:
        for name, value in form.multi_items():
            if name not in GRAPH_PARTS:
                raise InputError(f"body: unknown part {name!r}; a graph upload has the parts "
                                 f"{' and '.join(GRAPH_PARTS)}")
            if name in parts:
                raise InputError(f"body: part {name!r} given twice")
            parts[name] = value.encode() if isinstance(value, str) else await value.read()
    finally:
        await form.close()
    if "graph" not in parts:
        raise InputError("body: the `graph` part is missing (the graph file or edge list)")
    if "labels" in parts:
        labels = EdgeListLabels(parts["labels"], labels.num_labels, labels.seed)
    return parts["graph"], labels
