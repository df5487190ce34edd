// Leaf level of a packed-memory-array batch (gpu/pma.py): merge each touched segment's
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
        } else {
            keys[base + l] = 0;
            if (l == 0) atomicAdd(empty_segments, 1);
        }
    }
    if (ok && l == 0) cnt[seg] = total;
}
