"""What a start says while Numba compiles (service/compiling.py): a line before the first
kernel, progress lines, a total, /readyz's reason; nothing when nothing compiles."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import numba
import pytest

from service.compiling import REFERENCE_SECONDS, CompileWatch, writable


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _kernel(tmp_path, name: str, cached: bool) -> SimpleNamespace:
    """A stand-in for a Numba dispatcher with `cache=True`: its cache index exists or not."""
    index = tmp_path / f"{name}.nbi"
    if cached:
        index.write_bytes(b"")
    return SimpleNamespace(_cache=SimpleNamespace(
        _cache_path=str(tmp_path), _cache_file=SimpleNamespace(_index_path=str(index))))


@pytest.fixture(autouse=True)
def _cache_beside_the_sources(monkeypatch):
    # The kernels' own folders, whatever NUMBA_CACHE_DIR the run has.
    monkeypatch.setattr("service.compiling.numba_config.CACHE_DIR", "")


@pytest.fixture
def records(caplog):
    caplog.set_level(logging.INFO, logger="motifstream.engine")
    return lambda: [(r.levelname, r.getMessage()) for r in caplog.records
                    if r.name == "motifstream.engine"]


def test_a_start_that_compiles_says_what_how_long_how_far_and_the_total(tmp_path, records):
    kernels = [_kernel(tmp_path, f"k{i}", cached=i >= 3) for i in range(4)]
    clock = _Clock()
    watch = CompileWatch(kernels, clock=clock, every=10.0)
    assert (watch.total, watch.uncached) == (4, 3)
    assert watch.estimate() == pytest.approx(REFERENCE_SECONDS * 3 / 4)
    watch.start()
    assert watch.status() is None and records() == []
    try:
        watch.on_start(None)            # a kernel ...
        (level, first), = records()
        assert level == "WARNING"
        assert "3 of 4 are not in Numba's cache" in first and str(tmp_path) in first
        assert f"about {REFERENCE_SECONDS * 3 / 4:.0f} s" in first
        assert "not writable" not in first
        watch.on_start(None)            # ... and a function it calls, compiled with it
        clock.now += 4
        watch.on_end(None)
        watch.on_end(None)
        assert len(records()) == 1      # no progress line before `every` seconds
        assert watch.status() == "compiling the CPU executor's kernels (first start " \
            f"only): 2 kernels compiled in 4 s, about {REFERENCE_SECONDS * 3 / 4 - 4:.0f} s left"
        clock.now += 7
        watch.on_start(None)
        watch.on_end(None)
        assert records()[-1] == ("INFO", (f"compiling: 3 kernels compiled in 11 s, about "
                                          f"{REFERENCE_SECONDS * 3 / 4 - 11:.0f} s left"))
        clock.now += REFERENCE_SECONDS
        watch.on_start(None)
        watch.on_end(None)
        assert records()[-1][1] == f"compiling: 4 kernels compiled in " \
            f"{REFERENCE_SECONDS + 11:.0f} s, longer than the {REFERENCE_SECONDS * 3 / 4:.0f} s " \
            "estimated (a busy or slower machine)"
    finally:
        clock.now += 1
        watch.finish()
    assert records()[-1][1].startswith(
        f"compiled 4 kernels in {REFERENCE_SECONDS + 12:.1f} s into Numba's cache at {tmp_path}")
    assert len(records()) == 4


def test_real_compilations_are_counted_and_cache_loads_are_not(tmp_path, records):
    watch = CompileWatch([_kernel(tmp_path, "k", cached=False)])
    watch.start()
    try:
        numba.njit(lambda x: x * 3 + 1)(2)     # compiled now (no cache)
    finally:
        watch.finish()
    assert watch.compiled >= 1
    assert records()[0][0] == "WARNING" and records()[-1][1].startswith("compiled ")
    # A start that compiles nothing (every later start) logs nothing here.
    quiet = CompileWatch([_kernel(tmp_path, "k2", cached=True)])
    before = len(records())
    quiet.start()
    quiet.finish()
    assert quiet.compiled == 0 and quiet.status() is None and len(records()) == before


def test_a_cache_folder_numba_cannot_write_is_named(tmp_path, records, monkeypatch):
    # A file where the folder should be: no user, root included, can create it.
    (tmp_path / "file").write_text("")
    monkeypatch.setattr("service.compiling.numba_config.CACHE_DIR", str(tmp_path / "file" / "nb"))
    watch = CompileWatch([_kernel(tmp_path, "k", cached=False)])
    watch.start()
    watch.on_start(None)
    watch.on_end(None)
    watch.finish()
    assert f"at {tmp_path / 'file' / 'nb'} " in records()[0][1]
    assert "not writable, so every start will compile again" in records()[0][1]


def test_writable_looks_at_the_nearest_existing_folder(tmp_path):
    assert writable(str(tmp_path / "not" / "yet"))
    (tmp_path / "file").write_text("")
    assert not writable(str(tmp_path / "file" / "below"))
