// qdot.cuh: the dot product of one 32-column group of a repacked weight row with 32 activations,
// for the decode/verify matvec (qmatvec.cu). Layouts of the planes: quant.cuh.
//
// Why not decode_group + 32 FMAs: int->float conversion (I2F) runs at 16/clk/SM on Hopper, which
// caps a 4-bit matvec near 2.4 TB/s before any other instruction. Here a field of b bits at bit SH
// of a word becomes an exact float with one LOP3 and one FADD: OR-ing exponent (150 - SH) above it
// reads as 2^(23-SH) + field (valid while SH + b <= 23), and the FADD removes 2^(23-SH) (plus the
// format's zero offset, folded into the same constant). The group's scale is applied once to the
// integer-weight dot, and a per-group minimum via sum(x):
//   Q4_0/Q5_0/Q8_0: d * sum (q - off) x      Q4_1: d * sum q x + m * sum x
//   Q4_K/Q5_K: (d*sc) * sum q x - (dmin*m) * sum x     Q6_K: (d*sc0) * sum_{j<16} + (d*sc1) * sum_{j>=16}
// Every weight value is exact; only the rounding of the sums differs from decode-then-multiply
// (kernel_check's matmul tolerance). T = 1 and T > 1 run this same code, so decode and speculative
// verify give bit-identical rows (a kernel_check case asserts it).
#pragma once
#include "quant.cuh"

template <int FMT>
struct NV {  // 16-byte vectors of the main plane per group
    static constexpr int v = FMT == FMT_F32 ? 8 : (FMT == FMT_F16 || FMT == FMT_BF16) ? 4 : FMT == FMT_Q8_0 ? 2 : 1;
};

template <int FMT>
struct GRaw {  // the raw bytes of one group of one row, loaded before any arithmetic
    uint4 v[NV<FMT>::v];
    u32 s0, s1, s2, s3;
};

// Weights stream past L1 (read once); activations use the cached path (reused by every row).
__device__ __forceinline__ uint4 ld_stream(const void* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// The scale / high-bit words of one group of one row of a quantized format (r.s0..s3; the main
// plane's bytes are load_group's).
template <int FMT>
__device__ __forceinline__ void load_scales(const Planes& p, i64 row, int g, int K, GRaw<FMT>& r) {
    const i64 gi = row * (K >> 5) + g;
    r.s0 = r.s1 = r.s2 = r.s3 = 0;
    if constexpr (FMT == FMT_Q8_0) {
        r.s0 = __ldg((const u16*)p.c + gi);
    } else if constexpr (FMT != FMT_F32 && FMT != FMT_F16 && FMT != FMT_BF16) {
        if constexpr (FMT == FMT_Q4_1) r.s0 = __ldg((const u32*)p.c + gi);
        else r.s0 = __ldg((const u16*)p.c + gi);
        if constexpr (FMT == FMT_Q5_0 || FMT == FMT_Q5_K) r.s1 = __ldg((const u32*)p.b + gi);
        if constexpr (FMT == FMT_Q6_K) {
            const uint2 h = __ldg((const uint2*)p.b + gi);
            r.s1 = h.x;
            r.s2 = h.y;
            r.s3 = __ldg((const u16*)p.d + (row * (K >> 8) + (g >> 3)));
        }
        if constexpr (FMT == FMT_Q4_K || FMT == FMT_Q5_K) r.s2 = __ldg((const u32*)p.d + (row * (K >> 8) + (g >> 3)));
    }
}

template <int FMT>
__device__ __forceinline__ void load_group(const Planes& p, i64 row, int g, int K, GRaw<FMT>& r) {
    if constexpr (FMT == FMT_F32) {
        const float* s = (const float*)p.a + row * K + 32 * g;
#pragma unroll
        for (int i = 0; i < 8; ++i) r.v[i] = ld_stream(s + 4 * i);
    } else if constexpr (FMT == FMT_F16 || FMT == FMT_BF16) {
        const u16* s = (const u16*)p.a + row * K + 32 * g;
#pragma unroll
        for (int i = 0; i < 4; ++i) r.v[i] = ld_stream(s + 8 * i);
    } else if constexpr (FMT == FMT_Q8_0) {
        const i8* s = (const i8*)p.a + row * K + 32 * g;
        r.v[0] = ld_stream(s);
        r.v[1] = ld_stream(s + 16);
    } else {
        r.v[0] = ld_stream((const u8*)p.a + row * (K >> 1) + 16 * g);
    }
    load_scales<FMT>(p, row, g, K, r);  // issued after the main plane's streaming loads
}

// Group g of rows row0 .. row0 + R - 1 (rows past N re-read row N - 1; their sums are never stored).
template <int FMT, int R>
__device__ __forceinline__ void load_rows(const Planes& p, int row0, int N, int g, int K, GRaw<FMT> (&raw)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) load_group<FMT>(p, (i64)min(row0 + r, N - 1), g, K, raw[r]);
}

