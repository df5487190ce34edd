"""The array operations the packed memory array is written in, alike on NumPy and CuPy.

Each takes the array module `xp` first and returns int64 indices or counts; none loops
in Python over elements, so on CuPy each is a few kernel launches.
"""
from __future__ import annotations

import numpy as np


def search(xp, sorted_values, wanted, side: str = "left"):
    """Lower (or upper) bounds of `wanted` in `sorted_values` (0 for an empty one), int64."""
    if sorted_values.size == 0 or wanted.size == 0:
        return xp.zeros(wanted.shape, dtype=np.int64)
    return xp.searchsorted(sorted_values, wanted, side=side).astype(np.int64)


def bincount(xp, values, length: int):
    """bincount with at least `length` bins (an empty input gives zeros)."""
    if values.size == 0:
        return xp.zeros(length, dtype=np.int64)
    return xp.bincount(values, minlength=length)


def prefix(xp, values):
    """Exclusive prefix sums of `values` and their total: one entry more (int64)."""
    out = xp.zeros(values.size + 1, dtype=np.int64)
    if values.size:
        out[1:] = xp.cumsum(values, dtype=np.int64)
    return out


def exclusive_cumsum(xp, counts):
    """Exclusive prefix sums of `counts`, as many entries (int64)."""
    out = xp.zeros(counts.size, dtype=np.int64)
    if counts.size > 1:
        out[1:] = xp.cumsum(counts[:-1])
    return out


def sorted_union(xp, a, b):
    """The distinct values of two sorted arrays, in order (merged by rank, not sorted)."""
    if a.size == 0 or b.size == 0:
        # A batch that only inserts or only deletes: no merge (on CuPy its searches,
        # scatters and index ranges were ~10 launches, ~0.2 ms of the host's time).
        merged = b if a.size == 0 else a
    else:
        merged = xp.empty(a.size + b.size, dtype=a.dtype)
        merged[xp.arange(a.size, dtype=np.int64) + search(xp, b, a)] = a
        merged[xp.arange(b.size, dtype=np.int64) + search(xp, a, b, side="right")] = b
    first = xp.ones(merged.size, dtype=bool)
    first[1:] = merged[1:] != merged[:-1]
    return merged[first]


def ranges(xp, starts, lengths):
    """The concatenation of [starts[j], starts[j] + lengths[j]) and the j of each entry."""
    lengths = lengths.astype(np.int64)
    offsets = exclusive_cumsum(xp, lengths)
    total = int(lengths.sum()) if lengths.size else 0
    if total == 0:
        return xp.zeros(0, dtype=np.int64), xp.zeros(0, dtype=np.int64)
    # Each range's start bumps the owner; empty ranges bump it at the same place.
    owner = xp.cumsum(bincount(xp, offsets[1:], total + 1)[:total]).astype(np.int64)
    index = xp.arange(total, dtype=np.int64) - offsets[owner] + starts.astype(np.int64)[owner]
    return index, owner


def pending_counts(xp, flags, starts, ends):
    """How many of flags[starts[j]:ends[j]] are set, for each j."""
    running = prefix(xp, flags)
    return running[ends] - running[starts]


def range_sums(xp, values, starts, ends):
    """sum(values[starts[j]:ends[j]]) for each j."""
    index, _ = ranges(xp, starts, ends - starts)
    sums = xp.zeros(starts.size, dtype=np.int64)
    if index.size:
        running = xp.cumsum(values[index].astype(np.int64))
        last = exclusive_cumsum(xp, ends - starts) + (ends - starts) - 1
        nonempty = ends > starts
        totals = running[last[nonempty]]
        prev = xp.concatenate([xp.zeros(1, dtype=np.int64), totals[:-1]])
        sums[nonempty] = totals - prev
    return sums


def scatter_add(xp, target, index, value) -> None:
    """target[index] += value, repeated indices adding up."""
    if index.size:
        xp.add.at(target, index, xp.full(index.shape, value, dtype=target.dtype))
