"""The Numba CPU executor: backtracking DFS over a plan's task types, parallel over tasks.

One task = (update edge u < v, its rank, a task type).  Tasks run in
parallel chunks (`prange`); each searches depth-first along the type's
matching order.  A level's candidates come from the label segment (lists are
sorted by (label, id)) of its smallest backward neighbour, filtered by the
candidate bit, edge label and total-order rule, then checked against the
other backward neighbours' segments by galloping search with monotone
cursors.  Counts are exact int64.

Candidate caching: a level's list depends only on the data vertices matched
to its backward neighbours, so it is kept (without the injectivity filter)
and reused while those stay the same; injectivity is checked when a
candidate is used.  The last level is then counted, not enumerated: the
cached size minus the matched vertices found in it by binary search.  When
the last two query vertices are not adjacent (the plan's `tail_free`), both
levels are counted together as |A||B| - |A & B|.

Listing is two-pass and deterministic: pass one counts per task, a prefix sum
gives each task its slice of the output, pass two writes rows (in query-vertex
order, permuted for every member of the task's orbit) up to the limit.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)
from gpu.cpu.borrowed import borrowed, borrowed_search
from gpu.cpu.work_queue import REC_END, REC_FIRST, give, short_of_work
from gpu.graph.lists import find_position, label_segment


@nb.njit(cache=True, inline="always")
def _lower_bound(ids, lo, hi, w):
    """First position in [lo, hi) of the sorted `ids` whose value is >= w."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if ids[mid] < w:
            lo = mid + 1
        else:
            hi = mid
    return lo


@nb.njit(cache=True, inline="always")
def _gallop(ids, lo, hi, w):
    """_lower_bound by exponential search from lo: cheap when the answer is near lo."""
    if lo >= hi or ids[lo] >= w:
        return lo
    prev = lo
    step = 1
    nxt = lo + 1
    while nxt < hi and ids[nxt] < w:
        prev = nxt
        step <<= 1
        nxt = lo + step
    return _lower_bound(ids, prev + 1, min(nxt, hi), w)


@nb.njit(cache=True, inline="always")
def _blocked(r, cur):
    """Total-order rule: an updated edge ranked below the task's own edge is off limits."""
    return r != 0 and r < cur


NO_RANK = np.int32(0x7FFFFFFF)   # "no update edge": above every rank


@nb.njit(cache=True, inline="always")
def _rank_or_none(r):
    return NO_RANK if r == 0 else np.int32(r)


# The kernels take their arrays in four tuples (Numba unpacks them for free):
#   graph   = (start, deg, nbr, nlab, elab, rank, label)           gpu/graph/lists.py
#   plan    = (q_label, orders, bw_count, bw_level, bw_label,
#              tail_free, leaf_from, tail_head, perms, multiplicity,
#              leaf_root, bw_key)                                   gpu/plan/planner.py TaskTypes
#   leaves  = (leaf_column, nc, upd_start, upd_cnt, upd_nbr,
#              upd_rank, upd_elab)                                  gpu/plan/leaf_counts.py
#   scratch = (m, buf, idx, cnt, key, valid, cursors, ends)         one per parallel chunk
#   ranks   = (rbuf, fin, nfin)   lowest backward rank per candidate, grouped search only


@nb.njit(cache=True)
def _scan_level(level, t, m, cur, graph, cand, plan, cursors, ends, out_buf, out_rank):
    """All candidates of `level` (injectivity not checked) into out_buf; returns how many.

    When out_rank is not None it receives, per candidate, the lowest rank among the
    edges to its backward neighbours (NO_RANK when none is an update edge)."""
    start, deg, nbr, nlab, elab, rank, _ = graph
    orders, bw_count, bw_level, bw_label, bw_key = plan[1], plan[2], plan[3], plan[4], plan[11]
    q = orders[t, level]
    bit = np.uint32(1) << np.uint32(q)
    nb_count = bw_count[t, level]
    pivot = 0
    best = np.int64(1) << np.int64(62)
    for j in range(nb_count):
        x = m[bw_level[t, level, j]]
        lo, hi = label_segment(nlab, start[x], start[x] + deg[x], bw_key[t, level, j])
        cursors[j] = lo
        ends[j] = hi
        if hi - lo < best:
            best = hi - lo
            pivot = j
    plab = bw_label[t, level, pivot]
    found = 0
    for i in range(cursors[pivot], ends[pivot]):
        w = nbr[i]
        if (cand[w] & bit) == 0 or elab[i] != plab or _blocked(rank[i], cur):
            continue
        ok = True
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
            out_buf[found] = w
            if out_rank is not None:
                # Compiled only for the grouped search (None prunes it for the rest).
                low = _rank_or_none(rank[i])
                for j in range(nb_count):
                    if j != pivot:
                        low = min(low, _rank_or_none(rank[cursors[j]]))
                out_rank[found] = low
            found += 1
    return found


