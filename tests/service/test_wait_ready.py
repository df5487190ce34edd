"""The service tests' readiness wait (tests/service/conftest.py): a limit on time without
progress, not on the whole start, since a first start compiles every kernel."""
from __future__ import annotations

import pytest

from tests.service import conftest
from tests.service.conftest import kernels_compiled, wait_ready


class _Answer:
    def __init__(self, status: int, body: dict) -> None:
        self.status_code, self._body = status, body

    def json(self) -> dict:
        return self._body


class _Starting:
    """/readyz answers: `compiling` bodies with the kernel count given by `counts`, then
    ready (or starting for ever when `counts` runs out and `ready` is False)."""

    def __init__(self, counts, ready: bool) -> None:
        self.counts, self.ready, self.asked = list(counts), ready, 0

    def get(self, path: str) -> _Answer:
        assert path == "/readyz"
        self.asked += 1
        if self.counts:
            n = self.counts.pop(0)
            return _Answer(503, {"status": "starting", "detail": "compiling the CPU executor's "
                                 f"kernels (first start only): {n} kernels compiled in 3 s"})
        if self.ready:
            return _Answer(200, {"status": "ready"})
        return _Answer(503, {"status": "starting", "detail": "recovering the store"})


class _Clock:
    """time.monotonic and time.sleep of a clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(conftest, "time", clock)
    return clock


def test_a_start_that_compiles_kernels_may_take_longer_than_the_limit(clock):
    # 30 answers 20 ms apart are 0.6 s, three times the limit, a kernel compiled every second.
    client = _Starting([i // 2 for i in range(30)], ready=True)
    wait_ready(client, timeout=0.2)
    assert client.asked == 31 and clock.now > 0.2


def test_a_start_without_progress_fails_after_the_limit(clock):
    client = _Starting([1, 2, 2, 2], ready=False)
    with pytest.raises(AssertionError, match="did not become ready.*recovering the store"):
        wait_ready(client, timeout=0.2)
    # The limit counts from the last kernel compiled (the second answer, at 20 ms).
    assert clock.now == pytest.approx(0.02 + 0.2, abs=0.021)


def test_the_kernels_compiled_are_read_from_the_detail():
    assert kernels_compiled("compiling the CPU executor's kernels (first start only): "
                            "17 kernels compiled in 40 s, about 100 s left") == 17
    assert kernels_compiled("recovering the store") == 0
