"""Owns the label dictionary: string labels of queries and updates mapped to engine integers,
and label names in text bodies (`parse_named`).

The engine knows integer labels only.  Integer labels pass through unchanged
and must lie below STRING_LABEL_BASE; a string label gets the next id from
STRING_LABEL_BASE upward the first time it is seen, so the two kinds can never
collide.  Vertex and edge labels share the one dictionary.  New names are
staged per request and committed only once their batch or query is durable,
so a rejected or failed request leaves the dictionary as it was.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from gpu.io.records import MAX_LABEL, FormatError

STRING_LABEL_BASE = 1 << 30
MAX_LABEL_NAME = 256


class LabelError(ValueError):
    """A label is neither a usable integer nor a usable name."""


class LabelDictionary:
    """Names -> ids for string labels; `stage` collects the names a request introduces."""

    def __init__(self, names: dict[str, int] | None = None) -> None:
        self._ids: dict[str, int] = dict(names or {})
        self._names = {i: n for n, i in self._ids.items()}
        self._next = max(self._ids.values(), default=STRING_LABEL_BASE - 1) + 1

    def __len__(self) -> int:
        return len(self._ids)

    def names(self) -> dict[str, int]:
        return dict(self._ids)

    def by_id(self) -> dict[int, str]:
        """Ids -> names of every string label (a copy, safe to read on another thread)."""
        return dict(self._names)

    def name_of(self, label: int) -> str | int:
        """The label as the user wrote it: its name, or the integer itself."""
        return self._names.get(label, label)

    def stage(self) -> StagedLabels:
        return StagedLabels(self)

    def commit(self, staged: StagedLabels) -> None:
        for name, label in staged.new.items():
            self._ids[name] = label
            self._names[label] = name
        self._next = max(self._next, staged.next)


class StagedLabels:
    """Label lookups for one request; names seen for the first time wait in `new`."""

    def __init__(self, dictionary: LabelDictionary) -> None:
        self._dictionary = dictionary
        self.new: dict[str, int] = {}
        self.next = dictionary._next

    def resolve(self, label: int | str, where: str) -> int:
        """The engine id of `label`; `where` names the field in error messages."""
        if isinstance(label, bool):
            raise LabelError(f"{where}: label must be an integer or a string, got {label!r}")
        if isinstance(label, int):
            if not 0 <= label < STRING_LABEL_BASE:
                raise LabelError(f"{where}: integer label {label} out of range "
                                 f"[0, {STRING_LABEL_BASE}) (larger ids are for string labels)")
            return label
        if isinstance(label, str):
            if not label or len(label) > MAX_LABEL_NAME:
                raise LabelError(f"{where}: label names must have 1 to {MAX_LABEL_NAME} "
                                 f"characters")
            known = self._dictionary._ids.get(label)
            if known is None:
                known = self.new.get(label)
            if known is None:
                if self.next >= 1 << 31:
                    raise LabelError(f"{where}: the label dictionary is full")
                known = self.new[label] = self.next
                self.next += 1
            return known
        raise LabelError(f"{where}: label must be an integer or a string, got {label!r}")


# ---- label names in text bodies ---------------------------------------------------
# The text readers (gpu/io) take integer labels only.  A text body that uses names is
# rewritten before they read it: each name becomes a stand-in integer from
# STRING_LABEL_BASE up, which the integer readers accept and an integer label written in
# text may not use (refused below), and the stand-ins are resolved like JSON names once
# the request reaches the engine thread.

_INTEGER = re.compile(rb"[+-]?[0-9]+")
# Which token of a line is its label, by the line's tag (t/v/e graph and query files;
# v/-v/e/-e update streams).
GRAPH_LABEL_TOKENS = {b"v": 2, b"e": 3}
STREAM_LABEL_TOKENS = {b"v": 2, b"-v": 2, b"e": 3, b"-e": 3}


def text_safe(name: str) -> bool:
    """Whether `name` can stand in a text body as itself (one token, not an integer)."""
    data = name.encode()
    return bool(data) and not _INTEGER.fullmatch(data) and \
        not any(c in data for c in b" \t\r\n\v\f#")


@dataclass
class TextLabelNames:
    """The label names of one text body, in order of first use, and the line of each."""
    source: str
    names: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)

    def name_of(self, label: int) -> int | str:
        """A parsed label as the body wrote it: its name for a stand-in, else the integer."""
        return self.names[label - STRING_LABEL_BASE] if label >= STRING_LABEL_BASE else label

    def resolve(self, labels: np.ndarray, staged: StagedLabels) -> np.ndarray:
        """`labels` with every stand-in replaced by its name's engine id."""
        if not self.names:
            return labels
        ids = np.array([staged.resolve(name, f"{self.source}:{line}")
                        for name, line in zip(self.names, self.lines)], np.int64)
        stand_in = labels >= STRING_LABEL_BASE
        resolved = labels.astype(np.int64)
        resolved[stand_in] = ids[labels[stand_in] - STRING_LABEL_BASE]
        return resolved


def parse_named(parse, data: bytes, label_tokens: dict[bytes, int], source: str):
    """`parse(data, source)` of a text body whose labels may be names: (what it returns,
    TextLabelNames).  Bodies with integer labels only are read as they are; the rewrite
    runs only when that fails."""
    try:
        return parse(data, source), TextLabelNames(source)
    except FormatError as first:
        rewritten, names = _stand_ins(data, label_tokens, source)
        if not names.names:
            raise first from None
    return parse(rewritten, source), names


def _stand_ins(data: bytes, label_tokens: dict[bytes, int], source: str
               ) -> tuple[bytes, TextLabelNames]:
    names = TextLabelNames(source)
    index: dict[str, int] = {}
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        tokens = line.split(b"#", 1)[0].split()
        position = label_tokens.get(tokens[0]) if tokens else None
        if position is None or len(tokens) <= position:
            continue
        token = tokens[position]
        if _INTEGER.fullmatch(token):
            # A stand-in's value written as an integer would read as the name.
            if int(token) >= STRING_LABEL_BASE:
                raise FormatError(source, number, f"integer label {int(token)} out of range "
                                                  f"[0, {STRING_LABEL_BASE})")
            continue
        try:
            name = token.decode()
        except UnicodeDecodeError:
            raise FormatError(source, number, "a label name must be UTF-8") from None
        if name not in index:
            if len(index) >= MAX_LABEL - STRING_LABEL_BASE:
                raise FormatError(source, number, "too many label names in one body")
            index[name] = STRING_LABEL_BASE + len(index)
            names.names.append(name)
            names.lines.append(number)
        tokens[position] = str(index[name]).encode()
        lines[number - 1] = b" ".join(tokens)   # the comment goes; the line number stays
    return b"\n".join(lines), names
