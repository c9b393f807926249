// attention_gemm.cu: the two non-GEMM steps of prefill attention as tensor-core GEMMs
// (ops/cuda/attn_gemm.py; cuBLAS does S = Q K^T and O = P V on a float16 KV cache).
//
// Formula (as attention_prefill.cu): query t of head h at position p = pos[0] + t0 + t attends to keys
// j in [lo, p], lo = 0 or p - window + 1; s_j = (q . k_j) * scale, optionally softcap * tanh(s_j /
// softcap); out = sum_j softmax(s)_j v_j. Precision: q and the probabilities are each split into a
// float16 high part and a float16 low part (x = hi + lo up to ~2^-22 relative), so with the exact
// float16 cache both products keep fp32-like accuracy in cuBLAS's fp32 accumulation.
//
// Thread-to-data mapping:
//   attn_q_split: one thread per element of q [T, H, D] (float32); writes qh / ql laid out [H, T, D]
//     (head-major: a kv head's G query heads are G * T consecutive rows, one GEMM's columns).
//   attn_softmax_rows: one block (256 threads) per score row (h, t) of s [H, T, ld] (float32, keys
//     0 .. nkeys - 1 valid); thread i walks keys i, i + 256, ... three times: the masked row max, the
//     sum of e^(s - max), then p = e^(s - max) / sum split into ph / pl ([H, T, ld] float16; masked and
//     j >= nkeys keys get 0, so the P V GEMM may run over all nkeys).
//   attn_o_gather: one thread per output element: o [H, T, DV] (the P V GEMM's head-major rows) to
//     out [T, H, DV] at query row t0.
// Bytes moved: q 4 T H D read, 4 T H D written; per score row 3 x 4 nkeys read (L2 after the first)
//   and 4 nkeys written; the gather 4 T H DV each way.
#include "common.cuh"

// Element i of a token-major [T, H, D] array: its offset in the head-major [H, T, D] layout.
__device__ __forceinline__ i64 head_major(i64 i, int T, int H, int D) {
    const int d = (int)(i % D);
    const i64 th = i / D;
    return ((th % H) * T + th / H) * D + d;
}

extern "C" __global__ void attn_q_split(const float* __restrict__ q, int T, int H, int D, __half* __restrict__ qh,
                                        __half* __restrict__ ql) {
    PDL_OPEN();
    const i64 n = (i64)T * H * D;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const float x = q[i];
        const __half hi = __float2half_rn(x);
        const i64 o = head_major(i, T, H, D);
        qh[o] = hi;
        ql[o] = __float2half_rn(x - __half2float(hi));
    }
}

#define SM_THREADS 256

__device__ __forceinline__ float block_reduce(float v, bool is_max, float* red) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();  // red is reused by the next call
    if (lane == 0) red[w] = v;
    __syncthreads();
    float r = red[0];
    for (int u = 1; u < SM_THREADS / 32; ++u) r = is_max ? fmaxf(r, red[u]) : r + red[u];
    return r;
}

// s [H * T rows, ld] scores of query rows t0 .. t0 + T - 1 (row r = h * T + t); keys < nkeys.
extern "C" __global__ void __launch_bounds__(SM_THREADS)
attn_softmax_rows(const float* __restrict__ s, int T, int ld, int nkeys, const int* __restrict__ pos, int t0,
                  float scale, float softcap, int window, __half* __restrict__ ph, __half* __restrict__ pl) {
    PDL_OPEN();
    __shared__ float red[SM_THREADS / 32];
    const i64 r = blockIdx.x;
    const int t = (int)(r % T);
    const int p = pos[0] + t0 + t;
    const int lo = window > 0 ? max(0, p - window + 1) : 0;
    const int hi = min(p, nkeys - 1);  // last live key
    const float* row = s + r * ld;
    auto score = [&](int j) {
        float x = row[j] * scale;
        if (softcap > 0.f) x = softcap * tanhf(x / softcap);
        return x;
    };
    float m = -INFINITY;
    for (int j = lo + threadIdx.x; j <= hi; j += SM_THREADS) m = fmaxf(m, score(j));
    m = block_reduce(m, true, red);
    float l = 0.f;
    for (int j = lo + threadIdx.x; j <= hi; j += SM_THREADS) l += expf(score(j) - m);
    l = block_reduce(l, false, red);
    const float inv = 1.f / l;
    for (int j = threadIdx.x; j < nkeys; j += SM_THREADS) {
        const float v = (j >= lo && j <= hi) ? expf(score(j) - m) * inv : 0.f;
        const __half h = __float2half_rn(v);
        ph[r * ld + j] = h;
        pl[r * ld + j] = __float2half_rn(v - __half2float(h));
    }
}

extern "C" __global__ void attn_o_gather(const float* __restrict__ o, int T, int H, int DV, float* __restrict__ out) {
    PDL_OPEN();
    const i64 n = (i64)T * H * DV;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = o[head_major(i, T, H, DV)];
}
