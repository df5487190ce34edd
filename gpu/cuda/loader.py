"""The one loader of `gpu/cuda/kernels/*.cu`, and what every launcher shares: argument
checks and the thread-per-item launch.

Each source is compiled through CuPy's `RawModule` with fixed options, once per device;
a `#line` directive makes compiler errors name the real file and line.  The compile runs
when the module is first asked for, inside `gpu.clock.compiling()`, so no batch is charged
for it.  Launchers check the dtypes of their arrays and cast their scalars, so a wrong
argument fails with a message instead of corrupting memory.  The launchers live beside
this module, one module per kernel family: `match_launchers` (match.cu, tasks.cu,
ranks.cu), `pma_launchers` (pma.cu, view.cu), `signature_launchers` (signature.cu), and
`id_mirror` (idmap.cu).  Only import this module where `gpu.cuda.device.cuda_available()`
is true.
"""
from __future__ import annotations

import functools
from pathlib import Path

import cupy as cp
import numpy as np

from gpu import clock

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
OPTIONS = ("-std=c++17", "--generate-line-info")
# The largest query the kernels hold (MAX_QUERY of match.cu and signature.cu).
MAX_QUERY = 32


@cp.memoize(for_each_device=True)
def module(name: str) -> cp.RawModule:
    """gpu/cuda/kernels/<name>.cu, compiled for the current device (once)."""
    path = KERNEL_DIR / f"{name}.cu"
    source = f'#line 1 "{path}"\n' + path.read_text()
    raw = cp.RawModule(code=source, options=OPTIONS)
    with clock.compiling():
        raw.compile()       # RawModule compiles lazily, at its first get_function
    return raw


@cp.memoize(for_each_device=True)
def kernel(source: str, name: str) -> cp.RawKernel:
    """gpu/cuda/kernels/<source>.cu:<name>, looked up once per device (a one-edge batch
    launches a dozen kernels: RawModule.get_function each time cost more than the launch)."""
    return module(source).get_function(name)


@functools.cache
def _dtype(dtype) -> np.dtype:
    return np.dtype(dtype)


def check_array(name: str, array, dtype, ndim: int | None = None) -> None:
    """Raise unless `array` is a C-contiguous device array of `dtype` (and `ndim`).

    Called for every array of every launch (a one-edge batch makes ~140 such calls), so
    it reads CuPy's own contiguity flag instead of building `array.flags`, and caches
    the dtypes it compares with."""
    if not isinstance(array, cp.ndarray):
        raise TypeError(f"{name}: expected a device array, got {type(array).__name__}")
    want = _dtype(dtype)
    if array.dtype != want:
        raise TypeError(f"{name}: expected {want}, got {array.dtype}")
    if ndim is not None and array.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got {array.ndim}")
    if not array._c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous")


def one_thread_each(source: str, name: str, items: int, args: tuple,
                    threads: int = 256) -> None:
    """Launch gpu/cuda/kernels/<source>.cu:<kernel> with a thread per item (none for none)."""
    if items == 0:
        return
    kernel(source, name)((-(-items // threads),), (threads,), args)
