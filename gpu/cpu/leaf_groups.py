"""Grouped CPU search of leaf-rooted task types: one search per (type, parent vertex).

A task whose root edge ends in a query leaf (`TaskTypes.leaf_root`) uses its
leaf's data vertex for nothing but that edge.  The tasks of one type whose
root edges share the parent's data vertex p (a `plan.LeafGroups` group)
therefore explore the same partial matches of the rest of the query; member
i (rank r_i, leaf vertex y_i) differs from the others in two ways only:

* the total-order rule: it may use no update edge ranked below r_i.  The group
  searches with the lowest member rank and keeps, per partial match, `mr`: the
  lowest rank among the update edges the match uses.  A match is valid for
  exactly the members with r_i < mr;
* injectivity: y_i must not appear in the match, which can only happen at query
  vertices that carry the leaf's label ("colliding" levels).

So a match M counts weight(M) = |{i : r_i < mr(M), y_i not in M}| times.  The
interior levels are enumerated once for the whole group instead of once per
member (a hub with a hundred new leaf edges searched its neighbourhood a
hundred times).  Counted tails:

* last level: a candidate's weight differs from its prefix's only when its own
  backward edges are updates (the `fin` entries of its level) or it is a
  member's leaf vertex;
* leaf product and non-adjacent pair: their value changes only at the ranks of
  the update edges they could use, so they are evaluated once per rank
  interval that holds members (or once per member, when fewer), from the
  ranked buffers and per-leaf update ranks, without rescanning.  (The plan does
  not group a type whose such tail has a vertex with the leaf's label: it would
  need one evaluation per member.)
"""
from __future__ import annotations

import numba as nb
import numpy as np

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)
from gpu.cpu.atomics import atomic_add
from gpu.cpu.borrowed import borrowed_search
from gpu.cpu.search import (NO_RANK, _candidates, _leaf_count, _lower_bound, _used,
                              new_ranks, new_scratch)

# group = (rank, leaf, leaf_by_id, rank_by_id): plan.LeafGroups' member arrays.


@nb.njit(cache=True)
def _weight(x, level, m, collide, group, lo, hi):
    """Members i with r_i < x whose leaf vertex is none of m[2:level]."""
    rank, _, leaf_by_id, rank_by_id = group
    w = _lower_bound(rank, lo, hi, x) - lo
    for k in range(2, level):
        if collide[k]:
            p = _lower_bound(leaf_by_id, lo, hi, m[k])
            if p < hi and leaf_by_id[p] == m[k] and rank_by_id[p] < x:
                w -= 1
    return w


@nb.njit(cache=True)
def _group_last(last, mr_p, m, scratch, ranks, collide, group, lo, hi):
    """Weighted count of the last level's unused candidates (buffer scanned with ranks)."""
    _, buf, _, cnt, _, _, _, _ = scratch
    rbuf, fin, nfin = ranks
    _, _, leaf_by_id, rank_by_id = group
    wp = _weight(mr_p, last, m, collide, group, lo, hi)
    if wp == 0:
        return np.int64(0)     # a candidate's weight never exceeds its prefix's
    c = cnt[last]
    plain = c - nfin[last]
    for k in range(last):
        w = m[k]
        if w >= 0:
            p = _lower_bound(buf[last], 0, c, w)
            if p < c and buf[last, p] == w and rbuf[last, p] == NO_RANK:
                plain -= 1
    total = np.int64(plain) * wp
    for j in range(nfin[last]):
        p = fin[last, j]
        if not _used(m, last, buf[last, p]):
            total += _weight(min(mr_p, rbuf[last, p]), last, m, collide, group, lo, hi)
    if collide[last]:
        # A candidate that is member j's leaf vertex is no match for member j.
        if c <= hi - lo:
            for p in range(c):
                w = buf[last, p]
                q = _lower_bound(leaf_by_id, lo, hi, w)
                if q < hi and leaf_by_id[q] == w and rank_by_id[q] < min(mr_p, rbuf[last, p]) \
                        and not _used(m, last, w):
                    total -= 1
        else:
            for q in range(lo, hi):
                w = leaf_by_id[q]
                p = _lower_bound(buf[last], 0, c, w)
                if p < c and buf[last, p] == w and rank_by_id[q] < min(mr_p, rbuf[last, p]) \
                        and not _used(m, last, w):
                    total -= 1
    return total


