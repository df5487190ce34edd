// Vertex signatures and every standing query's candidate bits, kept on the device.
//
// The rules are gpu/plan/signatures.py's (GSI / GAMMA §IV-B): a vertex's signature holds, per
// encoded label (slot), the 2-bit saturating count of its neighbours with that label, 32
// slots per 64-bit word; data vertex v is a candidate of query vertex u when the labels
// agree, deg(v) >= deg(u) and every 2-bit field of v's signature is >= u's.  Exact
// neighbour-label counts are kept beside the codes (a saturated code cannot be
// decremented).  Per batch, count_edges follows the changed edges into the counts and
// degrees, and refresh re-encodes the touched vertices and recomputes their bits for
// every query: the work follows the batch.
// (No standard headers: NVRTC compiles this without the host include paths.)

#define MAX_QUERY 32
#define LABELS_PER_WORD 32

// Edges us[i] - vs[i] added (delta 1) or taken out (delta -1): each end's count of the
// other end's label slot, and both degrees.  In a `directed` graph edge i is the arc
// us[i] -> vs[i] and a label has two fields (`slots` of them in all): us[i] counts an
// out-neighbour (2 slot), vs[i] an in-neighbour (2 slot + 1).
extern "C" __global__ void count_edges(
    const int* __restrict__ us, const int* __restrict__ vs, int count, int delta,
    const int* __restrict__ slot_of, int* counts, int slots, int* deg, int directed)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const int u = us[i], v = vs[i];
    int s = slot_of[v];
    if (s >= 0) atomicAdd(counts + (long long)u * slots + (directed ? 2 * s : s), delta);
    s = slot_of[u];
    if (s >= 0) atomicAdd(counts + (long long)v * slots + (directed ? 2 * s + 1 : s), delta);
    atomicAdd(deg + u, delta);
    atomicAdd(deg + v, delta);
}

// True when every 2-bit field of d is >= the same field of q (branch-free SWAR).
__device__ __forceinline__ bool fields_ge(unsigned long long d, unsigned long long q) {
    const unsigned long long HI = 0xAAAAAAAAAAAAAAAAull, LO = 0x5555555555555555ull;
    const unsigned long long dh = d & HI, qh = q & HI;
    const unsigned long long dl = (d & LO) << 1, ql = (q & LO) << 1;
    const unsigned long long ok = (dh & ~qh) | (~(dh ^ qh) & (dl | ~ql));
    return (ok & HI) == HI;
}

// Re-encode vertices[i] from its counts, then set its bit of query vertex u in each
// query's table (cand_ptrs[q]) when it is a candidate of u.  Query q has q_n[q] vertices
// with labels q_label[q, u], degrees q_deg[q, u] and codes q_codes[q, u, :words].
extern "C" __global__ void refresh(
    const int* __restrict__ vertices, int count, const int* __restrict__ counts, int slots,
    unsigned long long* codes, int words, const int* __restrict__ label,
    const int* __restrict__ deg, const unsigned char* __restrict__ alive, int queries,
    const unsigned long long* __restrict__ cand_ptrs, const int* __restrict__ q_n,
    const int* __restrict__ q_label, const int* __restrict__ q_deg,
    const unsigned long long* __restrict__ q_codes)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const int v = vertices[i];
    unsigned long long* code = codes + (long long)v * words;
    for (int w = 0; w < words; ++w) {
        unsigned long long c = 0;
        const int first = w * LABELS_PER_WORD;
        for (int s = first; s < slots && s < first + LABELS_PER_WORD; ++s) {
            const int k = counts[(long long)v * slots + s];
            c |= (unsigned long long)(k < 3 ? k : 3) << (2 * (s - first));
        }
        code[w] = c;
    }
    const bool live = alive[v] != 0;
    const int lab = label[v], d = deg[v];
    for (int q = 0; q < queries; ++q) {
        unsigned bits = 0;
        for (int u = 0; live && u < q_n[q]; ++u) {
            const int at = q * MAX_QUERY + u;
            if (q_label[at] != lab || d < q_deg[at]) continue;
            bool ok = true;
            for (int w = 0; ok && w < words; ++w)
                ok = fields_ge(code[w], q_codes[(long long)at * words + w]);
            if (ok) bits |= 1u << u;
        }
        ((unsigned*)cand_ptrs[q])[v] = bits;
    }
}
