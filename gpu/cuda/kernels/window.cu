// Windowed counting on the device (issue 23): gpu/cpu/windowed.py's search, pruned by
// time as it goes, one warp per task, the warp's lanes over a level's candidates.
//
// The graph is a phase's window subgraph, not the engine's graph: the edges timed within
// the widest window of the phase's update edges' times, laid out on the host as a
// compact CSR in the phase's one buffer (gpu/cuda/window_layout.py, with the update
// edges, the other side's times and the plans; `part` finds each array in it) and copied
// up once per phase.  `verts` holds its vertices' slots, sorted; vertex verts[i]'s entries
// are vstart[i] .. vstart[i + 1] - 1, sorted by neighbour slot, each with the neighbour's
// label, the edge's label, time and rank (1 + its index among the phase's update edges, 0
// for the others).  A window's subgraph is sparse (GH's at W = 5,000: ~11,000 edges on
// 37,700 vertices), so a level scans its backward neighbour's whole list, not a label
// segment.
// Nothing in it is the size of the engine's graph.
//
// Directed graphs: entries are keyed 2 label + 0 for an arc out of the vertex, + 1 for one
// into it (a vertex may hold a neighbour twice, an arc each way, adjacent); a type is a
// query arc, each backward entry names the key to read and its arc (the arc's own time),
// and level 1 checks the root's reverse arc when the query has one (as
// gpu/cpu/windowed.py).
//
// A task is (update edge e, task type t), every pair taken from a counter 32 at a time by a
// warp, whose lanes drop at once the pairs whose root does not fit (labels): the update
// edge u - v as the type's root query edge (a -> u, b -> v),
// every match found once, from its lowest-ranked update edge (an entry ranked below the
// task's own is off limits), automorphic images each found.  As on the CPU (see there
// for the phases and `other`/`structural`): a partial match carries the span (lo, hi)
// of its edges' times and is never extended once hi - lo exceeds the window, nor with a
// `before` pair out of order (checked at the level that matches the pair's later edge);
// with `check_other`, a complete match counts only if it uses a structural edge, or an
// edge untimed on the other side of the batch, or the other side's times put it out of
// the window or out of order.
//
// The warp's state (per level: the vertex matched, the candidate range, the span, the
// flags; per query edge: its time on both sides) lives in shared memory.  A level is
// scanned 32 candidates at a time, each lane checking one completely (labels, rank,
// distinct vertices, the other backward edges by binary search, times, `before`); the
// last level counts the ballot, an inner one keeps it as a mask and descends into its
// candidates one by one (lane 0 writes the chosen one's state: the check again, which is
// deterministic).

#define FULL_MASK 0xffffffffu
// What one warp's state holds: query vertices (levels) and query edges.  Larger windowed
// queries are searched on the host (gpu/cuda/windowed.py fits).
#define WIN_MAX_QUERY 16
#define WIN_MAX_EDGES 64
#define WIN_MAX_BW 32           // backward entries of a level (directed: two per vertex)
#define WIN_WARPS 4
#define NO_TIME (-9223372036854775807LL - 1LL)

struct WinState {
    long long pos[WIN_MAX_QUERY], end[WIN_MAX_QUERY], base[WIN_MAX_QUERY];
    long long lo[WIN_MAX_QUERY], hi[WIN_MAX_QUERY], lo2[WIN_MAX_QUERY], hi2[WIN_MAX_QUERY];
    long long etime[WIN_MAX_EDGES], etime2[WIN_MAX_EDGES];
    int m[WIN_MAX_QUERY], pivot[WIN_MAX_QUERY], flags[WIN_MAX_QUERY];
    unsigned mask[WIN_MAX_QUERY];
};

struct WinGraph {
    const int* verts; long long nverts; const long long* vstart;
    const int* nbr; const int* nlab; const int* elab; const long long* etime;
    const int* rank;
};

