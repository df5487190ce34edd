"""The Numba CPU executor: warp-free backtracking DFS over a plan's task types.

One task = (update edge u < v, its rank, a task type).  Tasks run in
parallel chunks (`prange`); each searches depth-first along the type's
matching order.  A level's candidates are the pivot (smallest) backward
neighbour's list filtered by the candidate bit, edge label, total-order rule
and injectivity, then checked against the other backward neighbours' sorted
lists by galloping search with monotone cursors.  The last level is only
counted, unless matches are listed.  Counts are exact int64.

Listing is two-pass and deterministic: pass one counts per task, a prefix sum
gives each task its slice of the output, pass two writes rows (in query-vertex
order, permuted for every member of the task's orbit) up to the limit.
"""
from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, inline="always")
def _gallop(nbr, lo, hi, w):
    """First position in [lo, hi) whose neighbour is >= w."""
    if lo >= hi or nbr[lo] >= w:
        return lo
    prev = lo
    step = 1
    nxt = lo + 1
    while nxt < hi and nbr[nxt] < w:
        prev = nxt
        step <<= 1
        nxt = lo + step
    if nxt > hi:
        nxt = hi
    lo = prev + 1
    hi = nxt
    while lo < hi:
        mid = (lo + hi) >> 1
        if nbr[mid] < w:
            lo = mid + 1
        else:
            hi = mid
    return lo


@nb.njit(cache=True, inline="always")
def _blocked(r, cur):
    """Total-order rule: an updated edge ranked below the task's own edge is off limits."""
    return r != 0 and r < cur


@nb.njit(cache=True)
def _scan_level(level, t, m, cur, start, deg, nbr, elab, rank, cand, orders, bw_count,
                bw_level, bw_label, cursors, ends, out_buf, store):
    """Candidates for `level`: stored in out_buf when `store`, else only counted."""
    bit = np.uint32(1) << np.uint32(orders[t, level])
    nb_count = bw_count[t, level]
    pivot = 0
    best = np.int64(1) << np.int64(62)
    for j in range(nb_count):
        x = m[bw_level[t, level, j]]
        if deg[x] < best:
            best = deg[x]
            pivot = j
    px = m[bw_level[t, level, pivot]]
    plab = bw_label[t, level, pivot]
    for j in range(nb_count):
        x = m[bw_level[t, level, j]]
        cursors[j] = start[x]
        ends[j] = start[x] + deg[x]
    found = 0
    for i in range(start[px], start[px] + deg[px]):
        w = nbr[i]
        if (cand[w] & bit) == 0 or elab[i] != plab or _blocked(rank[i], cur):
            continue
        ok = True
        for k in range(level):
            if m[k] == w:
                ok = False
                break
        if not ok:
            continue
        for j in range(nb_count):
            if j == pivot:
                continue
            p = _gallop(nbr, cursors[j], ends[j], w)
            cursors[j] = p
            if p >= ends[j] or nbr[p] != w or elab[p] != bw_label[t, level, j] \
                    or _blocked(rank[p], cur):
                ok = False
                break
        if ok:
            if store:
                out_buf[found] = w
            found += 1
    return found