__host__ __device__ constexpr float p2(int e) {
    float v = 1.f;
    for (int i = 0; i < e; ++i) v *= 2.f;
    return v;
}

// Exact float of ((w >> SH) & MASK) * 2^UP - OFF, for fields with SH + bits <= 23 (see top).
template <int SH, u32 MASK, int UP, int OFF>
__device__ __forceinline__ float fld(u32 w) {
    constexpr u32 E = (u32)(150 - SH + UP) << 23;
    constexpr float C = p2(23 - SH + UP) + (float)OFF;
    return __uint_as_float((w & (MASK << SH)) | E) - C;
}

template <int FMT>
constexpr bool needs_sx() { return FMT == FMT_Q4_1 || FMT == FMT_Q4_K || FMT == FMT_Q5_K; }

// sum of the 32 activations of a group, in a fixed order (a tree of 4 chains).
__device__ __forceinline__ float sum32(const float x[32]) {
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll
    for (int j = 0; j < 32; j += 4) { s0 += x[j]; s1 += x[j + 1]; s2 += x[j + 2]; s3 += x[j + 3]; }
    return (s0 + s1) + (s2 + s3);
}

// 4/5/6-bit codes: a += sum_{j<16} (q_j - OFF) x_j, b += sum_{j>=16} (q_j - OFF) x_j.
// Nibble word k holds, from bit 0 up: q[4k], q[4k+16], q[4k+1], q[4k+17], ..., q[4k+3], q[4k+19].
template <int FMT, int OFF>
__device__ __forceinline__ void nib_dot(const GRaw<FMT>& r, const float x[32], float& a, float& b) {
    const u32 w[4] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const u32 lo = w[k], hi = w[k] >> 16;
        float ql[4] = {fld<0, 0xF, 0, OFF>(lo), fld<8, 0xF, 0, OFF>(lo), fld<0, 0xF, 0, OFF>(hi), fld<8, 0xF, 0, OFF>(hi)};
        float qh[4] = {fld<4, 0xF, 0, OFF>(lo), fld<12, 0xF, 0, OFF>(lo), fld<4, 0xF, 0, OFF>(hi), fld<12, 0xF, 0, OFF>(hi)};
        if constexpr (FMT == FMT_Q5_0 || FMT == FMT_Q5_K) {  // bit j of s1 = bit 4 of q_j, added as 16*h
            const u32 h0 = r.s1, h1 = r.s1 >> 16;
            ql[0] += fld<0, 1, 4, 0>(h0 >> (4 * k)); ql[1] += fld<1, 1, 4, 0>(h0 >> (4 * k));
            ql[2] += fld<2, 1, 4, 0>(h0 >> (4 * k)); ql[3] += fld<3, 1, 4, 0>(h0 >> (4 * k));
            qh[0] += fld<0, 1, 4, 0>(h1 >> (4 * k)); qh[1] += fld<1, 1, 4, 0>(h1 >> (4 * k));
            qh[2] += fld<2, 1, 4, 0>(h1 >> (4 * k)); qh[3] += fld<3, 1, 4, 0>(h1 >> (4 * k));
        }
        if constexpr (FMT == FMT_Q6_K) {  // bits 2j..2j+1 of (s2:s1) = bits 4..5 of q_j, added as 16*h
            const u32 hl = r.s1 >> (8 * k), hh = r.s2 >> (8 * k);
            ql[0] += fld<0, 3, 4, 0>(hl); ql[1] += fld<2, 3, 4, 0>(hl); ql[2] += fld<4, 3, 4, 0>(hl); ql[3] += fld<6, 3, 4, 0>(hl);
            qh[0] += fld<0, 3, 4, 0>(hh); qh[1] += fld<2, 3, 4, 0>(hh); qh[2] += fld<4, 3, 4, 0>(hh); qh[3] += fld<6, 3, 4, 0>(hh);
        }
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            a = fmaf(ql[m], x[4 * k + m], a);
            b = fmaf(qh[m], x[4 * k + m + 16], b);
        }
    }
}