// A query's plan (gpu/cuda/windowed.py pack); the backward entries' rows are `w` wide (n,
// or 2n for a directed query), each with the list key to read (bw_key) and its arc
// (bw_arc, ARC_*).  Level 1 of a directed type holds the root's reverse arc, if any.
struct WinPlan {
    int n; const int* q_label; const int* orders; const int* bw_count;
    const int* bw_level; const int* bw_label; const int* root_edge; const int* bw_edge;
    const int* bc_count; const int* bc_pairs; int pmax; const int* before; int nbefore;
    int w; int directed; const int* bw_key; const int* bw_arc;
};

// bw_arc: an undirected edge (keyed by its ends in order), an arc from the placed vertex
// to the new one, an arc from the new one to the placed one (gpu/cpu/windowed.py ARC_*).
enum { ARC_NONE = 0, ARC_OUT = 1, ARC_IN = 2 };

struct WinOther {
    int check; const long long* keys; const long long* times; long long count;
    const long long* structural; long long structural_count;
};

__device__ __forceinline__ long long edge_key(int a, int b)
{
    const int lo = a < b ? a : b, hi = a < b ? b : a;
    return ((long long)lo << 32) | (long long)(unsigned)hi;
}

// The times table's key of an entry's edge between the placed vertex y and w.
__device__ __forceinline__ long long arc_key(int y, int w, int arc)
{
    if (arc == ARC_OUT) return ((long long)y << 32) | (long long)(unsigned)w;
    if (arc == ARC_IN) return ((long long)w << 32) | (long long)(unsigned)y;
    return edge_key(y, w);
}

// Index of `key` in the sorted keys[0..count), or -1.
__device__ long long find_key(const long long* keys, long long count, long long key)
{
    long long lo = 0, hi = count;
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (keys[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo < count && keys[lo] == key ? lo : -1;
}

// Vertex x's entries [a, b) (empty when the subgraph does not hold x).
__device__ void vertex_range(const WinGraph& g, int x, long long* a, long long* b)
{
    long long lo = 0, hi = g.nverts;
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (g.verts[mid] < x) lo = mid + 1; else hi = mid;
    }
    if (lo >= g.nverts || g.verts[lo] != x) { *a = *b = 0; return; }
    *a = g.vstart[lo];
    *b = g.vstart[lo + 1];
}

// The entry of w under list key `key` in y's list, or -1 (a directed graph may file w
// twice, an arc each way: adjacent, sorted by direction).
__device__ long long find_entry(const WinGraph& g, int y, int w, int key)
{
    long long lo, hi;
    vertex_range(g, y, &lo, &hi);
    const long long end = hi;
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (g.nbr[mid] < w) lo = mid + 1; else hi = mid;
    }
    for (; lo < end && g.nbr[lo] == w; ++lo)
        if (g.nlab[lo] == key) return lo;
    return -1;
}

// The time of query edge e as a candidate at `level` of type t would have it: the
// candidate's own (local, per backward entry) where `level` matches e, else the state's.
__device__ __forceinline__ long long time_of(const WinPlan& p, int t, int level,
                                            const long long* state_times,
                                            const long long* local, int e)
{
    const int n = p.n;
    for (int j = 0; j < p.bw_count[t * n + level]; ++j)
        if (p.bw_edge[(t * n + level) * p.w + j] == e) return local[j];
    return state_times[e];
}

