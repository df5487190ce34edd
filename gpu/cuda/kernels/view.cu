// Reads of the packed memory array: its read view (gpu/graph/pma/view.py), each listed
// vertex's real slots copied, in order, to its gap-free list; and key lookups.
//
// A warp per vertex walks the vertex's slots [row[u], row[u + 1]) 32 at a time; a slot is
// real when its offset in its segment is below the segment's count (gpu/graph/pma/array.py).
// The real ones of a step go to consecutive list entries: each lane's place is the number
// of real slots on the lanes below it; the list's length goes to deg[u].  A key is
// u << 32 | label << vertex_bits | v.  A listed vertex of long_from edges or more (its
// degree in the array, array_deg) is left to refresh_long_lists, so that a batch's
// touched vertices, on the device already, need not be split there first.

extern "C" __global__ void refresh_lists(
    const unsigned long long* __restrict__ keys, const int* __restrict__ vals,
    const int* __restrict__ cnt, const long long* __restrict__ row, int seg_shift,
    int vertex_bits, const long long* __restrict__ vertices, long long count,
    const long long* __restrict__ start, int* __restrict__ nbr, int* __restrict__ nlab,
    int* __restrict__ elab, int* __restrict__ deg, const int* __restrict__ array_deg,
    int long_from)
{
    const long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (w >= count) return;     // whole warps: blockDim.x is a multiple of 32
    const long long u = vertices[w];
    if (array_deg[u] >= long_from) return;  // refresh_long_lists copies it
    const long long hi = row[u + 1];
    const long long segment_mask = (1LL << seg_shift) - 1;
    const unsigned long long vertex_mask = (1ull << vertex_bits) - 1;
    long long out = start[u];
    for (long long base = row[u]; base < hi; base += 32) {
        const long long i = base + lane;
        const bool real = i < hi && (int)(i & segment_mask) < cnt[i >> seg_shift];
        const unsigned mask = __ballot_sync(0xffffffffu, real);
        if (real) {
            const long long at = out + __popc(mask & ((1u << lane) - 1u));
            const unsigned long long key = keys[i];
            nbr[at] = (int)(key & vertex_mask);
            nlab[at] = (int)((key & 0xffffffffull) >> vertex_bits);
            elab[at] = vals[i];
        }
        out += __popc(mask);
    }
    if (lane == 0) deg[u] = (int)(out - start[u]);
}

// The slot of each wanted key in the array, or -1 where it is not stored, and (when
// `vals_out` is given) its value, or -1: a thread per key, a binary search over the whole
// array (non-decreasing with its gap copies), then whether the slot found is real.
// PackedMemoryArray.find's result in one launch (its generic path is a dozen).
extern "C" __global__ void find_keys(
    const unsigned long long* __restrict__ keys, const int* __restrict__ vals,
    const int* __restrict__ cnt, long long capacity, int seg_shift,
    const unsigned long long* __restrict__ wanted, long long count,
    long long* __restrict__ slots, int* __restrict__ vals_out)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const unsigned long long key = wanted[i];
    long long lo = 0, hi = capacity;
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (keys[mid] < key) lo = mid + 1; else hi = mid;
    }
    const bool found = lo < capacity && keys[lo] == key
        && (int)(lo & ((1LL << seg_shift) - 1)) < cnt[lo >> seg_shift];
    slots[i] = found ? lo : -1;
    if (vals_out) vals_out[i] = found ? vals[lo] : -1;
}

// refresh_lists for long lists: each vertex's slot range cut into `parts` equal pieces
// (more for longer lists, so that a hub of hundreds of thousands of slots is many
// blocks' work), a block of LONG_BLOCK threads per piece, LONG_BLOCK slots a step.
// Launched twice: first each piece counts its real slots (`counting`), then each writes
// them after those of the pieces before it of the same vertex (pieces of a vertex are
// consecutive, `part_index` numbering them from 0), the last one the list's length.
// A step's real slots go to consecutive entries: each warp's place from the counts of
// the warps before it (in shared memory), each lane's from its warp's ballot.
#define LONG_BLOCK 1024