@nb.njit(cache=True, inline="always")
def _used(m, level, w):
    for k in range(level):
        if m[k] == w:
            return True
    return False


@nb.njit(cache=True)
def _contains(buf, n, w):
    p = _lower_bound(buf, 0, n, w)
    return p < n and buf[p] == w


@nb.njit(cache=True)
def _intersection_size(buf_a, na, buf_b, nb_):
    """|A ∩ B| of two id-sorted lists, galloping through the longer one."""
    if na > nb_:
        buf_a, na, buf_b, nb_ = buf_b, nb_, buf_a, na
    size = 0
    lo = 0
    for i in range(na):
        w = buf_a[i]
        lo = _gallop(buf_b, lo, nb_, w)
        if lo >= nb_:
            break
        if buf_b[lo] == w:
            size += 1
    return size


@nb.njit(cache=True)
def _unused_size(buf, n, m, level):
    """How many of the first n entries of buf are not among m[:level]."""
    size = n
    for k in range(level):
        if _contains(buf, n, m[k]):
            size -= 1
    return size


@nb.njit(cache=True, inline="always")
def directed_plan(plan):
    """Whether `plan` is a directed query's: its backward entries are 2n wide (an arc each
    way; TaskTypes.bw_key), an undirected one's n."""
    return plan[11].shape[2] == 2 * plan[1].shape[1]


@nb.njit(cache=True)
def _leaf_count(y, q, el, key, directed, m, used_levels, cur, graph, cand, leaves):
    """Candidates of leaf q among y's neighbours via edges labelled el filed under `key` in
    y's list (its label; directed, with the leaf's arc direction), minus m[:used_levels].

    nc holds the count over edges that are not updates of the running phase; the
    phase's update edges at y are added back where the total-order rule allows (in a
    directed graph those of the leaf's direction: their upd_elab carries it, as `key`).
    """
    start, deg, nbr, nlab, elab, rank, label = graph
    leaf_column, nc, upd_start, upd_cnt, upd_nbr, upd_rank, upd_elab = leaves
    bit = np.uint32(1) << np.uint32(q)
    size = np.int64(nc[y, leaf_column[q]])
    want = 2 * el + (key & 1) if directed else el
    if upd_cnt[y] > 0:
        for k in range(upd_start[y], upd_start[y] + upd_cnt[y]):
            if upd_elab[k] == want and (cand[upd_nbr[k]] & bit) != 0 \
                    and not _blocked(upd_rank[k], cur):
                size += 1
    for k in range(used_levels):
        w = m[k]
        if w >= 0 and (cand[w] & bit) != 0:     # grouped search leaves m[leaf] at -1
            p = find_position(nbr, nlab, start, deg, y, w, key)
            if p >= 0 and elab[p] == el and not _blocked(rank[p], cur):
                size -= 1
    return size


@nb.njit(cache=True)
def _leaf_product(t, first, used_levels, m, cur, graph, cand, plan, leaves):
    """Matches of the trailing leaves from level `first`, avoiding m[:used_levels]: a product
    of falling factorials (leaves sharing parent, list key (label; directed, and arc
    direction) and edge label share one set)."""
    orders, bw_level, bw_label, bw_key = plan[1], plan[3], plan[4], plan[11]
    directed = directed_plan(plan)
    n = orders.shape[1]
    product = np.int64(1)
    for level in range(first, n):
        q = orders[t, level]
        parent = bw_level[t, level, 0]
        el = bw_label[t, level, 0]
        key = bw_key[t, level, 0]
        size = _leaf_count(m[parent], q, el, key, directed, m, used_levels, cur, graph, cand,
                           leaves)
        for earlier in range(first, level):
            if bw_level[t, earlier, 0] == parent and bw_key[t, earlier, 0] == key \
                    and bw_label[t, earlier, 0] == el:
                size -= 1
        if size <= 0:
            return np.int64(0)
        product *= size
    return product


@nb.njit(cache=True)
def _candidates(level, t, cur, graph, cand, plan, scratch, ranks):
    """Fill buf[level] unless the cached list for the same backward vertices is still there.

    ranks = (rbuf, fin, nfin), or None: rbuf[level] gets each candidate's lowest backward
    rank and fin[level, :nfin[level]] the positions where it is a rank."""
    m, buf, _, cnt, key, valid, cursors, ends = scratch
    bw_count, bw_level = plan[2], plan[3]
    if valid[level]:
        same = True
        for j in range(bw_count[t, level]):
            if key[level, j] != m[bw_level[t, level, j]]:
                same = False
                break
        if same:
            return
    for j in range(bw_count[t, level]):
        key[level, j] = m[bw_level[t, level, j]]
    if ranks is None:
        cnt[level] = _scan_level(level, t, m, cur, graph, cand, plan, cursors, ends, buf[level],
                                 None)
    else:
        rbuf, fin, nfin = ranks
        found = _scan_level(level, t, m, cur, graph, cand, plan, cursors, ends, buf[level],
                            rbuf[level])
        cnt[level] = found
        k = 0
        for i in range(found):
            if rbuf[level, i] != NO_RANK:
                fin[level, k] = i
                k += 1
        nfin[level] = k
    valid[level] = True


