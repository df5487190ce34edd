"""Owns the on-disk text formats: graph/query files, update streams, edge lists, label files.

Formats follow the continuous-subgraph-matching literature (RapidFlow, the CSM
study, GAMMA):

* graph and query files: ``t <n> <m>`` (optional header), ``v <id> <label>``,
  ``e <u> <v> [label]``; extra tokens after the last field are ignored;
* update streams: ``v <id> <label>``, ``-v <id> [label]``, ``e <u> <v> [label]``,
  ``-e <u> <v> [label]``; no extra tokens;
* edge lists: SNAP text (``u v``) or CSV with an optional header line;
* label files: ``<id> <label>`` per line, optional header.

``#`` starts a comment anywhere on a line (edge-list and label files also
accept ``%``); blank lines are skipped; ``.gz`` input is decompressed.

Every reader returns a complete object or raises :class:`FormatError`; nothing
is half-loaded.  Parsing runs a compiled (Numba) scan plus vectorised checks
over chunks of the raw bytes; a chunk the fast pass cannot vouch for (any
unusual token) is re-read line by line by the reference parser, which either
accepts it or reports the exact first bad line.  Syntax errors are reported
before semantic ones (duplicates, undeclared endpoints), which need the whole
file.
"""
from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

import numba as nb
import numpy as np

from gpu.graph.sets import sorted_unique

ADD_VERTEX = np.int8(0)
DELETE_VERTEX = np.int8(1)
INSERT_EDGE = np.int8(2)
DELETE_EDGE = np.int8(3)
NO_LABEL = -1

MAX_ID = 2**63 - 1
MAX_LABEL = 2**31 - 1

_CHUNK_BYTES = 1 << 24
# The fast pass trusts only tokens of <= 18 digits: they cannot overflow int64.
_FAST_DIGITS = 18
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[list(b" \t\n\r\x0b\x0c")] = True  # exactly the set bytes.split() uses
_SIGNED_INT = re.compile(rb"[+-]?\d+")


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


# --------------------------------------------------------------------------- containers


@dataclass(frozen=True, eq=False)
class LabeledGraph:
    """A vertex- and edge-labelled graph keyed by external vertex ids."""

    vertex_ids: np.ndarray
    vertex_labels: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_labels: np.ndarray

    def __post_init__(self):
        _coerce(self, vertex_ids=np.int64, vertex_labels=np.int32)
        _coerce(self, edge_src=np.int64, edge_dst=np.int64, edge_labels=np.int32)

    @property
    def num_vertices(self) -> int:
        return int(self.vertex_ids.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.shape[0])


