// The update edges' part of a launch's leaf counts (match.cu, Leaves): which of the
// phase's update edges a counted leaf could use, as prefix counts that a task looks up.
//
// The launch's update edges are listed once per end vertex y, sorted by key = y << 32 |
// rank (gpu/cuda/match_launchers.py PhaseLeaves).  mark_update_leaves writes
// hits[c * (m + 1) + i + 1] = 1 when entry i (neighbour nbr[i] through an edge labelled
// elab[i]) is ranked (an update edge of the phase: rank != 0) and would be a candidate of
// column c (edge label col_elab[c], the candidate bit col_q[c] in the table of query
// col_row[c]); a cumulative sum along each row then counts, for any vertex y and rank
// cur, the update edges at y that a task of rank cur may not use (blocked: 0 < rank <
// cur) by two lookups of the keys.  Per-vertex totals over all of y's edges are counted
// by the search itself when it first needs them (match.cu leaf_total): nothing here is
// the size of the graph.

extern "C" __global__ void mark_update_leaves(
    const int* __restrict__ nbr, const int* __restrict__ elab,
    const long long* __restrict__ key, long long m,
    const unsigned long long* __restrict__ cand_ptrs, const int* __restrict__ col_row,
    const int* __restrict__ col_q, const int* __restrict__ col_elab, int cols,
    int* __restrict__ hits)
{
    const long long at = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (at >= m * cols) return;
    const int c = (int)(at / m);
    const long long i = at - (long long)c * m;
    const unsigned* cand = (const unsigned*)cand_ptrs[col_row[c]];
    const int ranked = (int)(key[i] & 0xffffffffLL) != 0;
    hits[c * (m + 1) + i + 1] =
        ranked && elab[i] == col_elab[c] && ((cand[nbr[i]] >> col_q[c]) & 1u);
}
