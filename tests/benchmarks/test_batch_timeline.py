"""benchmarks/batch_timeline.py: the trace summary's arithmetic, and the phase marks."""
from __future__ import annotations

import contextlib

import pytest

from benchmarks import batch_timeline
from benchmarks.batch_timeline import summarize


def _range(name, ts, dur):
    return {"cat": "user_annotation", "name": name, "ts": ts, "dur": dur}


def _device(cat, name, ts, dur):
    return {"cat": cat, "name": name, "ts": ts, "dur": dur}


def _api(name, ts):
    return {"cat": "cuda_driver", "name": name, "ts": ts, "dur": 1}


def test_busy_idle_and_phases_of_one_batch():
    events = [
        _range("Engine.apply", 1000, 100),          # 1000..1100 µs
        _range("normalize", 1000, 30),
        _range("DevicePrep.edge_changes", 1005, 20),
        _range("Engine._incremental", 1040, 60),
        # Overlapping kernels count once; one starts before the batch (clipped).
        _device("kernel", "lookup", 990, 20),        # 10 µs inside
        _device("kernel", "match", 1050, 30),
        _device("kernel", "match", 1060, 30),        # union with the one above: 1050..1090
        _device("gpu_memcpy", "Memcpy HtoD", 1020, 4),
        _device("kernel", "after", 1200, 50),        # outside: not this batch's
        _api("cuLaunchKernel", 1041), _api("cuLaunchKernel", 1042),
        _api("cuMemcpyHtoDAsync", 1020), _api("cuStreamSynchronize", 1095),
    ]
    (batch,) = summarize(events)
    assert batch["wall_ms"] == pytest.approx(0.1)
    assert batch["gpu_busy_ms"] == pytest.approx((10 + 40 + 4) / 1e3)
    assert batch["gpu_idle_ms"] == pytest.approx((100 - 54) / 1e3)
    assert batch["kernels"] == 3 and batch["copies"] == 1
    by_name = {p["phase"]: p for p in batch["phases"]}
    assert [p["phase"] for p in batch["phases"]] == [
        "normalize", "DevicePrep.edge_changes", "Engine._incremental"]
    assert by_name["DevicePrep.edge_changes"]["depth"] == 2
    assert by_name["Engine._incremental"]["depth"] == 1
    assert by_name["normalize"]["gpu_busy_ms"] == pytest.approx((10 + 4) / 1e3)
    inc = by_name["Engine._incremental"]
    assert inc["start_ms"] == pytest.approx(0.04)
    assert inc["gpu_busy_ms"] == pytest.approx(0.04)
    assert (inc["launches"], inc["copies"], inc["syncs"]) == (2, 0, 1)
    assert by_name["DevicePrep.edge_changes"]["copies"] == 1
    work = {w["name"]: w for w in batch["device_work"]}
    assert work["kernel: match"]["count"] == 2
    assert work["kernel: match"]["ms"] == pytest.approx(0.06)


def test_one_summary_per_apply_in_time_order():
    events = [_range("Engine.apply", 500, 10), _range("Engine.apply", 100, 20),
              _device("kernel", "k", 105, 5)]
    first, second = summarize(events)
    assert first["wall_ms"] == pytest.approx(0.02) and first["gpu_busy_ms"] == \
        pytest.approx(0.005)
    assert second["gpu_busy_ms"] == 0 and second["kernels"] == 0


class _Thing:
    def work(self, x):
        return x + 1

    @staticmethod
    def still(x):
        return x * 2


def test_mark_phases_wraps_methods_and_static_methods(monkeypatch):
    import sys
    import types
    module = types.ModuleType("_timeline_probe")
    module.Thing = _Thing
    monkeypatch.setitem(sys.modules, "_timeline_probe", module)
    saved = dict(_Thing.__dict__)
    seen = []

    @contextlib.contextmanager
    def record(name):
        seen.append(name)
        yield

    try:
        batch_timeline.mark_phases(record, [("_timeline_probe", "Thing.work"),
                                            ("_timeline_probe", "Thing.still")])
        assert _Thing().work(1) == 2 and _Thing.still(3) == 6
        assert seen == ["Thing.work", "Thing.still"]
    finally:
        for name in ("work", "still"):
            setattr(_Thing, name, saved[name])
