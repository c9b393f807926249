// rope_row.cuh: one (token, head) row of rope_kv (rope.cu's formula: the optional qk-norm, then the rotation from
// the rope table; q in place, k into the cache, and for a k head its v row too), shared by rope_kv and the Q/K/V
// matvec with the rope in its blocks' epilogue (qmatvec_q8.cu qmv8_qkvr, BW24_QKV_ROPE), so that both write the
// same bits. The arithmetic is spelled out in rounding intrinsics (__fmul_rn, __fmaf_rn, __fadd_rn): inlined into
// two kernels, plain expressions could be contracted into fma differently, and decode (one kernel) must equal a
// verify row (maybe the other, where the fused build does not fit) bit for bit.
// Mapping: thread x < nb of the block (nb: rope_block(D, Dv), rope_kv's blockDim) holds slots x, x + nb, ... (at
// most RS): slot i < rope_dim/2 is rope pair i, slot i >= rope_dim/2 the pass-through dims (rope_dim + 2(i - half),
// +1). Threads x >= nb (a larger block's) hold nothing but take part in the block's barriers: every thread of the
// block must call it, with the same arguments but x. The norm's sum of squares is summed over the first nb / 32 warps
// in rope_kv's order (block_sum_first), so the bits do not depend on the block's size.
#pragma once
#include "common.cuh"

#define RS 4  // slots per thread: D <= 2 * RS * nb

// block_sum over the block's first nw warps (the others contribute nothing): rope_kv's block_sum when nw is its
// block's warp count. Every thread of the block must call it; each gets the sum.
__device__ __forceinline__ float block_sum_first(float v, float* red, int nw) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0 && w < nw) red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.f;
    return warp_sum(v);
}

// src: the row's D values (q or k, fp32); q heads (is_q) rotate in place into qd = src, k heads go to kd (the cache
// row at p); vs / vd: a k head's v row and its cache row (nullptr: the v row is another block's, qmv8_qkvr).
template <typename KT>
__device__ __forceinline__ void rope_row(const float* src, bool is_q, float* qd, KT* kd, const float* vs, KT* vd,
                                         int D, int Dv, int p, int rope_dim, int neox, const float2* __restrict__ tab,
                                         const float* __restrict__ nw, float eps, int x, int nb, float* red) {
    auto put = [&](int i, float v) { if (is_q) qd[i] = v; else kv_store(kd + i, v); };
    const bool live = x < nb;
    const int half = rope_dim / 2, slots = D / 2;
    int i0[RS], i1[RS];
    float a[RS], b[RS];
    float ss = 0.f;
#pragma unroll
    for (int r = 0; r < RS; ++r) {
        const int i = x + r * nb;
        i0[r] = i < half ? (neox ? i : 2 * i) : rope_dim + 2 * (i - half);
        i1[r] = i < half ? (neox ? i + half : 2 * i + 1) : i0[r] + 1;
        a[r] = b[r] = 0.f;
        if (live && i < slots) { a[r] = src[i0[r]]; b[r] = src[i1[r]]; }
        ss = __fadd_rn(ss, __fmaf_rn(a[r], a[r], __fmul_rn(b[r], b[r])));
    }
    if (nw) {  // uniform per block: every thread reaches the barriers of block_sum_first
        ss = block_sum_first(ss, red, nb >> 5);
        const float rn = rsqrtf(__fadd_rn(__fdiv_rn(ss, (float)D), eps));
#pragma unroll
        for (int r = 0; r < RS; ++r)
            if (live && x + r * nb < slots) {
                a[r] = __fmul_rn(__fmul_rn(a[r], rn), nw[i0[r]]);
                b[r] = __fmul_rn(__fmul_rn(b[r], rn), nw[i1[r]]);
            }
    }
    if (!live) return;
#pragma unroll
    for (int r = 0; r < RS; ++r) {
        const int i = x + r * nb;
        if (i >= slots) continue;
        if (i < half) {
            const float2 cs = tab[(i64)p * half + i];  // rope_table: (cos a, sin a)
            const float c = cs.x, s = cs.y;
            put(i0[r], __fmaf_rn(a[r], c, -__fmul_rn(b[r], s)));
            put(i1[r], __fmaf_rn(b[r], c, __fmul_rn(a[r], s)));
        } else if (!is_q || nw) {  // pass-through dims: q keeps them in place unless normed
            put(i0[r], a[r]);
            put(i1[r], b[r]);
        }
    }
    if (vd)
        for (int i = x; i < Dv; i += nb) kv_store(vd + i, vs[i]);
}
