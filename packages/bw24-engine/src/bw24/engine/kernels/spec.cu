// spec.cu: the greedy verify of speculative decoding, reduced on the device so the host reads 2T ints
// per round instead of T x V logits.
//
// Formula: for each verify row t < T: out[t] = argmax_i logits[t, i] (the LOWEST index among equal
// maxima, as numpy.argmax and sample.cu's argmax_sample pick), out[T + t] = ids[t] (the verified ids:
// [last, d1..dK], so the host learns device-written drafts in the same read).
// No penalties (the fast path is taken only for greedy without penalties). NaN logits are skipped
// (never chosen); the reference numpy.argmax would pick a NaN, a model producing NaN is broken anyway.
//
// Thread-to-data mapping: one block of VT threads per row; thread i strides the row (i, i + VT, ...),
// keeps its best (value, index), then a warp butterfly and a cross-warp pass give the block's best.
// Bytes moved: 4 T V logits read, 8 T bytes written.
#include "common.cuh"

#define VT 512  // threads per row block

__device__ __forceinline__ void take_better(float& bv, int& bi, float v, int i) {
    if (v > bv || (v == bv && i < bi)) { bv = v; bi = i; }
}

extern "C" __global__ void __launch_bounds__(VT)
verify_argmax(const float* __restrict__ logits, int T, int V, const int* __restrict__ ids, int* __restrict__ out) {
    PDL_OPEN();
    __shared__ float sv[VT / 32];
    __shared__ int si[VT / 32];
    const int t = blockIdx.x;
    const float* row = logits + (size_t)t * V;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < V; i += VT) {
        const float v = row[i];
        if (v == v) take_better(bv, bi, v, i);  // v == v: not NaN
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_xor_sync(FULL_MASK, bv, o);
        const int i2 = __shfl_xor_sync(FULL_MASK, bi, o);
        take_better(bv, bi, v2, i2);
    }
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) { sv[w] = bv; si[w] = bi; }
    __syncthreads();
    if (w == 0) {
        bv = lane < VT / 32 ? sv[lane] : -INFINITY;
        bi = lane < VT / 32 ? si[lane] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float v2 = __shfl_xor_sync(FULL_MASK, bv, o);
            const int i2 = __shfl_xor_sync(FULL_MASK, bi, o);
            take_better(bv, bi, v2, i2);
        }
        if (lane == 0) {
            out[t] = bi == 0x7fffffff ? 0 : bi;
            out[T + t] = ids[t];
        }
    }
}

// FR-Spec (spec/frspec.py TrimmedHeadOps): a trimmed draft head's logits sub [T, N] (rows of the kept ids)
// spread back to the full vocabulary: out[t, v] = sub[t, inv[v]] where inv[v] >= 0 (v is kept id number
// inv[v]), else -inf. The draft's own argmax (sample.cu, inside its captured decode step) then picks among the
// kept ids, lowest id among equal maxima, as the host path (frspec's full row with -inf outside the ids) does.
// Why a full rewrite each step instead of a scatter into a row filled once: no state to keep across graphs
// and buffers, and 8 V bytes a row (1.2 MB at V = 151,936) next to the ~4.6 V * E / 32 bytes of the head it
// saves. grid (ceil(V / 256), T), 256 threads, one v each: inv and out coalesced, sub gathered (from L2).
extern "C" __global__ void __launch_bounds__(256)
frspec_expand(const float* __restrict__ sub, const int* __restrict__ inv, int N, int V, float* __restrict__ out) {
    PDL_OPEN();
    const int v = blockIdx.x * 256 + threadIdx.x, t = blockIdx.y;
    if (v >= V) return;
#ifdef BW24_PLANTED_EXPAND  // kernel_check canary: each kept logit lands one id later
    const int j = v > 0 ? inv[v - 1] : -1;
#else
    const int j = inv[v];
#endif
    out[(size_t)t * V + v] = j >= 0 ? sub[(size_t)t * N + j] : -INFINITY;
}