// Whether w (entry `at` of the level's pivot list; at < 0: none, every backward entry
// looked up, as level 1 checks the root's reverse arc) is a valid candidate for `level` of
// type t (module comment); with `write`, its state goes into S (the level's vertex, span,
// flags, edge times).  `counts` reports, at the last level, whether the complete match
// counts.  Levels read the span and flags of the level above (level 0: the root edge's).
__device__ bool check_candidate(const WinGraph& g, const WinPlan& p, const WinOther& o,
                                long long window, WinState& S, int t, int level, int w,
                                long long at, int cur, bool write, bool* counts)
{
    const int n = p.n, W = p.w;
    const int j0 = at >= 0 ? S.pivot[level] : -1;
    const int row = t * n + level;
    if (at >= 0) {
        if (g.nlab[at] != p.bw_key[row * W + j0] || g.elab[at] != p.bw_label[row * W + j0])
            return false;
        if (g.rank[at] != 0 && g.rank[at] < cur) return false;
    }
    for (int i = 0; i < level; ++i)
        if (S.m[i] == w) return false;
    long long tl = S.lo[level - 1], th = S.hi[level - 1];
    long long tl2 = S.lo2[level - 1], th2 = S.hi2[level - 1];
    int f = S.flags[level - 1];
    long long te_j[WIN_MAX_BW], t2_j[WIN_MAX_BW];
    for (int j = 0; j < p.bw_count[row]; ++j) {
        const int y = S.m[p.bw_level[row * W + j]];
        long long q = at;
        if (j != j0) {
            q = find_entry(g, y, w, p.bw_key[row * W + j]);
            if (q < 0 || g.elab[q] != p.bw_label[row * W + j] ||
                (g.rank[q] != 0 && g.rank[q] < cur)) return false;
        }
        const long long te = g.etime[q];
        if (te == NO_TIME) return false;
        tl = te < tl ? te : tl;
        th = te > th ? te : th;
        if (th - tl > window) return false;     // the span only grows: prune here
        te_j[j] = te;
        t2_j[j] = te;
        if (o.check) {
            const long long key = arc_key(y, w, p.bw_arc[row * W + j]);
            const long long i = find_key(o.keys, o.count, key);
            const long long t2 = i >= 0 ? o.times[i] : te;
            t2_j[j] = t2;
            if (t2 == NO_TIME) {
                f |= 2;
            } else {
                tl2 = t2 < tl2 ? t2 : tl2;
                th2 = t2 > th2 ? t2 : th2;
            }
            if (find_key(o.structural, o.structural_count, key) >= 0) f |= 1;
        }
    }
    for (int c = 0; c < p.bc_count[row]; ++c) {
        const int* pair = p.bc_pairs + ((long long)row * p.pmax + c) * 2;
        if (time_of(p, t, level, S.etime, te_j, pair[0]) >=
            time_of(p, t, level, S.etime, te_j, pair[1])) return false;
    }
    if (level == n - 1) {
        bool valid = !o.check || (f & 3) || th2 - tl2 > window;
        for (int c = 0; !valid && c < p.nbefore; ++c)
            if (time_of(p, t, level, S.etime2, t2_j, p.before[2 * c]) >=
                time_of(p, t, level, S.etime2, t2_j, p.before[2 * c + 1])) valid = true;
        *counts = valid;
    }
    if (write) {
        S.m[level] = w;
        S.lo[level] = tl; S.hi[level] = th; S.lo2[level] = tl2; S.hi2[level] = th2;
        S.flags[level] = f;
        for (int j = 0; j < p.bw_count[row]; ++j) {
            S.etime[p.bw_edge[row * W + j]] = te_j[j];
            S.etime2[p.bw_edge[row * W + j]] = t2_j[j];
        }
    }
    return true;
}

// A level's candidates: the list of its backward neighbour with the shortest one (lane 0
// writes it); check_candidate drops the entries of other labels.
__device__ void open_level(const WinGraph& g, const WinPlan& p, WinState& S, int t,
                           int level, int lane)
{
    const int n = p.n, row = t * n + level;
    int best = -1;
    long long best_a = 0, best_b = 0;
    for (int j = 0; j < p.bw_count[row]; ++j) {
        long long a, b;
        vertex_range(g, S.m[p.bw_level[row * p.w + j]], &a, &b);
        if (best < 0 || b - a < best_b - best_a) { best = j; best_a = a; best_b = b; }
    }
    if (lane == 0) {
        S.pivot[level] = best; S.pos[level] = best_a; S.end[level] = best_b;
        S.mask[level] = 0;
    }
    __syncwarp();
}

