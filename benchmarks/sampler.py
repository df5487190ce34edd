"""A sampling profiler that needs no ptrace: runs a module while a thread reads every
thread's stack (`sys._current_frames`) at a fixed interval, and writes, per thread, how
many samples had each function on its stack (inclusive) and on top (own).

    python -m benchmarks.sampler --out FILE [--interval 0.005] [--top 60] -m MODULE [ARG ...]

For where py-spy cannot attach (the device host refuses ptrace): `benchmarks.service_bench
--profile FILE` runs the server under it.  The report is written when the module returns,
raises, or the process gets SIGTERM (turned into a normal exit, so a server's own shutdown
runs first).  SIGUSR1 starts the counts afresh (`service_bench --profile` sends it when
its load begins, so that a server's start-up is not in the report).  Sampling holds the
GIL for the few microseconds a read of the stacks takes; at the default 5 ms that is well
under 1% of one core.
"""
from __future__ import annotations

import argparse
import runpy
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path


def _frame_name(code) -> str:
    return f"{code.co_name} ({Path(code.co_filename).name}:{code.co_firstlineno})"



class Sampler:
    """Counts, per thread name, the samples each function (code object, named when the
    report is written) was on the stack (inclusive) and on its top (own); `samples` per
    thread name."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.inclusive: dict[str, Counter] = defaultdict(Counter)
        self.own: dict[str, Counter] = defaultdict(Counter)
        self.samples: Counter = Counter()
        self._stop = threading.Event()
        self._reset = threading.Event()
        self.started = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def reset(self) -> None:
        """Start the counts afresh (safe from a signal handler: the sampling thread
        clears them before its next sample)."""
        self._reset.set()

    def _run(self) -> None:
        # Kept short: it holds the GIL while it reads (code objects only, no strings).
        me = threading.get_ident()
        names: dict[int, str] = {}
        ticks = 0
        while not self._stop.wait(self.interval):
            if self._reset.is_set():
                self._reset.clear()
                self.inclusive.clear()
                self.own.clear()
                self.samples.clear()
                self.started = time.perf_counter()
            frames = sys._current_frames()
            # Names are read when a thread appears (a short-lived one is still named) and
            # now and then besides, since a new thread may reuse a dead one's ident.
            if ticks % 200 == 0 or not names.keys() >= frames.keys():
                names = {t.ident: t.name for t in threading.enumerate()}
            ticks += 1
            for ident, frame in frames.items():
                if ident == me:
                    continue
                thread = names.get(ident) or f"thread-{ident}"
                self.samples[thread] += 1
                self.own[thread][frame.f_code] += 1
                codes = set()
                while frame is not None:
                    codes.add(frame.f_code)
                    frame = frame.f_back
                self.inclusive[thread].update(codes)

    def report(self, top: int) -> str:
        lines = [f"# sampling every {self.interval * 1e3:g} ms; samples per thread (a busy "
                 f"thread has ~{1 / self.interval:,.0f} a second)"]
        for thread, count in self.samples.most_common():
            lines.append(f"\n## {thread}: {count} samples\n# inclusive  own  function")
            for code, inclusive in self.inclusive[thread].most_common(top):
                lines.append(f"{inclusive:8d} {self.own[thread][code]:6d}  "
                             f"{_frame_name(code)}")
        return "\n".join(lines) + "\n"


def module_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The options of a runner of a module (this one, benchmarks/sections.py): --out, and
    -m MODULE with its arguments."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--out", type=Path, required=True, help="where the report goes")
    p.add_argument("-m", dest="module", required=True, help="the module to run as __main__")
    p.add_argument("args", nargs=argparse.REMAINDER,
                   help="its arguments (after --, where the first is an option)")
    return p


def run_module(module: str, args: list[str], reset, finish) -> None:
    """Run `module` as __main__ with `args`; SIGUSR1 calls `reset()`, SIGTERM ends the run
    as a normal exit (a server's own shutdown runs first), and `finish()` runs when the
    module returns, raises or is ended."""
    def terminate(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGUSR1, lambda signum, frame: reset())
    sys.argv = [module, *(args[1:] if args[:1] == ["--"] else args)]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        finish()


def main(argv=None) -> None:
    p = module_parser("python -m benchmarks.sampler", __doc__.split("\n", 1)[0])
    p.add_argument("--interval", type=float, default=0.005, help="seconds between samples")
    p.add_argument("--top", type=int, default=60, help="functions listed per thread")
    args = p.parse_args(argv)
    if args.interval <= 0:
        p.error("--interval must be positive")
    sampler = Sampler(args.interval)

    def finish() -> None:
        sampler.stop()
        report = sampler.report(args.top)
        args.out.write_text(f"# {args.module} {' '.join(args.args)}: "
                            f"{time.perf_counter() - sampler.started:.1f} s counted\n"
                            + report)

    sampler.start()
    run_module(args.module, args.args, sampler.reset, finish)


if __name__ == "__main__":
    main()
