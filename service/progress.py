"""Owns the command line's progress display on stderr: phase lines and an in-place batch meter.

Progress is for a person watching a terminal; piped or captured stderr gets
nothing, so logs and tests see only real messages.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

# Redrawing the meter costs a terminal write; tiny batches would otherwise
# spend more time drawing than matching.
_REDRAW_SECONDS = 0.1


class Progress:
    """Phase messages with elapsed time, and a `batch i/n, rate, eta` meter redrawn with ``\\r``.

    Disabled (every method a no-op) unless ``enabled`` is true; by default it
    is enabled exactly when ``stream`` is a terminal.
    """

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None,
                 unit: str = "updates") -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.unit = unit
        self._start = self._phase_start = time.perf_counter()
        self._last_draw = float("-inf")
        self._meter_width = 0  # characters of the meter now on screen; 0 = none

    def phase(self, message: str) -> None:
        """Start a phase: print its message on a line of its own, after the elapsed time."""
        if not self.enabled:
            return
        self._end_meter()
        now = time.perf_counter()
        self._phase_start = now
        self.stream.write(f"[{now - self._start:7.1f}s] {message}\n")
        self.stream.flush()

    def update(self, done: int, total: int, items: int = 0) -> None:
        """Redraw the meter: ``done`` of ``total`` batches, ``items`` units so far in this phase."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if done < total and now - self._last_draw < _REDRAW_SECONDS:
            return
        elapsed = max(now - self._phase_start, 1e-9)
        text = f"batch {done}/{total}, {_compact(items / elapsed)} {self.unit}/s"
        if 0 < done < total:
            text += f", eta {_duration(elapsed * (total - done) / done)}"
        self._draw(text, now)

    def status(self, text: str) -> None:
        """Redraw the meter's line with ``text`` (how far a phase without batches is)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last_draw >= _REDRAW_SECONDS:
            self._draw(text, now)

    def _draw(self, text: str, now: float) -> None:
        self._last_draw = now
        # Pad over the previous meter: a shorter line would leave its tail visible.
        self.stream.write("\r" + text.ljust(self._meter_width))
        self.stream.flush()
        self._meter_width = len(text)

    def close(self) -> None:
        """Finish the meter's line so that later stderr output starts on a fresh one."""
        if self.enabled:
            self._end_meter()

    def _end_meter(self) -> None:
        if self._meter_width:
            self.stream.write("\n")
            self.stream.flush()
            self._meter_width = 0


def _compact(rate: float) -> str:
    """``950``, ``1.2e6``: short enough for a meter, exact enough for a rate."""
    if rate < 1000:
        return f"{rate:.0f}"
    mantissa, exponent = f"{rate:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"
