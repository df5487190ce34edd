"""Owns the graph snapshot files: atomic writes, digest-checked reads, removal."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import numpy as np

from gpu.io.records import NO_TIME, LabeledGraph
from storage.errors import SnapshotCorrupt

FIELDS = ("vertex_ids", "vertex_labels", "edge_src", "edge_dst", "edge_labels")
# A timed graph's (issue 23), stored only when it has them: each edge's event time and the
# watermark (an empty array when there is none yet).
TIMED_FIELDS = ("edge_times", "watermark")
DIGEST_KEY = "sha256"
TEMP_SUFFIX = ".tmp"


def snapshot_name(seq: int) -> str:
    return f"snapshot-{seq:012d}.npz"


def write_snapshot(directory: Path, seq: int, graph: LabeledGraph) -> Path:
    """Write ``graph`` as ``snapshot-<seq>.npz`` in ``directory``; return its path.

    The file appears under its final name only once complete and on disk: it is
    written to a temporary name, fsynced, renamed, and the directory fsynced so
    the rename itself survives a power loss.
    """
    directory = Path(directory)
    path = directory / snapshot_name(seq)
    temp = directory / f".{path.name}.{os.getpid()}{TEMP_SUFFIX}"
    arrays = {name: getattr(graph, name) for name in FIELDS}
    if graph.edge_times is not None or graph.watermark is not None:
        arrays["edge_times"] = (graph.edge_times if graph.edge_times is not None
                                else np.full(graph.num_edges, NO_TIME, dtype=np.int64))
        arrays["watermark"] = np.array([] if graph.watermark is None else [graph.watermark],
                                       dtype=np.int64)
    try:
        with open(temp, "wb") as handle:
            np.savez(handle, **arrays, **{DIGEST_KEY: np.array(_digest(arrays))})
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_directory(directory)
    return path


def read_snapshot(path: Path) -> LabeledGraph:
    """Load a snapshot; raise :class:`SnapshotCorrupt` unless its digest matches."""
    try:
        # Our own handle: np.load leaks the one it opens when the zip is unreadable.
        with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as data:
            arrays = {name: data[name] for name in FIELDS + TIMED_FIELDS
                      if name in FIELDS or name in data.files}
            stored = str(data[DIGEST_KEY])
    except FileNotFoundError:
        raise SnapshotCorrupt(path, "file is missing") from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise SnapshotCorrupt(path, f"unreadable ({type(exc).__name__}: {exc})") from exc
    if _digest(arrays) != stored:
        raise SnapshotCorrupt(path, "sha256 digest does not match the arrays")
    if "edge_times" in arrays:
        mark = arrays.pop("watermark")
        arrays["watermark"] = int(mark[0]) if mark.size else None
    return LabeledGraph(**arrays)


def remove_snapshot(path: Path) -> None:
    Path(path).unlink(missing_ok=True)


def is_temporary(path: Path) -> bool:
    """Whether ``path`` is a leftover of a write that never reached its rename."""
    return path.name.startswith(".snapshot-") and path.name.endswith(TEMP_SUFFIX)


def _digest(arrays: dict[str, np.ndarray]) -> str:
    # Names, dtypes and shapes are hashed too, so reinterpreted bytes do not pass.
    digest = hashlib.sha256()
    for name in (n for n in FIELDS + TIMED_FIELDS if n in arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
