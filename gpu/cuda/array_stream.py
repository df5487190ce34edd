"""The packed memory array's own CUDA stream, ordered against the engine's by events.

With the read view (gpu/graph/pma/view.py) the matching kernels read the view, never the
array, so the next batch's lookups and array update need not wait for the kernels the
engine queued since: they run on a non-blocking stream of their own, and their read-backs
(validation's stored labels, the update's window counts and record) wait for that stream
only.  Two events keep the order: the engine's stream waits for the array's last change
before it reads the array (the view's refresh, every edge, static reads), and the array's
stream waits for the engine's last read of the array before it changes it.  The view
itself (and everything else the kernels read) changes only on the engine's stream, after
the kernels queued before.  Memory made on the array's stream goes back to that stream's
free list (CuPy's pool) when it is freed: a kernel on the engine's stream that reads such
memory after the batch's last wait (the ranks' clearing reads a batch's device edge
arrays) runs inside `reading()`, so that the array's stream waits for it before reusing it.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import cupy as cp


class ArrayStream:
    """Where work on the packed memory array runs (module docstring); `enabled=False`
    keeps everything on the engine's stream (the kernel reads the array directly)."""

    def __init__(self, enabled: bool) -> None:
        self.stream = cp.cuda.Stream(non_blocking=True) if enabled else None
        self._changed: cp.cuda.Event | None = None  # array stream: after its last change
        self._read: cp.cuda.Event | None = None     # engine stream: after its last read

    @contextmanager
    def changing(self) -> Iterator[None]:
        """Work that changes the array (or reads it and reads back at once: lookups), on
        the array's stream, after the engine's last read of it."""
        if self.stream is None:
            yield
            return
        if self._read is not None:
            self.stream.wait_event(self._read)
        try:
            with self.stream:
                yield
        finally:
            self._changed = self.stream.record()

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Work on the engine's stream that reads the array, after its last change."""
        if self.stream is None:
            yield
            return
        engine = cp.cuda.get_current_stream()
        if self._changed is not None:
            engine.wait_event(self._changed)
        try:
            yield
        finally:
            self._read = engine.record()
