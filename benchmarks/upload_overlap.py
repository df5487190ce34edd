"""Whether host-to-device uploads return while kernels run (CUDA executor, on a GPU).

The engine uploads each batch's arrays with ``cupy.asarray`` on the current stream.
CuPy stages a NumPy array through a pinned buffer and copies it with cudaMemcpyAsync,
so the call returns once the host has filled the staging buffer, not when the copy (or
the kernels queued before it) is done: the host goes on with the next batch while the
device works.  This script checks that on the device at hand: it queues a kernel that
spins for `--spin-ms`, uploads arrays of several sizes behind it, and reports how long
each upload held the host and whether the kernel was still running when it returned.

    python -m benchmarks.upload_overlap [--spin-ms 200] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

SPIN = r"""
extern "C" __global__ void spin(long long cycles, int* out) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
    if (threadIdx.x == 0) out[0] = 1;
}
"""


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spin-ms", type=float, default=200.0)
    p.add_argument("--sizes", type=int, nargs="+", default=[16, 4096, 1 << 20, 1 << 24])
    p.add_argument("--json", help="append one JSON line per size here")
    args = p.parse_args(argv)
    import cupy as cp

    kernel = cp.RawKernel(SPIN, "spin")
    flag = cp.zeros(1, dtype=np.int32)
    clock_hz = cp.cuda.runtime.getDeviceProperties(0)["clockRate"] * 1000
    cycles = int(args.spin_ms / 1000 * clock_hz)
    for size in args.sizes:      # warm: compile the kernel, grow the pinned pool
        kernel((1,), (32,), (np.int64(1000), flag))
        cp.asarray(np.arange(size, dtype=np.int32))
    cp.cuda.Device().synchronize()
    rows = []
    for size in args.sizes:
        host = np.arange(size, dtype=np.int32)
        stream = cp.cuda.get_current_stream()
        kernel((1,), (32,), (np.int64(cycles), flag))
        t0 = time.perf_counter()
        dev = cp.asarray(host)
        held = time.perf_counter() - t0
        running = not stream.done
        stream.synchronize()
        waited = time.perf_counter() - t0
        row = {"bytes": host.nbytes, "upload_ms": round(held * 1000, 3),
               "kernel_running_after_upload": running,
               "until_done_ms": round(waited * 1000, 1),
               "equal": bool(np.array_equal(dev.get(), host)),
               "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode()}
        rows.append(row)
        print(json.dumps(row))
    if args.json:
        with open(args.json, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
