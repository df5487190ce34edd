"""The long schemathesis run: the conformance test (tests/service/test_openapi_conformance.py)
with many more cases, against a fresh app in a temporary directory, on the CPU executor.

Every check, the examples, coverage, fuzzing and stateful phases; a seed drawn at random
unless given (printed, so that a failing run can be repeated).  Exits 1 on any failure or
error, printing each.

    python -m benchmarks.openapi_conformance [--max-examples 250] [--seed S] [--no-shrink]
        [--json F]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sys
import tempfile
from pathlib import Path

from tests.service.test_openapi_conformance import run_conformance


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-examples", type=int, default=250,
                        help="schemathesis's examples per operation and phase (the default "
                             "gives over 10,000 cases)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-shrink", action="store_true",
                        help="report a failing case as found, not reduced (shrinking one "
                             "can take longer than the run)")
    parser.add_argument("--json", type=Path, default=None, help="write the outcome here")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    started = datetime.datetime.now(datetime.timezone.utc)
    with tempfile.TemporaryDirectory(prefix="motifstream-conformance-") as tmp:
        outcome = run_conformance(Path(tmp) / "data", max_examples=args.max_examples,
                                  seed=seed, shrink=not args.no_shrink)
    summary = {
        "cases": outcome.cases, "failures": len(outcome.failures),
        "errors": len(outcome.errors), "seconds": round(outcome.seconds, 1),
        "documented_refusals_dropped": outcome.dropped, "phases": outcome.phases,
        "links_followed": outcome.links, "seed": seed, "max_examples": args.max_examples,
        "started": started.isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}"}
    for line in outcome.errors + outcome.failures:
        print(line, file=sys.stderr)
    print(json.dumps(summary, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps({**summary, "failure_text": outcome.failures,
                                         "error_text": outcome.errors}, indent=1))
    return 1 if outcome.failures or outcome.errors else 0


if __name__ == "__main__":
    sys.exit(main())