@nb.njit(cache=True)
def _add_fin(level, ranks, r_min, mr_p, bps, nbp):
    rbuf, fin, nfin = ranks
    for j in range(nfin[level]):
        r = rbuf[level, fin[level, j]]
        if r_min < r < mr_p:
            bps[nbp] = r
            nbp += 1
    return nbp


@nb.njit(cache=True)
def _sort_unique(bps, nbp):
    if nbp > 1:
        bps[:nbp].sort()
        k = 1
        for j in range(1, nbp):
            if bps[j] != bps[k - 1]:
                bps[k] = bps[j]
                k += 1
        nbp = k
    return nbp


@nb.njit(cache=True)
def _thresholds(active, nbp, bps, r_min, mr_p, level, m, collide, group, lo, hi, xs, ws):
    """The thresholds at which a tail must be evaluated, into xs, and how many members
    each one stands for, into ws; returns how many.

    bps[:nbp] are the ranks in (r_min, mr_p) of the update edges the tail could use.
    With no more active members than that, one threshold per member (its rank);
    otherwise one per rank interval holding members: those ranked in [below, upper)
    block the same tail edges, the ones ranked <= below.
    """
    k = 0
    if active <= nbp:
        rank, leaf = group[0], group[1]
        for i in range(lo, hi):
            if rank[i] >= mr_p:
                break
            if not _in_prefix(leaf[i], level, m, collide):
                xs[k] = rank[i]
                ws[k] = 1
                k += 1
        return k
    nbp = _sort_unique(bps, nbp)
    below, seen = r_min, 0
    for j in range(nbp + 1):
        upper = bps[j] if j < nbp else mr_p
        upto = _weight(upper, level, m, collide, group, lo, hi)
        if upto > seen:
            xs[k] = below if j == 0 else below + 1
            ws[k] = upto - seen
            k += 1
        below, seen = upper, upto
    return k


@nb.njit(cache=True)
def _group_leaf_tail(t, level, r_min, mr_p, graph, cand, plan, leaves, scratch, ranks, collide,
                     bps, xs, ws, alist, alen, base, group, lo, hi):
    """Weighted count of the counted leaf tail from `level` (head level optional).

    For a threshold x (a member's rank), leaf l at parent y counts base[l] (its
    count with every update edge ranked below mr_p blocked) plus the update edges
    alist[l] at y, ranked in [x, mr_p), whose far end is an unused candidate; the
    head counts its unused candidates whose lowest backward rank is >= x.  Those
    ranks split (r_min, mr_p) into intervals; each interval's members share one
    value.  The plan groups a type only when no tail vertex has the leaf's label
    (plan._groupable_leaf), so no tail vertex can be a member's leaf vertex.
    """
    q_label, orders, bw_level, bw_label, tail_head = plan[0], plan[1], plan[3], plan[4], \
        plan[7]
    upd_start, upd_cnt, upd_nbr, upd_rank, upd_elab = leaves[2], leaves[3], leaves[4], \
        leaves[5], leaves[6]
    m, buf, _, cnt, _, _, _, _ = scratch
    rbuf, fin, nfin = ranks
    n = orders.shape[1]
    active = _weight(mr_p, level, m, collide, group, lo, hi)
    if active == 0:
        return np.int64(0)
    nbp = 0
    first = level
    heads_plain = np.int64(1)
    if tail_head[t]:
        _candidates(level, t, r_min, graph, cand, plan, scratch, ranks)
        c = cnt[level]
        heads_plain = c - nfin[level]       # no update edge: counts at every threshold
        for k in range(level):
            if m[k] >= 0:
                p = _lower_bound(buf[level], 0, c, m[k])
                if p < c and buf[level, p] == m[k] and rbuf[level, p] == NO_RANK:
                    heads_plain -= 1
        for j in range(nfin[level]):
            p = fin[level, j]
            if rbuf[level, p] >= mr_p and not _used(m, level, buf[level, p]):
                heads_plain += 1
        nbp = _add_fin(level, ranks, r_min, mr_p, bps, nbp)
        first = level + 1
    for lv in range(first, n):
        q = orders[t, lv]
        parent = bw_level[t, lv, 0]
        y = m[parent]
        el = bw_label[t, lv, 0]
        bit = np.uint32(1) << np.uint32(q)
        # (Grouped search is planned for undirected queries only: _groupable_leaf.)
        base[lv] = _leaf_count(y, q, el, plan[11][t, lv, 0], False, m, level, mr_p, graph,
                               cand, leaves)
        for e in range(first, lv):
            if bw_level[t, e, 0] == parent and q_label[orders[t, e]] == q_label[q] \
                    and bw_label[t, e, 0] == el:
                base[lv] -= 1       # leaves sharing parent, label and edge label
        k = 0
        for u in range(upd_start[y], upd_start[y] + upd_cnt[y]):    # by rank
            r = upd_rank[u]
            if r >= mr_p:
                break
            w = upd_nbr[u]
            if r > r_min and upd_elab[u] == el and (cand[w] & bit) != 0 \
                    and not _used(m, level, w):
                alist[lv, k] = r
                bps[nbp] = r
                nbp += 1
                k += 1
        alen[lv] = k
    total = np.int64(0)
    for j in range(_thresholds(active, nbp, bps, r_min, mr_p, level, m, collide, group, lo,
                               hi, xs, ws)):
        total += ws[j] * _leaf_tail_at(xs[j], t, level, first, mr_p, heads_plain, m, buf,
                                       ranks, alist, alen, base, plan)
    return total


