// A one-kind batch's edge records settled on the device in four launches around a sort
// (gpu/cuda/batch_prep.py): gpu/batch_edges.py's checks and set semantics for a batch that
// only inserts, or only deletes, edges and has no vertex records.
//
// record_keys    a thread per record: its checks (atomicMin of the record into `checks`,
//                gpu/batch_edges.py's LOOP, MISSING, NEGATIVE_LABEL) and its edge key
//                lo << 32 | hi (NO_KEY where an endpoint is missing);
// settle_runs    a thread per sorted record: the first of each run of equal keys (the
//                earliest record: the sort is stable) walks its run for a conflicting
//                insert label (CONFLICT, the earliest such record) and writes the key
//                the packed memory array files the edge under; every other one NO_KEY;
// keep_changes   after the array's lookup of those keys: whether each run's edge changes
//                (inserted: not stored; deleted: stored, and named by a record of the run,
//                its label omitted or the stored one);
// write_changes  after a prefix sum of `keep`: the kept edges, in key order, into one
//                int32 buffer [u | v | label] of n entries each, then the count kept and
//                the checks, so that one copy brings back all the host needs.
// A run is walked by one thread: a batch's total is its records, whatever the runs.

#define NO_KEY 0xffffffffffffffffull
#define LOOP 0
#define MISSING 1
#define NEGATIVE_LABEL 3
#define CONFLICT 4
#define CHECKS 5
#define NO_LABEL (-1)

extern "C" __global__ void record_keys(
    const long long* __restrict__ a, const long long* __restrict__ b,
    const int* __restrict__ slot_a, const int* __restrict__ slot_b,
    const int* __restrict__ labels, long long n,
    int inserting, unsigned long long* __restrict__ key, long long* __restrict__ checks)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int su = slot_a[i], sv = slot_b[i];
    if (a[i] == b[i]) atomicMin((unsigned long long*)&checks[LOOP], (unsigned long long)i);
    if (su < 0) atomicMin((unsigned long long*)&checks[MISSING], (unsigned long long)(2 * i));
    if (sv < 0)
        atomicMin((unsigned long long*)&checks[MISSING], (unsigned long long)(2 * i + 1));
    if (inserting && labels[i] < 0)
        atomicMin((unsigned long long*)&checks[NEGATIVE_LABEL], (unsigned long long)i);
    if (su < 0 || sv < 0) {
        key[i] = NO_KEY;
        return;
    }
    const unsigned long long lo = su < sv ? su : sv, hi = su < sv ? sv : su;
    key[i] = lo << 32 | hi;
}

extern "C" __global__ void settle_runs(
    const unsigned long long* __restrict__ sorted, const long long* __restrict__ order,
    const int* __restrict__ labels, long long n, int inserting,
    const int* __restrict__ slot_labels, int vertex_bits,
    unsigned long long* __restrict__ array_key, long long* __restrict__ checks)
{
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    const unsigned long long k = sorted[p];
    if (k == NO_KEY || (p > 0 && sorted[p - 1] == k)) {
        array_key[p] = NO_KEY;
        return;
    }
    if (inserting) {
        const int label = labels[order[p]];
        for (long long q = p + 1; q < n && sorted[q] == k; ++q)
            if (labels[order[q]] != label)
                atomicMin((unsigned long long*)&checks[CONFLICT], (unsigned long long)order[q]);
    }
    const unsigned long long u = k >> 32, v = k & 0xffffffffull;
    array_key[p] = u << 32 | (unsigned long long)slot_labels[v] << vertex_bits | v;
}

extern "C" __global__ void keep_changes(
    const unsigned long long* __restrict__ sorted, const long long* __restrict__ order,
    const int* __restrict__ labels, const unsigned long long* __restrict__ array_key,
    const int* __restrict__ stored, long long n, int inserting, int* __restrict__ keep)
{
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    int kept = 0;
    if (array_key[p] != NO_KEY) {
        const int s = stored[p];
        if (inserting) {
            kept = s < 0;
        } else if (s >= 0) {
            const unsigned long long k = sorted[p];
            for (long long q = p; q < n && sorted[q] == k && !kept; ++q) {
                const int label = labels[order[q]];
                kept = label == NO_LABEL || label == s;
            }
        }
    }
    keep[p] = kept;
}

extern "C" __global__ void write_changes(
    const unsigned long long* __restrict__ sorted, const long long* __restrict__ order,
    const int* __restrict__ labels, const int* __restrict__ stored,
    const int* __restrict__ keep, const int* __restrict__ place, long long n, int inserting,
    const long long* __restrict__ checks, int* __restrict__ out)
{
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    if (keep[p]) {
        const long long j = place[p] - 1;      // place: the inclusive prefix sum of keep
        const unsigned long long k = sorted[p];
        out[j] = (int)(k >> 32);
        out[n + j] = (int)(k & 0xffffffffull);
        out[2 * n + j] = inserting ? labels[order[p]] : stored[p];
    }
    if (p == n - 1) {
        out[3 * n] = place[p];
        for (int c = 0; c < CHECKS; ++c) out[3 * n + 1 + c] = (int)checks[c];
    }
}
