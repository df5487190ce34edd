// The packed-memory-array batch kernels of gpu/graph/pma/ (its generic array path,
// update.py, is the reference each is tested against on the device).
//
// A batch climbs the implicit tree of windows one level at a time (device_update.py,
// `update_on_device`); at each level the host launches, over every window of the level:
//   plan_windows    each window's segments, insert range and delete range (binary search
//                   in the batch's sorted segment ids) and, above the leaves, how many
//                   elements it would hold and whether that stays within the level's
//                   thresholds (its fit flag);
//   merge_leaves    leaves (segments of at most 32 slots): S lanes per segment, in place;
//   merge_windows   windows of up to WINDOW_MAX slots: one block each, in shared memory;
//   large_*         larger windows: several blocks each, through global scratch (GAMMA's
//                   "device" strategy for windows beyond shared memory);
//   parent_windows  the parent of each window that did not fit, once per parent.
// Merges skip windows whose fit flag is clear, so the host needs no compaction between
// them and reads back one number per level (how many parents).  At the end set_rows
// sets the row offsets from the rewritten windows' slots.
//
// The invariant every merge keeps (array.py's docstring): a segment holds its `cnt`
// elements packed at its front, and its gaps copy the last real key before them, so the
// keys are non-decreasing.  A merged window spreads its `total` elements evenly: segment
// k of m gets total / m elements, one more for the first total % m.  A segment left empty
// gets key 0 here and is counted; the host then repairs every gap (update.py `fill_gaps`).
//
// Shared layouts (gpu/cuda/pma_launchers.py names the same indices):
//   plan[PLAN_ROWS][num_windows], int64: first and end segment, insert range, delete range
//     (indices into the batch's sorted inserts and deletes) and the total;
//   record[], uint64 counters the host reads once per batch: segments left empty, windows
//     whose merge found another total than their plan, rewritten windows followed by an
//     empty segment, then per level the windows rewritten and their slots.
// Header-free: compiled through NVRTC (CuPy RawModule) with no standard headers.

#define DEAD (-2147483647 - 1)
#define FULL_MASK 0xffffffffu

#define PLAN_S0 0
#define PLAN_S1 1
#define PLAN_IB 2
#define PLAN_IE 3
#define PLAN_DB 4
#define PLAN_DE 5
#define PLAN_TOTAL 6

#define RECORD_EMPTIED 0
#define RECORD_MISCOUNTED 1
#define RECORD_FOLLOWERS 2
#define RECORD_LEVELS 3

#define PLAN_RANGES 0       // plan_windows modes: ranges only (leaves: merge_leaves decides)
#define PLAN_DECIDE 1       // ranges, totals, fit flags
#define PLAN_TOTALS 2       // ranges and totals (the root: the host decides)

__device__ __forceinline__ long long min_ll(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ long long max_ll(long long a, long long b) { return a > b ? a : b; }

__device__ __forceinline__ long long plan_at(const long long* plan, long long num_windows,
                                             int row, long long w)
{
    return plan[row * num_windows + w];
}

// First index in sorted a[0, n) whose value is >= x (n if none).
__device__ long long lower_bound_ll(const long long* a, long long n, long long x)
{
    long long lo = 0, hi = n;
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (a[mid] < x) lo = mid + 1; else hi = mid;
    }
    return lo;
}

