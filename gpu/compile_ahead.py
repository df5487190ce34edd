"""Owns a first run's compiling: whether Numba's cache holds the CPU executor, a background
process that fills it, and running the kernels as plain Python until it has.

Compiling every kernel a run reaches costs half a minute of one core, once per machine
(Numba keeps the result in its cache: `__pycache__` beside the sources where that is
writable, else its user-wide cache).  `first_run()` wraps a command; on the CPU executor,
unless the cache is known to be filled (the stamp below) or holds the search kernel
compiled from this code (`search_cached`: a run that compiled in the foreground):
  - a small run (inputs of at most INTERPRET_BELOW_BYTES, decompressed) starts a
    background process, `python -m gpu.compile_ahead`, which compiles every kernel a
    batch can reach (gpu/warm_up.py) and the readers' into the cache, niced and detached
    (it outlives the run), and runs the kernels as plain Python meanwhile
    (gpu/cpu/interpreted.py);
    `poll()`, between batches, switches to the compiled kernels once it has finished;
  - a larger run compiles what it needs as it goes, as it always did.
Either way the terminal shows "compiling the CPU executor (first run only)" while it
does, with the kernels compiled so far.  MOTIFSTREAM_FIRST_RUN=compile turns the
background off (the test suite sets it).  The service's first start uses the same pieces
(`background_wanted`, `interpret_while_compiling`, `wait_for_background`;
service/engine_service.py).

The stamp, written by the background process when it has finished, names the code it
compiled (Numba's and Python's versions, every source file's size and time) and every
cache index it wrote: the cache counts as filled while the code is the same and the
indexes are all there (deleting the `.nbi` files empties it).
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numba
from numba.core import event

from gpu.cpu import interpreted
from gpu.kernel_cache import code_stamp

# Larger inputs compile rather than interpret: the twins are ~100x slower than the
# compiled kernels (the embedded demo, 350 kB, runs in about a second either way).
INTERPRET_BELOW_BYTES = 1 << 20
# A small input can still hold much work (two hubs sharing a few thousand neighbours:
# minutes as plain Python); past this many seconds of interpreting, a run compiles in the
# foreground and starts over (interpreted.OutOfTime), which costs what a run that never
# interpreted costs, plus this.
INTERPRET_SECONDS = 10.0
OutOfTime = interpreted.OutOfTime
MODE_VARIABLE = "MOTIFSTREAM_FIRST_RUN"
_STAMP = "motifstream-compiled.json"
_LOCK = "motifstream-compiling.lock"
_LOG = "motifstream-compiling.log"
# How often a run that did not start the background process looks for its stamp.
_LOOK_EVERY = 1.0

_background: subprocess.Popen | None = None
_last_look = 0.0


@contextlib.contextmanager
def first_run(paths: list[str], backend: str, progress):
    """Run a command's body with a first run's compiling handled (module docstring):
    `paths` are its inputs, `progress` shows what happens on a terminal."""
    announce = _Announce(progress)
    event.register("numba:compile", announce)
    try:
        if backend == "cpu" and background_wanted() and small(paths) \
                and interpret_while_compiling(INTERPRET_SECONDS):
            progress.phase("compiling the CPU executor in the background (first run only); "
                           "running it as plain Python meanwhile")
        yield
    finally:
        event.unregister("numba:compile", announce)
        interpreted.stop()


def compile_now(progress) -> None:
    """After OutOfTime: compile (or load) every kernel called from now on, saying so."""
    interpreted.stop()
    progress.phase("too much work to run as plain Python: compiling the CPU executor now "
                   "(first run only), then starting over")


def poll() -> None:
    """Switch to the compiled kernels if the background process has filled the cache."""
    global _last_look
    if not interpreted.active():
        return
    if _background is not None:
        if _background.poll() is not None:
            # Finished (or failed: then compiling as needed is all that is left).
            interpreted.stop()
    elif time.monotonic() - _last_look >= _LOOK_EVERY:
        _last_look = time.monotonic()
        if cache_filled():
            interpreted.stop()


def background_wanted() -> bool:
    """Whether a first run may compile in the background: not turned off, and the cache
    neither known to be filled (the stamp) nor holding the search compiled from this code
    (a run that compiled in the foreground writes no stamp)."""
    return os.environ.get(MODE_VARIABLE, "background") != "compile" and not cache_filled() \
        and not search_cached()


def search_cached() -> bool:
    """Whether Numba's cache holds the CPU executor's search kernel compiled from this code:
    its index fresh under the package's stamp (gpu/kernel_cache.py)."""
    from gpu.cpu import search
    try:
        return bool(search.run_tasks._cache._cache_file._load_index())
    except Exception:   # noqa: BLE001 -- Numba's internals moved: say no, compile as needed
        return False


def interpret_while_compiling(budget: float | None) -> bool:
    """Start the background process and run the kernels as plain Python until it has
    filled the cache, with `budget` seconds on the calling thread; False (nothing
    started) where it cannot run."""
    if not _start_background():
        return False
    interpreted.interpret(budget=budget)
    return True


def wait_for_background() -> int:
    """Until the background process has finished (at once if none was started); its exit
    status (0: none was started)."""
    return 0 if _background is None else _background.wait()


