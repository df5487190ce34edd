"""Owns the engine's clock: wall seconds that stand still while kernels compile.

A kernel is compiled (or loaded from Numba's cache) the first time a process calls it
with new argument types, in whatever batch happens to call it first: seconds of the
process's start-up, not of that batch's work.  `now()` is `time.perf_counter()` less the
seconds this thread has spent in Numba's compiler (inside its global compiler lock,
which compiling and loading cached code both take), so the difference of two readings
leaves compiling out.  The CUDA kernels' compiling (NVRTC, or CuPy's cache) counts the
same: gpu/cuda/loader.py builds each module inside `compiling()`.  Counted per thread: the
service's other threads may compile while the engine thread works.
"""
from __future__ import annotations

import threading
import time

from numba.core import event


class _CompilerTime(event.Listener):
    """Seconds each thread has spent in Numba's compiler, outermost entries only."""

    def __init__(self) -> None:
        self._thread = threading.local()

    def on_start(self, ev) -> None:
        mine = self._thread
        depth = getattr(mine, "depth", 0)
        if depth == 0:
            mine.since = time.perf_counter()
        mine.depth = depth + 1

    def on_end(self, ev) -> None:
        mine = self._thread
        mine.depth -= 1
        if mine.depth == 0:
            mine.total = self.total() + time.perf_counter() - mine.since

    def total(self) -> float:
        return getattr(self._thread, "total", 0.0)


# Not "numba:"-prefixed: Numba reserves those kinds for its own events.
_KERNEL_COMPILE = "motifstream:kernel_compile"
_COMPILER = _CompilerTime()
event.register("numba:compiler_lock", _COMPILER)
event.register(_KERNEL_COMPILE, _COMPILER)


def compiling():
    """A context in which this thread compiles kernels outside Numba (the CUDA sources):
    its seconds count as compiling, as Numba's own do."""
    return event.trigger_event(_KERNEL_COMPILE)


def now() -> float:
    """A reading of the clock: wall seconds less this thread's compiling so far."""
    return time.perf_counter() - _COMPILER.total()


def compile_seconds() -> float:
    """The seconds this thread has spent in Numba's compiler so far."""
    return _COMPILER.total()