__device__ long long lower_bound_u64(const unsigned long long* a, long long lo, long long hi,
                                     unsigned long long x)
{
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (a[mid] < x) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// One window's row of a plan of row stride `stride` (plan_windows, update_small).
__device__ __forceinline__ void set_plan(
    long long* plan, const long long stride, const long long w, const long long s0,
    const long long s1, const long long ib, const long long ie, const long long db,
    const long long de, const long long total)
{
    plan[PLAN_S0 * stride + w] = s0;
    plan[PLAN_S1 * stride + w] = s1;
    plan[PLAN_IB * stride + w] = ib;
    plan[PLAN_IE * stride + w] = ie;
    plan[PLAN_DB * stride + w] = db;
    plan[PLAN_DE * stride + w] = de;
    plan[PLAN_TOTAL * stride + w] = total;
}

// The sorted distinct segments of sorted iseg[0, n_ins) and dseg[0, n_del) into windows;
// returns their number (one thread: locate_small, update_small).
__device__ long long merge_segments(const long long* iseg, const long long n_ins,
                                    const long long* dseg, const long long n_del,
                                    long long* windows)
{
    long long i = 0, j = 0, count = 0, last = -1;
    while (i < n_ins || j < n_del) {
        const long long s = (j >= n_del || (i < n_ins && iseg[i] <= dseg[j])) ? iseg[i++]
                                                                             : dseg[j++];
        if (s != last) windows[count++] = s;
        last = s;
    }
    return count;
}

// ---------------------------------------------------------------------------------------
// plan_windows: `group` lanes per window (1 at the leaves, where windows are many and
// small; 32 above).  The totals count each window's segments, less its pending deletes
// (marked DEAD in place, still counted), plus its pending inserts, in loops or from
// exclusive prefix sums for windows too large for a warp's loop: of the pending flags
// with bit 0 of `use_prefix`, of the counts with bit 1.  A window that fits
// (PLAN_DECIDE) consumes its deletes here.

extern "C" __global__ void __launch_bounds__(256) plan_windows(
    const long long* windows, const long long num_windows, const int level,
    const long long nseg, const int S,
    const long long* iseg, const long long n_ins, const long long* dseg, const long long n_del,
    const int* cnt, const unsigned char* ins_pending, unsigned char* del_pending,
    const int use_prefix, const long long* cnt_prefix, const long long* ins_prefix,
    const long long* del_prefix, const int mode, const int group,
    const double lower, const double upper,
    long long* plan, unsigned char* fit, unsigned long long* record)
{
    __shared__ unsigned long long block_windows, block_slots;
    if (threadIdx.x == 0) { block_windows = 0; block_slots = 0; }
    __syncthreads();

    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long w = group == 1 ? t : t >> 5;       // a warp's lanes share w when group 32
    const int g = group == 1 ? 0 : (int)(threadIdx.x & 31);
    const bool active = w < num_windows;
    long long s0 = 0, s1 = 0;
    if (active) {
        const long long win = windows[w];
        s0 = win << level;
        s1 = min_ll((win + 1) << level, nseg);
    }
    long long ib, ie, db, de;
    if (group == 1) {
        ib = active ? lower_bound_ll(iseg, n_ins, s0) : 0;
        ie = active ? lower_bound_ll(iseg, n_ins, s1) : 0;
        db = active ? lower_bound_ll(dseg, n_del, s0) : 0;
        de = active ? lower_bound_ll(dseg, n_del, s1) : 0;
    } else {
        // Lanes 0-3 search one end each; every lane takes all four.
        long long mine = 0;
        if (active && g < 4)
            mine = g < 2 ? lower_bound_ll(iseg, n_ins, g == 0 ? s0 : s1)
                         : lower_bound_ll(dseg, n_del, g == 2 ? s0 : s1);
        ib = __shfl_sync(FULL_MASK, mine, 0);
        ie = __shfl_sync(FULL_MASK, mine, 1);
        db = __shfl_sync(FULL_MASK, mine, 2);
        de = __shfl_sync(FULL_MASK, mine, 3);
    }

    long long total = 0;
    if (mode != PLAN_RANGES && active) {
        if (use_prefix & 2) {
            if (g == 0) total += cnt_prefix[s1] - cnt_prefix[s0];
        } else {
            for (long long s = s0 + g; s < s1; s += group) total += cnt[s];
        }
        if (use_prefix & 1) {
            if (g == 0)
                total += (ins_prefix[ie] - ins_prefix[ib]) - (del_prefix[de] - del_prefix[db]);
        } else {
            for (long long j = db + g; j < de; j += group) total -= del_pending[j];
            for (long long j = ib + g; j < ie; j += group) total += ins_pending[j];
        }
    }
    if (group != 1) {
        for (int d = 16; d > 0; d >>= 1) total += __shfl_down_sync(FULL_MASK, total, d);
        total = __shfl_sync(FULL_MASK, total, 0);
    }

    bool ok = false;
    if (mode == PLAN_DECIDE && active) {
        // The same double comparisons as the array path (int64 total against float64).
        const double slots = (double)((s1 - s0) * S);
        ok = (double)total <= upper * slots && (de == db || (double)total >= lower * slots);
    }
    if (active && g == 0) {
        set_plan(plan, num_windows, w, s0, s1, ib, ie, db, de, total);
        if (mode == PLAN_DECIDE) fit[w] = ok;
    }
    if (ok) {
        // Its deletes are compacted away by its merge: no longer pending above.
        for (long long j = db + g; j < de; j += group) del_pending[j] = 0;
        if (g == 0) {
            atomicAdd(&block_windows, 1ull);
            atomicAdd(&block_slots, (unsigned long long)((s1 - s0) * S));
        }
    }
    __syncthreads();
    if (threadIdx.x == 0 && block_windows) {
        atomicAdd(record + RECORD_LEVELS + 2 * level, block_windows);
        atomicAdd(record + RECORD_LEVELS + 2 * level + 1, block_slots);
    }
}

// ---------------------------------------------------------------------------------------
// merge_leaves: leaf level of a batch: merge each touched segment's live elements with its
// inserts in place, one group of S lanes per segment (S = segment size, a power of two
// <= 32; 32 / S segments per warp, GAMMA's cooperative-group split for small segments).
// A segment whose result would leave the leaf thresholds is left alone and reported in
// fit[] (the host passes it up the window tree).  merge_leaf is one leaf's merge by the
// S lanes of its group (also update_small's): window w of a level-0 plan of row stride
// `stride`; every lane of the warp calls it (shuffles).
__device__ __forceinline__ void merge_leaf(
    unsigned long long* keys, int* vals, int* cnt, const long long* plan,
    const long long stride, const long long w, const bool active,
    const unsigned long long* batch_keys, const int* batch_vals,
    unsigned char* ins_pending, unsigned char* del_pending, unsigned char* fit,
    const int S, const int upper_count, const int lower_count, unsigned long long* record)
{
    const int lane = threadIdx.x & 31;
    const int group = lane / S;
    const int l = lane % S;
    const long long num_windows = stride;
    const unsigned group_mask = S == 32 ? FULL_MASK : ((1u << S) - 1) << (group * S);
    const unsigned before_me = lane == 0 ? 0u : FULL_MASK >> (32 - lane);

    const long long seg = active ? plan_at(plan, num_windows, PLAN_S0, w) : 0;
    const long long base = seg * S;
    const int count = active ? cnt[seg] : 0;
    unsigned long long key = 0;
    int val = 0;
    bool live = false;
    if (active && l < count) {
        key = keys[base + l];
        val = vals[base + l];
        live = val != DEAD;
    }
    const unsigned alive = __ballot_sync(FULL_MASK, live) & group_mask;
    const int old = __popc(alive);
    const long long ib = active ? plan_at(plan, num_windows, PLAN_IB, w) : 0;
    const long long inserts = active ? plan_at(plan, num_windows, PLAN_IE, w) - ib : 0;
    const long long db = active ? plan_at(plan, num_windows, PLAN_DB, w) : 0;
    const long long deletes = active ? plan_at(plan, num_windows, PLAN_DE, w) - db : 0;
    const long long total = old + inserts;
    const bool ok = active && total <= upper_count && (deletes == 0 || total >= lower_count);
    if (active && l == 0) fit[w] = ok;

    unsigned long long ins_key = 0;
    int ins_val = 0;
    const bool inserting = ok && l < inserts;
    if (inserting) {
        ins_key = batch_keys[ib + l];
        ins_val = batch_vals[ib + l];
    }
    // Merged rank: own rank in its list plus the elements of the other list below it.
    int inserts_below = 0, olds_below = 0;
    for (int j = 0; j < S; ++j) {
        const unsigned long long other_ins = __shfl_sync(FULL_MASK, ins_key, j, S);
        const unsigned long long other_old = __shfl_sync(FULL_MASK, key, j, S);
        if (j < inserts && other_ins < key) ++inserts_below;
        if (((alive >> (group * S + j)) & 1u) && other_old < ins_key) ++olds_below;
    }
    __syncwarp();
    if (ok) {
        if (live) {
            const int r = __popc(alive & before_me) + inserts_below;
            keys[base + r] = key;
            vals[base + r] = val;
        }
        if (inserting) {
            const int r = l + olds_below;
            keys[base + r] = ins_key;
            vals[base + r] = ins_val;
            ins_pending[ib + l] = 0;
        }
        if (l < deletes) del_pending[db + l] = 0;
    }
    __syncwarp();
    if (ok && l >= total) {
        // Gaps copy the segment's last element; an emptied segment needs the host's repair.
        if (total > 0) {
            keys[base + l] = keys[base + total - 1];
            vals[base + l] = vals[base + total - 1];
        } else {
            keys[base + l] = 0;
            vals[base + l] = 0;
            if (l == 0) atomicAdd(record + RECORD_EMPTIED, 1ull);
        }
    }
    if (ok && l == 0) {
        cnt[seg] = (int)total;
        atomicAdd(record + RECORD_LEVELS, 1ull);        // level 0: a window, S slots
        atomicAdd(record + RECORD_LEVELS + 1, (unsigned long long)S);
    }
}

extern "C" __global__ void merge_leaves(
    unsigned long long* keys, int* vals, int* cnt, const long long* plan,
    const long long num_windows, const unsigned long long* batch_keys, const int* batch_vals,
    unsigned char* ins_pending, unsigned char* del_pending, unsigned char* fit,
    const int S, const int upper_count, const int lower_count, unsigned long long* record)
{
    const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    const long long w = warp * (32 / S) + (int)((threadIdx.x & 31) / S);
    merge_leaf(keys, vals, cnt, plan, num_windows, w, w < num_windows, batch_keys, batch_vals,
               ins_pending, del_pending, fit, S, upper_count, lower_count, record);
}

// ---------------------------------------------------------------------------------------
// merge_windows: one block per window of up to WINDOW_MAX slots above the leaves: the
// window's live elements and its still-pending inserts are compacted into shared memory,
// merged by rank, and spread evenly over the window's segments in place (GAMMA's block
// strategy for windows that fit in shared memory).

#define WINDOW_MAX 1024
#define BLOCK 256

__device__ int block_exclusive_scan(int value, int* warp_sums, int* total)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int x = value;
    for (int d = 1; d < 32; d <<= 1) {
        const int y = __shfl_up_sync(FULL_MASK, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (int w = 0; w < BLOCK / 32; ++w) {
            const int t = warp_sums[w];
            warp_sums[w] = run;
            run += t;
        }
        *total = run;
    }
    __syncthreads();
    const int result = x - value + warp_sums[warp];
    __syncthreads();
    return result;
}

__device__ int lower_bound_shared(const unsigned long long* a, int n, unsigned long long key)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (a[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

extern "C" __global__ void __launch_bounds__(BLOCK) merge_windows(
    unsigned long long* keys, int* vals, int* cnt, const long long* plan,
    const long long num_windows, const unsigned char* fit,
    const unsigned long long* batch_keys, const int* batch_vals,
    unsigned char* ins_pending, const int S, unsigned long long* record)
{
    __shared__ unsigned long long old_keys[WINDOW_MAX], new_keys[WINDOW_MAX];
    __shared__ int old_vals[WINDOW_MAX], new_vals[WINDOW_MAX];
    __shared__ int warp_sums[BLOCK / 32];
    __shared__ int count_old, count_new;

    const long long w = blockIdx.x;
    if (!fit[w]) return;                     // the whole block: before any barrier
    const long long seg_begin = plan_at(plan, num_windows, PLAN_S0, w);
    const long long first_slot = seg_begin * S;
    const long long window_slots = (plan_at(plan, num_windows, PLAN_S1, w) - seg_begin) * S;
    if (window_slots > WINDOW_MAX) {         // the host never sends one; never overrun
        if (threadIdx.x == 0) atomicAdd(record + RECORD_MISCOUNTED, 1ull);
        return;
    }
    const int slots = (int)window_slots;
    const int segments = slots / S;
    const int per_thread = (slots + BLOCK - 1) / BLOCK;

    // Live elements, in slot order: each thread owns a run of per_thread slots.
    const int mine = threadIdx.x * per_thread;
    int live = 0;
    for (int i = mine; i < mine + per_thread && i < slots; ++i) {
        const long long slot = first_slot + i;
        live += (i % S) < cnt[slot / S] && vals[slot] != DEAD;
    }
    int at = block_exclusive_scan(live, warp_sums, &count_old);
    for (int i = mine; i < mine + per_thread && i < slots; ++i) {
        const long long slot = first_slot + i;
        if ((i % S) < cnt[slot / S] && vals[slot] != DEAD) {
            old_keys[at] = keys[slot];
            old_vals[at] = vals[slot];
            ++at;
        }
    }
    // Pending inserts of the window (those applied below are live elements already).
    const long long ib = plan_at(plan, num_windows, PLAN_IB, w);
    const int span = (int)(plan_at(plan, num_windows, PLAN_IE, w) - ib);
    const int per_thread_ins = (span + BLOCK - 1) / BLOCK;
    const int mine_ins = threadIdx.x * per_thread_ins;
    int pending = 0;
    for (int j = mine_ins; j < mine_ins + per_thread_ins && j < span; ++j)
        pending += ins_pending[ib + j];
    at = block_exclusive_scan(pending, warp_sums, &count_new);
    for (int j = mine_ins; j < mine_ins + per_thread_ins && j < span; ++j) {
        if (ins_pending[ib + j]) {
            if (at < WINDOW_MAX) {           // more only if the plan miscounted (below)
                new_keys[at] = batch_keys[ib + j];
                new_vals[at] = batch_vals[ib + j];
            }
            ins_pending[ib + j] = 0;
            ++at;
        }
    }
    __syncthreads();
    const int n_old = count_old, n_new = count_new;
    const int total = n_old + n_new;
    if (total != plan_at(plan, num_windows, PLAN_TOTAL, w) || total > slots) {
        // The host's fit test used another total: leave the window as it is and say so.
        if (threadIdx.x == 0) atomicAdd(record + RECORD_MISCOUNTED, 1ull);
        return;                              // the whole block (shared values)
    }
    const int base = total / segments, extra = total % segments;

    // Rank r of the merged order goes to segment k at offset off.
    #define PLACE(r) do { \
        const int r_ = (r); int k_, off_; \
        if (r_ < extra * (base + 1)) { k_ = r_ / (base + 1); off_ = r_ % (base + 1); } \
        else { const int q_ = r_ - extra * (base + 1); k_ = extra + q_ / base; off_ = q_ % base; } \
        dest = first_slot + (long long)k_ * S + off_; } while (0)
    for (int i = threadIdx.x; i < n_old; i += BLOCK) {
        long long dest;
        PLACE(i + lower_bound_shared(new_keys, n_new, old_keys[i]));
        keys[dest] = old_keys[i];
        vals[dest] = old_vals[i];
    }
    for (int j = threadIdx.x; j < n_new; j += BLOCK) {
        long long dest;
        PLACE(j + lower_bound_shared(old_keys, n_old, new_keys[j]));
        keys[dest] = new_keys[j];
        vals[dest] = new_vals[j];
    }
    #undef PLACE
    __syncthreads();
    // Gaps copy their segment's last element; an empty segment needs the host's repair.
    for (int i = threadIdx.x; i < slots; i += BLOCK) {
        const int k = i / S, off = i % S;
        const int count = base + (k < extra);
        if (off == 0) cnt[seg_begin + k] = count;
        if (off >= count) {
            if (count > 0) {
                const long long last = first_slot + (long long)k * S + count - 1;
                keys[first_slot + i] = keys[last];
                vals[first_slot + i] = vals[last];
            } else {
                keys[first_slot + i] = 0;
                vals[first_slot + i] = 0;
                if (off == 0) atomicAdd(record + RECORD_EMPTIED, 1ull);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The large path: windows above WINDOW_MAX slots, each cut into chunks of `chunk` slots
// (one block of LARGE_BLOCK threads per chunk, a thread per slot), in four launches:
//   large_take_inserts  each pending insert of a window that fits goes to new_keys at its
//                       rank among all pending inserts (ins_prefix, an exclusive prefix
//                       sum of the pending flags taken before this level), so a window's
//                       pending inserts are new_keys[ins_prefix[ib], ins_prefix[ie]);
//   large_count         live elements per chunk (the host scans them into chunk offsets:
//                       a window's live elements are old_keys[offset of its first chunk,
//                       offset of the next window's first chunk));
//   large_compact       each chunk's live elements to old_keys in slot order;
//   large_spread        a thread per slot of the window: its segment, its rank in the
//                       even spread, and the element of that rank in the merge of the two
//                       sorted lists, found by a merge-path search (Green, McColl and
//                       Bader, "GPU merge path", 2012): no two lists share a key.
// Every read of the window's slots happens before large_spread writes them.

#define LARGE_BLOCK 256

extern "C" __global__ void __launch_bounds__(256) large_take_inserts(
    const long long* plan, const long long num_windows, const unsigned char* fit,
    const unsigned long long* batch_keys, const int* batch_vals, unsigned char* ins_pending,
    const long long n_ins, const long long* ins_prefix,
    unsigned long long* new_keys, int* new_vals)
{
    const long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (j >= n_ins || !ins_pending[j]) return;
    // The window whose insert range holds j: the last whose range begins at or before j
    // (ranges are disjoint and in window order).
    const long long* ins_begin = plan + PLAN_IB * num_windows;
    long long lo = 0, hi = num_windows;
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (ins_begin[mid] <= j) lo = mid + 1; else hi = mid;
    }
    const long long w = lo - 1;
    if (w < 0 || !fit[w] || j >= plan_at(plan, num_windows, PLAN_IE, w)) return;
    const long long at = ins_prefix[j];
    new_keys[at] = batch_keys[j];
    new_vals[at] = batch_vals[j];
    ins_pending[j] = 0;
}

// Whether slot `slot` of chunk k of window w holds a live element (false past the chunk).
__device__ __forceinline__ bool chunk_slot_live(
    const int* cnt, const int* vals, const long long* plan, long long num_windows, long long w,
    long long k, int chunk, int S, long long* slot)
{
    const long long first = plan_at(plan, num_windows, PLAN_S0, w) * S + k * chunk;
    const long long end = min_ll(first + chunk, plan_at(plan, num_windows, PLAN_S1, w) * S);
    *slot = first + threadIdx.x;
    return (int)threadIdx.x < chunk && *slot < end && (*slot % S) < cnt[*slot / S]
           && vals[*slot] != DEAD;
}

extern "C" __global__ void __launch_bounds__(LARGE_BLOCK) large_count(
    const int* cnt, const int* vals, const long long* plan, const long long num_windows,
    const unsigned char* fit, const int S, const long long chunks_per_window,
    const int chunk, long long* chunk_counts)
{
    const long long b = blockIdx.x;
    const long long w = b / chunks_per_window, k = b % chunks_per_window;
    long long slot;
    const bool live = fit[w] && chunk_slot_live(cnt, vals, plan, num_windows, w, k, chunk, S,
                                                &slot);
    const int count = __syncthreads_count(live);
    if (threadIdx.x == 0) chunk_counts[b] = count;
}

extern "C" __global__ void __launch_bounds__(LARGE_BLOCK) large_compact(
    const unsigned long long* keys, const int* vals, const int* cnt, const long long* plan,
    const long long num_windows, const unsigned char* fit, const int S,
    const long long chunks_per_window, const int chunk, const long long* chunk_offsets,
    unsigned long long* old_keys, int* old_vals)
{
    __shared__ int warp_counts[LARGE_BLOCK / 32];
    const long long b = blockIdx.x;
    const long long w = b / chunks_per_window, k = b % chunks_per_window;
    if (!fit[w]) return;                     // the whole block: before any barrier
    long long slot;
    const bool live = chunk_slot_live(cnt, vals, plan, num_windows, w, k, chunk, S, &slot);
    // Rank among the chunk's live slots: within the warp by ballot, then the warps before.
    const unsigned ballot = __ballot_sync(FULL_MASK, live);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    if (live) {
        int rank = __popc(ballot & ((1u << lane) - 1u));
        for (int v = 0; v < warp; ++v) rank += warp_counts[v];
        const long long at = chunk_offsets[b] + rank;
        old_keys[at] = keys[slot];
        old_vals[at] = vals[slot];
    }
}

extern "C" __global__ void __launch_bounds__(LARGE_BLOCK) large_spread(
    unsigned long long* keys, int* vals, int* cnt, const long long* plan,
    const long long num_windows, const unsigned char* fit, const int S,
    const long long blocks_per_window, const long long chunks_per_window,
    const long long* chunk_offsets, const unsigned long long* old_keys, const int* old_vals,
    const long long* ins_prefix, const unsigned long long* new_keys, const int* new_vals,
    unsigned long long* record)
{
    const long long b = blockIdx.x;
    const long long w = b / blocks_per_window;
    if (!fit[w]) return;
    const long long i = (b % blocks_per_window) * LARGE_BLOCK + threadIdx.x;
    const long long s0 = plan_at(plan, num_windows, PLAN_S0, w);
    const long long segments = plan_at(plan, num_windows, PLAN_S1, w) - s0;
    if (i >= segments * S) return;

    const long long a0 = chunk_offsets[w * chunks_per_window];
    const long long n_old = chunk_offsets[(w + 1) * chunks_per_window] - a0;
    const long long b0 = ins_prefix[plan_at(plan, num_windows, PLAN_IB, w)];
    const long long n_new = ins_prefix[plan_at(plan, num_windows, PLAN_IE, w)] - b0;
    const long long total = n_old + n_new;
    if (total != plan_at(plan, num_windows, PLAN_TOTAL, w) || total > segments * S) {
        // The host's fit test used another total: leave the window as it is and say so.
        if (i == 0) atomicAdd(record + RECORD_MISCOUNTED, 1ull);
        return;
    }
    const long long base = total / segments, extra = total % segments;
    const long long k = i / S, off = i % S;
    const long long count = base + (k < extra ? 1 : 0);
    const long long first = k * base + min_ll(k, extra);
    // A gap copies the segment's last element; an empty segment the element before it.
    const long long rank = off < count ? first + off : first + count - 1;
    unsigned long long key = 0;
    int val = 0;
    if (rank >= 0) {
        // Merge path: ia elements of A (old) and rank - ia of B (new) precede merged[rank].
        const unsigned long long* A = old_keys + a0;
        const unsigned long long* B = new_keys + b0;
        long long lo = max_ll(0, rank - n_new), hi = min_ll(rank, n_old);
        while (lo < hi) {
            const long long mid = (lo + hi) >> 1;
            if (A[mid] < B[rank - mid - 1]) lo = mid + 1; else hi = mid;
        }
        const long long ia = lo, jb = rank - lo;
        if (ia < n_old && (jb >= n_new || A[ia] < B[jb])) {
            key = A[ia];
            val = old_vals[a0 + ia];
        } else {
            key = B[jb];
            val = new_vals[b0 + jb];
        }
    }
    const long long slot = s0 * S + i;
    keys[slot] = key;
    vals[slot] = val;
    if (off == 0) {
        cnt[s0 + k] = (int)count;
        if (count == 0) atomicAdd(record + RECORD_EMPTIED, 1ull);
    }
}

// ---------------------------------------------------------------------------------------
// parent_windows: after a level's merges, parents[i] is the parent of window i if it did
// not fit and its sibling is not the window just before it that did not fit either (the
// windows are sorted, so the list of parents stays sorted and distinct), else -1.  A
// window that fit and is followed by an empty segment is counted (the host then repairs
// the gaps): the count is taken now, but a later rewrite of that segment that leaves it
// empty counts it as emptied, so nothing is missed.

extern "C" __global__ void parent_windows(
    const long long* windows, const long long num_windows, const unsigned char* fit,
    const long long* plan, const int* cnt, const long long nseg, long long* parents,
    unsigned long long* record)
{
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= num_windows) return;
    const long long w = windows[i];
    long long parent = -1;
    if (!fit[i]) {
        const bool sibling_passed = (w & 1) && i > 0 && windows[i - 1] == w - 1 && !fit[i - 1];
        if (!sibling_passed) parent = w >> 1;
    } else {
        const long long next = plan_at(plan, num_windows, PLAN_S1, i);
        if (next < nseg && cnt[next] == 0) atomicAdd(record + RECORD_FOLLOWERS, 1ull);
    }
    parents[i] = parent;
}

// ---------------------------------------------------------------------------------------
// set_rows: row offsets after a batch, from the slots of one level's rewritten windows
// (the gaps repaired first).  Row u is the lower bound of u << 32.  A gap copies the last
// real key before it (0 if none, below every real key: 0 -> 0 is a loop), so a real slot
// i > 0 is that bound exactly for the u in (src(keys[i-1]), src(keys[i])], and slot 0
// for those in [0, src(keys[0])].  The window's last slot also sets, by binary search
// after the window, the vertices after its last element up to the last source it held
// before the batch (a deleted edge's): their edges there may all be gone.

__device__ void set_row_at(
    const unsigned long long* keys, const int* cnt, const int S, const long long capacity,
    const long long i, const long long begin, const long long end,
    const unsigned long long* del_keys, const long long db, const long long de,
    const long long num_vertices, long long* row)
{
    if ((i % S) < cnt[i / S]) {
        const long long cur = (long long)(keys[i] >> 32);
        const long long prev = i > 0 ? (long long)(keys[i - 1] >> 32) : -1;
        for (long long u = prev + 1; u <= cur; ++u) row[u] = i;
    }
    if (i == end - 1) {
        const long long last = (long long)(keys[end - 1] >> 32);
        long long hi = last;
        if (de > db) hi = max_ll(hi, (long long)(del_keys[de - 1] >> 32));
        hi = min_ll(hi, num_vertices - 1);
        long long lo = begin > 0 ? (long long)(keys[begin - 1] >> 32) : -1;
        lo = max_ll(min_ll(lo, hi), min_ll(last, hi));
        for (long long u = lo + 1; u <= hi; ++u)
            row[u] = lower_bound_u64(keys, end, capacity, (unsigned long long)u << 32);
    }
}

extern "C" __global__ void set_rows(
    const unsigned long long* keys, const int* cnt, const int S, const long long capacity,
    const long long* plan, const long long num_windows, const unsigned char* fit,
    const long long window_slots, const unsigned long long* del_keys,
    const long long num_vertices, long long* row)
{
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long w = t / window_slots;     // windows of one level: all this size but the last
    if (w >= num_windows || !fit[w]) return;
    const long long begin = plan_at(plan, num_windows, PLAN_S0, w) * S;
    const long long end = plan_at(plan, num_windows, PLAN_S1, w) * S;
    const long long i = begin + t % window_slots;
    if (i >= end) return;
    set_row_at(keys, cnt, S, capacity, i, begin, end, del_keys,
               plan_at(plan, num_windows, PLAN_DB, w), plan_at(plan, num_windows, PLAN_DE, w),
               num_vertices, row);
}

// ---------------------------------------------------------------------------------------
// locate_small: a small batch's start in one launch of one block, in place of a dozen
// array operations (device_update.py `locate_small`): the segment of each sorted insert
// and delete (their lower bounds' segments, an insert past the end in the last one),
// each delete's slot marked DEAD, the sources' degrees moved by one per update, and the
// sorted distinct segments touched (the leaf windows) with their number.

extern "C" __global__ void __launch_bounds__(1024) locate_small(
    const unsigned long long* keys, int* vals, const long long capacity, const int seg_shift,
    const long long nseg, const unsigned long long* ik, const long long n_ins,
    const unsigned long long* dk, const long long n_del, int* deg, long long* iseg,
    long long* dseg, long long* windows, long long* num_windows)
{
    for (long long i = threadIdx.x; i < n_ins; i += blockDim.x) {
        const long long pos = lower_bound_u64(keys, 0, capacity, ik[i]);
        iseg[i] = min_ll(pos >> seg_shift, nseg - 1);
        atomicAdd(deg + (long long)(ik[i] >> 32), 1);
    }
    for (long long j = threadIdx.x; j < n_del; j += blockDim.x) {
        const long long pos = lower_bound_u64(keys, 0, capacity, dk[j]);
        dseg[j] = pos >> seg_shift;
        vals[pos] = DEAD;
        atomicAdd(deg + (long long)(dk[j] >> 32), -1);
    }
    __syncthreads();
    if (threadIdx.x == 0) *num_windows = merge_segments(iseg, n_ins, dseg, n_del, windows);
}

// ---------------------------------------------------------------------------------------
// locate_batch: locate_small's per-update work for a batch of any size, a thread per
// update over the grid (device_update.py `locate`): each sorted insert's and delete's
// segment, the deletes' slots marked DEAD, the sources' degrees moved by one per update.
// The windows are left to the host (xp_ops.sorted_union), as the level-by-level update
// takes them.

extern "C" __global__ void locate_batch(
    const unsigned long long* keys, int* vals, const long long capacity, const int seg_shift,
    const long long nseg, const unsigned long long* ik, const long long n_ins,
    const unsigned long long* dk, const long long n_del, int* deg, long long* iseg,
    long long* dseg)
{
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n_ins) {
        const long long pos = lower_bound_u64(keys, 0, capacity, ik[t]);
        iseg[t] = min_ll(pos >> seg_shift, nseg - 1);
        atomicAdd(deg + (long long)(ik[t] >> 32), 1);
    } else if (t < n_ins + n_del) {
        const long long j = t - n_ins;
        const long long pos = lower_bound_u64(keys, 0, capacity, dk[j]);
        dseg[j] = pos >> seg_shift;
        vals[pos] = DEAD;
        atomicAdd(deg + (long long)(dk[j] >> 32), -1);
    }
}

// ---------------------------------------------------------------------------------------
// update_small: a small batch (at most SMALL_BATCH updates, sorted, already validated) in
// one launch of one block when every leaf it touches takes its share within the leaf
// thresholds (device_update.py `update_small`): locate_small's segments and windows, the
// leaf plan, then, only if every leaf fits, the deletes marked DEAD, the degrees moved,
// merge_leaf on each leaf and set_row_at on each of its slots, exactly as the level-by-level
// path leaves them when its level 0 takes the whole batch.  Otherwise nothing changes and
// the host takes that path.  A leaf that would be left empty, or followed by an empty
// segment the batch does not touch, also goes there (the host's gap repair).
// scratch (int64): result[2] (taken, windows), iseg[n_ins], dseg[n_del], dpos[n_del],
// windows[n], plan[PLAN_TOTAL + 1][n] (n = n_ins + n_del), record[RECORD_LEVELS + 2], then
// bytes: ins_pending[n_ins], del_pending[n_del], fit[n].

extern "C" __global__ void __launch_bounds__(1024) update_small(
    unsigned long long* keys, int* vals, int* cnt, int* deg, long long* row,
    const long long capacity, const int seg_shift, const long long nseg,
    const long long num_vertices, const unsigned long long* ik, const int* iv,
    const long long n_ins, const unsigned long long* dk, const long long n_del,
    const int upper_count, const int lower_count, long long* scratch)
{
    const long long n = n_ins + n_del;
    const int S = 1 << seg_shift;
    long long* result = scratch;
    long long* iseg = result + 2;
    long long* dseg = iseg + n_ins;
    long long* dpos = dseg + n_del;
    long long* windows = dpos + n_del;
    long long* plan = windows + n;
    unsigned long long* record = (unsigned long long*)(plan + (PLAN_TOTAL + 1) * n);
    unsigned char* ins_pending = (unsigned char*)(record + RECORD_LEVELS + 2);
    unsigned char* del_pending = ins_pending + n_ins;
    unsigned char* fit = del_pending + n_del;
    __shared__ long long num_windows;

    for (long long i = threadIdx.x; i < n_ins; i += blockDim.x) {
        const long long pos = lower_bound_u64(keys, 0, capacity, ik[i]);
        iseg[i] = min_ll(pos >> seg_shift, nseg - 1);
        ins_pending[i] = 1;
    }
    for (long long j = threadIdx.x; j < n_del; j += blockDim.x) {
        const long long pos = lower_bound_u64(keys, 0, capacity, dk[j]);
        dpos[j] = pos;
        dseg[j] = pos >> seg_shift;
        del_pending[j] = 1;
    }
    if (threadIdx.x < RECORD_LEVELS + 2) record[threadIdx.x] = 0;
    __syncthreads();
    if (threadIdx.x == 0) num_windows = merge_segments(iseg, n_ins, dseg, n_del, windows);
    __syncthreads();
    const long long nw = num_windows;
    int fits = 1;
    for (long long w = threadIdx.x; w < nw; w += blockDim.x) {
        const long long s = windows[w];
        const long long ib = lower_bound_ll(iseg, n_ins, s), ie = lower_bound_ll(iseg, n_ins, s + 1);
        const long long db = lower_bound_ll(dseg, n_del, s), de = lower_bound_ll(dseg, n_del, s + 1);
        const long long total = cnt[s] - (de - db) + (ie - ib);
        bool ok = total > 0 && total <= upper_count && (de == db || total >= lower_count);
        const long long next = s + 1;
        if (next < nseg && cnt[next] == 0 && !(w + 1 < nw && windows[w + 1] == next)) ok = false;
        fits &= ok;
        set_plan(plan, n, w, s, next, ib, ie, db, de, total);
    }
    if (!__syncthreads_and(fits)) {
        if (threadIdx.x == 0) { result[0] = 0; result[1] = nw; }
        return;
    }
    for (long long j = threadIdx.x; j < n_del; j += blockDim.x) {
        vals[dpos[j]] = DEAD;
        atomicAdd(deg + (long long)(dk[j] >> 32), -1);
    }
    for (long long i = threadIdx.x; i < n_ins; i += blockDim.x)
        atomicAdd(deg + (long long)(ik[i] >> 32), 1);
    __syncthreads();
    const int per_warp = 32 / S;
    const long long warps = blockDim.x >> 5;
    for (long long first = (threadIdx.x >> 5) * per_warp; first < nw; first += warps * per_warp) {
        const long long w = first + (int)((threadIdx.x & 31) / S);
        merge_leaf(keys, vals, cnt, plan, n, w, w < nw, ik, iv, ins_pending, del_pending, fit,
                   S, upper_count, lower_count, record);
    }
    __syncthreads();
    for (long long t = threadIdx.x; t < nw * S; t += blockDim.x) {
        const long long w = t / S;
        const long long begin = windows[w] * S;
        set_row_at(keys, cnt, S, capacity, begin + t % S, begin, begin + S, dk,
                   plan[PLAN_DB * n + w], plan[PLAN_DE * n + w], num_vertices, row);
    }
    if (threadIdx.x == 0) { result[0] = 1; result[1] = nw; }
}
