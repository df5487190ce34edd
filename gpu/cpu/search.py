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

from gpu.cpu.borrowed import borrowed, borrowed_graph, borrowed_plan, borrowed_search
from gpu.cpu.atomics import atomic_add, atomic_cas, atomic_load, atomic_store
from gpu.cpu.cycles import cycles
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
#              leaf_root)                                           gpu/plan/planner.py TaskTypes
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
    q_label, orders, bw_count, bw_level, bw_label = plan[0], plan[1], plan[2], plan[3], plan[4]
    q = orders[t, level]
    bit = np.uint32(1) << np.uint32(q)
    want = q_label[q]
    nb_count = bw_count[t, level]
    pivot = 0
    best = np.int64(1) << np.int64(62)
    for j in range(nb_count):
        x = m[bw_level[t, level, j]]
        lo, hi = label_segment(nlab, start[x], start[x] + deg[x], want)
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


@nb.njit(cache=True)
def _leaf_count(y, q, el, m, used_levels, cur, graph, cand, leaves):
    """Candidates of leaf q among y's neighbours via edges labelled el, minus m[:used_levels].

    nc holds the count over edges that are not updates of the running phase; the
    phase's update edges at y are added back where the total-order rule allows.
    """
    start, deg, nbr, nlab, elab, rank, label = graph
    leaf_column, nc, upd_start, upd_cnt, upd_nbr, upd_rank, upd_elab = leaves
    bit = np.uint32(1) << np.uint32(q)
    size = np.int64(nc[y, leaf_column[q]])
    if upd_cnt[y] > 0:
        for k in range(upd_start[y], upd_start[y] + upd_cnt[y]):
            if upd_elab[k] == el and (cand[upd_nbr[k]] & bit) != 0 \
                    and not _blocked(upd_rank[k], cur):
                size += 1
    for k in range(used_levels):
        w = m[k]
        if w >= 0 and (cand[w] & bit) != 0:     # grouped search leaves m[leaf] at -1
            p = find_position(nbr, nlab, start, deg, y, w, label[w])
            if p >= 0 and elab[p] == el and not _blocked(rank[p], cur):
                size -= 1
    return size


@nb.njit(cache=True)
def _leaf_product(t, first, used_levels, m, cur, graph, cand, plan, leaves):
    """Matches of the trailing leaves from level `first`, avoiding m[:used_levels]: a product
    of falling factorials (leaves sharing parent, label and edge label share one set)."""
    q_label, orders, bw_level, bw_label = plan[0], plan[1], plan[3], plan[4]
    n = orders.shape[1]
    product = np.int64(1)
    for level in range(first, n):
        q = orders[t, level]
        parent = bw_level[t, level, 0]
        el = bw_label[t, level, 0]
        size = _leaf_count(m[parent], q, el, m, used_levels, cur, graph, cand, leaves)
        for earlier in range(first, level):
            r = orders[t, earlier]
            if bw_level[t, earlier, 0] == parent and q_label[r] == q_label[q] \
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
def _search(u, v, cur, t, graph, cand, plan, leaves, scratch, ranks, out, out_pos, limit,
            listing, part, parts):
    """Matches of one task.  Returns the count; writes rows from out_pos when listing.

    Counting (not listing) may split a task into `parts` pieces: piece `part` takes the
    level-2 candidates i with i % parts == part (count_phase); parts = 1 is the task."""
    return _search_from(u, v, cur, t, graph, cand, plan, leaves, scratch, ranks, out,
                        out_pos, limit, listing, part, parts, 2, None)


# share_tasks's work queue: where its counters sit in the `state` array (apart, so that
# waiting workers reading one do not share a cache line with the others' updates), and
# the columns of a record: piece, level, first and end candidate position, then the
# matched vertices of the levels above.
HEAD, TAIL, PENDING, WAITING = 0, 16, 32, 48
STATE_SIZE = 64
REC_PIECE, REC_LEVEL, REC_FIRST, REC_END, REC_MATCHED = 0, 1, 2, 3, 4


