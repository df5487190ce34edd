"""The engine's batch groups with a second Python thread taking the GIL in bursts, as the
service's event loop does under load: how much of the service's slowdown is the GIL.

    python -m benchmarks.gil_noise --backend cuda [--k 13] [--groups 200] [--rounds 3]
        [--bursts 1:4 2:5] [--switch-ms 0.5] [--sections 2:5]

Setup as benchmarks.apply_profile (GH, 5 labels, the 10 dense queries, counts only, the
held-out edges cycled as one-edge batches).  `--k` batches are started (Engine.start) and
then finished, so that they run as one batch group, as the service's engine thread takes
the requests queued behind each other; batches/s is K over the group's wall time.  Each
`--bursts W:P` runs a thread that spins W ms of pure Python every P ms (sleeping between,
the GIL released); the configurations take turns within each round, so that they see the
same spells of the machine's speed.  `--sections W:P` then times every engine step per call
under that burst (benchmarks/sections.py's report; a step that releases the GIL for a CUDA
call waits to get it back).  The switch interval is the service's (0.5 ms) unless
`--switch-ms` says otherwise.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter

import numpy as np

from benchmarks import apply_profile
from benchmarks.gh_table import INSERT_FRACTION
from benchmarks.sections import report
from gpu.config import EngineConfig
from gpu.io.graphs import load_graph
from gpu.io.streams import split_stream


class Bursts:
    """A daemon thread that spins `work` seconds of Python every `period` seconds (none
    while `work` is 0)."""

    def __init__(self) -> None:
        self.work = self.period = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bursts", daemon=True)
        self._thread.start()

    def set(self, work: float, period: float) -> None:
        self.work, self.period = work, period

    def _run(self) -> None:
        while not self._stop.is_set():
            work, period = self.work, self.period
            if work <= 0:
                time.sleep(0.01)
                continue
            time.sleep(max(period - work, 0.0))
            end = time.perf_counter() + work
            while time.perf_counter() < end:
                pass

    def stop(self) -> None:
        self._stop.set()


def _burst(text: str) -> tuple[float, float]:
    work, period = (float(x) / 1e3 for x in text.split(":"))
    if not 0 < work <= period:
        raise argparse.ArgumentTypeError(f"W:P in ms with 0 < W <= P, got {text!r}")
    return work, period


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gil_noise",
                                description=__doc__.split("\n", 1)[0])
    apply_profile.add_setup_args(p, 1)
    p.add_argument("--k", type=int, default=13, help="batches a group (default 13)")
    p.add_argument("--groups", type=int, default=200, help="groups per configuration, round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bursts", type=_burst, nargs="+", default=[_burst("1:4"), _burst("2:5")],
                   metavar="W:P", help="ms of Python every ms (default 1:4 2:5)")
    p.add_argument("--switch-ms", type=float, default=0.5, help="sys.setswitchinterval, ms")
    p.add_argument("--sections", type=_burst, metavar="W:P",
                   help="then time each engine step per call under this burst")
    args = p.parse_args(argv)
    sys.setswitchinterval(args.switch_ms / 1e3)
    initial, held_out = split_stream(load_graph(args.graph, num_labels=5, seed=0),
                                     INSERT_FRACTION, 0)
    engine = apply_profile.gh_engine(args, initial, EngineConfig())
    position = 0

    def run(groups: int) -> float:
        nonlocal position
        seconds = []
        for _ in range(groups):
            todo, position = apply_profile.batches(held_out, args.size, args.k, position)
            t0 = time.perf_counter()
            for started in [engine.start(batch) for batch in todo]:
                started.finish()
            seconds.append((time.perf_counter() - t0) / len(todo))
        return 1 / float(np.mean(seconds))

    bursts = Bursts()
    run(30)     # warm
    configs = [("no bursts", 0.0, 0.0)] + [
        (f"{w * 1e3:g} ms every {period * 1e3:g} ms", w, period) for w, period in args.bursts]
    rates: dict[str, list[float]] = {name: [] for name, _, _ in configs}
    for _ in range(args.rounds):
        for name, work, period in configs:
            bursts.set(work, period)
            rates[name].append(run(args.groups))
    print(f"{args.backend}, groups of {args.k} one-edge batches, switch interval "
          f"{args.switch_ms:g} ms, {args.queries} dense queries; batches/s per round:")
    for name, values in rates.items():
        print(f"  {name}: " + ", ".join(f"{v:,.0f}" for v in values), flush=True)
    if args.sections:
        sections = apply_profile.Sections(wrap_compiled=False)
        apply_profile.instrument(sections)
        bursts.set(*args.sections)
        t0 = time.perf_counter()
        rate = run(args.groups)
        print(f"\nsteps under bursts of {args.sections[0] * 1e3:g} ms every "
              f"{args.sections[1] * 1e3:g} ms ({rate:,.0f} batches/s):")
        print(report(sections, Counter({args.k: args.groups}), time.perf_counter() - t0))
    bursts.stop()


if __name__ == "__main__":
    main()
