// Total-order ranks of a phase's update edges, written on the device.
//
// Thread i < count handles edge i as us[i] -> vs[i], thread count + i as vs[i] -> us[i]:
// it finds the entry in the source's neighbour list (sorted by (neighbour label, id),
// see gpu/graph/lists.py) by binary search and writes ranks[i] there, or 0 when `clear`.
// In a `directed` graph edge i is the arc us[i] -> vs[i], listed at us[i] under key
// 2 label + 0 and at vs[i] under 2 label + 1 (lists.py list_key).
// Every edge must exist in the device graph (the engine calls this after syncing it).

extern "C" __global__ void set_edge_ranks(
    const long long* __restrict__ start, const int* __restrict__ deg,
    const int* __restrict__ nbr, const int* __restrict__ nlab,
    const int* __restrict__ label, int* __restrict__ rank,
    const int* __restrict__ us, const int* __restrict__ vs,
    const int* __restrict__ ranks, int count, int clear, int directed)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 2LL * count) return;
    int e = (int)(i < count ? i : i - count);
    int a = i < count ? us[e] : vs[e];
    int b = i < count ? vs[e] : us[e];
    int want = directed ? 2 * label[b] + (i < count ? 0 : 1) : label[b];
    long long lo = start[a];
    long long end = lo + deg[a];
    long long hi = end;
    while (lo < hi) {
        long long mid = (lo + hi) >> 1;
        if (nlab[mid] < want || (nlab[mid] == want && nbr[mid] < b)) lo = mid + 1;
        else hi = mid;
    }
    if (lo < end && nbr[lo] == b) rank[lo] = clear ? 0 : ranks[e];
}