@nb.njit(cache=True, inline="always")
def _pair_tail(t, level, cur, graph, cand, plan, scratch, ranks):
    """Matches of the last two levels when they are not adjacent: with A, B their
    candidates minus the matched vertices, the pairs (a, b), a != b, number |A||B| - |A & B|."""
    m, buf, _, cnt, _, _, _, _ = scratch
    last = level + 1
    _candidates(level, t, cur, graph, cand, plan, scratch, ranks)
    _candidates(last, t, cur, graph, cand, plan, scratch, ranks)
    na = _unused_size(buf[level], cnt[level], m, level)
    if na == 0:
        return np.int64(0)
    nb_ = _unused_size(buf[last], cnt[last], m, level)
    both = _intersection_size(buf[level], cnt[level], buf[last], cnt[last])
    if both > 0:
        for k in range(level):
            if _contains(buf[level], cnt[level], m[k]) and \
                    _contains(buf[last], cnt[last], m[k]):
                both -= 1
    return na * nb_ - both


@nb.njit(cache=True)
def _root_checks(t, u, v, cur, graph, plan):
    """A directed plan's level-1 entries: the root's reverse arc v -> u, when the query has
    one, is in u's list with its label and allowed by the total-order rule."""
    start, deg, nbr, nlab, elab, rank, _ = graph
    bw_label, bw_key = plan[4], plan[11]
    for j in range(plan[2][t, 1]):
        p = find_position(nbr, nlab, start, deg, u, v, bw_key[t, 1, j])
        if p < 0 or elab[p] != bw_label[t, 1, j] or _blocked(rank[p], cur):
            return False
    return True


@nb.njit(cache=True)
def _search(u, v, cur, t, graph, cand, plan, leaves, scratch, ranks, out, out_pos, limit,
            listing, part, parts):
    """Matches of one task.  Returns the count; writes rows from out_pos when listing.

    Counting (not listing) may split a task into `parts` pieces: piece `part` takes the
    level-2 candidates i with i % parts == part (count_phase); parts = 1 is the task."""
    return _search_from(u, v, cur, t, graph, cand, plan, leaves, scratch, ranks, out,
                        out_pos, limit, listing, part, parts, 2, None)




