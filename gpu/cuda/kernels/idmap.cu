// The vertex id map (gpu/graph/idmap.py) read on the device: the same open-addressing
// table, copied from the host (gpu/cuda/id_mirror.py), probed as find_slot probes it.

#define EMPTY (-1LL)
#define GOLDEN 0x9E3779B97F4A7C15ULL

// out[i]: the slot of external id query[i], -1 where unknown; a thread per id.
extern "C" __global__ void lookup_ids(const long long* __restrict__ keys,
                                      const int* __restrict__ vals, long long mask,
                                      const long long* __restrict__ query,
                                      int* __restrict__ out, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const long long q = query[i];
    // idmap.py _slot: the id times the golden ratio, its high bits folded in.
    const unsigned long long h = (unsigned long long)q * GOLDEN;
    long long s = (long long)((h ^ (h >> 29)) & (unsigned long long)mask);
    int found = -1;
    for (long long k = keys[s]; k != EMPTY; k = keys[s]) {
        if (k == q) {
            found = vals[s];
            break;
        }
        s = (s + 1) & mask;
    }
    out[i] = found;
}