@nb.njit(cache=True)
def _search_from(u, v, cur, t, graph, cand, plan, leaves, scratch, ranks, out, out_pos,
                 limit, listing, part, parts, start, share):
    """_search from level `start`, m[2:start] holding the vertices matched above it.

    `share` is None, or (records, ready, state, slot, stop, every, always): the search is
    share_tasks's queue record `slot`, whose level `start` takes the candidate positions
    records[slot, REC_FIRST:REC_END] only; every `every` advances it looks whether more
    workers wait than records are queued (_short_of_work; with `always` it gives
    regardless: tests) and if so hands the queue half of the positions left at its
    shallowest level with any (_give), as the CUDA kernel's warps do.  `stop` (one per
    worker) holds each level's end position."""
    orders, tail_free, leaf_from, tail_head = plan[1], plan[5], plan[6], plan[7]
    m, buf, idx, cnt, _, valid, _, _ = scratch
    n = orders.shape[1]
    last = n - 1
    if part > 0 and (last <= 2 or leaf_from[t] == 2 or (tail_free[t] and last == 3)):
        return np.int64(0)      # level 2 is counted, not enumerated: piece 0 has it all
    m[0] = u
    m[1] = v
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
                if share[6] or _short_of_work(share[2]):
                    _give(start, level, m, idx, share)
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


@nb.njit(cache=True, inline="always")
def _short_of_work(state):
    """Whether more workers wait than there are records in the queue for them: only then
    does a search give (when every busy search gave as soon as one worker waited, 15 of
    them on the H100 host cut their work into ever smaller records for it)."""
    waiting = atomic_load(state, WAITING)
    return waiting > 0 and waiting > atomic_load(state, TAIL) - atomic_load(state, HEAD)


@nb.njit(cache=True)
def _give(start, level, m, idx, share):
    """Hand share_tasks's queue the later half of the candidate positions left at the
    shallowest of levels start..level that has any (_search_from's `share`): a record of
    the piece, the level, the positions and the vertices matched above it, which any
    worker can search by computing that level's candidates again.  Nothing when the queue
    is full."""
    records, ready, state, slot, stop = share[0], share[1], share[2], share[3], share[4]
    d = start
    while d <= level and stop[d] <= idx[d]:
        d += 1
    if d > level:
        return
    split = stop[d] - (stop[d] - idx[d] + 1) // 2
    atomic_add(state, PENDING, 1)           # before it is visible: the region ends at 0
    s = atomic_add(state, TAIL, 1)
    if s >= records.shape[0]:
        atomic_add(state, PENDING, -1)
        return
    records[s, REC_PIECE] = records[slot, REC_PIECE]
    records[s, REC_LEVEL] = d
    records[s, REC_FIRST] = split
    records[s, REC_END] = stop[d]
    for j in range(d):
        records[s, REC_MATCHED + j] = m[j]
    atomic_store(ready, s, 1)
    stop[d] = split


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
            np.empty((n, n), dtype=np.int32),       # key: backward vertices of buf
            np.zeros(n, dtype=np.bool_),            # valid: buf[level] is cached
            np.empty(n, dtype=np.int64),            # cursors into backward lists
            np.empty(n, dtype=np.int64))            # ends of backward lists


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


@nb.njit(cache=True, nogil=True)
def count_small(queries, us, vs, labels, edge_batch, nbatch, serial_below, group_size, graph,
                upd_start, upd_cnt, max_deg):
    """One phase of a small batch for several queries: ranks, update index, make_tasks, the
    grouping test and a serial run_tasks, in one compiled call.

    `queries` is a typed list of (roots, root_labels, cand, plan, leaf column, leaf nc),
    one per query.  The update edges us-vs (present in the graph) get ranks 1..k in the
    graph's rank column and are listed per endpoint in `upd_start`/`upd_cnt` (the
    UpdateIndex's per-vertex arrays, all counts zero on entry) for the time of the call;
    both are cleared before it returns, so a count is exactly what DynamicGraph.set_ranks,
    UpdateIndex.fill and execute_cpu give.  Returns each query's matches (orbit
    multiplicity included) of the tasks the update edges start, summed per batch: row q,
    column b holds the tasks of the edges i with edge_batch[i] == b (of `nbatch`; one
    phase of several batches, Engine's batch groups), searched one by one on this
    thread; or a row of -1 where the general path would do otherwise: `serial_below` or more
    tasks (a parallel region), or, with group_size > 0, a leaf group of at least
    `group_size` members (group_leaf_tasks).  Tasks are made and checked exactly as
    make_tasks does.  A small batch then costs one dispatch per phase instead of a dozen
    NumPy calls on one-element arrays per query, and the GIL is released once for all of
    it: the service's event loop and writer run on the other core while it searches."""
    marks = _mark_updates(us, vs, labels, graph, upd_start, upd_cnt)
    ranks, upd = marks[0], marks[3:]
    totals = np.zeros((len(queries), nbatch), dtype=np.int64)
    for q in range(len(queries)):
        roots, root_labels, cand, plan, column, nc = queries[q]
        tu, tv, tr, tt, ntasks = _query_tasks(us, vs, labels, ranks, roots, root_labels,
                                              cand, plan[10], group_size)
        if ntasks < 0 or ntasks >= serial_below:
            totals[q, :] = -1
            continue
        if ntasks == 0:
            continue
        leaves = (column, nc, upd_start, upd_cnt) + upd
        multiplicity = plan[9]
        n = plan[1].shape[1]
        scratch = new_scratch(n, max_deg + 1)
        no_out = np.empty((0, n), dtype=np.int32)
        for i in range(ntasks):
            found = _search(tu[i], tv[i], tr[i], tt[i], graph, cand, plan, leaves, scratch,
                            None, no_out, np.int64(0), np.int64(0), False, 0, 1)
            # A task's rank is its edge's position + 1 (_mark_updates).
            totals[q, edge_batch[tr[i] - 1]] += found * multiplicity[tt[i]]
    _unmark_updates(us, vs, marks[1], marks[2], graph, upd_cnt)
    return totals


