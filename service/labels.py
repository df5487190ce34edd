"""Owns the label dictionary: string labels of queries and updates mapped to engine integers.

The engine knows integer labels only.  Integer labels pass through unchanged
and must lie below STRING_LABEL_BASE; a string label gets the next id from
STRING_LABEL_BASE upward the first time it is seen, so the two kinds can never
collide.  Vertex and edge labels share the one dictionary.  New names are
staged per request and committed only once their batch or query is durable,
so a rejected or failed request leaves the dictionary as it was.
"""
from __future__ import annotations

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
