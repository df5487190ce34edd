"""Test-session hooks: the suite on every core (pytest-xdist), the Numba threads each
worker's tests get, skipping tests marked ``gpu`` when no CUDA device is usable, and the
CLI's first-run compiling kept in the foreground.

The markers are registered in pyproject.toml, whose addopts deselect ``slow`` (.ci/run
runs those second, with ``-m slow``).

When pytest-xdist is installed, a plain ``python -m pytest`` runs one worker per core
(``-n`` the cores it may use, if more than one); ``-n 0`` or ``-p no:xdist`` runs in this
one process, an explicit ``-n`` wins, and without pytest-xdist (the device host, unless its
wheel is carried) the suite runs in one process as before.  In one process nothing below
changes a test.

Workers and Numba threads.  The CPU executor's parallel regions spin while they wait
(for queued work, for a giver's record, at the barrier), so a region whose threads
outnumber the free cores stalls whenever a thread is descheduled: two workers of two
threads each on two cores ran three engine test modules in 203 s against 19 s with one
thread each (2-vCPU VM shared with other sessions, load 1.5-4, 2026-11-25 09:30 UTC,
`NUMBA_NUM_THREADS=2` or `1` `python -m pytest -n 2` on test_small_batch_queries,
test_batch_groups and test_oracle).  So each worker starts Numba with ``cores // workers``
threads (at least two) and runs its tests with ``cores // workers`` (at least one); the
tests marked ``parallel`` (the regions' work sharing, which needs several threads at
once) run with all of them while no other worker runs a test: every test holds a shared
lock on the run's cores, a ``parallel`` one the exclusive lock.  The workers also take
turns saving to Numba's on-disk cache (see _serialise_numba_cache_saves).
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

# The CLI compiles in the foreground here: no detached compile process per test run
# (gpu/compile_ahead.py; its own tests turn the background on).
os.environ.setdefault("MOTIFSTREAM_FIRST_RUN", "compile")


def _cuda_available() -> bool:
    # Imported lazily so collecting CPU-only tests never touches the device
    # module; a missing or half-written module simply means "no device".
    try:
        from gpu.cuda.device import cuda_available
    except ImportError:
        return False
    return bool(cuda_available())


def _cores() -> int:
    return len(os.sched_getaffinity(0))


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config):
    # Runs before xdist's own pytest_cmdline_main turns -n into workers; pytest only calls
    # this hook in initial conftests, which this one is for every path under tests/.
    if (config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput")
            and not config.option.collectonly and not config.option.usepdb):
        if config.option.numprocesses is None and not config.option.tx and _cores() > 1:
            config.option.numprocesses = _cores()
    return (yield)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config, specs):
    # In the controller, before the workers start (they inherit its environment): the
    # threads Numba starts in each (it reads the variable once, at import), unless the
    # user chose.
    if "NUMBA_NUM_THREADS" not in os.environ and len(specs) > 1:
        os.environ["NUMBA_NUM_THREADS"] = str(max(2, _cores() // len(specs)))


def _worker_count(config) -> int:
    workerinput = getattr(config, "workerinput", None)
    return int(workerinput["workercount"]) if workerinput else 1


@pytest.hookimpl(trylast=True)     # after the tmpdir plugin's, which _run_dir reads
def pytest_configure(config):
    if _worker_count(config) > 1:
        import numba
        numba.set_num_threads(min(numba.config.NUMBA_NUM_THREADS,
                                  max(1, _cores() // _worker_count(config))))
        _serialise_numba_cache_saves(_run_dir(config) / "numba-cache.lock")


def _run_dir(config) -> Path:
    """The directory every worker of this run shares (the workers' basetemps are in it)."""
    return Path(config._tmp_path_factory.getbasetemp()).parent


def _serialise_numba_cache_saves(lock_path: Path) -> None:
    """One worker at a time saves to Numba's on-disk cache.  A save reads a function's
    index, picks the first free data file name for a new signature and writes both: two
    workers saving different signatures of one function at once can give both the same
    name, and the index one's signature with the other's code."""
    from numba.core import caching
    save = getattr(caching.IndexDataCacheFile, "save", None)
    if save is None:        # another Numba: its own cache, unguarded here
        return

    def locked_save(self, key, data):
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)    # released when the file closes
            save(self, key, data)

    caching.IndexDataCacheFile.save = locked_save


@contextmanager
def _cores_lock(config, exclusive: bool):
    """The run's lock on the cores: shared by every test, exclusive for a ``parallel`` one.
    New shared holders queue behind a waiting exclusive one at the gate."""
    base = _run_dir(config)
    with open(base / "cores.gate", "a") as gate, open(base / "cores.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _worker_count(item.config) == 1:
        return (yield)
    parallel = item.get_closest_marker("parallel") is not None
    with _cores_lock(item.config, exclusive=parallel):
        if not parallel:
            return (yield)
        import numba
        threads = numba.get_num_threads()
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        try:
            return (yield)
        finally:
            numba.set_num_threads(threads)


def pytest_collection_modifyitems(config, items):
    if _worker_count(config) > 1:
        # The exclusive tests last: earlier, one would hold the other workers idle while
        # it waited for, or itself spent, a cold run's first compilations.  (Every worker
        # collects the same order, as xdist requires.)
        items.sort(key=lambda item: item.get_closest_marker("parallel") is not None)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or _cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in gpu_items:
        item.add_marker(skip)
