// qmatvec.cu: quantized matrix x few-vectors product for decode and speculative verify.
//
// Formula: out[t, n] = softcap?( sum_k W[n, k] * x[t, k] + bias[n] + residual[t, n] ),  t < T <= NT.
// W is a repacked GGUF weight (planes described in quant.cuh); each 32-column group's dot product
// is formed from exact integer weights and the group's scales (qdot.cuh), accumulated in fp32.
//
// Thread-to-data mapping: a block of W warps owns R consecutive rows; thread i of the block walks
// groups g = i, i + 32W, ... and, for each group, first loads that group of all R rows (16-byte
// streaming loads: R x 16..128 bytes in flight per thread), then reads its 32 activations per
// token once (cached loads, shared by the R rows). Partial sums are reduced per (row, token) by a
// warp shuffle tree, then across the W warps in shared memory in warp order. The summation order
// depends on (W, K) only, never on R or T: decode (T = 1) and verify (T > 1) rows are bit-identical
// when they use the same W (the dispatcher keys W on the weight, not on T).
// qmv3 runs up to three weights of one input (Q/K/V, gate/up) in one launch: block b belongs to
// the weight whose block range holds it, with the same per-row code as qmv.
//
// Bytes moved (HBM): the weight's repacked bytes once (e.g. Q4_K 4.625 bits/weight, Q8_0 8.5),
// plus T*K*4 (x, from L1/L2) plus T*N*4 (out) [+ T*N*4 residual].
#include "qdot.cuh"
#include "quant_x.cuh"

// NORM (qmv3n): x is the residual stream h, normalized on the fly: x = h * rn[t] * nw (norm.cu's
// formula), rn[t] = rsqrt(mean(h[t]^2) + eps) from norm_scales.
struct NormIn {
    const float* nw;  // [K] RMSNorm weight
    const float* rn;  // [NT] per-token scales (shared memory)
};

// One group g of R rows against the T tokens' activations: acc[r][t] += dot.
template <int FMT, int R, int NT, bool NORM = false>
__device__ __forceinline__ void qmv_group(const GRaw<FMT> (&raw)[R], const float* __restrict__ x, int K, int T, int g,
                                          float (&acc)[R][NT], NormIn nrm = {}) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        if (t < T) {
            float xr[32];
            const float4* s = reinterpret_cast<const float4*>(x + (i64)t * K + 32 * g);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float4 f = __ldg(s + i);
                xr[4 * i] = f.x; xr[4 * i + 1] = f.y; xr[4 * i + 2] = f.z; xr[4 * i + 3] = f.w;
            }
            if constexpr (NORM) {
                const float r = nrm.rn[t];
                const float4* w4 = reinterpret_cast<const float4*>(nrm.nw + 32 * g);
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const float4 w = __ldg(w4 + i);
                    xr[4 * i] = xr[4 * i] * r * w.x; xr[4 * i + 1] = xr[4 * i + 1] * r * w.y;
                    xr[4 * i + 2] = xr[4 * i + 2] * r * w.z; xr[4 * i + 3] = xr[4 * i + 3] * r * w.w;
                }
            }
            const float sx = needs_sx<FMT>() ? sum32(xr) : 0.f;
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r][t] += group_dot<FMT>(raw[r], xr, sx);
        }
    }
}

// One thread's share of a row's sum of squares: float4s i, i + stride, ... in order (norm_scales).
__device__ __forceinline__ float sumsq_share(const float* __restrict__ row, int K, int i, int stride) {
    const float4* v = reinterpret_cast<const float4*>(row);
    float ss = 0.f;
    for (; i < (K >> 2); i += stride) {
        const float4 f = v[i];
        ss += f.x * f.x + f.y * f.y + f.z * f.z + f.w * f.w;
    }
    return ss;
}

