// Warp-centric incremental matching (GAMMA Algorithm 1): one warp per update-edge task.
//
// A task is (update edge u-v, its rank, a task type of the plan).  The warp runs the
// type's matching order depth-first.  A level's candidates are the neighbour range of
// its smallest backward neighbour, filtered lane-parallel (candidate bit, edge label,
// total-order rule) and checked against the other backward neighbours by binary
// search, then compacted into the level's buffer with ballot/popc, so buffers stay
// sorted by id.  Injectivity is checked when a candidate is used, so a buffer stays
// valid (and is reused) while the level's backward vertices do not change.  The last
// level is counted (popc), never stored; the last two levels are counted together as
// |A||B| - |A & B| when they are not adjacent (the plan's tail_free).  When counting, a
// plan's trailing run of query leaves (its leaf_from, maybe after a head level) is counted
// as a product of its parents' candidate counts (leaf_product, match_tasks_leaves only;
// RapidFlow's leaves, as gpu/cpu/search.py counts them), not enumerated.
//
// Tasks are made on the device (gpu/cuda/kernels/tasks.cu) from the update edges and the
// candidate bits there.  Warps are persistent and take tasks from a global counter, so
// skewed tasks do not leave whole blocks idle.  Counts are exact 64-bit: per warp and
// query when counting (summed after the launch), per (edge, type) pair before listing.
// In listing mode a task writes its rows from its own offset (a prefix sum of the
// counting pass, per query) up to its query's end, for every member of its
// coalesced-search orbit.  A counting launch may first take leaf-rooted tasks that share
// the leaf's parent out into groups searched once each (match_groups, search_group).
//
// One file (past 1,000 lines) because every entry point is the same search: the levels'
// scans, the candidate buffers, work sharing and the persistent warps' schedule are
// shared device code, and the loader compiles one source per module with no include
// path (gpu/cuda/loader.py).
//
// Two layouts of the data graph, one search (templated on the layout):
// - ListGraph: the host's pooled lists, sorted by (neighbour label, id), mirrored; a
//   level scans one label segment; update ranks sit beside the neighbours.
// - PmaGraph: the packed memory array (gpu/graph/pma/) of keys src << 32 | label(dst) <<
//   label_shift | dst, sorted, with gaps that copy the last real key before them: a
//   label segment is found by two binary searches in [row[x], row[x + 1]) and scanned
//   skipping gaps; during a phase the value slots of its update edges point at their
//   ranks and labels, so the rank sits beside the neighbour as in the lists.
// (No standard headers: NVRTC compiles this without the host include paths.)

#define FULL_MASK 0xffffffffu
#define MAX_QUERY 32

