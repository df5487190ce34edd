"""Owns the durable state of the Motifstream service (SQLite database + graph snapshots).

:class:`Store` is the only entry point the service needs; the records are what
it reads and writes, the errors what it may catch.
"""

from storage.errors import (
    PersistFailed,
    ResultsPruned,
    SchemaTooNew,
    SnapshotCorrupt,
    StorageError,
    StoreClosed,
)
from storage.records import BatchRecord, EventRecord, QueryRecord, SnapshotRecord
from storage.store import Store

__all__ = [
    "BatchRecord",
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
