"""Typed launchers of the grouped search of leaf-rooted tasks on the device: the groups made
from a launch's tasks (gpu/cuda/kernels/groups.cu, with CuPy's sorts between its steps)
and match.cu's match_groups, which searches each group once.

A leaf-rooted task's leaf end takes part in nothing but its root edge, so the tasks of one
type whose root edges share the leaf's parent search the same partial matches
(gpu/cpu/leaf_groups.py is the CPU's version, match.cu's search_group says how a match is
weighted per member).  `form_groups` splits make_tasks' output, on the device and without
reading anything back, into the tasks searched one by one and `LeafGroups`.  Only import
this module where `gpu.cuda.device.cuda_available()` is true.
"""
from __future__ import annotations

from typing import NamedTuple

import cupy as cp
import numpy as np

from gpu.cuda.loader import MAX_QUERY, check_array, kernel
from gpu.cuda.match_launchers import (CTL_WORDS, TASKS_WORD, WARP_STATE_BYTES,
                                      WARPS_PER_BLOCK, DevicePlan, ListGraphArrays,
                                      SHARE_RECORD_INTS, UpdateEdges, scratch)

# match.cu's GroupState per warp in shared memory, beside its WarpState: 2 int arrays.
GROUP_STATE_BYTES = 2 * 4 * MAX_QUERY
# A key is (type * slots + parent) << 31 | rank, in 64 bits (groups.cu).
KEY_RUN_LIMIT = 1 << 33
THREADS = 256


class LeafGroups(NamedTuple):
    """A launch's groups on the device (ctl[TASKS] of their launch: how many were made).
    Members lo..hi-1 of a group are `key`'s entries (rank in the low 31 bits) by rank,
    and leaf_by_id / rank_by_id's by leaf vertex."""
    type: cp.ndarray          # int32 [G]
    parent: cp.ndarray        # int32 [G]
    lo: cp.ndarray            # int64 [G]
    hi: cp.ndarray            # int64 [G]
    key: cp.ndarray           # uint64 [K]
    leaf_by_id: cp.ndarray    # int32 [K]
    rank_by_id: cp.ndarray    # int32 [K]


def groupable(plan_types: int, slots: int) -> bool:
    """Whether groups.cu's 64-bit keys can name every (type, parent) of a launch."""
    return plan_types * slots < KEY_RUN_LIMIT


