// qdot_q8.cuh: one 32-column group of a repacked weight row against int8-quantized activations,
// with integer dot products (__dp4a), for qmatvec_q8.cu. Weight planes: quant.cuh; raw loads: qdot.cuh.
//
// Activations (quantize_x): xq[j] = rint(x[j] / dx), dx = max|x| / 127 per group, in natural order,
// plus the group's integer sums sx0 = sum_{j<16} xq[j], sx1 = sum_{j>=16} xq[j] (int16 each).
// Byte j of a nibble group is q_j | q_{j+16} << 4, so word k & 0x0F0F0F0F holds q[4k..4k+3] and
// (word k >> 4) & 0x0F0F0F0F holds q[4k+16..4k+19]: both line up with xq words k and 4 + k.
// Per group (all sums exact integers, then one fp32 scale product):
//   Q8_0: dw dx I            Q4_0 / Q5_0: dw dx (I - 8|16 S)         Q4_1: dw dx I + m dx S
//   Q4_K/Q5_K: (d sc) dx I - (dmin m) dx S      Q6_K: d dx (sc0 (I0 - 32 S0) + sc1 (I1 - 32 S1))
// with I = sum q xq (unsigned codes), S = sx0 + sx1. The only error vs the reference computed on
// the dequantized activations is fp32 rounding of these few products and of the group sums.
#pragma once
#include "qdot.cuh"

// bits 0..3 of h -> bit 4 of bytes 0..3 (the four partial products occupy disjoint bits: no carries).
__device__ __forceinline__ u32 spread1(u32 h) { return ((h & 0xFu) * 0x00204081u & 0x01010101u) << 4; }

// 2-bit fields 0..3 of h (bits 0..7) -> bits 4..5 of bytes 0..3.
__device__ __forceinline__ u32 spread2(u32 h) {
    const u32 t = (h | (h << 12)) & 0x000F000Fu;  // fields 0,1 at bits 0..3, fields 2,3 at 16..19
    return ((t | (t << 6)) & 0x03030303u) << 4;
}

struct XQ {  // one group of one token's quantized activations
    int v[8];
    float d;
    int s0, s1;
};

// Token t's scale and half-group sums of group g (x.d, x.s0, x.s1; x.v untouched).
__device__ __forceinline__ void load_xscale(const int2* __restrict__ xs, int t, int G, int g, XQ& x) {
    const int2 m = __ldg(xs + (i64)t * G + g);
    x.d = __int_as_float(m.x);
    x.s0 = (int)(short)(m.y & 0xFFFF);
    x.s1 = m.y >> 16;
}

__device__ __forceinline__ void load_xq(const i8* __restrict__ xq, const int2* __restrict__ xs, int t, int K,
                                        int g, XQ& x) {
    const int4* p = reinterpret_cast<const int4*>(xq + (i64)t * K + 32 * g);
    const int4 a = __ldg(p), b = __ldg(p + 1);
    x.v[0] = a.x; x.v[1] = a.y; x.v[2] = a.z; x.v[3] = a.w;
    x.v[4] = b.x; x.v[5] = b.y; x.v[6] = b.z; x.v[7] = b.w;
    load_xscale(xs, t, K >> 5, g, x);
}

// Word k of a 4/5/6-bit group as byte codes: lo = q[4k..4k+3], hi = q[4k+16..4k+19], the Q5 / Q6 high
// bits (r.s1, r.s2) merged in.
template <int FMT>
__device__ __forceinline__ void nib_codes(u32 w, const GRaw<FMT>& r, int k, u32& lo, u32& hi) {
    lo = w & 0x0F0F0F0Fu;
    hi = (w >> 4) & 0x0F0F0F0Fu;
    if constexpr (FMT == FMT_Q5_0 || FMT == FMT_Q5_K) {
        lo |= spread1(r.s1 >> (4 * k));
        hi |= spread1(r.s1 >> (16 + 4 * k));
    }
    if constexpr (FMT == FMT_Q6_K) {
        lo |= spread2((r.s1 >> (8 * k)) & 0xFFu);
        hi |= spread2((r.s2 >> (8 * k)) & 0xFFu);
    }
}

// (float)v, exactly as I2F gives it, for |v| < 2^22 (both are exact there): v added to the bits of
// 1.5 * 2^23 lands in its mantissa (one ulp = 1), and the FADD removes that offset. Two full-rate ops
// instead of a conversion at 16/clk/SM: with T tokens per weight group a verify launch converts T
// group dots per row and group (its cost, benchmarks/gpu_verify_sweep.py). Bounds per format below.
__device__ __forceinline__ float i2f_small(int v) { return __int_as_float(0x4B400000 + v) - 12582912.f; }

