// Leaf-rooted groups made on the device from a launch's tasks (make_tasks' output), for
// match.cu's match_groups; gpu/cuda/group_launchers.py runs the steps in order:
//
// 1. group_keys: each task's key.  A task of a leaf-rooted type t (leaf_root[t] >= 0)
//    whose leaf's parent is data vertex p gets (t * slots + p) << 31 | rank; every other
//    slot (tasks of other types, slots past the tasks made) gets ~0.
// 2. (CuPy's argsort of the keys) and gather_keys: the keys in sorted order, so that a
//    group's members lie together, by rank.
// 3. group_runs: runs of at least min_size equal (t, p) become groups (type, parent,
//    first and last member), the other tasks go to `singles` (searched one by one), and
//    each member gets a second key, its run's start << 32 | its leaf vertex (a task
//    outside a group: its own position << 32, so it stays in place).
// 4. (argsort of the second keys) and by_leaf: each group's members by leaf vertex, with
//    their ranks, in the group's own positions.  The singles' count goes to ctl[TASKS].
//
// Groups and singles land in no particular order (warp-aggregated atomics): counts do not
// depend on it.  (No standard headers: NVRTC compiles this without the host include
// paths.)

#define FULL_MASK 0xffffffffu
#define TASKS 5
#define SINGLES 0               // gctl word counting the singles (match_groups' NEXT_TASK,
                                // zeroed before that launch)
#define RANK_BITS 31
#define NO_KEY (~0ull)

extern "C" __global__ void group_keys(
    const int* __restrict__ tasks, const unsigned long long* __restrict__ ctl, long long pairs,
    int types, const int* __restrict__ leaf_root, const int* __restrict__ us,
    const int* __restrict__ vs, const int* __restrict__ ranks, long long slots,
    unsigned long long* __restrict__ keys)
{
    const long long made = (long long)ctl[TASKS];
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < pairs;
         i += stride) {
        unsigned long long key = NO_KEY;
        if (i < made) {
            const int pair = tasks[i];
            const int e = pair / types;
            const int t = pair - e * types;
            const int leaf = leaf_root[t];
            if (leaf >= 0) {
                const int parent = leaf == 1 ? us[e] : vs[e];
                key = ((unsigned long long)t * slots + parent) << RANK_BITS |
                      (unsigned)ranks[e];
            }
        }
        keys[i] = key;
    }
}

extern "C" __global__ void gather_keys(const long long* __restrict__ order,
                                       const unsigned long long* __restrict__ keys,
                                       long long pairs, unsigned long long* __restrict__ out)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < pairs;
         j += stride)
        out[j] = keys[order[j]];
}

__device__ __forceinline__ long long first_at_least(const unsigned long long* a, long long lo,
                                                    long long hi, unsigned long long key) {
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (a[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Reserve room for the lanes whose `want` is set, with one atomic add for the warp;
// returns this lane's slot.
__device__ __forceinline__ long long warp_slot(unsigned long long* counter, bool want,
                                               int lane) {
    const unsigned mask = __ballot_sync(FULL_MASK, want);
    unsigned long long at = 0;
    if (lane == 0 && mask) at = atomicAdd(counter, (unsigned long long)__popc(mask));
    at = __shfl_sync(FULL_MASK, at, 0);
    return (long long)at + __popc(mask & ((1u << lane) - 1u));
}

extern "C" __global__ void group_runs(
    const unsigned long long* __restrict__ key, const long long* __restrict__ order,
    const int* __restrict__ tasks, const unsigned long long* __restrict__ ctl, long long pairs,
    int types, const int* __restrict__ leaf_root, const int* __restrict__ us,
    const int* __restrict__ vs, long long slots, int min_size, int* __restrict__ singles,
    unsigned long long* gctl, int* __restrict__ group_type, int* __restrict__ group_parent,
    long long* __restrict__ group_lo, long long* __restrict__ group_hi,
    unsigned long long* __restrict__ leaf_key)
{
    const long long made = (long long)ctl[TASKS];
    const int lane = threadIdx.x & 31;
    const long long stride = (long long)gridDim.x * blockDim.x;
    // The loop bound is the same for the whole warp (base excludes the lane).
    for (long long base = (long long)blockIdx.x * blockDim.x + (threadIdx.x - lane);
         base < pairs; base += stride) {
        const long long j = base + lane;
        bool single = false, first = false;
        int pair = 0, t = 0, parent = 0;
        long long lo = 0, hi = 0;
        if (j < pairs) {
            unsigned long long second = (unsigned long long)j << 32;
            const long long i = order[j];
            if (i < made) {
                pair = tasks[i];
                single = true;
                const unsigned long long k = key[j];
                if (k != NO_KEY) {
                    const unsigned long long run = k >> RANK_BITS;
                    lo = first_at_least(key, 0, j + 1, run << RANK_BITS);
                    hi = first_at_least(key, j, pairs, (run + 1) << RANK_BITS);
                    if (hi - lo >= min_size) {
                        single = false;
                        first = j == lo;
                        const int e = pair / types;
                        t = pair - e * types;
                        parent = (int)(run - (unsigned long long)t * slots);
                        const int leaf = leaf_root[t] == 1 ? vs[e] : us[e];
                        second = (unsigned long long)lo << 32 | (unsigned)leaf;
                    }
                }
            }
            leaf_key[j] = second;
        }
        const long long s = warp_slot(gctl + SINGLES, single, lane);
        if (single) singles[s] = pair;
        const long long g = warp_slot(gctl + TASKS, first, lane);
        if (first) {
            group_type[g] = t;
            group_parent[g] = parent;
            group_lo[g] = lo;
            group_hi[g] = hi;
        }
    }
}

extern "C" __global__ void by_leaf(
    const long long* __restrict__ order, const unsigned long long* __restrict__ leaf_key,
    const unsigned long long* __restrict__ key, long long pairs, int* __restrict__ leaf_by_id,
    int* __restrict__ rank_by_id, unsigned long long* ctl, const unsigned long long* gctl)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (start == 0) ctl[TASKS] = gctl[SINGLES];
    for (long long j = start; j < pairs; j += stride) {
        const long long i = order[j];
        leaf_by_id[j] = (int)(leaf_key[i] & 0xffffffffull);
        rank_by_id[j] = (int)(key[i] & ((1ull << RANK_BITS) - 1));
    }
}
