"""Windowed queries against the same queries without a window, on a timed stream with
retention (issue 23: the window prunes the search, it does not filter its result).

    python -m benchmarks.window_bench [--graph G] [--retention 80000] [--windows 1000 5000]
        [--kinds dense --queries 3] [--batch 1000] [--json FILE]

The stream is benchmarks/retention_bench.py's (GH's edges in a random order, edge i at
event time i, batches of `--batch` onto the vertices alone, retention on); the first
`--queries` saved queries of each kind stand without a window on one engine, and with
window W on another, for each W.  Per run: the median and p99 `Engine.apply` wall of the
steady-state batches (after the first `--retention` edges), the median of their matching
phase alone (`timings["match"]`: the searches, the windowed phases with their subgraphs)
and the matches, checked as positive - negative = the count at the end; the ratios are
the unwindowed medians over the windowed ones, end to end and for the matching phase.
`--backend cuda` runs both engines on the CUDA executor, the windowed search in the
kernel (gpu/cuda/windowed.py); `--host-windows` runs each window a second time with that
search on the host's cores (EngineConfig.device_windows off), rows marked "host".
`--split` adds, for the windowed runs, the parts of their matching phase: the subgraphs
the host search fills (gpu/event_time.py `_window_subgraph`), the host searches
(`count_windowed`, every query of every phase) and the device's (`_count_on_device`: the
window's layout, its copy up, the kernel and the read-back), each as its median per
steady batch.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from pathlib import Path

from benchmarks.gh_table import run_header
from benchmarks.retention_bench import add_stream_args, load_stream, run
from gpu import event_time
from gpu.config import EngineConfig

# The parts of a windowed batch's matching phase that --split times (gpu/event_time.py).
SPLIT = {"subgraphs": "_window_subgraph", "searches": "count_windowed",
         "device searches": "_count_on_device"}


class PhaseSplit:
    """Seconds spent in each of SPLIT's functions, summed per batch while `timing()`."""

    def __init__(self) -> None:
        self._batch: dict[str, float] = defaultdict(float)
        self.steady: list[dict[str, float]] = []    # one per steady batch

    def after_batch(self, steady: bool) -> None:
        if steady:
            self.steady.append({part: self._batch[part] for part in SPLIT})
        self._batch.clear()

    def medians_ms(self) -> dict[str, float | None]:
        return {part: (round(statistics.median(b[part] for b in self.steady) * 1e3, 3)
                       if self.steady else None) for part in SPLIT}

    @contextmanager
    def timing(self):
        originals = {part: getattr(event_time, name) for part, name in SPLIT.items()}

        def timed(part, fn):
            def call(*args, **kwargs):
                t0 = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self._batch[part] += time.perf_counter() - t0
            return call

        for part, name in SPLIT.items():
            setattr(event_time, name, timed(part, originals[part]))
        try:
            yield self
        finally:
            for part, name in SPLIT.items():
                setattr(event_time, name, originals[part])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.window_bench",
                                description=__doc__.split("\n", 1)[0])
    add_stream_args(p)
    p.add_argument("--retention", type=int, default=80_000)
    p.add_argument("--windows", type=int, nargs="+", default=[1_000, 5_000])
    p.add_argument("--backend", default="cpu", choices=("cpu", "cuda"),
                   help="the engines' executor (on cuda the windowed search runs in the "
                        "kernel, over the window's edges copied up per phase)")
    p.add_argument("--host-windows", action="store_true",
                   help="cuda: also run each window with its search on the host's cores")
    p.add_argument("--split", action="store_true",
                   help="also time the windowed runs' subgraph fills and searches (median ms "
                        "per steady batch, parts of the matching phase)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    header = run_header(args.backend, "benchmarks.window_bench")
    print(json.dumps(header), flush=True)
    graph, queries, batches = load_stream(args)
    host = EngineConfig(device_windows=False)
    runs = [(None, None)] + [(w, c) for w in args.windows
                             for c in ((None, host) if args.host_windows else (None,))]
    # Compiles, not timed: no window, and the first window with each search.
    for window, config in [r for r in runs if r[0] in (None, args.windows[0])]:
        run(graph, queries, batches[:3], args.retention, args.backend, window, config=config,
            directed=args.directed)
    print("| window | steady batches | apply p50 ms | apply p99 ms | matching p50 ms | positive "
          "| negative | matches at the end | apply p50 ratio | matching p50 ratio |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = base_match = None
    splits = []
    for window, config in runs:
        split = PhaseSplit() if args.split and window is not None else None
        with split.timing() if split else nullcontext():
            record = run(graph, queries, batches, args.retention, args.backend, window,
                         after_batch=split.after_batch if split else None, config=config,
                         directed=args.directed)
        if split:
            record["split_ms"] = split.medians_ms()
        assert record["positive"] - record["negative"] == record["final_matches"], record
        base = base or record["p50_ms"]
        base_match = base_match or record["match_p50_ms"]
        ratio = base / record["p50_ms"] if record["p50_ms"] else float("nan")
        match_ratio = (base_match / record["match_p50_ms"] if record["match_p50_ms"]
                       else float("nan"))
        label = "none" if window is None else f"{window}{' host' if config else ''}"
        print(f"| {label} | {record['steady_batches']} | "
              f"{record['p50_ms']} | {record['p99_ms']} | {record['match_p50_ms']} | "
              f"{record['positive']:,} | {record['negative']:,} | "
              f"{record['final_matches']:,} | {ratio:.1f} | {match_ratio:.1f} |", flush=True)
        if "split_ms" in record:
            splits.append(f"W = {label}: " + ", ".join(
                f"{part} {ms} ms" for part, ms in record["split_ms"].items()))
        if args.json:
            with args.json.open("a") as f:
                f.write(json.dumps({**header, **record, "window": window,
                                    "window_search": "host" if config else args.backend,
                                    "ratio": ratio,
                                    "match_ratio": match_ratio,
                                    "batch": args.batch, "queries": len(queries)}) + "\n")
    if splits:
        print("\nParts of the windowed matching phase, median per steady batch: "
              + "; ".join(splits))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
