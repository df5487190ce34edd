"""Owns the binary encoding of update streams stored in the batch log."""

from __future__ import annotations

import numpy as np

from gpu.io.records import UpdateStream
from storage.errors import StorageError

# "MSU" (Motifstream updates) + format version; a blob without it is not ours.
MAGIC = b"MSU\x01"
# Packed little-endian records: 21 bytes each, independent of the host's byte order.
RECORD = np.dtype([("kind", "<i1"), ("a", "<i8"), ("b", "<i8"), ("label", "<i4")])


def encode_updates(stream: UpdateStream) -> bytes:
    records = np.empty(len(stream), dtype=RECORD)
    for field in RECORD.names:
        records[field] = getattr(stream, field)
    return MAGIC + records.tobytes()


def decode_updates(data: bytes, source: str) -> UpdateStream:
    """Inverse of :func:`encode_updates`; ``line`` is renumbered 1..n."""
    if data[: len(MAGIC)] != MAGIC:
        raise StorageError(f"{source}: not an encoded update stream (bad magic)")
    body = memoryview(data)[len(MAGIC):]
    if len(body) % RECORD.itemsize:
        raise StorageError(
            f"{source}: encoded update stream of {len(body)} bytes is not a whole number"
            f" of {RECORD.itemsize}-byte records"
        )
    records = np.frombuffer(body, dtype=RECORD)
    # astype copies each field out of the packed buffer into native, aligned arrays.
    return UpdateStream(
        records["kind"].astype(np.int8),
        records["a"].astype(np.int64),
        records["b"].astype(np.int64),
        records["label"].astype(np.int32),
        np.arange(1, len(records) + 1, dtype=np.int64),
        source,
    )
