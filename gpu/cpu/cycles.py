"""Owns the processor's cycle counter, read inside compiled code (region traces).

`cycles()` is LLVM's readcyclecounter (RDTSC on x86-64: a constant rate, the same on every
core of a modern processor), so the pieces of a parallel region can be placed on one time
line; `cycles_per_second` calibrates it against the wall clock once.
"""
from __future__ import annotations

import functools
import time

import numba as nb
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)


@intrinsic
def cycles(typingctx):
    """The cycle counter now (0 where the target has none)."""

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return types.int64(), codegen


@nb.njit(cache=True)
def _read() -> int:
    return cycles()


@functools.cache
def cycles_per_second(seconds: float = 0.05) -> float:
    """The counter's rate, measured over `seconds` of wall clock."""
    _read()
    t0, c0 = time.perf_counter(), _read()
    while time.perf_counter() - t0 < seconds:
        pass
    t1, c1 = time.perf_counter(), _read()
    return (c1 - c0) / (t1 - t0)
