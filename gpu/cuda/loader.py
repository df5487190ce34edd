"""The one loader of `gpu/cuda/kernels/*.cu`, and what every launcher shares: argument
checks and the thread-per-item launch.

Each source is compiled through CuPy's `RawModule` with fixed options, once per device;
a `#line` directive makes compiler errors name the real file and line.  The compile runs
when the module is first asked for, inside `gpu.clock.compiling()`, so no batch is charged
for it.  Launchers check the dtypes of their arrays and cast their scalars, so a wrong
argument fails with a message instead of corrupting memory.  The launchers live beside
this module, one module per kernel family: `match_launchers` (match.cu, tasks.cu,
ranks.cu, leaves.cu), `group_launchers` (groups.cu), `pma_launchers` (pma.cu, view.cu),
`prep_launchers` (prep.cu), `signature_launchers` (signature.cu), `windowed` (window.cu),
and `id_mirror` (idmap.cu).  `Prepared` keeps one kernel's
arguments as C values for launches that repeat (gpu/cuda/small_phase.py), and
`upload_together` copies a launch's host arrays up in one copy, `read_back` a result down
(through pinned memory), and `keep_until_copied` holds a pinned block until its
asynchronous copy is done.  Only import this
module where `gpu.cuda.device.cuda_available()` is true.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import cupy as cp
import cupyx
import numpy as np

from gpu import clock

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"

# CuPy's CUB block reductions (`x.sum()`, `.any()`, `.min()` of a device array) compile one
# kernel per block size, and the block size follows the array's length (32 to 512
# threads): a GH 10% batch after `gpu.warm_up` compiled two of them for 3.3 s inside its
# validation, on a machine whose kernel cache was fresh.  CuPy's plain reduction kernel
# compiles once per operation and dtype, whatever the length, so no batch size can reach
# a kernel the warm-up did not; the precompiled device-wide CUB routines stay on.
cp._core.set_reduction_accelerators([])
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


# The C type of each scalar argument a launcher passes, as CuPy would pass it.
_C_SCALARS = {np.dtype(np.int32): ctypes.c_int32, np.dtype(np.int64): ctypes.c_int64,
              np.dtype(np.uint32): ctypes.c_uint32, np.dtype(np.uint64): ctypes.c_uint64}


class Prepared:
    """A kernel and its named arguments held as C values, launched through the driver
    with no per-argument conversion: what a launch that repeats every batch costs (a
    RawKernel call converts each of match_tasks' 40 arguments again, and took longer
    than the kernel of a one-edge batch).

    `args` are what the RawKernel call takes (device arrays, passed as their data
    pointers, and NumPy scalars), after the typed launcher checked them.  The arrays are
    kept referenced, so their memory stays theirs; `set` replaces one argument (an array
    whose buffer moved, a count), `launch` queues the kernel on the current stream."""

    def __init__(self, raw: cp.RawKernel, names, args, shared_mem: int = 0) -> None:
        if len(names) != len(args):
            raise ValueError(f"{len(names)} names for {len(args)} arguments")
        self._kernel = raw.kernel   # (holds its module: the address stays valid)
        self._function = self._kernel.ptr
        self._index = {name: i for i, name in enumerate(names)}
        self._values = [self._c_value(name, a) for name, a in zip(names, args)]
        self._arrays = {name: a for name, a in zip(names, args) if isinstance(a, cp.ndarray)}
        self._params = (ctypes.c_void_p * len(args))(
            *(ctypes.addressof(v) for v in self._values))
        self.shared_mem = shared_mem

    @staticmethod
    def _c_value(name: str, arg):
        if isinstance(arg, cp.ndarray):
            return ctypes.c_void_p(arg.data.ptr)
        ctype = _C_SCALARS.get(getattr(arg, "dtype", None))
        if ctype is None:
            raise TypeError(f"{name}: a prepared launch takes device arrays and NumPy int32, "
                            f"int64, uint32 or uint64 scalars, got {type(arg).__name__}")
        return ctype(int(arg))

    def array(self, name: str) -> cp.ndarray:
        return self._arrays[name]

    def set(self, name: str, arg) -> None:
        """Replace argument `name` by another of its kind: an array (checked by the
        caller as the launcher checked the first), or a scalar's value."""
        value = self._values[self._index[name]]
        if isinstance(value, ctypes.c_void_p):
            if not isinstance(arg, cp.ndarray):
                raise TypeError(f"{name}: expected a device array")
            self._arrays[name] = arg
            value.value = arg.data.ptr
        else:
            value.value = int(arg)

    def launch(self, blocks: int, threads: int) -> None:
        """Queue the kernel on `blocks` blocks of `threads` threads (none for none)."""
        if blocks <= 0:
            return
        cp.cuda.driver.launchKernel(self._function, blocks, 1, 1, threads, 1, 1,
                                    self.shared_mem, cp.cuda.get_current_stream().ptr,
                                    ctypes.addressof(self._params), 0)


# Pinned host blocks whose asynchronous copies may still be running, with the event after
# each: kept until the copy is done, whoever drops the arrays they belong to (CuPy's
# pinned pool would hand a freed block to the next staging while the copy still reads or
# writes it).
_IN_FLIGHT: list[tuple[cp.cuda.Event, np.ndarray]] = []


def keep_until_copied(event: cp.cuda.Event, host: np.ndarray) -> None:
    _IN_FLIGHT[:] = [(e, h) for e, h in _IN_FLIGHT if not e.done]
    _IN_FLIGHT.append((event, host))


def upload_together(*arrays: np.ndarray) -> list[cp.ndarray]:
    """Host arrays on the device in one copy: their bytes in one buffer, each array a
    typed view of its part (8-byte types first, so that every part is aligned to its
    type).  Each part is made as one array over the buffer's memory (a slice and a view
    of it made two, ~2 us each: a one-edge batch's update uploads nine parts).
    (`cupy.asarray` stages the bytes in pinned memory and copies them asynchronously.)"""
    sizes = [a.itemsize for a in arrays]
    if sizes != sorted(sizes, reverse=True):
        raise ValueError("upload_together takes wider types first")
    host = [np.ascontiguousarray(a).reshape(-1) for a in arrays]
    both = cp.asarray(np.concatenate([a.view(np.uint8) for a in host]))
    out, lo = [], 0
    for a in host:
        out.append(cp.ndarray(a.shape, a.dtype, both.data + lo))
        lo += a.nbytes
    return out


def read_back(array: cp.ndarray) -> np.ndarray:
    """A device array on the host, through pinned memory, once the current stream has
    made it (a wait): 694 KB of a GH 10% batch's settled changes came back in 25 us
    instead of 101 us from pageable memory (H200, 2026-11-29)."""
    host = cupyx.empty_pinned(array.shape, dtype=array.dtype)
    return array.get(out=host)
