// quant.cuh: decode one 32-element group of a repacked weight row into 32 floats.
//
// Repacked planes (built at load time by bw24.engine.ops.cuda.repack from GGUF blocks), row r,
// group g (32 consecutive columns), superblock b = g / 8 (256 columns), G = K/32, B = K/256:
//   a : F32/F16/BF16 values [N,K]; Q8_0 int8 [N,K]; 4/5/6-bit types: nibbles [N,K/2], byte j of a
//       group = q_j | q_{j+16} << 4 (so one 16-byte load brings a whole group)
//   b : Q5_0/Q5_K: u32 [N,G], bit j = bit 4 of q_j;  Q6_K: u64 [N,G], bits 2j..2j+1 = bits 4..5 of q_j
//   c : Q8_0/Q4_0/Q5_0: half d [N,G]; Q4_1: half2 (d, m) [N,G]; Q4_K/Q5_K: u8x2 (sc, m) [N,G];
//       Q6_K: i8x2 (scale of elements 0-15, of 16-31) [N,G]
//   d : Q4_K/Q5_K: half2 (d, dmin) [N,B];  Q6_K: half d [N,B]
// Each formula below is written in gguf.quants' order of operations, so a decoded weight is
// bit-identical to the reference dequantization (only summation order differs downstream).
#pragma once
#include "common.cuh"

#define FMT_F32 0
#define FMT_F16 1
#define FMT_BF16 2
#define FMT_Q8_0 3
#define FMT_Q4_0 4
#define FMT_Q4_1 5
#define FMT_Q5_0 6
#define FMT_Q4_K 7
#define FMT_Q5_K 8
#define FMT_Q6_K 9

struct Planes {
    const void* a;
    const void* b;
    const void* c;
    const void* d;
};

__device__ __forceinline__ void unpack_nibbles(uint4 v, int q[32]) {
    u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            q[4 * i + k] = (words[i] >> (8 * k)) & 0xF;
            q[4 * i + k + 16] = (words[i] >> (8 * k + 4)) & 0xF;
        }
}

template <int FMT>
__device__ __forceinline__ void decode_group(const Planes& p, i64 row, int g, int K, float w[32]) {
    const int G = K >> 5;
    const i64 gi = row * G + g;  // group index in [N, G] planes
    if constexpr (FMT == FMT_F32) {
        const float4* s = reinterpret_cast<const float4*>((const float*)p.a + row * K + 32 * g);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            float4 f = __ldg(s + i);
            w[4 * i] = f.x; w[4 * i + 1] = f.y; w[4 * i + 2] = f.z; w[4 * i + 3] = f.w;
        }
    } else if constexpr (FMT == FMT_F16 || FMT == FMT_BF16) {
        const uint4* s = reinterpret_cast<const uint4*>((const u16*)p.a + row * K + 32 * g);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            uint4 v = __ldg(s + i);
            u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                u16 lo = words[k] & 0xFFFF, hi = words[k] >> 16;
                w[8 * i + 2 * k] = FMT == FMT_F16 ? h2f(lo) : bf2f(lo);
                w[8 * i + 2 * k + 1] = FMT == FMT_F16 ? h2f(hi) : bf2f(hi);
            }
        }
    } else if constexpr (FMT == FMT_Q8_0) {
        const uint4* s = reinterpret_cast<const uint4*>((const i8*)p.a + row * K + 32 * g);
        const float d = h2f(__ldg((const u16*)p.c + gi));
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            uint4 v = __ldg(s + i);
            u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int k = 0; k < 16; ++k) w[16 * i + k] = d * (float)(i8)((words[k >> 2] >> (8 * (k & 3))) & 0xFF);
        }
    } else {
        int q[32];
        unpack_nibbles(__ldg(reinterpret_cast<const uint4*>((const u8*)p.a + row * (K >> 1) + 16 * g)), q);
        if constexpr (FMT == FMT_Q5_0 || FMT == FMT_Q5_K) {
            const u32 hb = __ldg((const u32*)p.b + gi);
#pragma unroll
            for (int j = 0; j < 32; ++j) q[j] |= ((hb >> j) & 1) << 4;
        }
        if constexpr (FMT == FMT_Q6_K) {
            const uint2 hb2 = __ldg((const uint2*)p.b + gi);
#pragma unroll
            for (int j = 0; j < 32; ++j) q[j] |= (((j < 16 ? hb2.x >> (2 * j) : hb2.y >> (2 * j - 32))) & 3) << 4;
        }
        if constexpr (FMT == FMT_Q4_0 || FMT == FMT_Q5_0) {
            const float d = h2f(__ldg((const u16*)p.c + gi));
            const int off = FMT == FMT_Q4_0 ? 8 : 16;
#pragma unroll
            for (int j = 0; j < 32; ++j) w[j] = d * (float)(q[j] - off);
        } else if constexpr (FMT == FMT_Q4_1) {
            const u32 dm = __ldg((const u32*)p.c + gi);
            const float d = h2f(dm & 0xFFFF), m = h2f(dm >> 16);
#pragma unroll
            for (int j = 0; j < 32; ++j) w[j] = __fmaf_rn(d, (float)q[j], m);  // d*q exact, one rounding
        } else if constexpr (FMT == FMT_Q4_K || FMT == FMT_Q5_K) {
            const u16 sm = __ldg((const u16*)p.c + gi);
            const u32 dd = __ldg((const u32*)p.d + (row * (K >> 8) + (g >> 3)));
            const float s = h2f(dd & 0xFFFF) * (float)(sm & 0xFF);
            const float mn = h2f(dd >> 16) * (float)(sm >> 8);
#pragma unroll
            for (int j = 0; j < 32; ++j) w[j] = __fmaf_rn(s, (float)q[j], -mn);  // s*q exact (<= 22 bits)
        } else if constexpr (FMT == FMT_Q6_K) {
            const u16 sc = __ldg((const u16*)p.c + gi);
            const float d = h2f(__ldg((const u16*)p.d + (row * (K >> 8) + (g >> 3))));
            const float s0 = d * (float)(i8)(sc & 0xFF), s1 = d * (float)(i8)(sc >> 8);
#pragma unroll
            for (int j = 0; j < 32; ++j) w[j] = (j < 16 ? s0 : s1) * (float)(q[j] - 32);
        }
    }
}
