"""Owns the atomic operations through which a CPU parallel region's workers share work.

Numba has no atomics for its CPU targets; these intrinsics are LLVM's sequentially
consistent ones on one element of a one-dimensional int64 array.  The region's work queue
(phases.share_tasks) is built on them: a worker that runs out of work waits on the
queue, and busy workers hand it half of their unexplored candidates.  Sequential
consistency keeps it simple to reason about: a record written before its ready flag is
stored is seen whole by a worker that loads the flag.
"""
from __future__ import annotations

from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

_ORDER = "seq_cst"


def _element(context, builder, signature, args):
    array_type = signature.args[0]
    array = make_array(array_type)(context, builder, value=args[0])
    return cgutils.get_item_pointer(context, builder, array_type, array, [args[1]],
                                    wraparound=False)


def _accepts(array, index, *values) -> bool:
    """Whether the intrinsics take these argument types: an int64 vector, integers."""
    return (isinstance(array, types.Array) and array.ndim == 1 and
            array.dtype == types.int64 and
            all(isinstance(x, types.Integer) for x in (index,) + values))


@intrinsic
def atomic_load(typingctx, array, index):
    """array[index], read atomically."""
    if not _accepts(array, index):
        return None

    def codegen(context, builder, signature, args):
        return builder.load_atomic(_element(context, builder, signature, args), _ORDER, 8)

    return types.int64(array, index), codegen


@intrinsic
def atomic_store(typingctx, array, index, value):
    """array[index] = value, written atomically (what was written before is seen first)."""
    if not _accepts(array, index, value):
        return None

    def codegen(context, builder, signature, args):
        value = context.cast(builder, args[2], signature.args[2], types.int64)
        builder.store_atomic(value, _element(context, builder, signature, args), _ORDER, 8)
        return context.get_dummy_value()

    return types.none(array, index, value), codegen


@intrinsic
def atomic_add(typingctx, array, index, value):
    """array[index] += value atomically; returns the value before."""
    if not _accepts(array, index, value):
        return None

    def codegen(context, builder, signature, args):
        value = context.cast(builder, args[2], signature.args[2], types.int64)
        return builder.atomic_rmw("add", _element(context, builder, signature, args), value,
                                  _ORDER)

    return types.int64(array, index, value), codegen


@intrinsic
def atomic_cas(typingctx, array, index, expected, value):
    """Set array[index] to value if it holds `expected`, atomically; whether it did."""
    if not _accepts(array, index, expected, value):
        return None

    def codegen(context, builder, signature, args):
        expected = context.cast(builder, args[2], signature.args[2], types.int64)
        value = context.cast(builder, args[3], signature.args[3], types.int64)
        pair = builder.cmpxchg(_element(context, builder, signature, args), expected, value,
                               _ORDER, _ORDER)
        return builder.extract_value(pair, 1)

    return types.boolean(array, index, expected, value), codegen