@nb.njit(cache=True, nogil=True)
def count_phase(queries, us, vs, labels, edge_batch, nbatch, group_size, graph, upd_start,
                upd_cnt, max_deg, heavy_weight, min_pieces, pieces, workers, room, every,
                always, trace):
    """count_small for a phase of any size, the tasks of every query in one parallel
    region whose workers share the work (share_tasks): one region a phase instead of one
    a query, and no task, however heavy, left to one worker while the others wait.
    Returns what count_small returns, with no bound on the tasks: a row of -1 only where
    a leaf group forms.  The arguments from heavy_weight on are share_tasks's."""
    marks = _mark_updates(us, vs, labels, graph, upd_start, upd_cnt)
    ranks, upd = marks[0], marks[3:]
    totals, tasks, n_max = _phase_tasks(queries, us, vs, labels, ranks, nbatch, group_size)
    found, task_of = share_tasks(queries, tasks, n_max, graph, (upd_start, upd_cnt) + upd,
                                 max_deg, heavy_weight, min_pieces, pieces, workers, room,
                                 every, always, trace)
    task_q, task_r = tasks[0], tasks[3]
    for h in range(found.shape[0]):
        i = task_of[h]
        totals[task_q[i], edge_batch[task_r[i] - 1]] += found[h]
    _unmark_updates(us, vs, marks[1], marks[2], graph, upd_cnt)
    return totals


@nb.njit(cache=True)
def _phase_tasks(queries, us, vs, labels, ranks, nbatch, group_size):
    """count_phase's tasks: (totals, (task_q, task_u, task_v, task_r, task_t), the widest
    query's vertices), totals holding a row of -1 for each query handed back."""
    nq = len(queries)
    totals = np.zeros((nq, nbatch), dtype=np.int64)
    cap = 0
    for q in range(nq):
        cap += queries[q][0].shape[0] * us.shape[0]
    task_q = np.empty(cap, dtype=np.int32)
    task_u = np.empty(cap, dtype=np.int32)
    task_v = np.empty(cap, dtype=np.int32)
    task_r = np.empty(cap, dtype=np.int32)
    task_t = np.empty(cap, dtype=np.int32)
    ntasks = 0
    n_max = 2
    for q in range(nq):
        roots, root_labels, cand, plan, column, nc = queries[q]
        tu, tv, tr, tt, made = _query_tasks(us, vs, labels, ranks, roots, root_labels, cand,
                                            plan[10], group_size)
        if made < 0:
            totals[q, :] = -1
            continue
        task_q[ntasks:ntasks + made] = q
        task_u[ntasks:ntasks + made] = tu[:made]
        task_v[ntasks:ntasks + made] = tv[:made]
        task_r[ntasks:ntasks + made] = tr[:made]
        task_t[ntasks:ntasks + made] = tt[:made]
        ntasks += made
        n_max = max(n_max, plan[1].shape[1])
    return (totals, (task_q[:ntasks], task_u[:ntasks], task_v[:ntasks], task_r[:ntasks],
                     task_t[:ntasks]), n_max)