@nb.njit(cache=True)
def _search_from(u, v, cur, t, graph, cand, plan, leaves, scratch, ranks, out, out_pos,
                 limit, listing, part, parts, start, share):
    """_search from level `start`, m[2:start] holding the vertices matched above it.

    `share` is None, or (records, ready, state, slot, stop, every, always): the search is
    phases.share_tasks's queue record `slot`, whose level `start` takes the candidate
    positions records[slot, REC_FIRST:REC_END] only; every `every` advances it looks
    whether more workers wait than records are queued (work_queue.short_of_work; with
    `always` it gives regardless: tests) and if so hands the queue half of the positions
    left at its shallowest level with any (work_queue.give), as the CUDA kernel's warps
    do.  `stop` (one per worker) holds each level's end position."""
    orders, tail_free, leaf_from, tail_head = plan[1], plan[5], plan[6], plan[7]
    m, buf, idx, cnt, _, valid, _, _ = scratch
    n = orders.shape[1]
    last = n - 1
    if part > 0 and (last <= 2 or leaf_from[t] == 2 or (tail_free[t] and last == 3)):
        return np.int64(0)      # level 2 is counted, not enumerated: piece 0 has it all
    m[0] = u
    m[1] = v
    if plan[2][t, 1] > 0 and not _root_checks(t, u, v, cur, graph, plan):
        return np.int64(0)
    if n == 2:
        if listing:
            _emit(t, m, plan, out, out_pos, limit)
        return np.int64(1)
    for level in range(n):
        valid[level] = False
    total = np.int64(0)
    level = start
    steps = 0
    descend = True
    while True:
        if descend:
            descend = False
            if level == leaf_from[t] and not listing:
                heads = np.int64(1)
                first = level
                if tail_head[t]:
                    # The head's candidates are disjoint from the leaves' and feed none of
                    # them: every unused one extends every leaf assignment.
                    _candidates(level, t, cur, graph, cand, plan, scratch, ranks)
                    heads = _unused_size(buf[level], cnt[level], m, level)
                    first = level + 1
                if heads > 0:
                    total += heads * _leaf_product(t, first, level, m, cur, graph, cand, plan,
                                                   leaves)
                level -= 1
                if level < start:
                    return total
            elif level == last:
                _candidates(level, t, cur, graph, cand, plan, scratch, ranks)
                if listing:
                    for i in range(cnt[last]):
                        w = buf[last, i]
                        if not _used(m, last, w):
                            m[last] = w
                            out_pos = _emit(t, m, plan, out, out_pos, limit)
                    if out_pos >= limit:
                        return total + _unused_size(buf[last], cnt[last], m, last)
                total += _unused_size(buf[last], cnt[last], m, last)
                level -= 1
                if level < start:
                    return total
            elif level == last - 1 and tail_free[t] and not listing:
                total += _pair_tail(t, level, cur, graph, cand, plan, scratch, ranks)
                level -= 1
                if level < start:
                    return total
            else:
                _candidates(level, t, cur, graph, cand, plan, scratch, ranks)
                idx[level] = 0
                if share is not None:
                    records, stop = share[0], share[4]
                    stop[level] = cnt[level]
                    if level == start:
                        idx[level] = records[share[3], REC_FIRST]
                        stop[level] = min(cnt[level], records[share[3], REC_END])
        end = cnt[level]
        if share is not None:
            stop = share[4]
            steps += 1
            if steps >= share[5]:
                steps = 0
                if share[6] or short_of_work(share[2]):
                    give(start, level, m, idx, share)
            end = stop[level]
        # advance at `level` to the next unused candidate (of this piece, at level 2)
        while idx[level] < end and (_used(m, level, buf[level, idx[level]]) or
                                    (level == 2 and idx[level] % parts != part)):
            idx[level] += 1
        if idx[level] >= end:
            level -= 1
            if level < start:
                return total
            continue
        m[level] = buf[level, idx[level]]
        idx[level] += 1
        level += 1
        descend = True


@nb.njit(cache=True)
def _emit(t, m, plan, out, out_pos, limit):
    """Write the match held in m (by level) for every orbit member, up to `limit` rows."""
    orders, perms, multiplicity = plan[1], plan[8], plan[9]
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


@nb.njit(cache=True)
def new_scratch(n, width):
    """One parallel worker's search state."""
    return (np.empty(n, dtype=np.int32),            # m: data vertex per level
            np.empty((n, width), dtype=np.int32),   # buf: candidates per level
            np.zeros(n, dtype=np.int64),            # idx: next candidate per level
            np.zeros(n, dtype=np.int64),            # cnt: candidates per level
            # (a directed level has up to two backward entries per vertex: one per arc)
            np.empty((n, 2 * n), dtype=np.int32),   # key: backward vertices of buf
            np.zeros(n, dtype=np.bool_),            # valid: buf[level] is cached
            np.empty(2 * n, dtype=np.int64),        # cursors into backward lists
            np.empty(2 * n, dtype=np.int64))        # ends of backward lists


@nb.njit(cache=True)
def new_ranks(n, width):
    """(rbuf, fin, nfin) for _candidates (None there turns rank keeping off)."""
    return (np.empty((n, width), dtype=np.int32), np.empty((n, width), dtype=np.int32),
            np.zeros(n, dtype=np.int64))


@nb.njit(cache=True, parallel=True)
def run_tasks(task_u, task_v, task_rank, task_type, graph, cand, plan, leaves, max_deg, chunk,
              offsets, out, limit, listing):
    """Per-task match counts (searched matches, before orbit multiplicity).

    When `listing`, task i writes its rows from offsets[i] (already multiplied
    by orbit sizes) into `out`, stopping at `limit`; tasks starting past the
    limit are skipped and report 0.
    """
    ntasks = task_u.shape[0]
    n = plan[1].shape[1]
    counts = np.zeros(ntasks, dtype=np.int64)
    nchunks = (ntasks + chunk - 1) // chunk
    width = max_deg + 1
    for c in nb.prange(nchunks):
        scratch = new_scratch(n, width)
        # Borrowed views (gpu/cpu/borrowed.py): the workers share no reference counts.
        graph_b, cand_b, plan_b, leaves_b = borrowed_search(graph, cand, plan, leaves)
        rows = borrowed(out)
        for i in range(c * chunk, min(ntasks, (c + 1) * chunk)):
            pos = np.int64(0)
            if listing:
                pos = offsets[i]
                if pos >= limit:
                    continue
            counts[i] = _search(task_u[i], task_v[i], task_rank[i], task_type[i], graph_b,
                                cand_b, plan_b, leaves_b, scratch, None, rows, pos, limit,
                                listing, 0, 1)
    return counts