// rn[t] = rsqrt(mean(h[t]^2) + eps) for t < T into shared memory (rn[W * NT + t]; rn[0 .. W*NT) the warp
// partials): thread i sums the squares of float4s i, i + 32W, ... in order, a warp butterfly, then the W
// warp sums in warp order. A function of (W, K) only: a token's scale is the same in any T-row launch.
template <int W, int NT>
__device__ __forceinline__ void norm_scales(const float* __restrict__ h, int K, int T, float eps, float* rn) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int t = 0; t < T; ++t) {
        const float ss = warp_sum(sumsq_share(h + (i64)t * K, K, tid, 32 * W));
        if (lane == 0) rn[warp * NT + t] = ss;
    }
    __syncthreads();
    if (tid < T) {
        float ss = rn[tid];
#pragma unroll
        for (int w = 1; w < W; ++w) ss += rn[w * NT + tid];
        rn[W * NT + tid] = rsqrtf(ss / (float)K + eps);
    }
    __syncthreads();
}

template <int FMT, int W, int R, int NT, bool NORM = false>
__device__ __forceinline__ void qmv_rows(const Planes& p, const float* __restrict__ x, int K, int N, int T,
                                         const float* __restrict__ bias, const float* residual, float* out,
                                         float softcap, int row0, float* red, const float* nw = nullptr,
                                         float eps = 0.f, float* rn = nullptr) {
    const int tid = threadIdx.x;
    const int G = K >> 5;
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
#ifdef BW24_PLANTED_BUG
    const int G_END = G - 1;  // kernel_check canary: an off-by-one that drops the last group
#elif defined(BW24_PLANTED_VERIFY)
    const int G_END = NT > 1 ? G - 1 : G;  // kernel_check canary: only verify launches (T > 1) drop it
#else
    const int G_END = G;
#endif
#ifdef BW24_PDL
    // The first group's weights load before the wait for the kernel ahead (common.cuh PDL_OPEN): with
    // K = 1024 and one-warp blocks (the small models' layers) that is all of a block's weights. The
    // same dots in the same order as the loop: the same bits.
    const NormIn nrm{nw, NORM ? rn + W * NT : nullptr};
    {
        GRaw<FMT> first[R];
        if (tid < G_END) load_rows<FMT, R>(p, row0, N, tid, K, first);
        PDL_WAIT();
        if constexpr (NORM) norm_scales<W, NT>(x, K, T, eps, rn);  // h is the kernel ahead's output
        if (tid < G_END) qmv_group<FMT, R, NT, NORM>(first, x, K, T, tid, acc, nrm);
    }
    const int g0 = tid + 32 * W;
#else
    const NormIn nrm{nw, NORM ? rn + W * NT : nullptr};
    if constexpr (NORM) norm_scales<W, NT>(x, K, T, eps, rn);
    const int g0 = tid;
#endif
#pragma unroll 2
    for (int g = g0; g < G_END; g += 32 * W) {
        GRaw<FMT> raw[R];
        load_rows<FMT, R>(p, row0, N, g, K, raw);
        qmv_group<FMT, R, NT, NORM>(raw, x, K, T, g, acc, nrm);
    }
    reduce_store<W, R, NT>(acc, T, N, bias, residual, out, softcap, row0, red, threadIdx.x);
}

template <int FMT, int W, int R, int NT>
__global__ void __launch_bounds__(W * 32)
qmv(const void* __restrict__ pa, const void* __restrict__ pb, const void* __restrict__ pc,
    const void* __restrict__ pd, const float* __restrict__ x, int K, int N, int T,
    const float* __restrict__ bias, const float* residual, float* out, float softcap) {
    PDL_TRIGGER();  // qmv_rows waits, after its first weight loads
    __shared__ float red[W * R * NT];
    qmv_rows<FMT, W, R, NT>(Planes{pa, pb, pc, pd}, x, K, N, T, bias, residual, out, softcap, blockIdx.x * R, red);
}