@nb.njit(cache=True)
def _search(u, v, cur, t, start, deg, nbr, elab, rank, cand, orders, bw_count, bw_level,
            bw_label, perms, multiplicity, m, buf, idx, cnt, cursors, ends,
            out, out_pos, limit, listing):
    """Matches of one task.  Returns the count; writes rows from out_pos when listing."""
    n = orders.shape[1]
    m[0] = u
    m[1] = v
    last = n - 1
    if n == 2:
        if listing:
            _emit(t, m, orders, perms, multiplicity, out, out_pos, limit)
        return np.int64(1)
    total = np.int64(0)
    level = 2
    if last == 2:
        found = _scan_level(2, t, m, cur, start, deg, nbr, elab, rank, cand, orders,
                            bw_count, bw_level, bw_label, cursors, ends, buf[2], listing)
        if listing:
            for i in range(found):
                m[2] = buf[2, i]
                out_pos = _emit(t, m, orders, perms, multiplicity, out, out_pos, limit)
        return np.int64(found)
    cnt[2] = _scan_level(2, t, m, cur, start, deg, nbr, elab, rank, cand, orders, bw_count,
                         bw_level, bw_label, cursors, ends, buf[2], True)
    idx[2] = 0
    while level >= 2:
        if idx[level] >= cnt[level]:
            level -= 1
            continue
        m[level] = buf[level, idx[level]]
        idx[level] += 1
        if level + 1 == last:
            found = _scan_level(last, t, m, cur, start, deg, nbr, elab, rank, cand, orders,
                                bw_count, bw_level, bw_label, cursors, ends, buf[last],
                                listing)
            total += found
            if listing:
                for i in range(found):
                    m[last] = buf[last, i]
                    out_pos = _emit(t, m, orders, perms, multiplicity, out, out_pos, limit)
                if out_pos >= limit:
                    return total
        else:
            level += 1
            cnt[level] = _scan_level(level, t, m, cur, start, deg, nbr, elab, rank, cand,
                                     orders, bw_count, bw_level, bw_label, cursors, ends,
                                     buf[level], True)
            idx[level] = 0
    return total


@nb.njit(cache=True)
def _emit(t, m, orders, perms, multiplicity, out, out_pos, limit):
    """Write the match held in m (by level) for every orbit member, up to `limit` rows."""
    n = orders.shape[1]
    for member in range(multiplicity[t]):
        if out_pos >= limit:
            return out_pos
        for q in range(n):
            # f[q'] = m[level of q'];  g[q] = f[perms[t, member, q]]
            src = perms[t, member, q]
            for level in range(n):
                if orders[t, level] == src:
                    out[out_pos, q] = m[level]
                    break
        out_pos += 1
    return out_pos


@nb.njit(cache=True, parallel=True)
def run_tasks(task_u, task_v, task_rank, task_type, start, deg, nbr, elab, rank, cand,
              orders, bw_count, bw_level, bw_label, perms, multiplicity, max_deg, chunk,
              offsets, out, limit, listing):
    """Per-task match counts (searched matches, before orbit multiplicity).

    When `listing`, task i writes its rows from offsets[i] (already multiplied
    by orbit sizes) into `out`, stopping at `limit`; tasks starting past the
    limit are skipped and report 0.
    """
    ntasks = task_u.shape[0]
    n = orders.shape[1]
    counts = np.zeros(ntasks, dtype=np.int64)
    nchunks = (ntasks + chunk - 1) // chunk
    width = max_deg + 1
    for c in nb.prange(nchunks):
        m = np.empty(n, dtype=np.int32)
        buf = np.empty((n, width), dtype=np.int32)
        idx = np.zeros(n, dtype=np.int64)
        cnt = np.zeros(n, dtype=np.int64)
        cursors = np.empty(n, dtype=np.int64)
        ends = np.empty(n, dtype=np.int64)
        for i in range(c * chunk, min(ntasks, (c + 1) * chunk)):
            pos = np.int64(0)
            if listing:
                pos = offsets[i]
                if pos >= limit:
                    continue
            counts[i] = _search(task_u[i], task_v[i], task_rank[i], task_type[i], start, deg,
                                nbr, elab, rank, cand, orders, bw_count, bw_level, bw_label,
                                perms, multiplicity, m, buf, idx, cnt, cursors, ends, out, pos,
                                limit, listing)
    return counts


@nb.njit(cache=True)
def all_edges(start, deg, nbr, elab, num_slots):
    """Every undirected edge once, u < v, with its label."""
    total = 0
    for u in range(num_slots):
        for i in range(start[u], start[u] + deg[u]):
            if u < nbr[i]:
                total += 1
    us = np.empty(total, dtype=np.int32)
    vs = np.empty(total, dtype=np.int32)
    ls = np.empty(total, dtype=np.int32)
    k = 0
    for u in range(num_slots):
        for i in range(start[u], start[u] + deg[u]):
            if u < nbr[i]:
                us[k] = u
                vs[k] = nbr[i]
                ls[k] = elab[i]
                k += 1
    return us, vs, ls
