"""Owns the durable state of the Motifstream service (SQLite database + graph snapshots).

:class:`Store` is the only entry point the service needs; the records are what
it reads and writes, the errors what it may catch.  ``Store`` is imported on first
use: the writer process imports this package and must not load NumPy and the engine.
"""

from typing import TYPE_CHECKING

from storage.errors import (
    CommitUncertain,
    PersistFailed,
    ResultsPruned,
    SchemaTooNew,
    SnapshotCorrupt,
    StorageError,
    StoreClosed,
)
from storage.records import BatchRecord, EventRecord, QueryRecord, SnapshotRecord

if TYPE_CHECKING:
    from storage.store import Store

__all__ = [
    "BatchRecord",
    "CommitUncertain",
    "EventRecord",
    "PersistFailed",
    "QueryRecord",
    "ResultsPruned",
    "SchemaTooNew",
    "SnapshotCorrupt",
    "SnapshotRecord",
    "StorageError",
    "Store",
    "StoreClosed",
]


def __getattr__(name: str):
    if name == "Store":
        from storage.store import Store

        return Store
    raise AttributeError(f"module 'storage' has no attribute {name!r}")
