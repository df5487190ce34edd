// A phase's leaf counts for the matching kernel's counted tails (match.cu, Leaves).
//
// nc[y * cols + c] = the neighbours w of vertex y through edges labelled col_elab[c] that
// are not update edges of the phase (rank 0 in the read view: the phase's ranks are set)
// and whose candidate bits (the table of query col_row[c]) hold query vertex col_q[c].
// One warp per vertex, its lanes over the vertex's list, one pass per column; every entry
// of nc is written.  The layout is the lists' (gpu/graph/lists.py), as the read view's.

#define FULL_MASK 0xffffffffu

extern "C" __global__ void count_leaves(
    const long long* __restrict__ start, const int* __restrict__ deg,
    const int* __restrict__ nbr, const int* __restrict__ elab,
    const int* __restrict__ rank, int slots,
    const unsigned long long* __restrict__ cand_ptrs, const int* __restrict__ col_row,
    const int* __restrict__ col_q, const int* __restrict__ col_elab, int cols,
    int* __restrict__ nc)
{
    const long long y = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (y >= slots) return;      // the whole warp: y is the same on every lane
    const long long s = start[y], e = s + deg[y];
    for (int c = 0; c < cols; ++c) {
        const unsigned* cand = (const unsigned*)cand_ptrs[col_row[c]];
        const unsigned bit = 1u << col_q[c];
        const int el = col_elab[c];
        int found = 0;
        for (long long k = s + lane; k < e; k += 32)
            found += rank[k] == 0 && elab[k] == el && (cand[nbr[k]] & bit) != 0;
        found = __reduce_add_sync(FULL_MASK, found);
        if (lane == 0) nc[y * cols + c] = found;
    }
}
