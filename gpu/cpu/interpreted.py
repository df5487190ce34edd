"""Owns running the Numba kernels as plain Python, while they are not compiled yet.

Compiling the CPU executor takes half a minute; a small first run needs a fraction of a
second of its work.  While `interpret()` is on, a kernel called from Python with no
compiled version for its argument types runs its *twin* instead of compiling: the same
source, run by the interpreter, whose calls to other kernels go to their twins and whose
intrinsics (gpu/cpu/atomics.py, borrowed.py, cycles.py) to Python equivalents; `prange`
is `range`, so one worker takes a parallel region's whole queue.  A version compiled or
loaded before stays in use.  `stop()` turns it off: the next call of each kernel loads it
from Numba's cache (gpu/compile_ahead.py fills it) or compiles it.

The twins compute with NumPy scalars where the kernels compute with machine integers, and
NumPy types some operations otherwise: `int32 op int32` and `int32 op int` stay int32
where Numba widens them to int64 (and `uint64 op int64` is float64, int64 in Numba). Yet
the values are the same, kernel by kernel: none mixes unsigned and signed integers; the
int32 operations are on degrees, list capacities (doubled), ranks and per-vertex counts,
below 2^31 unless a vertex has a billion neighbours, let alone in an input a twin runs on
(compile_ahead.INTERPRET_BELOW_BYTES); every count, and product of counts, starts from an
int64 (np.int64(...), an int64 array), so it is int64 in both, and int64 wraps alike in
both (a count past 2^63 - 1 is wrong in both). Overflow warnings are off inside a twin,
as they are in compiled code (the id map's hash wraps on purpose). A twin is called as
Numba calls its kernel (`call`): a Python int argument becomes an int64, a NumPy scalar
result a Python number, so no int32 of a twin's reaches the compiled kernels later.
tests/gpu/cpu/test_interpreted.py holds the twins to the compiled kernels, closed forms
and the reference, at the extremes a first run's input can hold, with every other
overflow in a twin raising.

A twin can be far slower than its kernel (~100x; a small graph with two hubs sharing a few
thousand neighbours takes minutes), so interpreting has a time budget: past it, the next
twin call raises `OutOfTime`, a BaseException (no `except Exception` of the engine makes
it a batch's own error).  The kernels' work in progress is then lost, and with it the
state of the engine that ran them: its caller starts over on compiled kernels (the CLI
rebuilds its engine and replays the batches it has reported, service/cli.py; the service
rebuilds its engine from the store and runs the request again, service/engine_service.py).
The budget is the calling thread's: a thread that set none (the service's request handlers,
parsing with the readers' kernels) never runs out, whatever another thread's budget says.

Kernels take their per-query arrays as a typed list; `kernel_list` builds one with
compiled helpers kept in Numba's cache (building it from Python compiles Numba's own list
code in every process), or a plain list while interpreting.
"""
from __future__ import annotations

import functools
import sys
import threading
import time
import types

import numba as nb
import numpy as np
from numba.core.dispatcher import Dispatcher
from numba.typed import List

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)
from gpu.cpu import atomics, borrowed, cycles

_interpreting = False
_epoch = 0
# Per thread: (the epoch it was set in, the time.monotonic() past which that thread's twins
# stop); a budget set before interpreting last started or stopped no longer counts.
_budget = threading.local()


class OutOfTime(BaseException):
    """Interpreting ran past its budget: the kernels' work in progress is lost, and with it
    the state of the engine that ran them; start over on compiled kernels."""


def interpret(packages: tuple[str, ...] = ("gpu",), budget: float | None = None) -> None:
    """From now on, run each kernel of `packages` (modules imported so far) as its twin
    where it has no compiled version for the call's argument types; with a `budget`,
    for that many seconds at most on the calling thread (then its twins raise OutOfTime)."""
    global _interpreting, _epoch
    for dispatcher in kernels(packages):
        if "_compile_for_args" not in vars(dispatcher):
            dispatcher._compile_for_args = functools.partial(_compile_or_twin, dispatcher)
    if not _interpreting:
        _interpreting, _epoch = True, _epoch + 1
    allow(budget)


def allow(budget: float | None) -> None:
    """While interpreting, give the calling thread `budget` seconds from now (None: no
    limit), whatever it had left: the service gives each engine call its own."""
    _budget.until = (_epoch, None if budget is None else time.monotonic() + budget)


def stop() -> None:
    """Compile (or load from the cache) every kernel called from now on."""
    global _interpreting, _epoch
    if _interpreting:
        _interpreting, _epoch = False, _epoch + 1


def active() -> bool:
    return _interpreting


def epoch() -> int:
    """Changes whenever interpreting starts or stops: a key for what kernels were given."""
    return _epoch


def kernels(packages: tuple[str, ...] = ("gpu",)) -> list[Dispatcher]:
    """Every Numba dispatcher defined in the imported modules of `packages`."""
    found = {}
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in packages:
            continue
        for value in vars(module).values():
            if isinstance(value, Dispatcher) and \
                    value.py_func.__module__.split(".")[0] in packages:
                found[id(value)] = value
    return list(found.values())


