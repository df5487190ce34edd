"""The text machinery every format shares: the grammars, reading (gzip, chunks, a compiled
fast pass, the line-by-line reference pass), duplicate checks and chunked writing.

The grammars follow the continuous-subgraph-matching literature (RapidFlow, the CSM
study, GAMMA):

* graph and query files: ``t <n> <m>`` (optional header), ``v <id> <label>``,
  ``e <u> <v> [label]``; extra tokens after the last field are ignored;
* update streams: ``v <id> <label>``, ``-v <id> [label]``, ``e <u> <v> [label]``,
  ``-e <u> <v> [label]``; no extra tokens;
* edge lists: SNAP text (``u v``) or CSV with an optional header line;
* label files: ``<id> <label>`` per line, optional header.

``#`` starts a comment anywhere on a line (edge-list and label files also
accept ``%``); blank lines are skipped; ``.gz`` input is decompressed.

Parsing runs a compiled (Numba) scan plus vectorised checks over chunks of the raw
bytes; a chunk the fast pass cannot vouch for (any unusual token) is re-read line by
line by the reference parser, which either accepts it or reports the exact first bad
line.  The readers (gpu/io/graphs.py, streams.py, edge_lists.py) report syntax errors
before semantic ones (duplicates, undeclared endpoints), which need the whole file.
"""
from __future__ import annotations

import gzip
import re
from typing import Iterator, NamedTuple

import numba as nb
import numpy as np

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)
from gpu.io.records import MAX_ID, MAX_LABEL, FormatError

_CHUNK_BYTES = 1 << 24
# The fast pass trusts only tokens of <= 18 digits: they cannot overflow int64.
_FAST_DIGITS = 18
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[list(b" \t\n\r\x0b\x0c")] = True  # exactly the set bytes.split() uses
_SIGNED_INT = re.compile(rb"[+-]?\d+")


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
# An edge insert's event time (issue 23), after its label: `e u v label time`.
_TIME = _Field("event time", MAX_ID)

T_RECORD, V_RECORD, E_RECORD = 0, 1, 2  # record indices in GRAPH_GRAMMAR
GRAPH_GRAMMAR = _Grammar(
    (
        _Record(b"t", (_Field("vertex count", MAX_ID), _Field("edge count", MAX_ID))),
        _Record(b"v", (_ID, _LABEL)),
        _Record(b"e", (_SRC, _DST), (_ELABEL,)),
    ),
    b"#",
)
# Order matches ADD_VERTEX, DELETE_VERTEX, INSERT_EDGE, DELETE_EDGE.
STREAM_GRAMMAR = _Grammar(
    (
        _Record(b"v", (_ID, _LABEL), (), False),
        _Record(b"-v", (_ID,), (_LABEL,), False),
        _Record(b"e", (_SRC, _DST), (_ELABEL, _TIME), False),
        _Record(b"-e", (_SRC, _DST), (_ELABEL,), False),
    ),
    b"#",
)
EDGE_LIST_GRAMMAR = _Grammar((_Record(b"", (_SRC, _DST)),), b"#%", comma_delimits=True)
LABELS_GRAMMAR = _Grammar((_Record(b"", (_ID, _LABEL)),), b"#%", comma_delimits=True)


class Records(NamedTuple):
    """Parsed records: grammar record index, fields (-1 = omitted optional), 1-based line."""

    kind: np.ndarray  # int8 [k]
    fields: np.ndarray  # int64 [k, grammar.width]
    line: np.ndarray  # int64 [k]


def _tag_code(tag: bytes) -> int:
    """Pack a record-type token of <= 2 bytes into an int the fast pass can compare."""
    padded = tag + b"\0" * (2 - len(tag))
    return len(tag) << 16 | padded[0] << 8 | padded[1]


# --------------------------------------------------------------------------- input


