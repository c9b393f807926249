// quant_x.cuh: int8 quantization of activations per 32-column group, the q8 matvec's input
// (qmatvec_q8.cu). One definition of the arithmetic for every producer (quantize_x, the fused
// rmsnorm_reg of norm.cu given xq, and glu_q8 of qmatvec_q8.cu), so a fused producer writes bit for bit what
// quantize_x would write from the same floats:
//   dx = max_j |x_j| / 127 (IEEE division), xq_j = rint(x_j / dx) (round half to even; dx = 0 -> 0),
//   xs = (bits of dx, sum of xq over columns 0-15 in the low 16 bits | columns 16-31 in the high 16).
// max is exact in any order and the sums are small integers, so the lane layout cannot change a bit.
#pragma once
#include "common.cuh"

__device__ __forceinline__ int quant_q(float v, float d) { return d > 0.f ? (int)rintf(__fdiv_rn(v, d)) : 0; }

__device__ __forceinline__ int2 quant_scale_sums(float d, int s_lo, int s_hi) {
    return make_int2(__float_as_int(d), (int)(((u32)s_lo & 0xFFFFu) | ((u32)s_hi << 16)));
}

// One group per warp: lane j holds column j. xq -> the group's 32 bytes, xs -> its scale/sums slot.
__device__ __forceinline__ void quant_group32(float v, int lane, i8* __restrict__ xq, int2* __restrict__ xs) {
    const float d = __fdiv_rn(warp_max(fabsf(v)), 127.f);
    const int q = quant_q(v, d);
    xq[lane] = (i8)q;
    int s = q;
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(FULL_MASK, s, o);
    const int s1 = __shfl_sync(FULL_MASK, s, 16);
    if (lane == 0) *xs = quant_scale_sums(d, s, s1);
}

// One group per 8 consecutive lanes (lane % 8 == 0 first), each holding 4 columns as a float4
// (lane j of the 8: columns 4j .. 4j+3). Every lane of the warp must call it (full-mask shuffles);
// `valid` is false for whole 8-lane groups past the row's end, which then store nothing.
// xq4 -> this lane's 4 bytes, xs -> the group's slot.
__device__ __forceinline__ void quant_group8x4(float4 v, bool valid, i8* __restrict__ xq4, int2* __restrict__ xs) {
    float a = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) a = fmaxf(a, __shfl_xor_sync(FULL_MASK, a, o));
    const float d = __fdiv_rn(a, 127.f);
    const int q0 = quant_q(v.x, d), q1 = quant_q(v.y, d), q2 = quant_q(v.z, d), q3 = quant_q(v.w, d);
    int s = q0 + q1 + q2 + q3;
    s += __shfl_xor_sync(FULL_MASK, s, 1);
    s += __shfl_xor_sync(FULL_MASK, s, 2);  // lanes 0-3 of the 8: columns 0-15; lanes 4-7: 16-31
    const int s1 = __shfl_down_sync(FULL_MASK, s, 4);
    if (!valid) return;
    *reinterpret_cast<char4*>(xq4) = make_char4((char)q0, (char)q1, (char)q2, (char)q3);
    if ((threadIdx.x & 7) == 0) *xs = quant_scale_sums(d, s, s1);
}
