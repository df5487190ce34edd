"""How long the README's demo (`motifstream match`, no arguments) takes cold and warm.

    python -m benchmarks.demo_timing [--rounds 2] [--warm 3] [--before TREE]

Cold: Numba's cache (NUMBA_CACHE_DIR) an empty folder; warm: the same folder again, after
the background compile a cold run starts (gpu/compile_ahead.py) has written its stamp.
Each round also runs the demo cold with MOTIFSTREAM_FIRST_RUN=compile (compiling in the
foreground, as a larger first run does).  `--before TREE` times another source tree (a
`git archive` of an older commit) the same way, interleaved, run as
`PYTHONPATH=TREE python -m service.cli match`.  One JSON line per run: wall and CPU
seconds of the whole command, and the load average when it started.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAMP = "motifstream-compiled.json"


def run(tree: Path, cache: Path, **env: str) -> dict:
    """One demo run from `tree` with Numba's cache in `cache`: wall and CPU seconds."""
    environment = {**os.environ, "PYTHONPATH": str(tree), "NUMBA_CACHE_DIR": str(cache),
                   **env}
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "service.cli", "match"], cwd=tree, check=True,
                   env=environment, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
            "load": round(load, 2)}


def wait_for_stamp(cache: Path, limit: float = 900.0) -> float:
    """Seconds until the background compile's stamp appears in `cache`."""
    t0 = time.perf_counter()
    while not any(cache.rglob(STAMP)):
        if time.perf_counter() - t0 > limit:
            raise TimeoutError(f"no {STAMP} in {cache} after {limit:.0f} s")
        time.sleep(1)
    return round(time.perf_counter() - t0, 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warm", type=int, default=3, help="warm runs per round and tree")
    parser.add_argument("--before", type=Path, help="another source tree to time alike")
    args = parser.parse_args(argv)
    trees = {"after": REPO, **({"before": args.before.resolve()} if args.before else {})}

    def emit(record: dict) -> None:
        print(json.dumps({"utc": time.strftime("%H:%M:%S", time.gmtime()), **record}),
              flush=True)

    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            caches = {name: Path(scratch, f"{name}-{round_}") for name in trees}
            for name in sorted(trees, reverse=True):     # before first, when given
                emit({"round": round_, "tree": name, "run": "cold",
                      **run(trees[name], caches[name])})
            emit({"round": round_, "tree": "after", "run": "background compile",
                  "seconds_after_the_cold_run": wait_for_stamp(caches["after"])})
            emit({"round": round_, "tree": "after", "run": "cold, foreground compile",
                  **run(REPO, Path(scratch, f"foreground-{round_}"),
                        MOTIFSTREAM_FIRST_RUN="compile")})
            for _ in range(args.warm):
                for name in sorted(trees, reverse=True):
                    emit({"round": round_, "tree": name, "run": "warm",
                          **run(trees[name], caches[name])})


if __name__ == "__main__":
    main()