@nb.njit(cache=True, nogil=True)
def share_tasks(queries, tasks, n_max, graph, updates, max_deg, heavy_weight, min_pieces,
                pieces, workers, room, every, always, trace):
    """The matches of counted tasks, searched by `workers` workers sharing the work;
    returns (found, task): the matches (orbit multiplicity included) of each record the
    workers searched, and the task it belongs to.

    `tasks` = (task_q, task_u, task_v, task_r, task_t): each task's query (its entry in
    the typed list `queries`, as count_small takes), edge, rank and task type; `updates`
    the update index's arrays (executor._update_arrays) with the phase's edges in it.  A
    task whose edge has deg(u) * deg(v) >= heavy_weight starts as `min_pieces` to
    `pieces` pieces (interleaved slices of its level-2 candidates), more for a larger
    share of the tasks' total deg(u) * deg(v); the others start whole.  The pieces, the
    heaviest tasks' first, are the first records of a work queue that the workers (run it
    under numba.parallel_chunksize(1): one iteration a thread) take records from, one at
    a time.  A worker that finds the queue empty while records are still being searched
    waits; while more wait than records are queued, the busy searches hand the queue
    half of the candidates left at their shallowest level (_give, checked every `every`
    advances; with `always`, whatever waits: tests), up to `room` records beyond the
    pieces, so that the cost hidden past a task's edge (a hub at level 2 or 3) is shared
    too.

    `trace` (int64, 6 columns) records the region when it has more rows than the queue
    can hold (pieces + room), and is left alone otherwise (pass shape (0, 6)): row 0
    holds (records, tasks, pieces, 0, cycles at the region's start, at its end), row 1 + s
    record s's (task, query, parts of its task, worker thread, cycles at its start, at
    its end); a task's index is its place in `tasks`, the same for any thread count."""
    parts, pieces_of = _pieces(tasks[1], tasks[2], graph[1], heavy_weight, min_pieces,
                               pieces)
    npieces = pieces_of[0].shape[0]
    slots = npieces + room
    records, ready, state = _work_queue(npieces, slots, n_max, max_deg)
    found = np.empty(slots, dtype=np.int64)
    piece = np.empty(slots, dtype=np.int64)     # found[h]'s piece
    tracing = trace.shape[0] > slots
    if tracing:
        trace[0, 1], trace[0, 2], trace[0, 4] = tasks[0].shape[0], npieces, cycles()
    _share_region(queries, tasks, parts, pieces_of, n_max, graph, updates, max_deg,
                  (records, ready, state), found, piece, min(npieces, workers), every,
                  always, tracing, trace)
    # What the workers wrote through the atomics and their views, Numba does not see
    # written: a plain read of state[TAIL] here returned the value stored before the
    # region.  So the count is loaded atomically, and the records' pieces come from
    # `piece`, which the region writes plainly.
    used = min(atomic_load(state, TAIL), slots)
    if tracing:
        trace[0, 0], trace[0, 5] = used, cycles()
    task = np.empty(used, dtype=np.int64)
    for h in range(used):
        task[h] = pieces_of[0][piece[h]]
    return found[:used], task


@nb.njit(cache=True)
def _pieces(task_u, task_v, deg, heavy_weight, min_pieces, pieces):
    """share_tasks's pieces: (parts per task, (piece_task, piece_part, piece_parts)),
    the heaviest tasks' pieces first."""
    ntasks = task_u.shape[0]
    weight = np.empty(ntasks, dtype=np.float64)
    for i in range(ntasks):
        weight[i] = np.float64(deg[task_u[i]]) * deg[task_v[i]]
    order = np.argsort(-weight)
    # A heavy task gets `min_pieces` pieces, more in proportion to its share of the
    # tasks' weight, at most `pieces`: every piece searches the task's level-2
    # candidates again, so many pieces of a task with a small share cost more than the
    # balance gains.
    share = max(weight.sum() / pieces, 1.0)
    parts = np.ones(ntasks, dtype=np.int64)
    for i in range(ntasks):
        if weight[i] >= heavy_weight:
            parts[i] = min(pieces, max(min_pieces, np.int64(np.ceil(weight[i] / share))))
    npieces = parts.sum()
    piece_task = np.empty(npieces, dtype=np.int64)
    piece_part = np.empty(npieces, dtype=np.int64)
    piece_parts = np.empty(npieces, dtype=np.int64)
    k = 0
    for j in range(ntasks):
        i = order[j]
        for part in range(parts[i]):
            piece_task[k], piece_part[k], piece_parts[k] = i, part, parts[i]
            k += 1
    return parts, (piece_task, piece_part, piece_parts)


