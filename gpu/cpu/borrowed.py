"""Owns borrowed array views for Numba parallel regions: views with no reference count.

Numba counts references to every array with an atomic add on the array's shared header
(its meminfo), and the CPU search passes its graph, plan and candidate arrays to helper
functions at every level it enters: each call adds and takes back one reference per
array.  In a parallel region every worker does that on the same few headers, so the
workers queue on those cache lines (the region ran ~2x faster on 16 threads than on one,
docs/benchmarks.md).  A borrowed view has the array's data, shape and strides and no
header: Numba's reference counting skips it (NRT_incref/decref return at once on a null
meminfo).  It is valid while its array is alive, so a region borrows only arrays its
caller holds for the whole call, and the views never leave the region.
"""
from __future__ import annotations

import numba as nb
from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)


@intrinsic
def borrowed(typingctx, array):
    """`array`'s data as a view without a reference count (module docstring)."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, signature, args):
        kind = signature.args[0]
        source = make_array(kind)(context, builder, value=args[0])
        view = make_array(kind)(context, builder)
        view.meminfo = cgutils.get_null_value(view.meminfo.type)
        view.parent = cgutils.get_null_value(view.parent.type)
        view.nitems = source.nitems
        view.itemsize = source.itemsize
        view.data = source.data
        view.shape = source.shape
        view.strides = source.strides
        return view._getvalue()

    return array(array), codegen


@nb.njit(cache=True, inline="always")
def borrowed_graph(graph):
    """The search's graph arrays (executor._graph_arrays), borrowed."""
    return (borrowed(graph[0]), borrowed(graph[1]), borrowed(graph[2]), borrowed(graph[3]),
            borrowed(graph[4]), borrowed(graph[5]), borrowed(graph[6]))


@nb.njit(cache=True, inline="always")
def borrowed_plan(plan):
    """A plan's arrays (executor._plan_arrays: twelve of them), borrowed."""
    return (borrowed(plan[0]), borrowed(plan[1]), borrowed(plan[2]), borrowed(plan[3]),
            borrowed(plan[4]), borrowed(plan[5]), borrowed(plan[6]), borrowed(plan[7]),
            borrowed(plan[8]), borrowed(plan[9]), borrowed(plan[10]), borrowed(plan[11]))


@nb.njit(cache=True, inline="always")
def borrowed_leaves(leaves):
    """The leaf-count and update-index arrays (executor._leaf_arrays: seven), borrowed."""
    return (borrowed(leaves[0]), borrowed(leaves[1]), borrowed(leaves[2]), borrowed(leaves[3]),
            borrowed(leaves[4]), borrowed(leaves[5]), borrowed(leaves[6]))


@nb.njit(cache=True, inline="always")
def borrowed_search(graph, cand, plan, leaves):
    """What a region's search reads of the graph, one query and the phase, borrowed."""
    return borrowed_graph(graph), borrowed(cand), borrowed_plan(plan), borrowed_leaves(leaves)
