"""Owns the compiled entry points of a CPU phase: the update edges' ranks and index, every
query's tasks, and their search, serial (`count_small`) or in one parallel region whose
workers share the work (`count_phase`, `share_tasks`).

A phase is the negative or the positive half of a batch (or a batch group's edges): its
update edges are ranked 1..k in the graph's rank column and listed per endpoint in the
update index for the time of the call, every query's tasks are made from them, and each
task is searched by gpu/cpu/search.py.  One compiled call does all of it, so a small batch
costs one dispatch a phase instead of a dozen NumPy calls per query.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)
from gpu.cpu.atomics import atomic_add, atomic_cas, atomic_load
from gpu.cpu.borrowed import borrowed, borrowed_graph, borrowed_plan
from gpu.cpu.cycles import cycles
from gpu.cpu.search import _search, _search_from, new_scratch
from gpu.cpu.work_queue import (
    HEAD,
    PENDING,
    REC_LEVEL,
    REC_MATCHED,
    REC_PIECE,
    TAIL,
    WAITING,
    new_queue,
)
from gpu.graph.lists import find_position, list_key


@nb.njit(cache=True, nogil=True)
def count_small(queries, us, vs, labels, edge_batch, nbatch, serial_below, group_size, graph,
                upd_start, upd_cnt, directed, max_deg):
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
    it: the service's event loop and writer run on the other core while it searches.
    `directed`: the graph's (DynamicGraph.directed), whose list keys locate the edges."""
    marks = _mark_updates(us, vs, labels, graph, upd_start, upd_cnt, directed)
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
                upd_cnt, directed, max_deg, heavy_weight, min_pieces, pieces, workers, room, every,
                always, trace):
    """count_small for a phase of any size, the tasks of every query in one parallel
    region whose workers share the work (share_tasks): one region a phase instead of one
    a query, and no task, however heavy, left to one worker while the others wait.
    Returns what count_small returns, with no bound on the tasks: a row of -1 only where
    a leaf group forms.  The arguments from heavy_weight on are share_tasks's."""
    marks = _mark_updates(us, vs, labels, graph, upd_start, upd_cnt, directed)
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
    half of the candidates left at their shallowest level (work_queue.give, checked every
    `every` advances; with `always`, whatever waits: tests), up to `room` records beyond the
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
    records, ready, state = new_queue(npieces, slots, n_max, max_deg)
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
def _mark_updates(us, vs, labels, graph, upd_start, upd_cnt, directed):
    """Ranks 1..k for the update edges us-vs in the graph's rank column (both directions)
    and the update index filled per endpoint: DynamicGraph.set_ranks and UpdateIndex.fill
    in one pass.  Returns (ranks, forward, backward positions, upd_nbr, upd_rank,
    upd_elab: directed, with the arc's direction, as UpdateIndex's); _unmark_updates clears
    what it set."""
    start, deg, nbr, nlab, elab, rank, label = graph
    k = us.shape[0]
    ranks = np.empty(k, dtype=np.int32)
    forward = np.empty(k, dtype=np.int64)
    backward = np.empty(k, dtype=np.int64)
    for i in range(k):
        ranks[i] = i + 1
        forward[i] = find_position(nbr, nlab, start, deg, us[i], vs[i],
                                   list_key(label, vs[i], directed, False))
        backward[i] = find_position(nbr, nlab, start, deg, vs[i], us[i],
                                    list_key(label, us[i], directed, True))
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
        upd_elab[j] = 2 * labels[e] + (i >= k) if directed else labels[e]
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