def _compile_or_twin(dispatcher: Dispatcher, *args, **kws):
    # Numba's dispatcher calls this when no compiled version fits the arguments, and
    # calls what it returns with them.
    if _interpreting:
        return functools.partial(_run, twin(dispatcher))
    return Dispatcher._compile_for_args(dispatcher, *args, **kws)


def _run(function, *args):
    # Integer overflow wraps silently, as in the compiled kernels (the id map's hash
    # multiplies mod 2**64 on purpose; tests make every other wrap raise).
    _check_time()
    with np.errstate(over="ignore"):
        return call(function, args)


def call(function, args: tuple):
    """A twin called as Numba calls its kernel: arguments typed, results boxed, alike."""
    return _boxed(function(*map(_typed, args)))


def _typed(value):
    """An argument as the twin takes it: a Python int as int64, the type Numba gives it
    (as a Python int, NumPy would keep `int32 op int` in int32 where Numba widens it)."""
    if type(value) is int and -1 << 63 <= value < 1 << 63:
        return np.int64(value)
    return value


def _boxed(value):
    """A twin's result as the compiled kernel returns it: NumPy scalars as Python numbers,
    also inside tuples.  (A NumPy int32 kept by the caller, a pool's top say, would make
    the next call, once compiled, compile for int32: a version the cache does not hold.)"""
    if isinstance(value, np.generic):
        return value.item()
    if type(value) is tuple:
        return tuple(_boxed(item) for item in value)
    return value


# --------------------------------------------------------------------------- twins


def twin(dispatcher: Dispatcher) -> types.FunctionType:
    """`dispatcher`'s function, its globals those of its module with every kernel a twin
    and every intrinsic its Python equivalent."""
    found = _TWINS.get(dispatcher)
    if found is None:
        py = dispatcher.py_func
        found = types.FunctionType(py.__code__, _twin_globals(py.__globals__), py.__name__,
                                   py.__defaults__, py.__closure__)
        found.__qualname__ = py.__qualname__
        _TWINS[dispatcher] = found
    return found


_TWINS: dict[Dispatcher, types.FunctionType] = {}
_GLOBALS: dict[int, dict] = {}     # id(a module's globals) -> the twins' globals


def _twin_globals(module_globals: dict) -> dict:
    mine = _GLOBALS.get(id(module_globals))
    if mine is None:
        # Registered before it is filled: the kernels of a module call each other.
        mine = _GLOBALS[id(module_globals)] = {}
        for name, value in list(module_globals.items()):
            mine[name] = _in_python(value)
    return mine


def _check_time() -> None:
    epoch_set, deadline = getattr(_budget, "until", (None, None))
    if deadline is not None and epoch_set == _epoch and time.monotonic() > deadline:
        raise OutOfTime("the kernels ran past their time as plain Python")


def _timed(function: types.FunctionType):
    """`function`, checking the budget first: what a twin calls for another kernel."""
    def timed(*args):
        _check_time()
        return function(*args)
    timed.__wrapped__ = function
    return timed


def _in_python(value):
    if isinstance(value, Dispatcher):
        return _timed(twin(value))
    if value is nb:
        return _NUMBA
    for intrinsic, equivalent in _INTRINSICS:
        if value is intrinsic:
            return equivalent
    return value


class _NumbaInPython:
    """What the kernels use of `numba` (`nb.prange`, `nb.get_thread_id()`), in Python."""
    prange = range

    @staticmethod
    def get_thread_id() -> int:
        return 0

    def __getattr__(self, name: str):
        return getattr(nb, name)


_NUMBA = _NumbaInPython()


def _atomic_load(array, index):
    return array[index]


def _atomic_store(array, index, value):
    array[index] = value


def _atomic_add(array, index, value):
    before = array[index]
    array[index] = before + value
    return before


def _atomic_cas(array, index, expected, value):
    if array[index] != expected:
        return False
    array[index] = value
    return True


# One thread runs a twin: plain reads and writes are atomic to it.
_INTRINSICS = ((atomics.atomic_load, _atomic_load), (atomics.atomic_store, _atomic_store),
               (atomics.atomic_add, _atomic_add), (atomics.atomic_cas, _atomic_cas),
               (borrowed.borrowed, lambda array: array),
               (cycles.cycles, time.perf_counter_ns))


# --------------------------------------------------------------------------- typed lists


def kernel_list(items: list):
    """The list of per-query tuples a kernel takes: a typed list (a plain one while
    interpreting).  The tuples' arrays are themselves, not copies."""
    if _interpreting:
        return list(items)
    typed = _list_of(items[0])
    for item in items[1:]:
        _append(typed, item)
    return typed


@nb.njit(cache=True)
def _list_of(first):
    typed = List()
    typed.append(first)
    return typed


@nb.njit(cache=True)
def _append(typed, item):
    typed.append(item)
