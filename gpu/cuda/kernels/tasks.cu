// A launch's tasks, made on the device from its update edges and the candidate bits.
//
// A task is a pair (update edge e, task type t), numbered e * types + t.  It can start a
// match when the edge carries the type's root edge label and its ends are candidates of
// the type's two root query vertices (the bits of the type's query, cand_ptrs[cand_row[t]]).
// Each warp tests 32 pairs, and its lane 0 reserves room for those that pass with one
// atomic add on ctl[5] (the count the matching kernel reads), so tasks land in no
// particular order: counts and listings do not depend on it.
// (No standard headers: NVRTC compiles this without the host include paths.)

#define FULL_MASK 0xffffffffu
#define TASKS 5

extern "C" __global__ void make_tasks(
    const unsigned long long* __restrict__ cand_ptrs, const int* __restrict__ cand_row,
    const int* __restrict__ roots, const int* __restrict__ root_label, int types,
    const int* __restrict__ us, const int* __restrict__ vs, const int* __restrict__ elab,
    int edges, int* __restrict__ tasks, unsigned long long* ctl)
{
    const long long pairs = (long long)edges * types;
    const int lane = threadIdx.x & 31;
    const long long stride = (long long)gridDim.x * blockDim.x;
    // The loop bound is the same for the whole warp (base excludes the lane).
    for (long long base = (long long)blockIdx.x * blockDim.x + (threadIdx.x - lane);
         base < pairs; base += stride) {
        const long long i = base + lane;
        bool ok = false;
        if (i < pairs) {
            const int e = (int)(i / types);
            const int t = (int)(i - (long long)e * types);
            if (elab[e] == root_label[t]) {
                const unsigned* cand = (const unsigned*)cand_ptrs[cand_row[t]];
                ok = ((cand[us[e]] >> roots[2 * t]) & (cand[vs[e]] >> roots[2 * t + 1]) & 1u)
                     != 0;
            }
        }
        const unsigned mask = __ballot_sync(FULL_MASK, ok);
        unsigned long long at = 0;
        if (lane == 0 && mask) at = atomicAdd(ctl + TASKS, (unsigned long long)__popc(mask));
        at = __shfl_sync(FULL_MASK, at, 0);
        if (ok) tasks[at + __popc(mask & ((1u << lane) - 1u))] = (int)i;
    }
}
