"""Owns what a start of the service says while Numba compiles: a log line before the first
kernel compiles (what, where to, about how long), a progress line every few seconds, a
total at the end, and the reason /readyz gives meanwhile.

Numba keeps what it compiles in its cache (`NUMBA_CACHE_DIR`, else `__pycache__` beside
the sources where that is writable), so only the first start on a machine compiles, for
a minute or two of one core; later starts load the kernels in about a second.  Numba's
`numba:compile` event fires only for a real compilation, never for a load from the cache,
so a start that compiles nothing says nothing here but its count, 0.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from numba.core import config as numba_config
from numba.core import event

log = logging.getLogger("motifstream.engine")

# A progress line at most this often while compiling.
PROGRESS_SECONDS = 10.0
# The first start of `serve` on the 2-vCPU VM (every kernel compiled, an empty store):
# the base of the estimate a first start gives (docs/benchmarks.md).
REFERENCE_SECONDS = 80.0


class CompileWatch(event.Listener):
    """Counts Numba's compilations between `start()` and `finish()` (events of every thread;
    only the engine thread compiles then), saying what happens in the log."""

    def __init__(self, kernels: list, clock: Callable[[], float] = time.monotonic,
                 every: float = PROGRESS_SECONDS) -> None:
        self.clock, self.every = clock, every
        self.total = len(kernels)
        self.uncached = sum(not _cached(kernel) for kernel in kernels)
        self.cache = cache_folder(kernels)
        self.compiled = 0          # compilations finished (any depth)
        self.started = self.last_line = 0.0
        self.seconds = 0.0
        self._depth = 0
        self._lock = threading.Lock()

    # ---- the listener (Numba calls these on the compiling thread) --------------------
    def on_start(self, ev) -> None:
        with self._lock:
            if self.compiled == 0 and self._depth == 0:
                self._announce()
            self._depth += 1

    def on_end(self, ev) -> None:
        with self._lock:
            self._depth -= 1
            self.compiled += 1
            now = self.clock()
            if now - self.last_line >= self.every:
                self.last_line = now
                log.info("compiling: %s", self._progress(now))

    # ---- the start -------------------------------------------------------------------
    def start(self) -> None:
        self.started = self.last_line = self.clock()
        event.register("numba:compile", self)

    def finish(self) -> None:
        """Stop counting; log the total if anything compiled."""
        event.unregister("numba:compile", self)
        self.seconds = self.clock() - self.started
        if self.compiled:
            log.info("compiled %d kernels in %.1f s into Numba's cache at %s; later starts "
                     "load them from there", self.compiled, self.seconds, self.cache)

    def status(self) -> str | None:
        """What /readyz says while kernels compile (None when none has)."""
        with self._lock:
            if self.compiled == 0 and self._depth == 0:
                return None
            return f"compiling the CPU executor's kernels (first start only): " \
                   f"{self._progress(self.clock())}"

    def estimate(self) -> float:
        """Seconds the compiling should take on two cores: the reference first start, for
        the share of kernels not in the cache."""
        return REFERENCE_SECONDS * self.uncached / max(self.total, 1)

    def _announce(self) -> None:
        unwritable = "" if writable(self.cache) else (
            "; the cache folder is not writable, so every start will compile again: set "
            "NUMBA_CACHE_DIR to a writable, lasting folder")
        log.warning("compiling the CPU executor's kernels: %d of %d are not in Numba's cache "
                    "at %s (a first start, or a new version); about %.0f s on two cores, "
                    "once: later starts load them in about a second. /readyz answers 503 "
                    "until done%s", self.uncached, self.total, self.cache, self.estimate(),
                    unwritable)

    def _progress(self, now: float) -> str:
        elapsed, estimate = now - self.started, self.estimate()
        done = f"{self.compiled} kernels compiled in {elapsed:.0f} s"
        if elapsed < estimate:
            return f"{done}, about {estimate - elapsed:.0f} s left"
        return f"{done}, longer than the {estimate:.0f} s estimated (a busy or slower machine)"


def _cached(kernel) -> bool:
    """Whether Numba's cache holds an index for `kernel` (some signature of it)."""
    cache = getattr(kernel, "_cache", None)
    index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
    return index is None or os.path.exists(index)


def cache_folder(kernels: list) -> str:
    """Where Numba keeps the kernels' cache: NUMBA_CACHE_DIR, else the first kernel's."""
    if numba_config.CACHE_DIR:
        return numba_config.CACHE_DIR
    for kernel in kernels:
        path = getattr(getattr(kernel, "_cache", None), "_cache_path", None)
        if path is not None:
            return str(path)
    return "(none)"


def writable(folder: str) -> bool:
    """Whether Numba can write there: the folder, or the nearest existing one above it
    (Numba creates the rest)."""
    path = Path(folder).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path.is_dir() and os.access(path, os.W_OK)
