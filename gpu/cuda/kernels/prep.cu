// A batch's edge records settled on the device in four launches around a sort
// (gpu/cuda/batch_prep.py): gpu/batch_edges.py's checks and set semantics for a batch with
// no vertex records, its edge records inserting, deleting, or both.
//
// record_keys    a thread per record: its checks (atomicMin of the record into `checks`,
//                gpu/batch_edges.py's LOOP, MISSING, NEGATIVE_LABEL) and its edge key
//                lo << 32 | hi (`directed`: the arc's u << 32 | v; NO_KEY where an
//                endpoint is missing);
// settle_runs    a thread per sorted record: the first of each run of equal keys walks
//                its run (the sort is stable: in record order) for the first conflicting
//                insert label (CONFLICT: a record inserting the edge with another label
//                than the run's earliest insert) and for which kinds the run holds; a run
//                of inserts only or deletes only gets the key the packed memory array
//                files its edge under, every other record NO_KEY (a run that inserts and
//                deletes one edge cancels: nothing to look up; `directed`: the arc's entry
//                at u, list key 2 label + 0, gpu/cuda/device_graph.py);
// keep_changes   after the array's lookup of those keys: whether each run's edge changes
//                (inserted: not stored; deleted: stored, and named by a record of the run,
//                its label omitted or the stored one), in keep_ins or keep_del;
// write_changes  after prefix sums of both: the kept edges in key order into one int32
//                buffer [inserted u | v | label | deleted u | v | label] of n entries
//                each, then the two counts kept and the checks, so that one copy brings
//                back all the host needs.
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
    const int* __restrict__ labels, const int* __restrict__ inserting, long long n,
    int directed, unsigned long long* __restrict__ key, long long* __restrict__ checks)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int su = slot_a[i], sv = slot_b[i];
    if (a[i] == b[i]) atomicMin((unsigned long long*)&checks[LOOP], (unsigned long long)i);
    if (su < 0) atomicMin((unsigned long long*)&checks[MISSING], (unsigned long long)(2 * i));
    if (sv < 0)
        atomicMin((unsigned long long*)&checks[MISSING], (unsigned long long)(2 * i + 1));
    if (inserting[i] && labels[i] < 0)
        atomicMin((unsigned long long*)&checks[NEGATIVE_LABEL], (unsigned long long)i);
    if (su < 0 || sv < 0) {
        key[i] = NO_KEY;
        return;
    }
    const unsigned long long lo = su < sv || directed ? su : sv;
    const unsigned long long hi = su < sv || directed ? sv : su;
    key[i] = lo << 32 | hi;
}

extern "C" __global__ void settle_runs(
    const unsigned long long* __restrict__ sorted, const long long* __restrict__ order,
    const int* __restrict__ labels, const int* __restrict__ inserting, long long n,
    const int* __restrict__ slot_labels, int vertex_bits, int directed,
    unsigned long long* __restrict__ array_key, long long* __restrict__ checks)
{
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    const unsigned long long k = sorted[p];
    if (k == NO_KEY || (p > 0 && sorted[p - 1] == k)) {
        array_key[p] = NO_KEY;
        return;
    }
    bool inserts = false, deletes = false;
    int label = 0;          // the run's earliest insert's
    for (long long q = p; q < n && sorted[q] == k; ++q) {
        const long long r = order[q];
        if (!inserting[r]) {
            deletes = true;
        } else if (!inserts) {
            inserts = true;
            label = labels[r];
        } else if (labels[r] != label) {
            atomicMin((unsigned long long*)&checks[CONFLICT], (unsigned long long)r);
        }
    }
    if (inserts && deletes) {
        array_key[p] = NO_KEY;
        return;
    }
    const unsigned long long u = k >> 32, v = k & 0xffffffffull;
    const unsigned long long list_key = directed ? 2ull * slot_labels[v]
                                                 : (unsigned long long)slot_labels[v];
    array_key[p] = u << 32 | list_key << vertex_bits | v;
}

extern "C" __global__ void keep_changes(
    const unsigned long long* __restrict__ sorted, const long long* __restrict__ order,
    const int* __restrict__ labels, const int* __restrict__ inserting,
    const unsigned long long* __restrict__ array_key, const int* __restrict__ stored,
    long long n, int* __restrict__ keep_ins, int* __restrict__ keep_del)
{
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    int inserted = 0, deleted = 0;
    if (array_key[p] != NO_KEY) {        // the first of a run of one kind
        const int s = stored[p];
        if (inserting[order[p]]) {
            inserted = s < 0;
        } else if (s >= 0) {
            const unsigned long long k = sorted[p];
            for (long long q = p; q < n && sorted[q] == k && !deleted; ++q) {
                const int label = labels[order[q]];
                deleted = label == NO_LABEL || label == s;
            }
        }
    }
    keep_ins[p] = inserted;
    keep_del[p] = deleted;
}

extern "C" __global__ void write_changes(
    const unsigned long long* __restrict__ sorted, const long long* __restrict__ order,
    const int* __restrict__ labels, const int* __restrict__ stored,
    const int* __restrict__ keep_ins, const int* __restrict__ keep_del,
    const int* __restrict__ place_ins, const int* __restrict__ place_del, long long n,
    const long long* __restrict__ checks, int* __restrict__ out)
{
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    // place_*: the inclusive prefix sums of keep_*
    const unsigned long long k = sorted[p];
    if (keep_ins[p]) {
        const long long j = place_ins[p] - 1;
        out[j] = (int)(k >> 32);
        out[n + j] = (int)(k & 0xffffffffull);
        out[2 * n + j] = labels[order[p]];      // the run's first record: an insert
    }
    if (keep_del[p]) {
        const long long j = 3 * n + place_del[p] - 1;
        out[j] = (int)(k >> 32);
        out[n + j] = (int)(k & 0xffffffffull);
        out[2 * n + j] = stored[p];
    }
    if (p == n - 1) {
        out[6 * n] = place_ins[p];
        out[6 * n + 1] = place_del[p];
        for (int c = 0; c < CHECKS; ++c) out[6 * n + 2 + c] = (int)checks[c];
    }
}
