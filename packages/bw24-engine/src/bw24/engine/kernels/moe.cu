// moe.cu: mixture-of-experts FFN pieces for decode (qwen3moe): router top-k, expert matvecs that read
// only the selected experts (ids read from device memory: graph-capturable), weighted combine.
//
// Formula (ops/ref.py moe, llama.cpp build_moe_ffn with softmax gating), per token t:
//   p = softmax(router_logits[t]) (float64); sel = the k largest p (ties: lower expert index),
//   in descending order; w_j = p[sel_j] (/ sum_j p[sel_j] when norm), stored as float32;
//   out[t] = residual[t] + sum_j (w_j * down_{sel_j}(act(gate_{sel_j} x_t) * up_{sel_j} x_t)), the
//   sum in j order with float32 products and adds rounded one by one (as the reference does).
// Thread-to-data mapping: moe_route: one warp per token, lanes stride the X experts, k rounds of a
//   warp argmax. moe_mv: grid (row blocks, T*k slots), one warp per output row of expert sel[slot];
//   lanes walk the 32-column groups (decode_group from quant.cuh), warp-sum at the end.
//   moe_combine: one thread per (token, column).
// Bytes moved: route 4*T*X read; moe_mv the selected experts' repacked rows only (k/X of the tensor
//   per token) + 4K per slot of x; combine 4*T*E*(k + 2).
#include "quant.cuh"

#define MOE_WARPS 4

__device__ __forceinline__ void better_d(double& v, int& i, double v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i)) { v = v2; i = i2; }
}

// logits [T, X] -> sel int32 [T, k], wts float32 [T, k]. X <= 1024 (a 32-bit mask per lane).
extern "C" __global__ void moe_route(const float* __restrict__ logits, int X, int k, int norm,
                                     int* __restrict__ sel, float* __restrict__ wts) {
    const int t = blockIdx.x, lane = threadIdx.x;
    const float* l = logits + (i64)t * X;
    double m = -INFINITY;
    for (int x = lane; x < X; x += 32) m = fmax(m, (double)l[x]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmax(m, __shfl_xor_sync(FULL_MASK, m, o));
    double s = 0.0;
    for (int x = lane; x < X; x += 32) s += exp((double)l[x] - m);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL_MASK, s, o);
    u32 taken = 0;  // bit j: expert lane + 32 j already selected
    double pw[32];
    double total = 0.0;
    for (int r = 0; r < k; ++r) {
        double bv = -INFINITY;
        int bi = 0x7fffffff;
        for (int x = lane, j = 0; x < X; x += 32, ++j)
            if (!((taken >> j) & 1)) better_d(bv, bi, exp((double)l[x] - m) / s, x);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const double v2 = __shfl_xor_sync(FULL_MASK, bv, o);
            const int i2 = __shfl_xor_sync(FULL_MASK, bi, o);
            better_d(bv, bi, v2, i2);
        }
        if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
        pw[r] = bv;
        total += bv;
        if (lane == 0) sel[(i64)t * k + r] = bi;
    }
    if (lane == 0)
        for (int r = 0; r < k; ++r) wts[(i64)t * k + r] = (float)(norm ? pw[r] / total : pw[r]);
}

// out[slot, n] = W[sel[slot]] row n . x[slot or slot / k]. W: stacked experts [X, N, K] (rows X*N).
template <int FMT>
__global__ void __launch_bounds__(MOE_WARPS * 32)
moe_mv(const void* __restrict__ pa, const void* __restrict__ pb, const void* __restrict__ pc,
       const void* __restrict__ pd, const int* __restrict__ sel, int k, const float* __restrict__ x,
       int x_per_slot, int K, int N, float* __restrict__ out) {
    const Planes p{pa, pb, pc, pd};
    const int lane = threadIdx.x & 31, slot = blockIdx.y;
    const int n = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (n >= N) return;
    const i64 row = (i64)sel[slot] * N + n;
    const float* xs = x + (i64)(x_per_slot ? slot : slot / k) * K;
    const int G = K >> 5;
    float acc = 0.f;
    for (int g = lane; g < G; g += 32) {
        float w[32];
        decode_group<FMT>(p, row, g, K, w);
        const float4* s4 = reinterpret_cast<const float4*>(xs + 32 * g);
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float4 f = __ldg(s4 + i);
            s = fmaf(w[4 * i], f.x, s);
            s = fmaf(w[4 * i + 1], f.y, s);
            s = fmaf(w[4 * i + 2], f.z, s);
            s = fmaf(w[4 * i + 3], f.w, s);
        }
        acc += s;
    }
    acc = warp_sum(acc);
    if (lane == 0) out[(i64)slot * N + n] = acc;
}

// out[t, i] = residual[t, i] + sum_j wts[t, j] * d[t*k + j, i]  (residual may alias out, or be null).
extern "C" __global__ void moe_combine(const float* __restrict__ d, const float* __restrict__ wts, int k, int E,
                                       const float* residual, float* out) {
    const int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= E) return;
    float y = residual ? residual[(i64)t * E + i] : 0.f;
    for (int j = 0; j < k; ++j)
        y = __fadd_rn(y, __fmul_rn(wts[(i64)t * k + j], d[((i64)t * k + j) * E + i]));
    out[(i64)t * E + i] = y;
}