@nb.njit(cache=True)
def _work_queue(npieces, slots, width, max_deg):
    """share_tasks's work queue: (records, ready, state) with the pieces as its first
    records (a record's row is written before its ready flag is set)."""
    records = np.empty((slots, REC_MATCHED + width), dtype=np.int64)
    ready = np.zeros(slots, dtype=np.int64)
    state = np.zeros(STATE_SIZE, dtype=np.int64)
    for k in range(npieces):
        records[k, REC_PIECE], records[k, REC_LEVEL] = k, 2
        records[k, REC_FIRST], records[k, REC_END] = 0, max_deg + 1
        ready[k] = 1
    state[TAIL], state[PENDING] = npieces, npieces
    return records, ready, state


@nb.njit(cache=True, parallel=True, nogil=True)
def _share_region(queries, tasks, parts, pieces_of, n_max, graph, updates, max_deg, queue,
                  found, piece, workers, every, always, tracing, trace):
    """share_tasks's parallel region, and nothing else: in a parallel function Numba makes
    every array expression and slice copy a parallel loop of its own, each waking the
    workers and ending at a barrier (count_phase had about fifty a phase, and on a host
    whose cores were all busy a late worker held some of them for tens of ms)."""
    task_q, task_u, task_v, task_r, task_t = tasks
    piece_task, piece_part, piece_parts = pieces_of
    records, ready, state = queue
    slots = records.shape[0]
    no_out = np.empty((0, 0), dtype=np.int32)
    for _ in nb.prange(workers):
        scratch = new_scratch(n_max, max_deg + 1)
        m, stop = scratch[0], np.empty(n_max, dtype=np.int64)
        # Every worker's search reads these at each level it enters: borrowed views, whose
        # reference counts are no cache lines the workers share (gpu/cpu/borrowed.py).
        shared = borrowed_graph(graph)
        upd = (borrowed(updates[0]), borrowed(updates[1]), borrowed(updates[2]),
               borrowed(updates[3]), borrowed(updates[4]))
        # The queue's own arrays are used here directly (so that the region is seen to
        # take them) and handed to the search borrowed.
        mine = (borrowed(records), borrowed(ready), borrowed(state))
        waiting = False
        while True:
            h = atomic_load(state, HEAD)
            if h >= min(atomic_load(state, TAIL), slots):
                if atomic_load(state, PENDING) == 0:
                    break       # every record searched: nothing more can come
                if not waiting:
                    atomic_add(state, WAITING, 1)
                    waiting = True
                continue
            if not atomic_cas(state, HEAD, h, h + 1):
                continue
            if waiting:
                atomic_add(state, WAITING, -1)
                waiting = False
            while atomic_load(ready, h) == 0:
                pass            # its giver is still writing it
            k = records[h, REC_PIECE]
            level = records[h, REC_LEVEL]
            for j in range(2, level):
                m[j] = records[h, REC_MATCHED + j]
            i = piece_task[k]
            roots, root_labels, cand, plan, column, nc = queries[task_q[i]]
            leaves = (borrowed(column), borrowed(nc)) + upd
            if tracing:
                trace[h + 1, 0], trace[h + 1, 1], trace[h + 1, 2] = i, task_q[i], parts[i]
                trace[h + 1, 3], trace[h + 1, 4] = nb.get_thread_id(), cycles()
            piece[h] = k
            found[h] = _search_from(task_u[i], task_v[i], task_r[i], task_t[i], shared,
                                    borrowed(cand), borrowed_plan(plan), leaves, scratch, None,
                                    no_out, np.int64(0), np.int64(0), False, piece_part[k],
                                    piece_parts[k], level,
                                    mine + (h, stop, every, always)) * plan[9][task_t[i]]
            if tracing:
                trace[h + 1, 5] = cycles()
            atomic_add(state, PENDING, -1)
        if waiting:
            atomic_add(state, WAITING, -1)