// Write the complete match (the state's levels, `w` at the last) as a row, by query
// vertex, while there is room; `slot` from the launch's counter.
__device__ __forceinline__ void list_match(const WinPlan& p, const WinState& S, int t,
                                           int w, int* out, long long limit,
                                           unsigned long long* filled)
{
    const unsigned long long slot = atomicAdd(filled, 1ull);
    if ((long long)slot >= limit) return;
    const int n = p.n;
    for (int l = 0; l < n - 1; ++l) out[slot * n + p.orders[t * n + l]] = S.m[l];
    out[slot * n + p.orders[t * n + n - 1]] = w;
}

// The matches of one task (all lanes call it; the count is lane 0's).
__device__ long long run_task(const WinGraph& g, const WinPlan& p, const WinOther& o,
                              long long window, WinState& S, int t, int u, int v,
                              long long first, int cur, int lane, int* out, long long limit,
                              unsigned long long* filled)
{
    const int n = p.n;
    if (lane == 0) {
        // Level 0 holds the root edge's span and flags, level 1 those with the root's
        // reverse arc (a directed type's level-1 entry), if it has one.
        S.m[0] = u; S.m[1] = v;
        S.lo[0] = S.hi[0] = first;
        S.lo2[0] = S.hi2[0] = first;
        S.etime[p.root_edge[t]] = S.etime2[p.root_edge[t]] = first;
        int f = 0;
        if (o.check) {
            const long long key = p.directed ? arc_key(u, v, ARC_OUT) : edge_key(u, v);
            const long long i = find_key(o.keys, o.count, key);
            const long long t2 = i >= 0 ? o.times[i] : first;
            S.lo2[0] = S.hi2[0] = t2;
            S.etime2[p.root_edge[t]] = t2;
            if (t2 == NO_TIME) f |= 2;
            if (find_key(o.structural, o.structural_count, key) >= 0) f |= 1;
        }
        S.flags[0] = f;
        bool counts = false;
        const bool ok = check_candidate(g, p, o, window, S, t, 1, v, -1, cur, true, &counts);
        S.mask[1] = ok ? (counts ? 3u : 1u) : 0u;   // level 1 keeps no candidate mask
    }
    __syncwarp();
    const unsigned root = S.mask[1];
    if (!(root & 1u)) return 0;
    if (n == 2) {
        long long found = 0;
        if (lane == 0 && (root & 2u)) {
            found = 1;
            if (limit > 0) {
                const unsigned long long slot = atomicAdd(filled, 1ull);
                if ((long long)slot < limit) {
                    out[slot * 2 + p.orders[t * 2]] = u;
                    out[slot * 2 + p.orders[t * 2 + 1]] = v;
                }
            }
        }
        __syncwarp();
        return found;
    }
    long long count = 0;
    int level = 2;
    open_level(g, p, S, t, level, lane);
    while (level >= 2) {
        if (S.mask[level] == 0) {
            if (S.pos[level] >= S.end[level]) { --level; continue; }
            const long long at = S.pos[level] + lane;
            bool counts = false;
            const bool ok = at < S.end[level] &&
                check_candidate(g, p, o, window, S, t, level, g.nbr[at], at, cur, false,
                                &counts);
            if (level == n - 1) {
                const unsigned found = __ballot_sync(FULL_MASK, ok && counts);
                if (lane == 0) count += __popc(found);
                if (limit > 0 && ok && counts)
                    list_match(p, S, t, g.nbr[at], out, limit, filled);
                __syncwarp();
                if (lane == 0) S.pos[level] += 32;
            } else {
                const unsigned found = __ballot_sync(FULL_MASK, ok);
                __syncwarp();
                if (lane == 0) {
                    S.mask[level] = found; S.base[level] = S.pos[level]; S.pos[level] += 32;
                }
            }
            __syncwarp();
            continue;
        }
        const unsigned mask = S.mask[level];
        const int b = __ffs(mask) - 1;
        const long long at = S.base[level] + b;
        __syncwarp();
        if (lane == 0) {
            S.mask[level] = mask & ~(1u << b);
            bool counts;
            check_candidate(g, p, o, window, S, t, level, g.nbr[at], at, cur, true, &counts);
        }
        __syncwarp();
        ++level;
        open_level(g, p, S, t, level, lane);
    }
    return count;
}