template <int FMT>
constexpr bool q8_ok() { return FMT >= FMT_Q8_0 && FMT <= FMT_Q6_K; }

// The group's value from its exact integer dots a (columns < 16) and b (>= 16) and the scales: r's
// s0..s3 and x's d, s0, s1 (r.v and x.v are not read). Decode (group_dot_q8) and verify (codes_dot_q8)
// both end here: the same source, the same bits.
template <int FMT>
__device__ __forceinline__ float group_float_q8(const GRaw<FMT>& r, const XQ& x, int a, int b) {
    static_assert(q8_ok<FMT>(), "the q8 path handles the quantized formats only");
    // |a + b| <= 32 * 128 * 127 (Q8_0), 32 * 31 * 127 (4/5-bit codes), |S| <= 32 * 127: all < 2^22
    if constexpr (FMT == FMT_Q8_0) {
        return (h2f(r.s0 & 0xFFFF) * x.d) * i2f_small(a + b);
    } else {
        const int S = x.s0 + x.s1;
        if constexpr (FMT == FMT_Q4_0) {
            return (h2f(r.s0 & 0xFFFF) * x.d) * i2f_small(a + b - 8 * S);
        } else if constexpr (FMT == FMT_Q5_0) {
            return (h2f(r.s0 & 0xFFFF) * x.d) * i2f_small(a + b - 16 * S);
        } else if constexpr (FMT == FMT_Q4_1) {
            return fmaf(h2f(r.s0 & 0xFFFF) * x.d, i2f_small(a + b), (h2f(r.s0 >> 16) * x.d) * i2f_small(S));
        } else if constexpr (FMT == FMT_Q4_K || FMT == FMT_Q5_K) {
            const float s = h2f(r.s2 & 0xFFFF) * (float)(r.s0 & 0xFF);
            const float mn = h2f(r.s2 >> 16) * (float)((r.s0 >> 8) & 0xFF);
            return fmaf(s * x.d, i2f_small(a + b), -((mn * x.d) * i2f_small(S)));
        } else {  // Q6_K: integer total, |.| < 2^24 for realistic scales (exact); one rounding otherwise
            const int sc0 = (int)(i8)(r.s0 & 0xFF), sc1 = (int)(i8)((r.s0 >> 8) & 0xFF);
            const int I = sc0 * (a - 32 * x.s0) + sc1 * (b - 32 * x.s1);
            return (h2f(r.s3 & 0xFFFF) * x.d) * (float)I;
        }
    }
}

// A group's codes as dp4a operands, unpacked once per (row, group) for a verify launch (T > 1), whose
// tokens all reuse them: lo[k] / hi[k] line up with x.v[k] / x.v[4 + k] (Q8_0: the raw bytes).
struct GCodes {
    u32 lo[4], hi[4];
};

template <int FMT>
__device__ __forceinline__ void unpack_codes(const GRaw<FMT>& r, GCodes& c) {
    if constexpr (FMT == FMT_Q8_0) {
        c.lo[0] = r.v[0].x; c.lo[1] = r.v[0].y; c.lo[2] = r.v[0].z; c.lo[3] = r.v[0].w;
        c.hi[0] = r.v[1].x; c.hi[1] = r.v[1].y; c.hi[2] = r.v[1].z; c.hi[3] = r.v[1].w;
    } else {
        const u32 w[4] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w};
#pragma unroll
        for (int k = 0; k < 4; ++k) nib_codes<FMT>(w[k], r, k, c.lo[k], c.hi[k]);
    }
}

// The exact integer dots a, b of unpacked codes, then group_float_q8 (decode and verify: the same bits).
template <int FMT>
__device__ __forceinline__ float codes_dot_q8(const GCodes& c, const GRaw<FMT>& r, const XQ& x) {
    int a = 0, b = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        a = __dp4a((int)c.lo[k], x.v[k], a);
        b = __dp4a((int)c.hi[k], x.v[4 + k], b);
    }
    return group_float_q8<FMT>(r, x, a, b);
}

// One group of one row against one token's activations (decode): the codes unpacked, then the dot.
template <int FMT>
__device__ __forceinline__ float group_dot_q8(const GRaw<FMT>& r, const XQ& x) {
    GCodes c;
    unpack_codes<FMT>(r, c);
    return codes_dot_q8<FMT>(c, r, x);
}
