"""Owns the binary encoding of update streams stored in the batch log."""

from __future__ import annotations

import numpy as np

from gpu.io.records import UpdateStream
from storage.errors import StorageError

# "MSU" (Motifstream updates) + format version; a blob without one of them is not ours.
# Version 1: untimed records; version 2: each record with its event time (issue 23), used
# only for a stream that has times, so untimed batches are stored as before.
MAGIC = b"MSU\x01"
MAGIC_TIMED = b"MSU\x02"
# Packed little-endian records: 21 bytes each (29 timed), independent of the host's byte
# order.
RECORD = np.dtype([("kind", "<i1"), ("a", "<i8"), ("b", "<i8"), ("label", "<i4")])
RECORD_TIMED = np.dtype(RECORD.descr + [("time", "<i8")])


def encode_updates(stream: UpdateStream) -> bytes:
    timed = stream.time is not None
    layout = RECORD_TIMED if timed else RECORD
    records = np.empty(len(stream), dtype=layout)
    for field in layout.names:
        records[field] = getattr(stream, field)
    return (MAGIC_TIMED if timed else MAGIC) + records.tobytes()


def decode_updates(data: bytes, source: str) -> UpdateStream:
    """Inverse of :func:`encode_updates`; ``line`` is renumbered 1..n."""
    head = bytes(data[: len(MAGIC)])
    if head not in (MAGIC, MAGIC_TIMED):
        raise StorageError(f"{source}: not an encoded update stream (bad magic)")
    layout = RECORD_TIMED if head == MAGIC_TIMED else RECORD
    body = memoryview(data)[len(MAGIC):]
    if len(body) % layout.itemsize:
        raise StorageError(
            f"{source}: encoded update stream of {len(body)} bytes is not a whole number"
            f" of {layout.itemsize}-byte records"
        )
    records = np.frombuffer(body, dtype=layout)
    # astype copies each field out of the packed buffer into native, aligned arrays.
    return UpdateStream(
        records["kind"].astype(np.int8),
        records["a"].astype(np.int64),
        records["b"].astype(np.int64),
        records["label"].astype(np.int32),
        np.arange(1, len(records) + 1, dtype=np.int64),
        source,
        records["time"].astype(np.int64) if layout is RECORD_TIMED else None,
    )