@nb.njit(cache=True)
def _in_prefix(y, level, m, collide):
    """A member's leaf vertex y is matched at one of m[2:level] (only colliding levels can)."""
    for k in range(2, level):
        if collide[k] and m[k] == y:
            return True
    return False


@nb.njit(cache=True)
def _leaf_tail_at(x, t, level, first, mr_p, heads_plain, m, buf, ranks, alist, alen, base,
                  plan):
    """The leaf tail's value for members whose rank is x (see _group_leaf_tail)."""
    tail_head = plan[7]
    n = plan[1].shape[1]
    rbuf, fin, nfin = ranks
    value = heads_plain
    if tail_head[t]:
        for f in range(nfin[level]):
            p = fin[level, f]
            r = rbuf[level, p]
            if x <= r < mr_p and not _used(m, level, buf[level, p]):
                value += 1
    for lv in range(first, n):
        if value == 0:
            break
        size = base[lv] + alen[lv] - _lower_bound(alist[lv], 0, alen[lv], x)
        value = value * size if size > 0 else np.int64(0)
    return value


@nb.njit(cache=True)
def _ranked_unused(level, count_level, m, buf, ranks, out):
    """The lowest ranks of the unused entries of buf[level] (not among m[:count_level])
    that are reached by an update edge, into out; returns how many."""
    rbuf, fin, nfin = ranks
    k = 0
    for j in range(nfin[level]):
        p = fin[level, j]
        if not _used(m, count_level, buf[level, p]):
            out[k] = rbuf[level, p]
            k += 1
    return k


@nb.njit(cache=True)
def _plain_unused(level, count_level, m, scratch, ranks):
    """Unused entries of buf[level] reached by no update edge."""
    _, buf, _, cnt, _, _, _, _ = scratch
    rbuf, _, nfin = ranks
    c = cnt[level]
    plain = np.int64(c - nfin[level])
    for k in range(count_level):
        if m[k] >= 0:
            p = _lower_bound(buf[level], 0, c, m[k])
            if p < c and buf[level, p] == m[k] and rbuf[level, p] == NO_RANK:
                plain -= 1
    return plain


@nb.njit(cache=True)
def _count_ge(values, k, x):
    n = 0
    for j in range(k):
        if values[j] >= x:
            n += 1
    return n