// Up to three weights [N0|N1|N2, K] of one input; nb0 / nb1 = blocks of the first two (N2 may be 0).
template <int F0, int F1, int F2, int W, int R, int NT>
__global__ void __launch_bounds__(W * 32)
qmv3(const float* __restrict__ x, int K, int T, int nb0, int nb1,
     const void* a0, const void* b0, const void* c0, const void* d0, int N0, const float* bias0, float* out0,
     const void* a1, const void* b1, const void* c1, const void* d1, int N1, const float* bias1, float* out1,
     const void* a2, const void* b2, const void* c2, const void* d2, int N2, const float* bias2, float* out2) {
    PDL_TRIGGER();  // qmv_rows waits, after its first weight loads
    __shared__ float red[W * R * NT];
    const int b = blockIdx.x;
    if (b < nb0)
        qmv_rows<F0, W, R, NT>(Planes{a0, b0, c0, d0}, x, K, N0, T, bias0, nullptr, out0, 0.f, b * R, red);
    else if (b < nb0 + nb1)
        qmv_rows<F1, W, R, NT>(Planes{a1, b1, c1, d1}, x, K, N1, T, bias1, nullptr, out1, 0.f, (b - nb0) * R, red);
    else
        qmv_rows<F2, W, R, NT>(Planes{a2, b2, c2, d2}, x, K, N2, T, bias2, nullptr, out2, 0.f, (b - nb0 - nb1) * R, red);
}

// qmv3 with the RMSNorm of its input in front (ops/cuda/backend.py norm_matmul_multi; the small models'
// fp32-activation Q/K/V and gate/up): h is the residual stream, nw the norm weight; every block computes
// its tokens' scales itself (K * 4 bytes of h per token from L2) instead of a separate rmsnorm launch.
template <int F0, int F1, int F2, int W, int R, int NT>
__global__ void __launch_bounds__(W * 32)
qmv3n(const float* __restrict__ h, const float* __restrict__ nw, float eps, int K, int T, int nb0, int nb1,
      const void* a0, const void* b0, const void* c0, const void* d0, int N0, const float* bias0, float* out0,
      const void* a1, const void* b1, const void* c1, const void* d1, int N1, const float* bias1, float* out1,
      const void* a2, const void* b2, const void* c2, const void* d2, int N2, const float* bias2, float* out2) {
    PDL_TRIGGER();  // qmv_rows waits, after its first weight loads
    __shared__ float red[W * R * NT];
    __shared__ float rn[(W + 1) * NT];
    const int b = blockIdx.x;
    if (b < nb0)
        qmv_rows<F0, W, R, NT, true>(Planes{a0, b0, c0, d0}, h, K, N0, T, bias0, nullptr, out0, 0.f, b * R, red, nw,
                                     eps, rn);
    else if (b < nb0 + nb1)
        qmv_rows<F1, W, R, NT, true>(Planes{a1, b1, c1, d1}, h, K, N1, T, bias1, nullptr, out1, 0.f, (b - nb0) * R, red,
                                     nw, eps, rn);
    else
        qmv_rows<F2, W, R, NT, true>(Planes{a2, b2, c2, d2}, h, K, N2, T, bias2, nullptr, out2, 0.f,
                                     (b - nb0 - nb1) * R, red, nw, eps, rn);
}

// Dequantize rows [row0, row0 + rows) of a repacked weight to fp32 [rows, K] (prefill GEMM input
// and embedding gather). One thread per 32-column group; 128 B written per thread.
template <int FMT>
__global__ void dequant_rows(const void* __restrict__ pa, const void* __restrict__ pb,
                             const void* __restrict__ pc, const void* __restrict__ pd,
                             const int* __restrict__ ids, int row0, int rows, int K, float scale,
                             float* __restrict__ out) {
    PDL_OPEN();
    const Planes p{pa, pb, pc, pd};
    const int G = K >> 5;
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (i64)rows * G) return;
    const int r = (int)(i / G), g = (int)(i % G);
    const i64 src = ids ? (i64)ids[r] : (i64)(row0 + r);
    float w[32];
    decode_group<FMT>(p, src, g, K, w);
    float4* o = reinterpret_cast<float4*>(out + (i64)r * K + 32 * g);
#pragma unroll
    for (int k = 0; k < 8; ++k)
        o[k] = make_float4(w[4 * k] * scale, w[4 * k + 1] * scale, w[4 * k + 2] * scale, w[4 * k + 3] * scale);
}
