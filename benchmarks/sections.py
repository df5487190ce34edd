"""Per-call wall time of the engine's and the service's steps inside a running module (the
service under load): `benchmarks.apply_profile`'s wrappers (each step's own time, its
wrapped callees left out), the service's steps besides, and the sizes of the batch groups.

    python -m benchmarks.sections --out FILE -m MODULE [ARG ...]

For what a sampler cannot show: a sampling thread reads the stacks only when it holds
the GIL, so a step that spends its time waiting for the GIL (after a CUDA call released
it) is charged to wherever the engine thread happened to stand.  Here every wrapped call
is timed from its entry to its return, waits included, so the same step can be compared
in the service and in the engine alone (`benchmarks.apply_profile`, gil_noise).  The
report is written when the module returns, raises, or gets SIGTERM; SIGUSR1 starts the
counts afresh (`service_bench --sections` sends it when its load begins).  A wrapper costs
about half a microsecond a call.  Numba's compiled functions are not wrapped (a compiled
caller typed after the wrap would find a Python function): their time is their caller's.
"""
from __future__ import annotations

import time
from collections import Counter

from benchmarks.apply_profile import Sections, instrument
from benchmarks.sampler import module_parser, run_module


def instrument_service(sections: Sections, sizes: Counter) -> None:
    """Wrap the service's steps on the engine thread and the batch groups' steps, and count
    the batch groups by size (`sizes`)."""
    from gpu import pipeline
    from service import engine_service
    for name in ("ingest", "_finish", "_hand_off", "_settle"):
        sections.wrap(engine_service.EngineService, name, f"EngineService.{name}")
    for name in ("_resolve", "_count", "_apply_and_search"):
        sections.wrap(pipeline.BatchGroup, name, f"BatchGroup.{name}")
    try:
        from gpu.cuda import loader
    except ImportError:     # no CuPy here
        pass
    else:
        sections.wrap(loader, "upload_together", "loader.upload_together")
    run = pipeline.BatchGroup.run

    def counted(group):
        if not group.done:
            sizes[len(group.members)] += 1
        return run(group)
    pipeline.BatchGroup.run = counted


def report(sections: Sections, sizes: Counter, seconds: float) -> str:
    """Each step's own time (total, share of `seconds`, per call), the most first."""
    groups = sum(sizes.values())
    lines = [f"# {seconds:.2f} s counted; {groups} batch groups of "
             f"{sum(k * v for k, v in sizes.items())} batches; sizes (size, groups): "
             f"{sorted(sizes.items())}",
             "# own s   share      calls   us/call  step"]
    for label, own in sorted(sections.own.items(), key=lambda kv: -kv[1]):
        calls = sections.calls[label]
        lines.append(f"{own:8.3f} {100 * own / max(seconds, 1e-9):6.1f}% {calls:10d} "
                     f"{own / calls * 1e6:9.1f}  {label}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    args = module_parser("python -m benchmarks.sections",
                         __doc__.split("\n", 1)[0]).parse_args(argv)
    sections, sizes = Sections(wrap_compiled=False), Counter()
    instrument(sections)
    instrument_service(sections, sizes)
    started = [time.perf_counter()]

    def reset() -> None:
        sections.reset()
        sizes.clear()
        started[0] = time.perf_counter()

    def finish() -> None:
        args.out.write_text(report(sections, sizes, time.perf_counter() - started[0]))

    run_module(args.module, args.args, reset, finish)


if __name__ == "__main__":
    main()