@nb.njit(cache=True)
def _group_pair_tail(t, level, r_min, mr_p, graph, cand, plan, scratch, ranks, collide, bps,
                     xs, ws, alist, group, lo, hi):
    """Weighted count of the non-adjacent last pair, |A||B| - |A & B| at each member's
    threshold, from the two levels' ranked buffers (cached like any level's): entries
    reached by no update edge count at every threshold, the others from their ranks."""
    m, buf, _, cnt, _, _, _, _ = scratch
    rbuf = ranks[0]
    last = level + 1
    active = _weight(mr_p, level, m, collide, group, lo, hi)
    if active == 0:
        return np.int64(0)
    _candidates(level, t, r_min, graph, cand, plan, scratch, ranks)
    _candidates(last, t, r_min, graph, cand, plan, scratch, ranks)
    plain_a = _plain_unused(level, level, m, scratch, ranks)
    plain_b = _plain_unused(last, level, m, scratch, ranks)
    fa = _ranked_unused(level, level, m, buf, ranks, alist[0])
    fb = _ranked_unused(last, level, m, buf, ranks, alist[1])
    # A & B over unused vertices: those with no update edge on either side, and the
    # lowest rank on both sides of the others.
    plain_ab = np.int64(0)
    fab = 0
    ca, cb = cnt[level], cnt[last]
    small, big, cs, cl = level, last, ca, cb
    if ca > cb:
        small, big, cs, cl = last, level, cb, ca
    cursor = 0
    for i in range(cs):
        w = buf[small, i]
        cursor = _lower_bound(buf[big], cursor, cl, w)
        if cursor >= cl:
            break
        if buf[big, cursor] == w and not _used(m, level, w):
            r = min(rbuf[small, i], rbuf[big, cursor])
            if r == NO_RANK:
                plain_ab += 1
            else:
                alist[2, fab] = r
                fab += 1
    nbp = 0
    for row, k in ((0, fa), (1, fb), (2, fab)):
        for j in range(k):
            r = alist[row, j]
            if r_min < r < mr_p:
                bps[nbp] = r
                nbp += 1
    total = np.int64(0)
    for j in range(_thresholds(active, nbp, bps, r_min, mr_p, level, m, collide, group, lo,
                               hi, xs, ws)):
        x = xs[j]
        na = plain_a + _count_ge(alist[0], fa, x)
        nb_ = plain_b + _count_ge(alist[1], fb, x)
        total += ws[j] * (na * nb_ - plain_ab - _count_ge(alist[2], fab, x))
    return total


@nb.njit(cache=True)
def _search_group(t, parent, lo, hi, part, parts, group, graph, cand, plan, leaves, scratch,
                  ranks, gscratch):
    """Sum over the group's members of their task's match count, over the level-2
    candidates i with i % parts == part (a group is split to spread a hub's work)."""
    q_label, orders, tail_free, leaf_from, leaf_root = plan[0], plan[1], plan[5], plan[6], \
        plan[10]
    m, buf, idx, cnt, _, valid, _, _ = scratch
    rbuf = ranks[0]
    mr, collide, bps, xs, ws, alist, alen, base = gscratch
    n = orders.shape[1]
    last = n - 1
    leaf_level = leaf_root[t]
    m[1 - leaf_level] = parent
    m[leaf_level] = -1          # the members' leaf vertices are handled by weights
    r_min = group[0][lo]
    leaf_label = q_label[orders[t, leaf_level]]
    for k in range(n):
        collide[k] = k >= 2 and q_label[orders[t, k]] == leaf_label
        valid[k] = False
    mr[0] = NO_RANK
    mr[1] = NO_RANK
    if part > 0 and (leaf_from[t] == 2 or last == 2 or (tail_free[t] and last == 3)):
        return np.int64(0)      # level 2 is counted, not enumerated: part 0 has it all
    total = np.int64(0)
    level = 2
    idx[2] = 0
    descend = True
    while True:
        if descend:
            descend = False
            if level == leaf_from[t]:
                total += _group_leaf_tail(t, level, r_min, mr[level - 1], graph, cand, plan,
                                          leaves, scratch, ranks, collide, bps, xs, ws,
                                          alist, alen, base, group, lo, hi)
                level -= 1
                if level < 2:
                    return total
            elif level == last - 1 and tail_free[t]:
                total += _group_pair_tail(t, level, r_min, mr[level - 1], graph, cand, plan,
                                          scratch, ranks, collide, bps, xs, ws, alist, group,
                                          lo, hi)
                level -= 1
                if level < 2:
                    return total
            elif level == last:
                _candidates(level, t, r_min, graph, cand, plan, scratch, ranks)
                total += _group_last(level, mr[level - 1], m, scratch, ranks, collide, group,
                                     lo, hi)
                level -= 1
                if level < 2:
                    return total
            else:
                _candidates(level, t, r_min, graph, cand, plan, scratch, ranks)
                idx[level] = 0
        # advance at `level` to the next unused candidate some member can still use
        while idx[level] < cnt[level]:
            i = idx[level]
            if min(mr[level - 1], rbuf[level, i]) > r_min and not _used(m, level, buf[level, i]) \
                    and (level > 2 or i % parts == part):
                break
            idx[level] = i + 1
        if idx[level] >= cnt[level]:
            level -= 1
            if level < 2:
                return total
            continue
        i = idx[level]
        m[level] = buf[level, i]
        mr[level] = min(mr[level - 1], rbuf[level, i])
        idx[level] = i + 1
        level += 1
        descend = True