// A query's plan in the launch's plan blob (gpu/cuda/windowed.py PackedWindowPlan): its
// header, HEAD_INTS ints at heads + q * HEAD_INTS, gives the sizes and each array's
// offset in `blob`.
#define HEAD_INTS 19
enum { H_N, H_TYPES, H_PMAX, H_NBEFORE, H_WIDTH, H_DIRECTED, H_Q_LABEL, H_ORDERS,
       H_ROOT_LABEL, H_BW_COUNT, H_BW_LEVEL, H_BW_LABEL, H_ROOT_EDGE, H_BW_EDGE, H_BC_COUNT,
       H_BC_PAIRS, H_BEFORE, H_BW_KEY, H_BW_ARC };

__device__ __forceinline__ WinPlan plan_of(const int* heads, const int* blob, int q)
{
    const int* h = heads + q * HEAD_INTS;
    return WinPlan{h[H_N], blob + h[H_Q_LABEL], blob + h[H_ORDERS], blob + h[H_BW_COUNT],
                   blob + h[H_BW_LEVEL], blob + h[H_BW_LABEL], blob + h[H_ROOT_EDGE],
                   blob + h[H_BW_EDGE], blob + h[H_BC_COUNT], blob + h[H_BC_PAIRS],
                   h[H_PMAX], blob + h[H_BEFORE], h[H_NBEFORE], h[H_WIDTH], h[H_DIRECTED],
                   blob + h[H_BW_KEY], blob + h[H_BW_ARC]};
}

// The phase's buffer (gpu/cuda/window_layout.py): HEAD int64 entries, the counts, then
// each array's offset in bytes from the buffer's start, in window_layout.FIELDS' order.
enum { P_NVERTS, P_NUPDATES, P_QUERIES, P_NOTHER, P_NSTRUCTURAL, P_CHECK_OTHER, P_WORDS,
       P_VSTART, P_ETIME, P_FIRST_TIME, P_TASK_START, P_WINDOWS, P_LIMITS, P_OUT_AT,
       P_OTHER_KEYS, P_OTHER_TIMES, P_STRUCTURAL, P_COUNTERS, P_VERTS, P_NBR, P_NLAB, P_ELAB,
       P_RANK, P_US, P_VS, P_U_LABEL, P_V_LABEL, P_ROOT_ELAB, P_HEADS, P_BLOB, P_OUT,
       P_HEAD };

template <typename T>
__device__ __forceinline__ const T* part(const long long* phase, int field)
{
    return (const T*)((const char*)phase + phase[field]);
}