// First position in [lo, hi) whose value is >= key (values sorted ascending there).
template <class T>
__device__ __forceinline__ long long lower_bound(const T* a, long long lo, long long hi, T key) {
    while (lo < hi) {
        long long mid = (lo + hi) >> 1;
        if (a[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// First position in [lo, hi) whose value is > key (values sorted ascending there).
template <class T>
__device__ __forceinline__ long long upper_bound(const T* a, long long lo, long long hi, T key) {
    while (lo < hi) {
        long long mid = (lo + hi) >> 1;
        if (a[mid] <= key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

struct ListGraph {
    static constexpr bool keyed = false;    // find() and rank() ignore the source vertex
    static constexpr bool arcs = true;      // directed plans run here (Plan's bw_key)
    const long long* start;
    const int* deg;
    const int* nbr;
    const int* nlab;
    const int* elab_;
    const int* rank_;

    // x's neighbours with label `want`: [lo, hi).
    __device__ __forceinline__ void range(int x, int want, long long& lo, long long& hi) const {
        long long s = start[x], e = s + deg[x];
        lo = lower_bound(nlab, s, e, want);
        hi = upper_bound(nlab, lo, e, want);    // not want + 1: labels reach INT_MAX
    }
    __device__ __forceinline__ bool real(long long) const { return true; }
    __device__ __forceinline__ int nbr_at(long long i) const { return nbr[i]; }
    __device__ __forceinline__ int elab(long long i) const { return elab_[i]; }
    __device__ __forceinline__ int rank(long long i, int, int) const { return rank_[i]; }
    // Position of w in x's range [lo, hi) (w has label `want`), or -1.
    __device__ __forceinline__ long long find(long long lo, long long hi, int, int w,
                                              int) const {
        long long pos = lower_bound(nbr, lo, hi, w);
        return (pos < hi && nbr[pos] == w) ? pos : -1;
    }
};

// The lists for undirected plans only (match_tasks_leaves, match_groups: counted leaves and
// grouped search are not built for directed plans).
struct UndirectedLists : ListGraph {
    static constexpr bool arcs = false;
};

struct PmaGraph {
    static constexpr bool keyed = true;
    static constexpr bool arcs = false;     // undirected graphs only
    // Keys are src << 32 | label(dst) << label_shift | dst: a source's keys are grouped by
    // neighbour label (a dense label index), then sorted by id, as in the lists.
    const unsigned long long* keys;
    // Edge labels (>= 0).  During a phase the slots of its update edges hold -(j + 1)
    // instead, j indexing their ranks and saved labels.
    const int* vals;
    const int* cnt;               // real slots at the front of each segment
    const long long* row;         // first slot of each vertex's keys
    int seg_shift;                // log2(segment size)
    int label_shift;              // bits of the vertex id in a key's low word
    const int* ranked;            // [j] rank of the phase's j-th directed update edge
    const int* saved;             // [j] its edge label

    __device__ __forceinline__ unsigned long long prefix(int x, int label) const {
        return ((unsigned long long)x << 32) + ((unsigned long long)label << label_shift);
    }
    // x's neighbours with label index `want`: [lo, hi).
    __device__ __forceinline__ void range(int x, int want, long long& lo, long long& hi) const {
        const long long s = row[x], e = row[x + 1];
        lo = lower_bound(keys, s, e, prefix(x, want));
        hi = lower_bound(keys, lo, e, prefix(x, want + 1));
    }
    __device__ __forceinline__ bool real(long long i) const {
        return (int)(i & ((1LL << seg_shift) - 1)) < cnt[i >> seg_shift];
    }
    __device__ __forceinline__ int nbr_at(long long i) const {
        return (int)(keys[i] & ((1ull << label_shift) - 1));
    }
    __device__ __forceinline__ int elab(long long i) const {
        const int v = vals[i];
        return v >= 0 ? v : saved[-v - 1];
    }
    __device__ __forceinline__ int rank(long long i, int, int) const {
        const int v = vals[i];
        return v >= 0 ? 0 : ranked[-v - 1];
    }
    // The first slot holding a key is real (gaps only copy keys before them).
    __device__ __forceinline__ long long find(long long lo, long long hi, int x, int w,
                                              int want) const {
        const unsigned long long key = prefix(x, want) + (unsigned)w;
        long long pos = lower_bound(keys, lo, hi, key);
        return (pos < hi && keys[pos] == key) ? pos : -1;
    }
};

struct Plan {
    int n;                    // query vertices
    int width;                // orbit members per type (perms' middle dimension)
    const int* q_label;       // [T, n]     a type's query vertex labels
    // Candidate bits of each query in the launch (one device array per query, by
    // address), so one launch serves the tasks of several standing queries.
    const unsigned long long* cand_ptrs;
    const int* cand_row;      // [T]        which of cand_ptrs a type's query reads
    const int* orders;        // [T, n]
    const int* level_of;      // [T, n]     level of each query vertex
    const int* bw_count;      // [T, n]
    // A level's backward entries, W a level (n; a directed plan's 2n: an arc each way):
    // the level it reaches, the edge's label, and the neighbour-list key the entry's
    // segment is read under (the level's label, or label index on the array; directed,
    // 2 label + 1 when the arc enters the backward vertex: gpu/graph/lists.py list_key).
    const int* bw_level;      // [T, n, W]
    const int* bw_label;      // [T, n, W]
    const int* bw_key;        // [T, n, W]
    int bw_width;             // W
    const unsigned char* tail_free;  // [T]
    const int* perms;         // [T, width, n]
    const long long* multiplicity;   // [T]
};

// The first backward entry of (type t, level) in the plan's [T, n, W] arrays.  Only a
// layout that takes arcs (G::arcs) reads W and the keys; the others run undirected plans
// (W = n, every key the level's label) and keep the registers (match_tasks_leaves spilled
// 160 bytes reading them, 104 without).
template <class G>
__device__ __forceinline__ long long bw_at(const Plan& p, int t, int level) {
    return ((long long)t * p.n + level) * (G::arcs ? p.bw_width : p.n);
}

// A launch's tasks, made on the device (gpu/cuda/kernels/tasks.cu): pair[i] = e * types + t
// for update edge e and task type t; their number is in ctl[TASKS].
struct Tasks {
    long long count;
    const int* pair;
    int types;
    const int* u;             // [E] the update edges' ends
    const int* v;
    const int* rank;          // [E] their ranks (0: unranked)
    __device__ __forceinline__ int type(long long task) const { return pair[task] % types; }
};

// A launch's leaf counts (read only when counting and `on`, on the lists' layout), one int64
// record in device memory (LEAF_ARGS words, gpu/cuda/match_launchers.py) read when a tail
// is counted: as kernel arguments they cost the search registers, which it then spills.
// A counted leaf q of parent y has as candidates the neighbours w of y through edges
// labelled as q's edge whose candidate bits hold q (leaf_total: all of y's edges, counted
// by the first task that needs them in this launch and kept in `cache` under the launch's
// `epoch`), less the phase's update edges at y that the task may not use (blocked by the
// total-order rule: prefix counts over the update edges sorted by y and rank, leaves.cu),
// less the used vertices among them.  A tail whose first leaf's parent has fewer than
// min_degree neighbours is enumerated: a short list is scanned faster than the counts'
// lookups are made.
struct Leaves {
    long long on;
    const int* from;                  // [T] level of the first leaf counted (n: none)
    const int* col;                   // [T, n] leaf q's column (-1: not a leaf)
    unsigned long long* cache;        // [slots, cols] epoch << 32 | y's total for column
    long long cols;
    long long epoch;                  // this launch's (> 0; older entries are stale)
    const long long* upd_key;         // [m] the update edges by end vertex: y << 32 | rank
    const int* upd_hits;              // [cols, m + 1] prefix counts (leaves.cu)
    long long upd_count;              // m
    long long min_degree;             // parents of fewer neighbours: leaves enumerated
    // The lists (the read view) and the plan's arrays again, so that leaf_product takes
    // a handful of arguments (see there).
    const long long* start;
    const int* deg;
    const int* nbr;
    const int* nlab;
    const int* elab;
    const int* rank;
    const int* orders;
    const int* bw_level;
    const int* bw_label;
    const int* q_label;
    const unsigned long long* cand_ptrs;
    const int* cand_row;
};
static_assert(sizeof(Leaves) == 22 * 8, "gpu/cuda/match_launchers.py LEAF_ARGS must match");

__device__ __forceinline__ bool blocked(int r, int cur) { return r != 0 && r < cur; }

__device__ __forceinline__ bool used(const int* m, int level, int w) {
    bool hit = false;
    for (int k = 0; k < level; ++k) hit |= (m[k] == w);
    return hit;
}

// Per-warp state in shared memory; arrays are indexed by level.  A level's buffer is
// still valid while none of its backward levels got a new vertex since it was built:
// set_at / built_at are readings of the warp's clock, which ticks on every change.
struct WarpState {
    int m[MAX_QUERY];         // data vertex per level
    int cnt[MAX_QUERY];       // candidates in the level's buffer
    int idx[MAX_QUERY];       // next candidate to try
    int end[MAX_QUERY];       // candidates past this one were given to other warps
    unsigned long long set_at[MAX_QUERY];    // when m[level] last changed
    unsigned long long built_at[MAX_QUERY];  // when buf[level] was filled (0: never)
    unsigned long long clock;
};

static_assert(sizeof(WarpState) == 1032, "gpu/cuda/match_launchers.py WARP_STATE_BYTES must match");

__device__ __forceinline__ void assign(WarpState& s, int level, int w) {
    if (s.m[level] != w) {
        s.m[level] = w;
        s.set_at[level] = ++s.clock;
    }
}

// True when buf[level] holds the list for the current backward vertices.
template <class G>
__device__ __forceinline__ bool cached(const Plan& p, const WarpState& s, int t, int level) {
    const unsigned long long built = s.built_at[level];
    if (built == 0) return false;
    const int nbc = p.bw_count[t * p.n + level];
    const int* bwl = p.bw_level + bw_at<G>(p, t, level);
    for (int j = 0; j < nbc; ++j)
        if (s.set_at[bwl[j]] > built) return false;
    return true;
}

// The rank a grouped search keeps for an edge: unranked edges (0) rank above every
// update edge.
#define NO_RANK 0x7fffffff
__device__ __forceinline__ int ranked(int r) { return r == 0 ? NO_RANK : r; }

// Fill `out` (when non-null) with the candidates of `level`, or only count them.
// With `count_unused`, candidates among m[:level] are left out (the last level).
// RANKED (grouped search): `rout` gets beside each candidate the lowest rank among its
// edges to the backward vertices (ranked()).
template <class G, bool RANKED = false>
__device__ long long scan_level(const G& g, const Plan& p, int t, int level, int cur,
                                const int* m, int* out, bool count_unused, int lane,
                                int* rout = nullptr) {
    const int n = p.n;
    const int q = p.orders[t * n + level];
    const unsigned bit = 1u << q;
    const unsigned* cand = (const unsigned*)p.cand_ptrs[p.cand_row[t]];
    const int nbc = p.bw_count[t * n + level];
    const long long at = bw_at<G>(p, t, level);
    const int* bwl = p.bw_level + at;
    const int* bwlab = p.bw_label + at;

    // Lane j < nbc finds backward entry j's segment.
    long long lo = 0, hi = 0;
    int x = -1, key = 0;
    if (lane < nbc) {
        x = m[bwl[lane]];
        key = G::arcs ? p.bw_key[at + lane] : p.q_label[t * n + q];
        g.range(x, key, lo, hi);
    }
    // Pivot: the shortest segment.
    long long best = (lane < nbc) ? (hi - lo) : (1LL << 62);
    int pivot = lane;
    for (int off = 16; off > 0; off >>= 1) {
        long long ob = __shfl_down_sync(FULL_MASK, best, off);
        int op = __shfl_down_sync(FULL_MASK, pivot, off);
        if (ob < best || (ob == best && op < pivot)) { best = ob; pivot = op; }
    }
    pivot = __shfl_sync(FULL_MASK, pivot, 0);
    const long long plo = __shfl_sync(FULL_MASK, lo, pivot);
    const long long phi = __shfl_sync(FULL_MASK, hi, pivot);
    const int px = G::keyed ? __shfl_sync(FULL_MASK, x, pivot) : 0;
    const int plab = bwlab[pivot];
    const unsigned lower_lanes = (1u << lane) - 1u;

    long long found = 0;
    for (long long base = plo; base < phi; base += 32) {
        long long i = base + lane;
        bool ok = i < phi && g.real(i);
        int w = ok ? g.nbr_at(i) : -1;
        int low = NO_RANK;
        if constexpr (RANKED) {
            if (ok) {
                const int r = g.rank(i, px, w);
                ok = (cand[w] & bit) && g.elab(i) == plab && !blocked(r, cur);
                low = ranked(r);
            }
        } else {
            if (ok) ok = (cand[w] & bit) && g.elab(i) == plab && !blocked(g.rank(i, px, w), cur);
        }
        for (int j = 0; j < nbc; ++j) {
            long long lj = __shfl_sync(FULL_MASK, lo, j);
            long long hj = __shfl_sync(FULL_MASK, hi, j);
            int xj = G::keyed ? __shfl_sync(FULL_MASK, x, j) : 0;
            int kj = G::keyed ? __shfl_sync(FULL_MASK, key, j) : 0;
            if (j == pivot || !__any_sync(FULL_MASK, ok)) continue;
            if (ok) {
                long long pos = g.find(lj, hj, xj, w, kj);
                if constexpr (RANKED) {
                    const int r = pos >= 0 ? g.rank(pos, xj, w) : 0;
                    ok = pos >= 0 && g.elab(pos) == bwlab[j] && !blocked(r, cur);
                    low = min(low, ranked(r));
                } else {
                    ok = pos >= 0 && g.elab(pos) == bwlab[j] &&
                         !blocked(g.rank(pos, xj, w), cur);
                }
            }
        }
        if (count_unused && ok) ok = !used(m, level, w);
        unsigned mask = __ballot_sync(FULL_MASK, ok);
        if (out != nullptr && ok) {
            out[found + __popc(mask & lower_lanes)] = w;
            if constexpr (RANKED) rout[found + __popc(mask & lower_lanes)] = low;
        }
        found += __popc(mask);
    }
    return found;
}

// A directed plan's level-1 entries (an undirected one has none): the root arc's reverse,
// when the query has it, is stored with its label and allowed by the total-order rule
// (gpu/cpu/search.py _root_checks).  Every lane returns it.
template <class G>
__device__ __forceinline__ bool root_arcs(const G& g, const Plan& p, int t, int cur,
                                          const int* m) {
    const int nbc = p.bw_count[t * p.n + 1];
    const long long at = bw_at<G>(p, t, 1);
    for (int j = 0; j < nbc; ++j) {
        const int x = m[p.bw_level[at + j]], key = p.bw_key[at + j];
        long long lo, hi;
        g.range(x, key, lo, hi);
        const long long pos = g.find(lo, hi, x, m[1], key);
        if (pos < 0 || g.elab(pos) != p.bw_label[at + j] || blocked(g.rank(pos, x, m[1]), cur))
            return false;
    }
    return true;
}

// Make buf[level] hold the level's candidates (reusing it when its backward vertices
// are unchanged).
template <class G, bool RANKED = false>
__device__ void candidates(const G& g, const Plan& p, int t, int level, int cur,
                           WarpState& s, int* buf, int lane, int* rbuf = nullptr) {
    if (cached<G>(p, s, t, level)) return;
    long long c = scan_level<G, RANKED>(g, p, t, level, cur, s.m, buf, false, lane, rbuf);
    __syncwarp();
    if (lane == 0) {
        s.cnt[level] = (int)c;
        s.built_at[level] = ++s.clock;
    }
    __syncwarp();
}

// Entries of buf[:count] that are not among m[:level] (buf is sorted by id).
__device__ long long unused_size(const int* buf, int count, const int* m, int level, int lane) {
    int hits = 0;
    if (lane < level) {
        long long pos = lower_bound(buf, 0, count, m[lane]);
        hits = pos < count && buf[pos] == m[lane];
    }
    return count - __popc(__ballot_sync(FULL_MASK, hits));
}

// |A & B| of two id-sorted buffers, minus elements among m[:level].
__device__ long long common_unused(const int* a, int na, const int* b, int nb,
                                   const int* m, int level, int lane) {
    if (na > nb) { const int* tp = a; a = b; b = tp; int tn = na; na = nb; nb = tn; }
    long long common = 0;
    for (int base = 0; base < na; base += 32) {
        int i = base + lane;
        bool ok = i < na;
        if (ok) {
            int w = a[i];
            long long pos = lower_bound(b, 0, nb, w);
            ok = pos < nb && b[pos] == w && !used(m, level, w);
        }
        common += __popc(__ballot_sync(FULL_MASK, ok));
    }
    return common;
}

// Write the match held in s.m (plus `last_w` at the last level) for every orbit member.
__device__ void emit(const Plan& p, int t, const int* m, int last_w, int* out,
                     long long pos, long long limit) {
    const int n = p.n;
    const long long members = p.multiplicity[t];
    for (long long member = 0; member < members && pos < limit; ++member, ++pos) {
        const int* perm = p.perms + ((long long)t * p.width + member) * n;
        for (int q = 0; q < n; ++q) {
            int lv = p.level_of[t * n + perm[q]];
            out[pos * n + q] = (lv == n - 1) ? last_w : m[lv];
        }
    }
}

// Last level in listing mode: enumerate unused candidates in id order and emit them.
template <class G>
__device__ long long list_last(const G& g, const Plan& p, int t, int cur, WarpState& s,
                               int* buf, int* out, long long pos, long long limit, int lane) {
    const int last = p.n - 1;
    candidates(g, p, t, last, cur, s, buf, lane);
    const long long members = p.multiplicity[t];
    const unsigned lower_lanes = (1u << lane) - 1u;
    long long found = 0;
    const int count = s.cnt[last];
    for (int base = 0; base < count; base += 32) {
        int i = base + lane;
        bool ok = i < count;
        int w = ok ? buf[i] : -1;
        if (ok) ok = !used(s.m, last, w);
        unsigned mask = __ballot_sync(FULL_MASK, ok);
        if (ok) {
            long long at = pos + (found + __popc(mask & lower_lanes)) * members;
            if (at < limit) emit(p, t, s.m, w, out, at, limit);
        }
        found += __popc(mask);
    }
    return found;
}

// A share record's candidate range at its level (the level's buffer rebuilt already).
__device__ __forceinline__ void take_range(WarpState& s, const volatile int* record, int floor,
                                           int lane) {
    if (lane == 0) {
        s.idx[floor] = record[2];
        s.end[floor] = min(record[3], s.cnt[floor]);
    }
    __syncwarp();
}

// The next unused candidate of buf[idx:count] (-1: none; every lane returns it), idx moved
// past it.  RANKED (grouped search): only one that some member can still use, the lower
// of mrp and its rank above cur; that lower rank goes to `low`.
template <bool RANKED>
__device__ __forceinline__ int next_candidate(const int* buf, const int* rbuf, int count,
                                              int& idx, const int* m, int level, int mrp,
                                              int cur, int& low, int lane) {
    while (idx < count) {
        const int i = idx + lane;
        bool ok = i < count;
        const int c = ok ? buf[i] : -1;
        int r = 0;
        if constexpr (RANKED) {
            r = ok ? min(mrp, rbuf[i]) : 0;
            ok = ok && r > cur;
        }
        if (ok) ok = !used(m, level, c);
        const unsigned mask = __ballot_sync(FULL_MASK, ok);
        if (mask) {
            const int first = __ffs(mask) - 1;
            if constexpr (RANKED) low = __shfl_sync(FULL_MASK, r, first);
            idx += first + 1;
            return __shfl_sync(FULL_MASK, c, first);
        }
        idx += 32;
    }
    return -1;
}

// Work sharing (GAMMA §V-A, across the whole grid as in BUG's global queue): a busy
// warp that sees idle warps hands over the upper half of the unexplored candidates at
// its shallowest open level.  A record names the task, the level, the candidate range
// and the vertices above it; the taker rebuilds that level's list (it is a function of
// those vertices) and searches the range.  Records only ever append (no wrap-around),
// so a slot is written once; `ready` publishes it.
struct Share {
    unsigned long long* ctl;  // [next_task, head, tail, active, waiting, tasks]
    int* records;             // [capacity, 4 + MAX_QUERY]: task, level, lo, hi, m[0..level)
    int* ready;               // [capacity]
    long long capacity;
    int enabled;
    int every;                // advance steps between looks at the waiting warps
};
// The first position in a[lo, hi) (sorted) holding key or more (UPPER: more than key):
// the warp probes 32 points a round, so a search takes a few dependent loads, not one a
// halving (every lane returns it).
template <class T, bool UPPER>
__device__ __forceinline__ long long warp_bound(const T* a, long long lo, long long hi, T key,
                                                int lane) {
    while (hi - lo > 32) {
        const long long step = (hi - lo + 31) / 32;
        const long long at = lo + lane * step;
        const int below = __popc(__ballot_sync(
            FULL_MASK, at < hi && (UPPER ? a[at] <= key : a[at] < key)));
        if (below == 0) return lo;
        const long long top = lo + below * step;
        lo = lo + (below - 1) * step + 1;
        hi = top < hi ? top : hi;
    }
    const long long at = lo + lane;
    return lo + __popc(__ballot_sync(FULL_MASK,
                                     at < hi && (UPPER ? a[at] <= key : a[at] < key)));
}

// x's neighbours with label `want` in the lists: [lo, hi) (ListGraph::range, by the warp).
__device__ __forceinline__ void warp_range(const Leaves* lv, int x, int want, long long& lo,
                                           long long& hi, int lane) {
    const long long s = lv->start[x], e = s + lv->deg[x];
    lo = warp_bound<int, false>(lv->nlab, s, e, want, lane);
    hi = warp_bound<int, true>(lv->nlab, lo, e, want, lane);
}

// y's neighbours through edges labelled el that have label `want` and candidate bit q
// (all of y's edges, ranked or not): from the cache when this launch counted them
// already, else counted and kept (every lane returns it).  Warps may count one entry at
// once: they write the same value, in one 64-bit store that no reader sees half of.
__device__ __forceinline__ long long leaf_total(const Leaves* lv, const unsigned* cand, int y,
                                             int c, int want, int el, int q, int lane) {
    unsigned long long* slot = lv->cache + (long long)y * lv->cols + c;
    unsigned long long seen = 0;
    if (lane == 0) seen = *(volatile unsigned long long*)slot;
    seen = __shfl_sync(FULL_MASK, seen, 0);
    if ((long long)(seen >> 32) == lv->epoch) return (long long)(seen & 0xffffffffull);
    long long lo, hi;
    warp_range(lv, y, want, lo, hi, lane);
    int found = 0;
    for (long long k = lo + lane; k < hi; k += 32)
        found += lv->elab[k] == el && (cand[lv->nbr[k]] >> q & 1u);
    found = __reduce_add_sync(FULL_MASK, found);
    if (lane == 0)
        *(volatile unsigned long long*)slot =
            (unsigned long long)lv->epoch << 32 | (unsigned)found;
    return found;
}

// Matches of the trailing leaves from level `first` of type t, given m[:used] (every lane
// returns it): per leaf, its candidates among its parent's neighbours (leaf_total, less
// the update edges the task may not use and the used vertices among them), less one for
// each earlier leaf of the run with the same parent, label and edge label (they share one
// set: a falling factorial); leaves with another parent or label have disjoint sets
// (gpu/plan/planner.py _leaf_run_start).
// Everything it reads comes from the Leaves record, not from registers the search holds
// (given the graph and the plan, it made the search spill on every path); inlined, it
// spills less than called (a call saves the search's live registers: GH trees 0.28 s
// inlined, 0.36 s called, H200, 2026-11-28).
__device__ __forceinline__ long long leaf_product(const Leaves* lv, int n, int t, int first,
                                                  int used, int cur, const int* m, int lane) {
    const unsigned* cand = (const unsigned*)lv->cand_ptrs[lv->cand_row[t]];
    long long product = 1;
    int seg_y = -1;                 // the parent whose blocked update edges are [from, to)
    long long from = 0, to = 0;
    for (int level = first; level < n; ++level) {
        const long long at = ((long long)t * n + level) * n;
        const int q = lv->orders[t * n + level];
        const int c = lv->col[t * n + q];
        const int el = lv->bw_label[at];
        const int want = lv->q_label[t * n + q];
        const int y = m[lv->bw_level[at]];
        long long size = leaf_total(lv, cand, y, c, want, el, q, lane);
        if (cur > 1 && lv->upd_count > 0) {     // blocked update edges: 0 < rank < cur
            if (y != seg_y) {                   // leaves of one parent: searched once
                const long long base = (long long)y << 32;
                seg_y = y;
                from = warp_bound<long long, false>(lv->upd_key, 0, lv->upd_count, base | 1,
                                                    lane);
                to = warp_bound<long long, false>(lv->upd_key, from, lv->upd_count,
                                                  base | cur, lane);
            }
            const int* hits = lv->upd_hits + c * (lv->upd_count + 1);
            size -= hits[to] - hits[from];
        }
        // The used vertices among y's candidates for q: each edge y-w looked up by the
        // whole warp in the shorter list (y is often a hub, w seldom).
        int w = -1;
        if (lane < used) w = m[lane];
        unsigned pending = __ballot_sync(FULL_MASK, w >= 0 && (cand[w] >> q & 1u));
        while (pending) {
            const int l = __ffs(pending) - 1;
            pending &= pending - 1;
            int a = y, b = __shfl_sync(FULL_MASK, w, l), b_label = want;
            if (lv->deg[b] < lv->deg[y]) {
                a = b;
                b = y;
                b_label = lv->q_label[t * n + lv->orders[t * n + lv->bw_level[at]]];
            }
            long long lo, hi;
            warp_range(lv, a, b_label, lo, hi, lane);
            const long long pos = warp_bound<int, false>(lv->nbr, lo, hi, b, lane);
            if (pos < hi && lv->nbr[pos] == b && lv->elab[pos] == el &&
                !blocked(lv->rank[pos], cur)) --size;
        }
        for (int earlier = first; earlier < level; ++earlier) {
            const long long ea = ((long long)t * n + earlier) * n;
            if (lv->bw_level[ea] == lv->bw_level[at] && lv->bw_label[ea] == el &&
                lv->q_label[t * n + lv->orders[t * n + earlier]] == want) --size;
        }
        if (size <= 0) return 0;
        product *= size;
    }
    return product;
}

enum { NEXT_TASK = 0, HEAD = 1, TAIL = 2, ACTIVE = 3, WAITING = 4, TASKS = 5 };
#define RECORD_INTS (4 + MAX_QUERY)
#define FEW_TASKS 64

__device__ __forceinline__ unsigned long long peek(unsigned long long* x) {
    return *(volatile unsigned long long*)x;
}

// Lane 0: give away half of the shallowest open level when warps are waiting for work.
// A grouped search (`mr` non-null) also writes the lowest rank of the levels above into
// the record's slot of the leaf's level, whose vertex it leaves unset.
__device__ void share_work(const Share& sh, WarpState& s, long long task, int floor, int level,
                           const int* mr = nullptr, int leaf = 0) {
    const unsigned long long waiting = peek(sh.ctl + WAITING);
    if (waiting == 0) return;
    const unsigned long long queued = peek(sh.ctl + TAIL) - peek(sh.ctl + HEAD);
    if (queued >= waiting) return;
    for (int l = floor; l <= level; ++l) {
        const int left = s.end[l] - s.idx[l];
        if (left < 1) continue;
        if (peek(sh.ctl + TAIL) >= (unsigned long long)sh.capacity) return;
        const unsigned long long slot = atomicAdd(sh.ctl + TAIL, 1ULL);
        if (slot >= (unsigned long long)sh.capacity) return;
        const int mid = s.idx[l] + left / 2;     // left == 1: give the one away
        int* r = sh.records + slot * RECORD_INTS;
        r[0] = (int)task;
        r[1] = l;
        r[2] = mid;
        r[3] = s.end[l];
        for (int k = 0; k < l; ++k) r[4 + k] = s.m[k];
        if (mr != nullptr) r[4 + leaf] = mr[l - 1];
        s.end[l] = mid;
        __threadfence();
        atomicExch(sh.ready + slot, 1);
        return;
    }
}

// Matches of one task, or of the part of it a share record names (`record` non-null):
// the search starts at the record's level with its candidate range and ends when it
// backtracks above that level.  In listing mode rows go to out from `pos`.
template <class G, bool LEAVES>
__device__ long long search(const G& g, const Plan& p, const Tasks& tk, const Leaves* lv,
                            long long task, const volatile int* record, const Share& sh,
                            WarpState& s,
                            int* bufs,
                            long long width, int* out, long long pos, long long limit,
                            bool listing, int lane) {
    const int n = p.n;
    const int last = n - 1;
    const unsigned pair = (unsigned)tk.pair[task];
    const int e = (int)(pair / (unsigned)tk.types);
    const int t = (int)(pair - (unsigned)e * (unsigned)tk.types);
    const int cur = tk.rank[e];
    const int floor = record ? record[1] : 2;
    if (lane == 0) {
        for (int l = 0; l < n; ++l) s.built_at[l] = 0;
        assign(s, 0, tk.u[e]);
        assign(s, 1, tk.v[e]);
        for (int l = 2; l < floor; ++l) assign(s, l, record[4 + l]);
    }
    __syncwarp();
    // A shared part's task passed this where it began.
    if constexpr (G::arcs)
        if (!record && !root_arcs(g, p, t, cur, s.m)) return 0;
    if (n == 2) {
        if (listing && lane == 0) emit(p, t, s.m, s.m[1], out, pos, limit);
        return 1;
    }
    const bool pair_tail = p.tail_free[t] && !listing;
    long long total = 0;
    int level = floor;
    bool descend = true;
    if (record) {
        candidates(g, p, t, floor, cur, s, bufs + floor * width, lane);
        take_range(s, record, floor, lane);
        descend = false;
    }
    unsigned steps = 0;
    while (true) {
        int* buf = bufs + level * width;
        if (descend) {
            descend = false;
            // Only in match_tasks_leaves (the others keep their registers: this path
            // makes the search spill some); read here, not kept in a register.
            if constexpr (LEAVES) if (!listing && lv->on && level == lv->from[t] &&
                                         lv->deg[s.m[p.bw_level[bw_at<G>(p, t, level)]]] >=
                                             lv->min_degree) {
                total += leaf_product(lv, n, t, level, level, cur, s.m, lane);
                if (--level < floor) return total;
                continue;
            }
            if (level == last) {
                if (listing) {
                    long long c = list_last(g, p, t, cur, s, buf, out, pos, limit, lane);
                    pos += c * p.multiplicity[t];
                    total += c;
                    if (pos >= limit) return total;   // the counting pass has the total
                } else if (cached<G>(p, s, t, last)) {
                    total += unused_size(buf, s.cnt[last], s.m, last, lane);
                } else {
                    // Count-only: nothing is stored, so nothing can be reused either.
                    total += scan_level(g, p, t, last, cur, s.m, nullptr, true, lane);
                }
                if (--level < floor) return total;
                continue;
            }
            if (level == last - 1 && pair_tail) {
                // The last two vertices are not adjacent: with A, B their unused
                // candidates, the pairs (a, b), a != b, number |A||B| - |A & B|.
                int* next = bufs + last * width;
                candidates(g, p, t, level, cur, s, buf, lane);
                candidates(g, p, t, last, cur, s, next, lane);
                long long na = unused_size(buf, s.cnt[level], s.m, level, lane);
                if (na > 0) {
                    long long nb = unused_size(next, s.cnt[last], s.m, level, lane);
                    long long both = common_unused(buf, s.cnt[level], next, s.cnt[last],
                                                   s.m, level, lane);
                    total += na * nb - both;
                }
                if (--level < floor) return total;
                continue;
            }
            candidates(g, p, t, level, cur, s, buf, lane);
            if (lane == 0) {
                s.idx[level] = 0;
                s.end[level] = s.cnt[level];
            }
            __syncwarp();
        }
        if (sh.enabled && ++steps % sh.every == 0) {
            if (lane == 0) share_work(sh, s, task, floor, level);
            __syncwarp();
        }
        // Advance at `level` to its next unused candidate.
        int idx = s.idx[level];
        const int count = s.end[level];
        int low = 0;
        const int w = next_candidate<false>(buf, nullptr, count, idx, s.m, level, 0, 0, low,
                                            lane);
        __syncwarp();
        if (w < 0) {
            if (lane == 0) s.idx[level] = count;
            __syncwarp();
            if (--level < floor) return total;
            continue;
        }
        if (lane == 0) {
            s.idx[level] = idx;
            assign(s, level, w);
        }
        __syncwarp();
        ++level;
        descend = true;
    }
}

// The kernel's parameters after the graph's (plan, tasks, scratch, work sharing and
// results), shared by both layouts' entry points.
#define MATCH_PARAMS \
        const unsigned long long* cand_ptrs, \
        int n, int width_members, const int* q_label, const int* cand_row, \
        const int* orders, const int* level_of, \
        const int* bw_count, const int* bw_level, const int* bw_label, \
        const int* bw_key, int bw_width, const unsigned char* tail_free, const int* perms, const long long* multiplicity, \
        const int* task_pair, int types, const int* edge_u, const int* edge_v, \
        const int* edge_rank, \
        int* bufs, long long width, unsigned long long* ctl, int* records, int* ready, \
        long long capacity, int sharing, int share_every, unsigned long long* counts, \
        int by_task, int queries, const long long* offsets, int* out, \
        const long long* row_end, int listing, \
        const Leaves* leaves
#define MATCH_ARGS cand_ptrs, n, width_members, q_label, cand_row, orders, level_of, \
        bw_count, bw_level, bw_label, bw_key, bw_width, tail_free, perms, multiplicity, \
        task_pair, types, \
        edge_u, edge_v, edge_rank, bufs, width, ctl, records, ready, capacity, sharing, \
        share_every, counts, by_task, queries, offsets, out, row_end, listing, leaves

// Grouped search of leaf-rooted tasks (gpu/cpu/leaf_groups.py on the CPU): the tasks of
// one leaf-rooted type whose root edges share the leaf's parent p explore the same
// partial matches of the rest of the query, so a group of them is searched once.  Member
// i (rank r_i, leaf vertex y_i) differs from the others only by the total-order rule,
// which admits no update edge ranked below r_i, and by injectivity, which keeps y_i out
// of the match.  The group searches with its lowest rank, and each level keeps `mr`, the
// lowest rank among the edges the partial match uses (its candidates' ranks are kept
// beside them in the buffers); a match counts once for each member with r_i < mr whose
// leaf it does not use.  Only levels with the leaf's label can use a member's leaf:
// `hit` holds there the rank of the member whose leaf was taken (NO_RANK: none).
// Members are listed by rank (the low 31 bits of the sorted grouping keys) and by leaf
// vertex (gpu/cuda/kernels/groups.cu makes both).  Counting only, with no counted tail:
// the last level is counted with each candidate's weight.
struct Groups {
    const int* type;                  // [G]
    const int* parent;                // [G] the parent's data vertex
    const long long* lo;              // [G] members lo..hi-1 of the arrays below
    const long long* hi;
    const unsigned long long* key;    // [K] by rank within a group: rank in the low bits
    const int* leaf_by_id;            // [K] by leaf vertex within a group
    const int* rank_by_id;            // [K] that member's rank
    const int* leaf_root;             // [T] the leaf's root level (0 or 1; -1: none)
};
#define RANK_BITS 31

struct GroupState {
    int mr[MAX_QUERY];        // lowest rank of the edges used by m[:level + 1]
    int hit[MAX_QUERY];       // rank of the member whose leaf m[level] is (NO_RANK: none)
};

// Members ranked below x whose leaf is none of m[2:level] (every lane returns it).
__device__ __forceinline__ long long group_weight(const Groups& gr, long long lo, long long hi,
                                                  int x, const GroupState& gs, int level) {
    const unsigned long long base = gr.key[lo] >> RANK_BITS << RANK_BITS;
    long long w = lower_bound(gr.key, lo, hi, base | (unsigned)x) - lo;
    for (int k = 2; k < level; ++k) w -= gs.hit[k] < x;
    return w;
}

// The rank of the member whose leaf vertex is w, or NO_RANK.
__device__ __forceinline__ int member_rank(const Groups& gr, long long lo, long long hi,
                                           int w) {
    const long long at = lower_bound(gr.leaf_by_id, lo, hi, w);
    return (at < hi && gr.leaf_by_id[at] == w) ? gr.rank_by_id[at] : NO_RANK;
}

__device__ __forceinline__ bool leaf_label_at(const Plan& p, int t, int level, int label) {
    return p.q_label[t * p.n + p.orders[t * p.n + level]] == label;
}

// The weighted count of the last level: each unused candidate counts for the members
// ranked below the lower of mr and its own rank, less the member whose leaf it is.
template <class G>
__device__ long long group_last(const G& g, const Plan& p, const Groups& gr, int t, long long lo,
                                long long hi, int cur, bool collide, WarpState& s,
                                const GroupState& gs, int* buf, int* rbuf, int lane) {
    const int last = p.n - 1;
    const int mrp = gs.mr[last - 1];
    const long long prefix = group_weight(gr, lo, hi, mrp, gs, last);
    if (prefix == 0) return 0;     // a candidate's weight never exceeds its prefix's
    candidates<G, true>(g, p, t, last, cur, s, buf, lane, rbuf);
    const int count = s.cnt[last];
    long long total = 0;
    for (int i = lane; i < count; i += 32) {
        const int w = buf[i];
        if (used(s.m, last, w)) continue;
        const int x = min(mrp, rbuf[i]);
        long long weight = x == mrp ? prefix : group_weight(gr, lo, hi, x, gs, last);
        if (collide && weight > 0 && member_rank(gr, lo, hi, w) < x) --weight;
        total += weight;
    }
    for (int off = 16; off > 0; off >>= 1) total += __shfl_down_sync(FULL_MASK, total, off);
    return __shfl_sync(FULL_MASK, total, 0);
}

// The summed match counts of a group's members, or of the part of its search a share
// record names (whose leaf slot carries the levels above's lowest rank).  Buffers as in
// search(), with each level's candidates' ranks in the n levels after them.
template <class G>
__device__ long long search_group(const G& g, const Plan& p, const Groups& gr, long long task,
                                  const volatile int* record, const Share& sh, WarpState& s,
                                  GroupState& gs, int* bufs, long long width, int lane) {
    const int n = p.n;
    const int last = n - 1;
    const int t = gr.type[task];
    const int leaf = gr.leaf_root[t];
    const long long lo = gr.lo[task], hi = gr.hi[task];
    const int cur = (int)(gr.key[lo] & NO_RANK);       // the lowest member rank
    const int label = p.q_label[t * n + p.orders[t * n + leaf]];
    const int floor = record ? record[1] : 2;
    int* rbufs = bufs + n * width;
    if (lane == 0) {
        for (int l = 0; l < n; ++l) s.built_at[l] = 0;
        assign(s, leaf, -1);            // the members' leaves: weights, not a vertex
        assign(s, 1 - leaf, gr.parent[task]);
        gs.mr[1] = NO_RANK;
        gs.hit[0] = gs.hit[1] = NO_RANK;
        for (int l = 2; l < floor; ++l) {
            assign(s, l, record[4 + l]);
            gs.hit[l] = leaf_label_at(p, t, l, label) ? member_rank(gr, lo, hi, s.m[l])
                                                      : NO_RANK;
        }
        if (record) gs.mr[floor - 1] = record[4 + leaf];
    }
    __syncwarp();
    long long total = 0;
    int level = floor;
    bool descend = true;
    if (record) {
        candidates<G, true>(g, p, t, floor, cur, s, bufs + floor * width, lane,
                            rbufs + floor * width);
        take_range(s, record, floor, lane);
        descend = false;
    }
    unsigned steps = 0;
    while (true) {
        int* buf = bufs + level * width;
        int* rbuf = rbufs + level * width;
        if (descend) {
            descend = false;
            if (level == last) {
                total += group_last(g, p, gr, t, lo, hi, cur, leaf_label_at(p, t, last, label),
                                    s, gs, buf, rbuf, lane);
                if (--level < floor) return total;
                continue;
            }
            candidates<G, true>(g, p, t, level, cur, s, buf, lane, rbuf);
            if (lane == 0) {
                s.idx[level] = 0;
                s.end[level] = s.cnt[level];
            }
            __syncwarp();
        }
        if (sh.enabled && ++steps % sh.every == 0) {
            if (lane == 0) share_work(sh, s, task, floor, level, gs.mr, leaf);
            __syncwarp();
        }
        // Advance at `level` to its next unused candidate that some member can use.
        int idx = s.idx[level];
        const int count = s.end[level];
        int low = 0;
        const int w = next_candidate<true>(buf, rbuf, count, idx, s.m, level, gs.mr[level - 1],
                                           cur, low, lane);
        __syncwarp();
        if (w < 0) {
            if (lane == 0) s.idx[level] = count;
            __syncwarp();
            if (--level < floor) return total;
            continue;
        }
        if (lane == 0) {
            s.idx[level] = idx;
            assign(s, level, w);
            gs.mr[level] = low;
            gs.hit[level] = leaf_label_at(p, t, level, label) ? member_rank(gr, lo, hi, w)
                                                              : NO_RANK;
        }
        __syncwarp();
        ++level;
        descend = true;
    }
}

// This warp's row of per-warp counts (counts[warp * queries + q], see add_count).
__device__ __forceinline__ long long warp_row() {
    return (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
}

// Matches found by a warp for a task (or a shared part of one): with `by_task`,
// counts[pair] += c, indexed by the task's (edge, type) pair rather than by where
// make_tasks put it, so that per-pair arrays have a fixed order (searched matches, before
// orbit multiplicity; several warps may add to one task); otherwise the warp's own total of the task's query, counts[warp *
// queries + cand_row[t]], grows by c times the orbit size, and when the warp is done it
// adds its totals to the last row, counts[warps * queries + q] (flush_counts).  Counts
// start at zero.
__device__ __forceinline__ void add_count(const Plan& p, const Tasks& tk,
                                          unsigned long long* counts, int by_task,
                                          int queries, long long task, long long c) {
    if (c == 0) return;
    if (by_task) {
        atomicAdd(counts + tk.pair[task], (unsigned long long)c);
    } else {
        // Read again here rather than kept live across the search (registers).
        const int t = tk.type(task);
        counts[warp_row() * queries + p.cand_row[t]] +=
            (unsigned long long)(c * p.multiplicity[t]);
    }
}

// Lane 0, when the warp is done: its per-query totals into the last row, and its own row
// back to zero (a phase's edge slices run as launches over the same counts).
// Not inlined: inlined at the kernel's two exits it made both kernels spill registers.
__device__ __noinline__ void flush_counts(unsigned long long* counts, int by_task,
                                             int queries) {
    if (by_task) return;
    const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
    const long long warp = warp_row();
    for (int q = 0; q < queries; ++q) {
        const unsigned long long c = counts[warp * queries + q];
        if (c) atomicAdd(counts + warps * queries + q, c);
        counts[warp * queries + q] = 0;     // the next launch over these counts adds anew
    }
}

// The launch is sized for every (edge, type) pair, of which the candidate bits keep
// few.  With more than FEW_TASKS tasks, blocks past them leave at once (a warp per
// task: idle warps would share work the short tasks of dense queries do not need,
// 15% slower on GH dense 100-edge batches); with fewer, every warp stays to take
// shared parts of them (3x faster on GH sparse one-edge batches, docs/benchmarks.md).
__device__ __forceinline__ bool surplus_block(unsigned long long* ctl) {
    const unsigned long long num_tasks = peek(ctl + TASKS);
    return num_tasks > FEW_TASKS &&
           (unsigned long long)blockIdx.x * (blockDim.x >> 5) >= num_tasks;
}

// The persistent warps' schedule, shared by both searches: whole tasks from the global
// counter (`whole(task)`), then shared parts (`part(task, record)`) until nothing is
// queued and no warp is active.  A warp counts as active from before it takes its first
// task until the whole tasks are gone, so no warp can see "nothing active, nothing
// queued" while work is still being handed out, nor between two whole tasks of another
// warp (an idle warp that left then could not take the parts that warp shares next);
// only active warps add records, and each checks the queue again before it can leave.
template <class Whole, class Part>
__device__ __forceinline__ void run_warps(const Share& sh, int* records, Whole whole,
                                          Part part, int lane) {
    unsigned long long* ctl = sh.ctl;
    if (lane == 0) atomicAdd(ctl + ACTIVE, 1ULL);
    while (true) {
        unsigned long long task = 0;
        if (lane == 0) {
            task = atomicAdd(ctl + NEXT_TASK, 1ULL);
            if (task >= peek(ctl + TASKS)) task = ~0ULL;     // none left
        }
        task = __shfl_sync(FULL_MASK, task, 0);
        if (task == ~0ULL) break;
        whole((long long)task);
    }
    if (lane == 0) {
        atomicAdd(ctl + ACTIVE, ~0ULL);
        atomicAdd(ctl + WAITING, 1ULL);
    }
    if (!sh.enabled) return;
    while (true) {
        long long slot = -1;
        bool done = false;
        if (lane == 0) {
            const unsigned long long head = peek(ctl + HEAD);
            const unsigned long long tail = min(peek(ctl + TAIL),
                                                (unsigned long long)sh.capacity);
            if (head < tail) {
                atomicAdd(ctl + ACTIVE, 1ULL);
                if (atomicCAS(ctl + HEAD, head, head + 1) == head) {
                    slot = (long long)head;
                    atomicAdd(ctl + WAITING, ~0ULL);
                } else {
                    atomicAdd(ctl + ACTIVE, ~0ULL);
                }
            } else if (peek(ctl + ACTIVE) == 0 && peek(ctl + HEAD) >= min(peek(ctl + TAIL),
                                                       (unsigned long long)sh.capacity)) {
                done = true;
            } else {
                __nanosleep(200);
            }
        }
        done = __shfl_sync(FULL_MASK, done, 0);
        slot = __shfl_sync(FULL_MASK, slot, 0);
        if (done) break;
        if (slot < 0) continue;
        int* r = records + slot * RECORD_INTS;
        if (lane == 0) {
            while (atomicAdd(sh.ready + slot, 0) == 0) __nanosleep(32);
        }
        __syncwarp();
        __threadfence();
        const long long task = *(volatile int*)r;   // volatile: never a stale L1 line
        part(task, r);
        if (lane == 0) {
            atomicAdd(ctl + ACTIVE, ~0ULL);
            atomicAdd(ctl + WAITING, 1ULL);
        }
    }
    if (lane == 0) atomicAdd(ctl + WAITING, ~0ULL);
}

// In listing mode the task of pair i writes rows from offsets[i] up to its query's
// row_end[cand_row[t]] (tasks starting there or past it are skipped): the queries of a
// launch list into one buffer, each into its own range of it.  Work sharing is off, so a
// task's rows keep their order.
template <class G, bool LEAVES>
__device__ __forceinline__ void match_all(const G& g, MATCH_PARAMS) {
    const Plan p{n, width_members, q_label, cand_ptrs, cand_row, orders, level_of, bw_count,
                 bw_level, bw_label, bw_key, bw_width, tail_free, perms, multiplicity};
    const Tasks tk{(long long)*(volatile unsigned long long*)(ctl + TASKS), task_pair, types,
                   edge_u, edge_v, edge_rank};
    const Share sh{ctl, records, ready, capacity, sharing && !listing, share_every};
    if (surplus_block(ctl)) return;
    extern __shared__ WarpState states[];
    const int lane = threadIdx.x & 31;
    const int warp_in_block = threadIdx.x >> 5;
    WarpState& s = states[warp_in_block];
    if (lane == 0) {
        s.clock = 0;
        for (int l = 0; l < MAX_QUERY; ++l) { s.m[l] = -1; s.set_at[l] = 0; }
    }
    __syncwarp();
    int* my_bufs = bufs + warp_row() * p.n * width;
    run_warps(sh, records,
        [&](long long task) {
            long long pos = 0, end = 0;
            if (listing) {
                pos = offsets[tk.pair[task]];
                end = row_end[p.cand_row[tk.type(task)]];
            }
            if (!listing || pos < end) {
                long long c = search<G, LEAVES>(g, p, tk, leaves, task, nullptr, sh, s,
                                                my_bufs, width, out, pos, end,
                                                listing != 0, lane);
                if (lane == 0) add_count(p, tk, counts, by_task, queries, task, c);
            }
        },
        [&](long long task, const int* r) {
            long long c = search<G, LEAVES>(g, p, tk, leaves, task, r, sh, s, my_bufs,
                                            width, out, 0, 0, false, lane);
            if (lane == 0) add_count(p, tk, counts, by_task, queries, task, c);
        },
        lane);
    if (lane == 0) flush_counts(counts, by_task, queries);
}

// 128 threads (4 warps) per block; at least 7 blocks per SM keeps both kernels at 72
// registers (80 without the bound, no spills with it).
extern "C" __global__ void __launch_bounds__(128, 7) match_tasks(
        const long long* start, const int* deg, const int* nbr, const int* nlab,
        const int* elab, const int* rank, MATCH_PARAMS) {
    match_all<ListGraph, false>(ListGraph{start, deg, nbr, nlab, elab, rank}, MATCH_ARGS);
}

// match_tasks with counted leaf tails (`leaves`, on the lists' layout).
extern "C" __global__ void __launch_bounds__(128, 7) match_tasks_leaves(
        const long long* start, const int* deg, const int* nbr, const int* nlab,
        const int* elab, const int* rank, MATCH_PARAMS) {
    match_all<UndirectedLists, true>(UndirectedLists{{start, deg, nbr, nlab, elab, rank}},
                                     MATCH_ARGS);
}

extern "C" __global__ void __launch_bounds__(128, 7) match_tasks_pma(
        const unsigned long long* keys, const int* vals, const int* cnt, const long long* row,
        int seg_shift, int label_shift, const int* ranked, const int* saved, MATCH_PARAMS) {
    match_all<PmaGraph, false>(PmaGraph{keys, vals, cnt, row, seg_shift, label_shift,
                                        ranked, saved},
              MATCH_ARGS);
}

// Leaf-rooted groups (search_group) on the lists' layout, counted per warp and query as
// match_tasks counts (counts [warps + 1, queries], the launch's totals in the last row);
// ctl[TASKS] holds the number of groups.  Shared memory: a WarpState, then a GroupState,
// per warp.
extern "C" __global__ void __launch_bounds__(128, 7) match_groups(
        const long long* start, const int* deg, const int* nbr, const int* nlab,
        const int* elab, const int* rank,
        const unsigned long long* cand_ptrs, int n, const int* q_label, const int* cand_row,
        const int* orders, const int* bw_count, const int* bw_level, const int* bw_label,
        const int* bw_key, int bw_width, const long long* multiplicity, const int* leaf_root,
        const int* group_type, const int* group_parent, const long long* group_lo,
        const long long* group_hi, const unsigned long long* group_key,
        const int* leaf_by_id, const int* rank_by_id,
        int* bufs, long long width, unsigned long long* ctl, int* records, int* ready,
        long long capacity, int sharing, int share_every, unsigned long long* counts,
        int queries) {
    const UndirectedLists g{{start, deg, nbr, nlab, elab, rank}};
    const Plan p{n, 0, q_label, cand_ptrs, cand_row, orders, nullptr, bw_count, bw_level,
                 bw_label, bw_key, bw_width, nullptr, nullptr, multiplicity};
    const Groups gr{group_type, group_parent, group_lo, group_hi, group_key, leaf_by_id,
                    rank_by_id, leaf_root};
    const Share sh{ctl, records, ready, capacity, sharing, share_every};
    // Every warp stays, however many groups there are, to take shared parts: a group is
    // a hub's work (with surplus_block's exit, GH sparse_1 took 356 ms grouped, 142 ms
    // without; tree_0 235 and 122 ms; H200, 2026-11-29).
    extern __shared__ WarpState group_states[];     // (the same memory as `states`)
    const int lane = threadIdx.x & 31;
    const int warp_in_block = threadIdx.x >> 5;
    WarpState& s = group_states[warp_in_block];
    GroupState& gs = ((GroupState*)(group_states + (blockDim.x >> 5)))[warp_in_block];
    if (lane == 0) {
        s.clock = 0;
        for (int l = 0; l < MAX_QUERY; ++l) { s.m[l] = -1; s.set_at[l] = 0; }
    }
    __syncwarp();
    int* my_bufs = bufs + warp_row() * 2 * n * width;
    auto add = [&](long long task, long long c) {
        if (lane == 0 && c != 0) {
            const int t = gr.type[task];
            counts[warp_row() * queries + cand_row[t]] +=
                (unsigned long long)(c * multiplicity[t]);
        }
    };
    run_warps(sh, records,
        [&](long long task) {
            add(task, search_group(g, p, gr, task, nullptr, sh, s, gs, my_bufs, width, lane));
        },
        [&](long long task, const int* r) {
            add(task, search_group(g, p, gr, task, r, sh, s, gs, my_bufs, width, lane));
        },
        lane);
    if (lane == 0) flush_counts(counts, 0, queries);
}