@dataclass(frozen=True, eq=False)
class UpdateStream:
    """A sequence of update records, one per source line, as parallel arrays."""

    kind: np.ndarray
    a: np.ndarray
    b: np.ndarray
    label: np.ndarray
    line: np.ndarray
    source: str

    def __post_init__(self):
        _coerce(self, kind=np.int8, a=np.int64, b=np.int64, label=np.int32, line=np.int64)

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    def slice(self, start: int, stop: int) -> UpdateStream:
        s = slice(start, stop)
        return UpdateStream(
            self.kind[s], self.a[s], self.b[s], self.label[s], self.line[s], self.source
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
        """Build from ``(kind, a, b, label)`` tuples; ``b`` is stored as 0 for vertex records."""
        rows = []
        for pos, (kind, a, b, label) in enumerate(records):
            kind, a, b, label = int(kind), int(a), int(b), int(label)
            problem = _record_problem(kind, a, b, label)
            if problem:
                raise FormatError(source, pos + 1, problem)
            is_edge = kind in (INSERT_EDGE, DELETE_EDGE)
            rows.append((kind, a, b if is_edge else 0, label))
        cols = np.array(rows, dtype=np.int64).reshape(-1, 4)
        return UpdateStream(
            cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3],
            np.arange(1, len(rows) + 1), source,
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


# --------------------------------------------------------------------------- grammar


class _Field(NamedTuple):
    name: str
    maximum: int


class _Record(NamedTuple):
    tag: bytes  # the record-type token; b"" for untagged formats
    required: tuple[_Field, ...]
    optional: tuple[_Field, ...] = ()
    extra_ok: bool = True  # whether tokens after the last field are ignored


class _Grammar(NamedTuple):
    records: tuple[_Record, ...]
    comment_chars: bytes
    comma_delimits: bool = False

    @property
    def tagged(self) -> bool:
        return self.records[0].tag != b""

    @property
    def width(self) -> int:
        return max(len(r.required) + len(r.optional) for r in self.records)


_ID = _Field("vertex id", MAX_ID)
_LABEL = _Field("vertex label", MAX_LABEL)
_SRC = _Field("edge source", MAX_ID)
_DST = _Field("edge target", MAX_ID)
_ELABEL = _Field("edge label", MAX_LABEL)

_T, _V, _E = 0, 1, 2  # record indices in _GRAPH
_GRAPH = _Grammar(
    (
        _Record(b"t", (_Field("vertex count", MAX_ID), _Field("edge count", MAX_ID))),
        _Record(b"v", (_ID, _LABEL)),
        _Record(b"e", (_SRC, _DST), (_ELABEL,)),
    ),
    b"#",
)
# Order matches ADD_VERTEX, DELETE_VERTEX, INSERT_EDGE, DELETE_EDGE.
_STREAM = _Grammar(
    (
        _Record(b"v", (_ID, _LABEL), (), False),
        _Record(b"-v", (_ID,), (_LABEL,), False),
        _Record(b"e", (_SRC, _DST), (_ELABEL,), False),
        _Record(b"-e", (_SRC, _DST), (_ELABEL,), False),
    ),
    b"#",
)
_EDGE_LIST = _Grammar((_Record(b"", (_SRC, _DST)),), b"#%", comma_delimits=True)
_LABELS = _Grammar((_Record(b"", (_ID, _LABEL)),), b"#%", comma_delimits=True)


class _Records(NamedTuple):
    """Parsed records: grammar record index, fields (-1 = omitted optional), 1-based line."""

    kind: np.ndarray  # int8 [k]
    fields: np.ndarray  # int64 [k, grammar.width]
    line: np.ndarray  # int64 [k]


def _tag_code(tag: bytes) -> int:
    """Pack a record-type token of <= 2 bytes into an int the fast pass can compare."""
    padded = tag + b"\0" * (2 - len(tag))
    return len(tag) << 16 | padded[0] << 8 | padded[1]


# --------------------------------------------------------------------------- input


def _read_bytes(path) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    # Sniff the gzip magic rather than trusting the suffix.
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _open_for_write(path):
    return gzip.open(path, "wt") if str(path).endswith(".gz") else open(path, "w")


def _strip_comments(data: bytes, comment_chars: bytes) -> bytes:
    for ch in comment_chars:
        if ch in data:
            # Keeps the newline, so line numbers stay put.
            data = re.sub(re.escape(bytes([ch])) + rb"[^\n]*", b"", data)
    return data


def _chunks(data: bytes) -> Iterator[tuple[bytes, int]]:
    """Split at line boundaries into ~_CHUNK_BYTES pieces; yields (chunk, lines before it)."""
    start, lines_before = 0, 0
    while start < len(data):
        end = data.rfind(b"\n", start, start + _CHUNK_BYTES) + 1
        if start + _CHUNK_BYTES >= len(data):
            end = len(data)
        elif end <= start:  # one line longer than a chunk
            end = data.find(b"\n", start + _CHUNK_BYTES) + 1 or len(data)
        chunk = data[start:end]
        yield chunk, lines_before
        lines_before += chunk.count(b"\n")
        start = end


def _parse(data: bytes, grammar: _Grammar, source: str) -> _Records:
    parts = []
    for chunk, lines_before in _chunks(data):
        try:
            recs = _parse_fast(chunk, grammar)
        except _NeedsSlowPath:
            recs = _parse_slow(chunk, grammar, source, lines_before)
        else:
            recs = recs._replace(line=recs.line + lines_before)
        parts.append(recs)
    if not parts:
        return _Records(
            np.zeros(0, np.int8), np.zeros((0, grammar.width), np.int64), np.zeros(0, np.int64)
        )
    return _Records(*(np.concatenate(col) for col in zip(*parts)))


# --------------------------------------------------------------------------- fast pass


class _NeedsSlowPath(Exception):
    """The fast pass met something only the line-by-line parser may judge."""


@nb.njit(cache=True, nogil=True)
def _scan(buf, space, comment, kept):
    """One pass over the bytes; per non-blank line: 1-based line number, token count,
    tag code of the first token, and value + all-digits flag of the first `kept` tokens.
    """
    max_lines = 1
    for c in buf:
        if c == 10:
            max_lines += 1
    line = np.empty(max_lines, np.int64)
    count = np.empty(max_lines, np.int64)
    tag = np.zeros(max_lines, np.int64)
    value = np.zeros((max_lines, kept), np.int64)
    numeric = np.zeros((max_lines, kept), np.bool_)
    n, i, k, lineno = buf.shape[0], 0, 0, 1
    while i < n:
        ntok = 0
        while i < n and buf[i] != 10:
            if comment[buf[i]]:
                while i < n and buf[i] != 10:
                    i += 1
                break
            if space[buf[i]]:
                i += 1
                continue
            start, v, ok = i, np.int64(0), True
            while i < n and not space[buf[i]] and not comment[buf[i]]:
                d = np.int64(buf[i]) - 48
                if 0 <= d <= 9:
                    if i - start < _FAST_DIGITS:
                        v = v * 10 + d
                else:
                    ok = False
                i += 1
            length = i - start
            if ntok == 0 and length <= 2:
                second = np.int64(buf[start + 1]) if length == 2 else 0
                tag[k] = length << 16 | np.int64(buf[start]) << 8 | second
            if ntok < kept:
                value[k, ntok] = v
                numeric[k, ntok] = ok and length <= _FAST_DIGITS
            ntok += 1
        if ntok:
            line[k], count[k] = lineno, ntok
            k += 1
        i += 1
        lineno += 1
    return line[:k], count[:k], tag[:k], value[:k], numeric[:k]


def _tables(grammar: _Grammar) -> tuple[np.ndarray, np.ndarray]:
    """Byte-class tables for _scan, matching what _parse_slow treats as separators/comments."""
    space = _WHITESPACE.copy()
    if grammar.comma_delimits:
        space[ord(",")] = True
    comment = np.zeros(256, dtype=np.bool_)
    comment[list(grammar.comment_chars)] = True
    return space, comment


def _parse_fast(chunk: bytes, grammar: _Grammar) -> _Records:
    skip = 1 if grammar.tagged else 0
    line, count, tag, value, numeric = _scan(
        np.frombuffer(chunk, dtype=np.uint8), *_tables(grammar), skip + grammar.width
    )
    kind = np.full(line.shape[0], -1, dtype=np.int8)
    fields = np.full((line.shape[0], grammar.width), -1, dtype=np.int64)
    for index, rec in enumerate(grammar.records):
        rows = np.arange(kind.size)
        if grammar.tagged:
            rows = np.flatnonzero(tag == _tag_code(rec.tag))
        kind[rows] = index
        nreq = len(rec.required)
        if np.any(count[rows] < skip + nreq):
            raise _NeedsSlowPath
        if not rec.extra_ok and np.any(count[rows] > skip + nreq + len(rec.optional)):
            raise _NeedsSlowPath
        for col, field in enumerate(rec.required + rec.optional):
            present = rows[count[rows] > skip + col]
            values = value[present, skip + col]
            if not (numeric[present, skip + col].all() and np.all(values <= field.maximum)):
                raise _NeedsSlowPath
            fields[present, col] = values
    if np.any(kind < 0):  # unknown record type
        raise _NeedsSlowPath
    return _Records(kind, fields, line)


# --------------------------------------------------------------------------- reference pass


def _parse_slow(chunk: bytes, grammar: _Grammar, source: str, lines_before: int) -> _Records:
    """Line-by-line parser: the definition of the syntax; raises at the first bad line."""
    by_tag = {rec.tag: (i, rec) for i, rec in enumerate(grammar.records)}
    skip = 1 if grammar.tagged else 0
    chunk = _strip_comments(chunk, grammar.comment_chars)
    if grammar.comma_delimits:
        chunk = chunk.replace(b",", b" ")
    kinds, rows, lines = [], [], []
    for offset, raw in enumerate(chunk.split(b"\n"), start=1):
        tokens = raw.split()
        if not tokens:
            continue
        lineno = lines_before + offset
        key = tokens[0] if grammar.tagged else b""
        if key not in by_tag:
            raise FormatError(source, lineno, f"unknown record type {_show(key)}")
        index, rec = by_tag[key]
        rows.append(_parse_fields(tokens[skip:], rec, source, lineno, grammar.width))
        kinds.append(index)
        lines.append(lineno)
    return _Records(
        np.array(kinds, dtype=np.int8),
        np.array(rows, dtype=np.int64).reshape(-1, grammar.width),
        np.array(lines, dtype=np.int64),
    )


def _parse_fields(tokens, rec: _Record, source: str, lineno: int, width: int) -> list[int]:
    what = f"'{rec.tag.decode()}' record" if rec.tag else "line"
    if len(tokens) < len(rec.required):
        missing = rec.required[len(tokens)].name
        raise FormatError(source, lineno, f"{what} is missing the {missing}")
    fields = rec.required + rec.optional
    if not rec.extra_ok and len(tokens) > len(fields):
        raise FormatError(source, lineno, f"unexpected extra token {_show(tokens[len(fields)])}")
    row = [_parse_int(t, f, source, lineno) for t, f in zip(tokens, fields)]
    return row + [-1] * (width - len(row))


def _parse_int(token: bytes, field: _Field, source: str, lineno: int) -> int:
    if not _SIGNED_INT.fullmatch(token):
        raise FormatError(source, lineno, f"{field.name} {_show(token)} is not an integer")
    value = int(token)
    if value < 0:
        raise FormatError(source, lineno, f"{field.name} {_show(token)} is negative")
    if value > field.maximum:
        raise FormatError(
            source, lineno, f"{field.name} {_show(token)} is too large (max {field.maximum})"
        )
    return value


def _show(token: bytes) -> str:
    return repr(token.decode("utf-8", errors="backslashreplace"))


# --------------------------------------------------------------------------- graph files


def read_graph(path) -> LabeledGraph:
    """Read a graph file (``t``/``v``/``e`` lines)."""
    return parse_graph_text(_read_bytes(path), str(path))


def read_query(path) -> LabeledGraph:
    """Read a query file: same format as graphs; query-specific checks live elsewhere."""
    return read_graph(path)


def parse_graph_text(text: str | bytes, source: str = "<text>") -> LabeledGraph:
    data = text.encode() if isinstance(text, str) else text
    return _build_graph(_parse(data, _GRAPH, source), source)


def _build_graph(recs: _Records, source: str) -> LabeledGraph:
    t_rows = np.flatnonzero(recs.kind == _T)
    v_rows = np.flatnonzero(recs.kind == _V)
    e_rows = np.flatnonzero(recs.kind == _E)
    ids, v_lines = recs.fields[v_rows, 0], recs.line[v_rows]
    src, dst, e_lines = recs.fields[e_rows, 0], recs.fields[e_rows, 1], recs.line[e_rows]

    problems = []  # (line, reason); the earliest line is reported
    if t_rows.size > 1:
        problems.append((int(recs.line[t_rows[1]]), "duplicate 't' header"))
    if t_rows.size and t_rows[0] != 0:
        problems.append(
            (int(recs.line[t_rows[0]]), "'t' header must precede all 'v' and 'e' lines")
        )
    problems += _duplicate_problems(ids, ids, v_lines, lambda i: f"duplicate vertex id {ids[i]}")
    loops = np.flatnonzero(src == dst)
    if loops.size:
        problems.append((int(e_lines[loops[0]]), f"self-loop on vertex {src[loops[0]]}"))
    for ends in (src, dst):
        undeclared = np.flatnonzero(~np.isin(ends, ids))
        if undeclared.size:
            bad = undeclared[0]
            problems.append(
                (int(e_lines[bad]), f"edge endpoint {ends[bad]} is not declared by a 'v' line")
            )
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    problems += _duplicate_problems(
        lo, hi, e_lines, lambda i: f"duplicate edge {src[i]}-{dst[i]} (either orientation)"
    )
    if problems:
        raise FormatError(source, *min(problems))

    if t_rows.size:
        n, m = recs.fields[t_rows[0], :2]
        if (n, m) != (ids.size, src.size):
            raise FormatError(
                source, int(recs.line[t_rows[0]]),
                f"header declares {n} vertices and {m} edges, file has {ids.size} and {src.size}",
            )
    labels = recs.fields[e_rows, 2]
    return LabeledGraph(ids, recs.fields[v_rows, 1], src, dst, np.where(labels < 0, 0, labels))


_PACKABLE_SPAN = 3_037_000_499  # span**2 < 2**63: a pair packs into one int64 key


def _first_repeat(key1: np.ndarray, key2: np.ndarray) -> np.ndarray:
    """Indices of rows whose (key1, key2) pair already occurred at a smaller index."""
    if key1.size == 0:
        return np.zeros(0, dtype=np.int64)
    span = int(max(key1.max(), key2.max())) + 1
    if span <= _PACKABLE_SPAN:
        # One stable argsort of a packed key is several times faster than lexsort.
        order = np.argsort(key1 * span + key2, kind="stable")
    else:
        order = np.lexsort((np.arange(key1.size), key2, key1))
    k1, k2 = key1[order], key2[order]
    return order[1:][(k1[1:] == k1[:-1]) & (k2[1:] == k2[:-1])]


def _duplicate_problems(key1, key2, lines, describe) -> list[tuple[int, str]]:
    repeats = _first_repeat(key1, key2)
    if not repeats.size:
        return []
    first = repeats[np.argmin(lines[repeats])]
    return [(int(lines[first]), describe(first))]


def write_graph(graph: LabeledGraph, path) -> None:
    """Write in graph-file format (``t n m``, then ``v`` lines, then ``e`` lines)."""
    with _open_for_write(path) as f:
        f.write(f"t {graph.num_vertices} {graph.num_edges}\n")
        _write_lines(f, "v {} {}\n".format, graph.vertex_ids, graph.vertex_labels)
        _write_lines(
            f, "e {} {} {}\n".format, graph.edge_src, graph.edge_dst, graph.edge_labels
        )


def _write_lines(f, format_row, *columns, rows_per_write: int = 1 << 16) -> None:
    # Formatting bounded slices of Python ints keeps memory flat on huge inputs.
    for start in range(0, columns[0].shape[0], rows_per_write):
        part = [c[start:start + rows_per_write].tolist() for c in columns]
        f.write("".join(map(format_row, *part)))


# --------------------------------------------------------------------------- update streams


def read_updates(path) -> UpdateStream:
    return parse_updates_text(_read_bytes(path), str(path))


def parse_updates_text(text: str | bytes, source: str = "<text>") -> UpdateStream:
    """Parse an update stream; only syntax and value ranges are checked, in file order."""
    data = text.encode() if isinstance(text, str) else text
    recs = _parse(data, _STREAM, source)
    kind, f = recs.kind, recs.fields
    is_edge = (kind == INSERT_EDGE) | (kind == DELETE_EDGE)
    label = np.where(is_edge, f[:, 2], f[:, 1])
    # `e u v` inserts an edge of label 0; other records keep -1 (= NO_LABEL) when omitted.
    label = np.where((kind == INSERT_EDGE) & (label < 0), 0, label)
    return UpdateStream(kind, f[:, 0], np.where(is_edge, f[:, 1], 0), label, recs.line, source)


_UPDATE_LINE = {  # (kind, has a label) -> line format over (a, b, label)
    (int(ADD_VERTEX), True): "v {0} {2}\n",
    (int(DELETE_VERTEX), False): "-v {0}\n",
    (int(DELETE_VERTEX), True): "-v {0} {2}\n",
    (int(INSERT_EDGE), True): "e {0} {1} {2}\n",
    (int(DELETE_EDGE), False): "-e {0} {1}\n",
    (int(DELETE_EDGE), True): "-e {0} {1} {2}\n",
}


def _format_update(kind: int, a: int, b: int, label: int) -> str:
    return _UPDATE_LINE[kind, label != NO_LABEL].format(a, b, label)


def write_updates(stream: UpdateStream, path) -> None:
    """Write in update-stream format; omitted labels (NO_LABEL) stay omitted."""
    with _open_for_write(path) as f:
        _write_lines(f, _format_update, stream.kind, stream.a, stream.b, stream.label)


# --------------------------------------------------------------------------- edge lists


def read_edge_list(path, *, labels_path=None, num_labels=None, seed=0) -> LabeledGraph:
    """Read a SNAP/CSV edge list as an undirected simple graph.

    Self-loops and duplicate edges (either orientation) are dropped silently;
    the first occurrence of each edge is kept, in file order.  Vertices are
    every id in the edge list plus every id in the label file, sorted.
    Labels come from ``labels_path`` (which must label every edge-list vertex)
    or are drawn uniformly from ``num_labels`` with ``seed``; give exactly one.
    """
    return _edge_list(_read_bytes(path), str(path), labels_path, num_labels, seed)


def _edge_list(data: bytes, source: str, labels_path, num_labels, seed) -> LabeledGraph:
    if (labels_path is None) == (num_labels is None):
        raise ValueError("an edge list needs exactly one of labels_path= or num_labels=")
    recs = _parse(_without_header(data, _EDGE_LIST), _EDGE_LIST, source)
    src, dst = recs.fields[:, 0], recs.fields[:, 1]
    keep = np.ones(src.size, dtype=bool)
    keep[_first_repeat(np.minimum(src, dst), np.maximum(src, dst))] = False
    keep &= src != dst
    src, dst = src[keep], dst[keep]
    edge_ids = sorted_unique(np.concatenate((src, dst)))
    if labels_path is None:
        vertex_ids, labels = edge_ids, random_labels(edge_ids, num_labels, seed)
    else:
        vertex_ids, labels = _labels_for(edge_ids, labels_path, source)
    return LabeledGraph(vertex_ids, labels, src, dst, np.zeros(src.size, dtype=np.int32))


def _labels_for(edge_ids: np.ndarray, labels_path, edges_path) -> tuple[np.ndarray, np.ndarray]:
    """Sorted vertex ids (edge ids plus labelled ids) and their labels from the label file."""
    ids, labels = read_label_file(labels_path)
    missing = edge_ids[~np.isin(edge_ids, ids)]
    if missing.size:
        raise FormatError(labels_path, 0, f"vertex {missing[0]} of {edges_path} has no label")
    order = np.argsort(ids)
    return ids[order], labels[order]


def read_label_file(path) -> tuple[np.ndarray, np.ndarray]:
    """Read ``<id> <label>`` lines (whitespace or comma, optional header); ids must be unique."""
    source = str(path)
    recs = _parse(_without_header(_read_bytes(path), _LABELS), _LABELS, source)
    ids, labels = recs.fields[:, 0], recs.fields[:, 1]
    problems = _duplicate_problems(
        ids, ids, recs.line, lambda i: f"duplicate label for vertex {ids[i]}"
    )
    if problems:
        raise FormatError(source, *problems[0])
    return ids, labels.astype(np.int32)


def _without_header(data: bytes, grammar: _Grammar) -> bytes:
    """Blank out the first content line if any of its fields is not an integer (a header)."""
    start, end, tokens = _first_content_line(data, grammar.comment_chars)
    if all(_SIGNED_INT.fullmatch(t) for t in tokens):
        return data
    return data[:start] + data[end:]  # keeps the newline: line numbers stay put


def _first_content_line(data: bytes, comment_chars: bytes) -> tuple[int, int, list[bytes]]:
    """Byte span and tokens (commas count as separators) of the first non-blank line."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        tokens = _strip_comments(data[start:end], comment_chars).replace(b",", b" ").split()
        if tokens:
            return start, end, tokens
        start = end + 1
    return 0, 0, []


def random_labels(vertex_ids: np.ndarray, num_labels: int, seed: int) -> np.ndarray:
    """Uniform labels in [0, num_labels), one per vertex, deterministic in ``seed``."""
    if not 1 <= num_labels <= MAX_LABEL + 1:
        raise ValueError(f"num_labels must be in [1, 2**31], got {num_labels}")
    rng = np.random.default_rng(seed)
    return rng.integers(0, num_labels, size=len(vertex_ids)).astype(np.int32)


def load_graph(path, *, labels_path=None, num_labels=None, seed=0) -> LabeledGraph:
    """Read a graph file or an edge list, told apart by the first content line."""
    data = _read_bytes(path)
    tokens = _first_content_line(data, b"#")[2]
    if tokens[:1] in ([b"t"], [b"v"], [b"e"]) and len(tokens) > 1:
        if labels_path is not None or num_labels is not None:
            raise ValueError(f"{path} is a graph file with its own labels; "
                             "labels_path/num_labels apply to edge lists only")
        return parse_graph_text(data, str(path))
    return _edge_list(data, str(path), labels_path, num_labels, seed)


# --------------------------------------------------------------------------- stream setup


def split_stream(
    graph: LabeledGraph, fraction: float, seed: int
) -> tuple[LabeledGraph, UpdateStream]:
    """Hold out round(fraction * m) random edges as an insertion stream (in random order).

    The remaining edges, in their original order, and all vertices form the
    initial graph — the usual continuous-subgraph-matching benchmark setup.
    """
    if not 0 <= fraction < 1:
        raise ValueError(f"fraction must be in [0, 1), got {fraction}")
    perm = np.random.default_rng(seed).permutation(graph.num_edges)
    k = round(fraction * graph.num_edges)
    streamed, kept = perm[:k], np.sort(perm[k:])
    initial = LabeledGraph(
        graph.vertex_ids, graph.vertex_labels,
        graph.edge_src[kept], graph.edge_dst[kept], graph.edge_labels[kept],
    )
    stream = UpdateStream(
        np.full(k, INSERT_EDGE), graph.edge_src[streamed], graph.edge_dst[streamed],
        graph.edge_labels[streamed], np.arange(1, k + 1), "<split_stream>",
    )
    return initial, stream