// Every windowed query of a phase in one launch: query q's tasks are the triples (update
// edge e, type t) numbered task_start[q] .. task_start[q + 1] - 1 (e * types + t), its
// window windows[q], its first limits[q] matches listed at out + out_at[q].  The phase's
// buffer also holds what the launch writes: `counters` (zero when copied up: [0] the next
// triple; per query q, [1 + 2q] its matches counted and [2 + 2q] its rows handed out)
// and `out`, the rows.
extern "C" __global__ void __launch_bounds__(32 * WIN_WARPS) match_window(
    long long* __restrict__ phase)
{
    __shared__ WinState states[WIN_WARPS];
    const int lane = threadIdx.x & 31;
    WinState& S = states[threadIdx.x >> 5];
    const int queries = (int)phase[P_QUERIES];
    const WinGraph g = {part<int>(phase, P_VERTS), phase[P_NVERTS],
                        part<long long>(phase, P_VSTART), part<int>(phase, P_NBR),
                        part<int>(phase, P_NLAB), part<int>(phase, P_ELAB),
                        part<long long>(phase, P_ETIME), part<int>(phase, P_RANK)};
    const WinOther o = {(int)phase[P_CHECK_OTHER], part<long long>(phase, P_OTHER_KEYS),
                        part<long long>(phase, P_OTHER_TIMES), phase[P_NOTHER],
                        part<long long>(phase, P_STRUCTURAL), phase[P_NSTRUCTURAL]};
    const int* __restrict__ us = part<int>(phase, P_US);
    const int* __restrict__ vs = part<int>(phase, P_VS);
    const long long* __restrict__ first_time = part<long long>(phase, P_FIRST_TIME);
    const int* __restrict__ u_label = part<int>(phase, P_U_LABEL);
    const int* __restrict__ v_label = part<int>(phase, P_V_LABEL);
    const int* __restrict__ root_elab = part<int>(phase, P_ROOT_ELAB);
    const long long* __restrict__ task_start = part<long long>(phase, P_TASK_START);
    const int* __restrict__ heads = part<int>(phase, P_HEADS);
    const int* __restrict__ blob = part<int>(phase, P_BLOB);
    const long long* __restrict__ windows = part<long long>(phase, P_WINDOWS);
    const long long* __restrict__ limits = part<long long>(phase, P_LIMITS);
    const long long* __restrict__ out_at = part<long long>(phase, P_OUT_AT);
    unsigned long long* counters =
        (unsigned long long*)((char*)phase + phase[P_COUNTERS]);
    int* out = (int*)((char*)phase + phase[P_OUT]);
    const long long ntasks = task_start[queries];
    while (true) {
        // 32 triples a warp at a time, a lane testing each one's root (most fail it): one
        // atomic per 32 triples, where one per triple made a phase's ~240,000 triples the
        // launch's floor (docs/benchmarks.md, "Windowed queries in the kernel").
        long long base = 0;
        if (lane == 0) base = (long long)atomicAdd(&counters[0], 32ull);
        base = __shfl_sync(FULL_MASK, base, 0);
        if (base >= ntasks) break;
        const long long task = base + lane;
        int q = 0, e = 0, t = 0;
        bool fits = false;
        if (task < ntasks) {
            int lo = 0, hi = queries - 1;       // the query whose triples hold `task`
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (task_start[mid] <= task) lo = mid; else hi = mid - 1;
            }
            q = lo;
            const int* h = heads + q * HEAD_INTS;
            const int types = h[H_TYPES], n = h[H_N];
            const long long local = task - task_start[q];
            e = (int)(local / types);
            t = (int)(local - (long long)e * types);
            // The root's test (gpu/cpu/windowed.py _count_edges', but the candidate bits):
            // the update edge in the subgraph (root_elab >= 0) with the labels of the
            // type's root.
            const int* q_label = blob + h[H_Q_LABEL];
            const int* orders = blob + h[H_ORDERS];
            fits = root_elab[e] >= 0 && root_elab[e] == blob[h[H_ROOT_LABEL] + t] &&
                   u_label[e] == q_label[orders[t * n]] &&
                   v_label[e] == q_label[orders[t * n + 1]];
        }
        unsigned todo = __ballot_sync(FULL_MASK, fits);
        while (todo) {
            const int b = __ffs(todo) - 1;
            todo &= todo - 1;
            const int qb = __shfl_sync(FULL_MASK, q, b);
            const int eb = __shfl_sync(FULL_MASK, e, b);
            const int tb = __shfl_sync(FULL_MASK, t, b);
            const long long found = run_task(g, plan_of(heads, blob, qb), o, windows[qb], S,
                                             tb, us[eb], vs[eb], first_time[eb], eb + 1, lane,
                                             out + out_at[qb], limits[qb],
                                             &counters[2 + 2 * qb]);
            if (lane == 0 && found)
                atomicAdd(&counters[1 + 2 * qb], (unsigned long long)found);
        }
    }
}