def log_path() -> Path:
    """Where the background process writes what it prints."""
    return cache_dir() / _LOG


def cache_filled() -> bool:
    """Whether the background process has compiled this code into the cache, every index
    it wrote still there."""
    try:
        stamp = json.loads((cache_dir() / _STAMP).read_text())
    except (OSError, ValueError):
        return False
    return stamp.get("code") == code_key() and all(map(os.path.exists, stamp["indexes"]))


def cache_dir() -> Path:
    """Where Numba caches the CPU executor (and this module keeps its stamp and lock)."""
    from gpu.cpu import search
    return Path(search.run_tasks._cache._cache_path)


def code_key() -> str:
    """Names the code Numba compiles: its version, Python's, every source file (the stamp
    each kernel is cached under, gpu/kernel_cache.py)."""
    return hashlib.sha256(f"{numba.__version__} {sys.version} {code_stamp()}".encode()
                          ).hexdigest()


def small(paths: list[str]) -> bool:
    """Whether the inputs hold at most INTERPRET_BELOW_BYTES, a gzip file counted as what
    it holds (the readers decompress it: 1 MB of gzip can hold a gigabyte of edges)."""
    left = INTERPRET_BELOW_BYTES
    try:
        for path in paths:
            left -= _content_bytes(path, left + 1)
            if left < 0:
                return False
    except (OSError, EOFError, zlib.error):
        return False        # the command reports it
    return True


def _content_bytes(path: str, most: int) -> int:
    """The bytes of `path` as gpu.io.text.read_bytes gives them, counted up to `most`."""
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":      # read_bytes sniffs the magic too
            return os.path.getsize(path)
    with gzip.open(path, "rb") as f:
        return len(f.read(most))


def _start_background() -> bool:
    """Start the background compile; False where it cannot run (no cache folder)."""
    global _background
    try:
        folder = cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        log = open(folder / _LOG, "ab")   # noqa: SIM115 -- the child's, closed with it
    except OSError:
        return False
    with log:
        _background = subprocess.Popen(
            [sys.executable, "-m", "gpu.compile_ahead"], stdin=subprocess.DEVNULL,
            stdout=log, stderr=log, start_new_session=True,
            env={**os.environ, MODE_VARIABLE: "compile"})
    return True


class _Announce(event.Listener):
    """Says on the terminal that the CPU executor compiles, and how far it is."""

    def __init__(self, progress) -> None:
        self.progress = progress
        self.depth = self.count = 0
        self.started = 0.0

    def on_start(self, ev) -> None:
        if self.depth == 0 and self.count == 0:
            self.started = time.perf_counter()
            self.progress.phase("compiling the CPU executor (first run only)")
        self.depth += 1

    def on_end(self, ev) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.count += 1
            self.progress.status(f"compiled {self.count} kernels in "
                                 f"{time.perf_counter() - self.started:.0f} s")


# --------------------------------------------------------------------------- the process


def compile_everything() -> list[str]:
    """Compile (or load) every kernel a run of the CPU executor reaches; the cache index
    of each."""
    from gpu import load_graph, read_query, read_updates  # the readers the CLI uses
    from gpu.warm_up import warm_up

    warm_up("cpu")
    with tempfile.TemporaryDirectory() as folder:
        tiny = Path(folder)
        (tiny / "graph.txt").write_text("t 3 3\nv 0 0\nv 1 0\nv 2 0\ne 0 1\ne 1 2\ne 0 2\n")
        (tiny / "updates.txt").write_text("e 0 3 0\n-e 0 1\n")
        (tiny / "edges.csv").write_text("a,b\n0,1\n1,2\n")
        (tiny / "labels.txt").write_text("0 0\n1 1\n2 0\n")
        load_graph(tiny / "graph.txt")
        read_query(tiny / "graph.txt")
        read_updates(tiny / "updates.txt")
        load_graph(tiny / "edges.csv", num_labels=2)
        load_graph(tiny / "edges.csv", labels_path=tiny / "labels.txt")
    return sorted({kernel._cache._cache_file._index_path for kernel in interpreted.kernels()
                   if kernel.overloads and getattr(kernel, "_cache", None) is not None
                   and os.path.exists(kernel._cache._cache_file._index_path)})


def main() -> int:
    """The background process: fill the cache and write the stamp, unless another
    process is at it (then wait for that one, and compile only what it left undone: it
    may have been killed)."""
    import fcntl

    with contextlib.suppress(OSError):
        os.nice(10)
    folder = cache_dir()
    with open(folder / _LOCK, "w") as lock:
        # Another process compiling (a restart while the first start's compile runs): wait
        # for it.  Exiting at once would tell this process's server that the cache is
        # filled, and that server would compile every kernel on its engine thread.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cache_filled():
            return 0        # the other process filled it
        code = code_key()
        indexes = compile_everything()
        fresh = folder / f"{_STAMP}.{os.getpid()}"
        fresh.write_text(json.dumps({"code": code, "indexes": indexes}))
        os.replace(fresh, folder / _STAMP)
    return 0


if __name__ == "__main__":
    sys.exit(main())