extern "C" __global__ void __launch_bounds__(LONG_BLOCK) refresh_long_lists(
    const unsigned long long* __restrict__ keys, const int* __restrict__ vals,
    const int* __restrict__ cnt, const long long* __restrict__ row, int seg_shift,
    int vertex_bits, const long long* __restrict__ part_vertex,
    const long long* __restrict__ part_index, const long long* __restrict__ parts,
    int counting,
    long long* __restrict__ part_counts, const long long* __restrict__ start,
    int* __restrict__ nbr, int* __restrict__ nlab, int* __restrict__ elab,
    int* __restrict__ deg)
{
    __shared__ int warp_counts[LONG_BLOCK / 32];
    const long long p = blockIdx.x;
    const long long u = part_vertex[p];
    const long long k = part_index[p], m = parts[p];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long first = row[u], length = row[u + 1] - first;
    const long long lo = first + length * k / m, hi = first + length * (k + 1) / m;
    const long long segment_mask = (1LL << seg_shift) - 1;
    const unsigned long long vertex_mask = (1ull << vertex_bits) - 1;
    long long out = 0;
    if (!counting) {
        out = start[u];
        for (long long j = 1; j <= k; ++j) out += part_counts[p - j];
    }
    const long long begin = out;
    for (long long base = lo; base < hi; base += LONG_BLOCK) {
        const long long i = base + threadIdx.x;
        const bool real = i < hi && (int)(i & segment_mask) < cnt[i >> seg_shift];
        const unsigned mask = __ballot_sync(0xffffffffu, real);
        if (lane == 0) warp_counts[warp] = __popc(mask);
        __syncthreads();
        int before = 0, total = 0;
        for (int w = 0; w < LONG_BLOCK / 32; ++w) {
            const int c = warp_counts[w];
            before += w < warp ? c : 0;
            total += c;
        }
        if (real && !counting) {
            const long long at = out + before + __popc(mask & ((1u << lane) - 1u));
            const unsigned long long key = keys[i];
            nbr[at] = (int)(key & vertex_mask);
            nlab[at] = (int)((key & 0xffffffffull) >> vertex_bits);
            elab[at] = vals[i];
        }
        out += total;
        __syncthreads();    // warp_counts is rewritten by the next step
    }
    if (threadIdx.x == 0) {
        if (counting) part_counts[p] = out - begin;
        else if (k == m - 1) deg[u] = (int)(out - start[u]);
    }
}

// Both list entries of each edge us[i] - vs[i] (born vertex slots) as keys: the entry at
// us[i] at i, the one at vs[i] at count + i, each keyed through its neighbour's label
// index (`slot_labels`, kept with the read view); `directed`: of the arc us[i] -> vs[i],
// whose list key is 2 label + 1 where the arc enters the entry's vertex.  With
// `with_values`, each entry's value is its edge's label (labels[i]).  A thread per entry:
// PmaGraph.device_keys' two dozen CuPy operations for a batch in one launch.
extern "C" __global__ void entry_keys(
    const int* __restrict__ us, const int* __restrict__ vs, long long count,
    const int* __restrict__ slot_labels, int vertex_bits, int directed,
    const int* __restrict__ labels, int with_values,
    unsigned long long* __restrict__ keys, int* __restrict__ vals)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 2 * count) return;
    const bool second = i >= count;
    const long long j = second ? i - count : i;
    const unsigned long long src = (unsigned)(second ? vs[j] : us[j]);
    const unsigned long long dst = (unsigned)(second ? us[j] : vs[j]);
    unsigned long long list_key = (unsigned)slot_labels[dst];
    if (directed) list_key = 2 * list_key + (second ? 1 : 0);
    keys[i] = (src << 32) + (list_key << vertex_bits) + dst;
    if (with_values) vals[i] = labels[j];
}

// The distinct vertices a batch touched (the ends of its deleted edges du - dv and inserted
// edges iu - iv, and its vertex records' `slots`), each with its degree in the array after
// the batch: PmaGraph's follow-up of a batch changed on the device, in place of a sort,
// a compaction and two read-backs.  A thread per end; the first to stamp its vertex with
// this batch's `epoch` (`stamp`, one int per vertex slot, kept between batches so that
// nothing is cleared) appends it.  out[0] counts them (zero before the launch); the
// vertices follow from out[1], their degrees from out[1 + bound], in the order claimed.
extern "C" __global__ void touched_vertices(
    const int* __restrict__ du, const int* __restrict__ dv, long long n_del,
    const int* __restrict__ iu, const int* __restrict__ iv, long long n_ins,
    const int* __restrict__ slots, long long n_slots, const int* __restrict__ deg,
    int* __restrict__ stamp, int epoch, long long bound, int* __restrict__ out)
{
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int v;
    if (t < 2 * n_del) {
        v = t < n_del ? du[t] : dv[t - n_del];
    } else if ((t -= 2 * n_del) < 2 * n_ins) {
        v = t < n_ins ? iu[t] : iv[t - n_ins];
    } else if ((t -= 2 * n_ins) < n_slots) {
        v = slots[t];
    } else {
        return;
    }
    if (atomicExch(stamp + v, epoch) == epoch) return;
    const int at = atomicAdd(out, 1);
    out[1 + at] = v;
    out[1 + bound + at] = deg[v];
}