def read_bytes(path) -> bytes:
    """The file's bytes, decompressed if it is gzip."""
    with open(path, "rb") as f:
        data = f.read()
    # Sniff the gzip magic rather than trusting the suffix.
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def open_for_write(path):
    """A text file to write, gzip-compressed when the name ends in .gz."""
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


def parse(data: bytes, grammar: _Grammar, source: str) -> Records:
    """Every record of `data` under `grammar`, or FormatError at the first bad line."""
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
        return Records(
            np.zeros(0, np.int8), np.zeros((0, grammar.width), np.int64), np.zeros(0, np.int64)
        )
    return Records(*(np.concatenate(col) for col in zip(*parts)))


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


def _parse_fast(chunk: bytes, grammar: _Grammar) -> Records:
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
    return Records(kind, fields, line)


# --------------------------------------------------------------------------- reference pass


def _parse_slow(chunk: bytes, grammar: _Grammar, source: str, lines_before: int) -> Records:
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
    return Records(
        np.array(kinds, dtype=np.int8),
        np.array(rows, dtype=np.int64).reshape(-1, grammar.width),
        np.array(lines, dtype=np.int64),
    )


def _parse_fields(tokens, rec: _Record, source: str, lineno: int, width: int) -> list[int]:
    what = f"'{rec.tag.decode()}' record" if rec.tag else "line"
    if len(tokens) < len(rec.required):
        missing = rec.required[len(tokens)].name
        if rec.tag:
            raise FormatError(source, lineno, f"{what} is missing the {missing}")
        # An untagged line short of fields is most often another delimiter (`0;1`):
        # show the line, and what separates fields here.
        raise FormatError(source, lineno, f"{what} {_show(b' '.join(tokens))} is missing the "
                                          f"{missing} (fields are separated by whitespace "
                                          "or commas)")
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


# --------------------------------------------------------------------------- whole-file checks


_PACKABLE_SPAN = 3_037_000_499  # span**2 < 2**63: a pair packs into one int64 key


def first_repeat(key1: np.ndarray, key2: np.ndarray) -> np.ndarray:
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


def duplicate_problems(key1, key2, lines, describe) -> list[tuple[int, str]]:
    """[(line, describe(row))] for the repeated (key1, key2) pair on the earliest line, or []."""
    repeats = first_repeat(key1, key2)
    if not repeats.size:
        return []
    first = repeats[np.argmin(lines[repeats])]
    return [(int(lines[first]), describe(first))]


class Header(NamedTuple):
    """A header line taken out of an untagged file: its 1-based line number and text."""

    line: int
    text: str


def without_header(data: bytes, grammar: _Grammar) -> tuple[bytes, Header | None]:
    """Blank out the first content line if it is a header: no field of it is an integer,
    and it has at least the fields a record needs (`id_1,id_2`).  A line with an integer
    in it, or with fewer fields (`0;1`, another delimiter), is data, and the parser
    reports it: taking it for a header had left such a file empty and silently loaded."""
    start, end, tokens = first_content_line(data, grammar.comment_chars)
    if len(tokens) < len(grammar.records[0].required) \
            or any(_SIGNED_INT.fullmatch(t) for t in tokens):
        return data, None
    header = Header(data.count(b"\n", 0, start) + 1,
                    data[start:end].decode("utf-8", errors="backslashreplace").strip())
    return data[:start] + data[end:], header  # keeps the newline: line numbers stay put


def first_content_line(data: bytes, comment_chars: bytes) -> tuple[int, int, list[bytes]]:
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


# --------------------------------------------------------------------------- output


def write_lines(f, format_row, *columns, rows_per_write: int = 1 << 16) -> None:
    """Write format_row(*row) for every row of the parallel columns."""
    # Formatting bounded slices of Python ints keeps memory flat on huge inputs.
    for start in range(0, columns[0].shape[0], rows_per_write):
        part = [c[start:start + rows_per_write].tolist() for c in columns]
        f.write("".join(map(format_row, *part)))