def _blocks(items: int) -> int:
    return max(1, min(-(-items // THREADS), 65535))


def form_groups(tasks: cp.ndarray, ctl: cp.ndarray, plan: DevicePlan, edges: UpdateEdges,
                slots: int, min_size: int, singles: cp.ndarray, gctl: cp.ndarray
                ) -> LeafGroups:
    """Queue the grouping of make_tasks' tasks (their number in ctl[TASKS]) over `edges`:
    runs of at least `min_size` (at least 2) leaf-rooted tasks of one type and parent
    become the groups returned (their number goes to gctl[TASKS], which must start at
    zero with gctl's first word), every other task goes to `singles`, whose number
    replaces ctl[TASKS].  `slots`: the graph's vertex slots (parents are below it)."""
    for name, array, dtype in (("tasks", tasks, np.int32), ("singles", singles, np.int32),
                               ("ctl", ctl, np.uint64), ("gctl", gctl, np.uint64)):
        check_array(name, array, dtype, 1)
    check_array("leaf_root", plan.leaf_root, np.int32, 1)
    types = plan.roots.shape[0]
    pairs = types * edges.us.shape[0]
    if tasks.shape[0] < pairs or singles.shape[0] < pairs:
        raise ValueError(f"tasks and singles need {pairs} entries, have {tasks.shape[0]} "
                         f"and {singles.shape[0]}")
    if ctl.shape[0] != CTL_WORDS or gctl.shape[0] != CTL_WORDS:
        raise ValueError(f"ctl and gctl need {CTL_WORDS} words")
    if not groupable(types, slots):
        raise ValueError(f"{types} task types x {slots} vertex slots exceed the group keys")
    if min_size < 2:
        raise ValueError(f"a group has at least 2 members, min_size {min_size}")
    blocks = _blocks(pairs)
    keys = cp.empty(pairs, dtype=np.uint64)
    kernel("groups", "group_keys")((blocks,), (THREADS,), (
        tasks, ctl, np.int64(pairs), np.int32(types), plan.leaf_root, edges.us, edges.vs,
        edges.ranks, np.int64(slots), keys))
    order = cp.argsort(keys)
    key = cp.empty(pairs, dtype=np.uint64)
    kernel("groups", "gather_keys")((blocks,), (THREADS,), (order, keys, np.int64(pairs), key))
    most = pairs // 2 + 1
    group_type = cp.empty(most, dtype=np.int32)
    parent = cp.empty(most, dtype=np.int32)
    lo = cp.empty(most, dtype=np.int64)
    hi = cp.empty(most, dtype=np.int64)
    leaf_key = keys      # reused: the first keys are not read again
    kernel("groups", "group_runs")((blocks,), (THREADS,), (
        key, order, tasks, ctl, np.int64(pairs), np.int32(types), plan.leaf_root, edges.us,
        edges.vs, np.int64(slots), np.int32(min_size), singles, gctl, group_type, parent,
        lo, hi, leaf_key))
    order = cp.argsort(leaf_key)
    leaf_by_id = cp.empty(pairs, dtype=np.int32)
    rank_by_id = cp.empty(pairs, dtype=np.int32)
    kernel("groups", "by_leaf")((blocks,), (THREADS,), (
        order, leaf_key, key, np.int64(pairs), leaf_by_id, rank_by_id, ctl, gctl))
    return LeafGroups(group_type, parent, lo, hi, key, leaf_by_id, rank_by_id)


def match_groups(graph: ListGraphArrays, cand_ptrs: cp.ndarray, plan: DevicePlan, n: int,
                 groups: LeafGroups, gctl: cp.ndarray, bufs: cp.ndarray, width: int,
                 warps: int, counts: cp.ndarray, sharing: bool, share_capacity: int,
                 share_every: int) -> None:
    """Launch match.cu:match_groups over `warps` persistent warps on the groups form_groups
    made (their number in gctl[TASKS]): counts [warps + 1, queries], warp-major, each
    query's total in the last row, as match_tasks counts.  `bufs`: 2 * n * width ints
    per warp (candidates, then their ranks)."""
    if not isinstance(graph, ListGraphArrays):
        raise TypeError(f"graph: grouped search reads the lists' layout, got "
                        f"{type(graph).__name__}")
    for name, value in zip(graph._fields, graph, strict=True):
        check_array(name, value, np.int64 if name == "start" else np.int32, 1)
    check_array("cand_ptrs", cand_ptrs, np.uint64, 1)
    check_array("bufs", bufs, np.int32)
    check_array("counts", counts, np.int64, 1)
    check_array("gctl", gctl, np.uint64, 1)
    queries = cand_ptrs.shape[0]
    if counts.shape[0] < (warps + 1) * queries:
        raise ValueError(f"counts has {counts.shape[0]} entries, {(warps + 1) * queries} "
                         "needed")
    if warps % WARPS_PER_BLOCK or bufs.size < warps * 2 * n * width:
        raise ValueError(f"bufs holds {bufs.size} ints, {warps} warps need "
                         f"{warps * 2 * n * width}")
    if share_capacity < 1 or share_every < 1:
        raise ValueError(f"share_capacity and share_every must be positive, got "
                         f"{share_capacity} and {share_every}")
    capacity = share_capacity if sharing else 1
    records = scratch("records", capacity * SHARE_RECORD_INTS)
    ready = scratch("ready", capacity)
    gctl[:TASKS_WORD] = 0       # the group count stays: group_runs wrote it
    ready[:capacity] = 0
    args = (*graph, cand_ptrs, np.int32(n), plan.q_label, plan.cand_row, plan.orders,
            plan.bw_count, plan.bw_level, plan.bw_label, plan.bw_key,
            np.int32(plan.bw_key.shape[2]), plan.multiplicity, plan.leaf_root,
            *groups, bufs, np.int64(width), gctl, records, ready, np.int64(capacity),
            np.int32(1 if sharing else 0), np.int32(share_every), counts, np.int32(queries))
    shared_mem = WARPS_PER_BLOCK * (WARP_STATE_BYTES + GROUP_STATE_BYTES)
    kernel("match", "match_groups")((warps // WARPS_PER_BLOCK,), (32 * WARPS_PER_BLOCK,),
                                    args, shared_mem=shared_mem)
