// The packed-memory-array batch kernels of gpu/pma.py (the generic array path there is
// the reference each is tested against on the device).
//
// merge_leaves: leaf level of a batch: merge each touched segment's
// live elements with its inserts in place, one group of S lanes per segment (S = segment
// size, a power of two <= 32; 32 / S segments per warp, GAMMA's cooperative-group split
// for small segments).  A segment whose result would leave the leaf thresholds is left
// alone and reported in fit[] (the host passes it up the window tree).

#define DEAD (-2147483647 - 1)

extern "C" __global__ void merge_leaves(
    unsigned long long* keys, int* vals, int* cnt,
    const long long* windows, const long long* ins_begin, const long long* ins_end,
    const long long* del_begin, const long long* del_end, const long long num_windows,
    const unsigned long long* batch_keys, const int* batch_vals,
    unsigned char* ins_pending, unsigned char* del_pending, unsigned char* fit,
    const int S, const int upper_count, const int lower_count, int* empty_segments)
{
    const int lane = threadIdx.x & 31;
    const int group = lane / S;
    const int l = lane % S;
    const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    const long long w = warp * (32 / S) + group;
    const bool active = w < num_windows;
    const unsigned full = 0xffffffffu;
    const unsigned group_mask = S == 32 ? full : ((1u << S) - 1) << (group * S);
    const unsigned before_me = lane == 0 ? 0u : full >> (32 - lane);

    const long long seg = active ? windows[w] : 0;
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
    const unsigned alive = __ballot_sync(full, live) & group_mask;
    const int old = __popc(alive);
    const long long ib = active ? ins_begin[w] : 0;
    const int inserts = active ? (int)(ins_end[w] - ib) : 0;
    const int deletes = active ? (int)(del_end[w] - del_begin[w]) : 0;
    const int total = old + inserts;
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
        const unsigned long long other_ins = __shfl_sync(full, ins_key, j, S);
        const unsigned long long other_old = __shfl_sync(full, key, j, S);
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
        if (l < deletes) del_pending[del_begin[w] + l] = 0;
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
            if (l == 0) atomicAdd(empty_segments, 1);
        }
    }
    if (ok && l == 0) cnt[seg] = total;
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
        const int y = __shfl_up_sync(0xffffffffu, x, d);
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
    unsigned long long* keys, int* vals, int* cnt,
    const long long* seg_begin, const long long* seg_end,
    const long long* ins_begin, const long long* ins_end, const long long* totals,
    const unsigned long long* batch_keys, const int* batch_vals,
    unsigned char* ins_pending, const int S, int* empty_segments, int* miscounted)
{
    __shared__ unsigned long long old_keys[WINDOW_MAX], new_keys[WINDOW_MAX];
    __shared__ int old_vals[WINDOW_MAX], new_vals[WINDOW_MAX];
    __shared__ int warp_sums[BLOCK / 32];
    __shared__ int count_old, count_new;

    const long long w = blockIdx.x;
    const long long first_slot = seg_begin[w] * S;
    const int slots = (int)((seg_end[w] - seg_begin[w]) * S);
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
    const long long ib = ins_begin[w];
    const int span = (int)(ins_end[w] - ib);
    const int per_thread_ins = (span + BLOCK - 1) / BLOCK;
    const int mine_ins = threadIdx.x * per_thread_ins;
    int pending = 0;
    for (int j = mine_ins; j < mine_ins + per_thread_ins && j < span; ++j)
        pending += ins_pending[ib + j];
    at = block_exclusive_scan(pending, warp_sums, &count_new);
    for (int j = mine_ins; j < mine_ins + per_thread_ins && j < span; ++j) {
        if (ins_pending[ib + j]) {
            new_keys[at] = batch_keys[ib + j];
            new_vals[at] = batch_vals[ib + j];
            ins_pending[ib + j] = 0;
            ++at;
        }
    }
    __syncthreads();
    const int n_old = count_old, n_new = count_new;
    const int total = n_old + n_new;
    if (threadIdx.x == 0 && total != totals[w]) atomicAdd(miscounted, 1);   // the host's fit test
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
        if (off == 0) cnt[seg_begin[w] + k] = count;
        if (off >= count) {
            if (count > 0) {
                const long long last = first_slot + (long long)k * S + count - 1;
                keys[first_slot + i] = keys[last];
                vals[first_slot + i] = vals[last];
            } else {
                keys[first_slot + i] = 0;
                vals[first_slot + i] = 0;
                if (off == 0) atomicAdd(empty_segments, 1);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// set_rows: row offsets after a batch, from the rewritten windows' slots.  Because a gap
// copies the last real key before it, keys[i - 1] names the previous real key's source
// (or is 0 before any), so a real slot i starts the vertices (src(keys[i-1]), src(keys[i])].

extern "C" __global__ void set_rows(
    const unsigned long long* keys, const int* cnt, const int S,
    const long long* slot_begin, const long long* slot_end, const long long num_windows,
    const long long window_slots, long long* row)
{
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long w = t / window_slots;     // windows of one level: all this size but the last
    if (w >= num_windows) return;
    const long long i = slot_begin[w] + t % window_slots;
    if (i >= slot_end[w] || (i % S) >= cnt[i / S]) return;
    const long long cur = (long long)(keys[i] >> 32);
    const unsigned long long before = i > 0 ? keys[i - 1] : 0ull;
    const long long prev = before == 0ull ? -1 : (long long)(before >> 32);
    for (long long u = prev + 1; u <= cur; ++u) row[u] = i;
}

// ---------------------------------------------------------------------------------------
// window_totals: elements a window above the leaves will hold: its segments' counts, less
// its still-pending deletes (marked DEAD in place), plus its still-pending inserts.  One
// thread per window (windows of at most WINDOW_MAX slots, so a short loop).

extern "C" __global__ void window_totals(
    const int* cnt, const long long* seg_begin, const long long* seg_end,
    const unsigned char* ins_pending, const long long* ins_begin, const long long* ins_end,
    const unsigned char* del_pending, const long long* del_begin, const long long* del_end,
    const long long num_windows, long long* totals)
{
    const long long w = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (w >= num_windows) return;
    long long total = 0;
    for (long long s = seg_begin[w]; s < seg_end[w]; ++s) total += cnt[s];
    for (long long j = ins_begin[w]; j < ins_end[w]; ++j) total += ins_pending[j];
    for (long long j = del_begin[w]; j < del_end[w]; ++j) total -= del_pending[j];
    totals[w] = total;
}