@nb.njit(cache=True)
def _mark_updates(us, vs, labels, graph, upd_start, upd_cnt):
    """Ranks 1..k for the update edges us-vs in the graph's rank column (both directions)
    and the update index filled per endpoint: DynamicGraph.set_ranks and UpdateIndex.fill
    in one pass.  Returns (ranks, forward, backward positions, upd_nbr, upd_rank,
    upd_elab); _unmark_updates clears what it set."""
    start, deg, nbr, nlab, elab, rank, label = graph
    k = us.shape[0]
    ranks = np.empty(k, dtype=np.int32)
    forward = np.empty(k, dtype=np.int64)
    backward = np.empty(k, dtype=np.int64)
    for i in range(k):
        ranks[i] = i + 1
        forward[i] = find_position(nbr, nlab, start, deg, us[i], vs[i], label[vs[i]])
        backward[i] = find_position(nbr, nlab, start, deg, vs[i], us[i], label[us[i]])
        rank[forward[i]] = ranks[i]
        rank[backward[i]] = ranks[i]
    # UpdateIndex.fill: both directions, per endpoint by rank.
    src = np.empty(2 * k, dtype=np.int32)
    key = np.empty(2 * k, dtype=np.int64)
    for i in range(k):
        src[i], src[k + i] = us[i], vs[i]
        key[i] = (np.int64(us[i]) << 32) | ranks[i]
        key[k + i] = (np.int64(vs[i]) << 32) | ranks[i]
    order = np.argsort(key)     # the keys are distinct: an edge's two endpoints differ
    upd_nbr = np.empty(2 * k, dtype=np.int32)
    upd_rank = np.empty(2 * k, dtype=np.int32)
    upd_elab = np.empty(2 * k, dtype=np.int32)
    for j in range(2 * k):
        i = order[j]
        e = i if i < k else i - k
        upd_nbr[j] = vs[e] if i < k else us[e]
        upd_rank[j] = ranks[e]
        upd_elab[j] = labels[e]
        s = src[i]
        if upd_cnt[s] == 0:
            upd_start[s] = j
        upd_cnt[s] += 1
    return ranks, forward, backward, upd_nbr, upd_rank, upd_elab


@nb.njit(cache=True)
def _unmark_updates(us, vs, forward, backward, graph, upd_cnt):
    rank = graph[5]
    for i in range(us.shape[0]):
        rank[forward[i]] = 0
        rank[backward[i]] = 0
        upd_cnt[us[i]] = 0
        upd_cnt[vs[i]] = 0


@nb.njit(cache=True)
def _query_tasks(us, vs, labels, ranks, roots, root_labels, cand, leaf_root, group_size):
    """One query's tasks of the update edges, made and checked exactly as make_tasks does:
    (tu, tv, tr, tt, count), the count -1 when, with group_size > 0, a leaf group of at
    least `group_size` members forms (group_leaf_tasks' key: type, data vertex of the
    leaf's parent): the general path searches those."""
    ntypes, k = roots.shape[0], us.shape[0]
    tu = np.empty(ntypes * k, dtype=np.int32)
    tv = np.empty(ntypes * k, dtype=np.int32)
    tr = np.empty(ntypes * k, dtype=np.int32)
    tt = np.empty(ntypes * k, dtype=np.int32)
    ntasks = 0
    for t in range(ntypes):
        a, b = np.uint32(roots[t, 0]), np.uint32(roots[t, 1])
        for i in range(k):
            if labels[i] == root_labels[t] and (cand[us[i]] >> a) & np.uint32(1) != 0 \
                    and (cand[vs[i]] >> b) & np.uint32(1) != 0:
                tu[ntasks], tv[ntasks], tr[ntasks], tt[ntasks] = us[i], vs[i], ranks[i], t
                ntasks += 1
    if group_size > 0:
        groups = _leaf_groups_form(tu, tv, tt, ntasks, leaf_root, group_size)
        if groups:
            return tu, tv, tr, tt, -1
    return tu, tv, tr, tt, ntasks


@nb.njit(cache=True)
def _leaf_groups_form(tu, tv, tt, ntasks, leaf_root, group_size):
    for i in range(ntasks):
        level = leaf_root[tt[i]]
        if level < 0:
            continue
        parent = tu[i] if level == 1 else tv[i]
        members = 0
        for j in range(ntasks):
            if tt[j] == tt[i] and (tu[j] if level == 1 else tv[j]) == parent:
                members += 1
        if members >= group_size:
            return True
    return False
