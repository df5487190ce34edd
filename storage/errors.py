"""Owns the storage error classes; each one's docstring line is its message."""

from __future__ import annotations

from pathlib import Path


class StorageError(Exception):
    """Storage failed."""

    def __init__(self, detail: str = ""):
        super().__init__(detail)
        self.detail = detail

    def __str__(self) -> str:
        message = (type(self).__doc__ or "").strip().splitlines()[0].rstrip(".")
        return f"{message}: {self.detail}" if self.detail else message


class PersistFailed(StorageError):
    """A write transaction failed and was rolled back."""

    @classmethod
    def wrapping(cls, cause: BaseException) -> PersistFailed:
        """The failure caused by ``cause``, chained to it as ``__cause__``."""
        failure = cls(f"{type(cause).__name__}: {cause}")
        failure.__cause__ = cause
        return failure


class CommitUncertain(PersistFailed):
    """The commit failed after its transaction was written; whether it is durable is unknown."""


class SchemaTooNew(StorageError):
    """The data directory was written by a newer version of Motifstream."""


class StoreClosed(StorageError):
    """The store is closed."""


class ResultsPruned(StorageError):
    """The events asked for are older than the result retention."""

    def __init__(self, query_id: int, after: int, earliest: int):
        super().__init__(
            f"query {query_id} has no events kept after {after}; the earliest cursor"
            f" still served is {earliest}"
        )
        self.args = (query_id, after, earliest)  # so the exception pickles
        self.query_id = query_id
        self.after = after
        self.earliest = earliest


class SnapshotCorrupt(StorageError):
    """A graph snapshot file is corrupt."""

    def __init__(self, path: str | Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.args = (path, reason)
        self.path = Path(path)
        self.reason = reason