@nb.njit(cache=True, nogil=True)
def run_groups(task_type, parent, lo, hi, parts, group, graph, cand, plan, leaves, max_deg,
               workers):
    """Per-group sums of their members' match counts (before orbit multiplicity); group g
    runs as parts[g] independent pieces, which `workers` workers take one at a time,
    largest groups' first (run it under numba.parallel_chunksize(1))."""
    ngroups = task_type.shape[0]
    first_piece = np.zeros(ngroups + 1, dtype=np.int64)
    for g in range(ngroups):
        first_piece[g + 1] = first_piece[g] + parts[g]
    npieces = first_piece[ngroups]
    piece_counts = np.zeros(npieces, dtype=np.int64)
    taken = np.zeros(1, dtype=np.int64)
    _group_region(task_type, parent, lo, hi, parts, first_piece, group, graph, cand, plan,
                  leaves, max_deg, piece_counts, taken, min(workers, npieces))
    counts = np.zeros(ngroups, dtype=np.int64)
    for g in range(ngroups):
        counts[g] = piece_counts[first_piece[g]:first_piece[g + 1]].sum()
    return counts


@nb.njit(cache=True, parallel=True, nogil=True)
def _group_region(task_type, parent, lo, hi, parts, first_piece, group, graph, cand, plan,
                  leaves, max_deg, piece_counts, taken, workers):
    """run_groups's parallel region, and nothing else (in a parallel function Numba makes
    every array expression a parallel loop of its own: phases._share_region).  A
    worker's search state is made once; it takes the next piece from `taken` until none
    is left, so one group's pieces spread over every worker (pieces dealt in chunks of
    the executor's task_chunk, 16, had kept a hub's group on two)."""
    npieces = piece_counts.shape[0]
    n = plan[1].shape[1]
    width = max_deg + 1
    for _ in nb.prange(workers):
        scratch = new_scratch(n, width)
        ranks = new_ranks(n, width)
        gscratch = (np.empty(n, dtype=np.int32),              # mr: lowest rank used
                    np.empty(n, dtype=np.bool_),              # collide: leaf's label
                    np.empty((n + 2) * width, dtype=np.int32),   # tail breakpoints
                    np.empty((n + 2) * width + 1, dtype=np.int32),   # tail thresholds
                    np.empty((n + 2) * width + 1, dtype=np.int64),   # ... members each
                    np.empty((n, width), dtype=np.int32),     # leaf tail: update ranks
                    np.zeros(n, dtype=np.int64),              # ... how many per level
                    np.zeros(n, dtype=np.int64))              # ... base leaf counts
        # Borrowed views (gpu/cpu/borrowed.py): the workers share no reference counts.
        graph_b, cand_b, plan_b, leaves_b = borrowed_search(graph, cand, plan, leaves)
        while True:
            k = atomic_add(taken, 0, 1)
            if k >= npieces:
                break
            g = np.searchsorted(first_piece, k, side="right") - 1
            piece_counts[k] = _search_group(task_type[g], parent[g], lo[g], hi[g],
                                            k - first_piece[g], parts[g], group, graph_b,
                                            cand_b, plan_b, leaves_b, scratch, ranks, gscratch)