// One group of one row against x: returns that group's contribution to the row's dot product.
template <int FMT>
__device__ __forceinline__ float group_dot(const GRaw<FMT>& r, const float x[32], float sx) {
    float a = 0.f, b = 0.f;
    if constexpr (FMT == FMT_F32 || FMT == FMT_F16 || FMT == FMT_BF16) {
#pragma unroll
        for (int i = 0; i < NV<FMT>::v; ++i) {
            const u32 w[4] = {r.v[i].x, r.v[i].y, r.v[i].z, r.v[i].w};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                float& acc = (i < NV<FMT>::v / 2) ? a : b;
                if constexpr (FMT == FMT_F32) {
                    acc = fmaf(__uint_as_float(w[k]), x[4 * i + k], acc);
                } else {
                    const u16 lo = w[k] & 0xFFFF, hi = w[k] >> 16;
                    acc = fmaf(FMT == FMT_F16 ? h2f(lo) : bf2f(lo), x[8 * i + 2 * k], acc);
                    acc = fmaf(FMT == FMT_F16 ? h2f(hi) : bf2f(hi), x[8 * i + 2 * k + 1], acc);
                }
            }
        }
        return a + b;
    } else if constexpr (FMT == FMT_Q8_0) {  // x ^ 0x80 turns int8 q into unsigned q + 128
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const u32 w[4] = {r.v[i].x ^ 0x80808080u, r.v[i].y ^ 0x80808080u, r.v[i].z ^ 0x80808080u,
                              r.v[i].w ^ 0x80808080u};
            float& acc = i == 0 ? a : b;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const u32 hi = w[k] >> 16;
                acc = fmaf(fld<0, 0xFF, 0, 128>(w[k]), x[16 * i + 4 * k], acc);
                acc = fmaf(fld<8, 0xFF, 0, 128>(w[k]), x[16 * i + 4 * k + 1], acc);
                acc = fmaf(fld<0, 0xFF, 0, 128>(hi), x[16 * i + 4 * k + 2], acc);
                acc = fmaf(fld<8, 0xFF, 0, 128>(hi), x[16 * i + 4 * k + 3], acc);
            }
        }
        return h2f(r.s0 & 0xFFFF) * (a + b);
    } else if constexpr (FMT == FMT_Q4_0) {
        nib_dot<FMT, 8>(r, x, a, b);
        return h2f(r.s0 & 0xFFFF) * (a + b);
    } else if constexpr (FMT == FMT_Q5_0) {
        nib_dot<FMT, 16>(r, x, a, b);
        return h2f(r.s0 & 0xFFFF) * (a + b);
    } else if constexpr (FMT == FMT_Q4_1) {
        nib_dot<FMT, 0>(r, x, a, b);
        return fmaf(h2f(r.s0 & 0xFFFF), a + b, h2f(r.s0 >> 16) * sx);
    } else if constexpr (FMT == FMT_Q4_K || FMT == FMT_Q5_K) {
        nib_dot<FMT, 0>(r, x, a, b);
        const float s = h2f(r.s2 & 0xFFFF) * (float)(r.s0 & 0xFF);
        const float mn = h2f(r.s2 >> 16) * (float)((r.s0 >> 8) & 0xFF);
        return fmaf(s, a + b, -mn * sx);
    } else {  // Q6_K
        nib_dot<FMT, 32>(r, x, a, b);
        const float d = h2f(r.s3 & 0xFFFF);
        const float s0 = d * (float)(i8)(r.s0 & 0xFF), s1 = d * (float)(i8)((r.s0 >> 8) & 0xFF);
        return fmaf(s0, a, s1 * b);
    }
}

// The end of a matvec block (qmatvec.cu's qmv and qmatvec_q8.cu's qmv8, one code for both so their
// summation orders agree): each (row, token) partial reduced by a warp shuffle tree, then across the
// W warps in shared memory in warp order; then bias, residual, softcap and the store. tid: the thread's index
// among the W warps (threadIdx.x, or its place in one of qmv8_na's sub-blocks).
template <int W, int R, int NT>
__device__ __forceinline__ void reduce_store(const float (&acc)[R][NT], int T, int N, const float* __restrict__ bias,
                                             const float* residual, float* out, float softcap, int row0,
                                             float* red, const int tid) {
    const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const float v = warp_sum(acc[r][t]);
            if (lane == 0) red[warp * R * NT + r * NT + t] = v;
        }
    __syncthreads();
    // one thread per (row, token) pair: the (row, token) pair i's sum over the warps, plus the epilogue
    auto store = [&](int i) {
        const int r = i / NT, t = i % NT, n = row0 + r;
        float v = red[i];
#pragma unroll
        for (int w = 1; w < W; ++w) v += red[w * R * NT + i];
        if (t < T && n < N) {
            if (bias) v += bias[n];
            if (residual) v += residual[(i64)t * N + n];
            if (softcap > 0.f) v = softcap * tanhf(v / softcap);
            out[(i64)t * N + n] = v;
        }
    };
    // a loop only when a sweep forces more pairs than threads; the decode kernels keep the plain test
    // (with the loop their matvecs were ~2% slower on the H200 profile at 76f0f51 vs 7e558ea, e.g. the
    // fused Q4_K launches 708 vs 692 us per token)
    if constexpr (R * NT <= W * 32) {
        if (tid < R * NT) store(tid);
    } else {
        for (int i = tid; i < R * NT; i += W * 32) store(i);
    }
}
