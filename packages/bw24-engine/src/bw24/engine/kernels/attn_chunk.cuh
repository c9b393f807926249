// attn_chunk.cuh: the decode / verify attention's split rule, shared by attention.cu (attn_split, attn_combine)
// and attention_dec_mma.cu: the keys a split for a row's n live keys. It depends on the row's position alone,
// never on T, so verify rows equal decode rows bit for bit. Also their one merge of a block's warps (pass 1's end).
#pragma once
#include "common.cuh"
#include "quant_x.cuh"

// BW24_ATTN_SHORT (ops/cuda/backend.py attn_short; opt-in, 0 = off): up to this many live keys take one
// split, whose block writes the output itself (attn_combine returns at once), instead of ch-key splits
// merged by pass 2. Why: at 64 keys the 0.6B's pass 2 took 3.8 us a layer beside attn_split's 3.5
// (6e0baa5, BW24_PDL=0 profile), the 30B-A3B's 3.75 beside 4.9: a launch and a round trip of partials
// for 2-4 one-round splits. One block runs ceil(n / 32) rounds instead. c still depends on p alone.
#ifndef BW24_ATTN_SHORT
#define BW24_ATTN_SHORT 0
#endif

// Keys per split for n live keys: the smallest multiple of ch giving at most maxs splits. Alone, the rule
// before BW24_ATTN_SHORT (the planted_short canary's pass 2 uses it: kernel_check's "attn short" cases must
// see the output a one-split block wrote overwritten from stale partials).
__device__ __forceinline__ int attn_chunk_len_long(int n, int ch, int maxs) {
    return ch * max(1, (n + ch * maxs - 1) / (ch * maxs));
}

// ... and one split up to BW24_ATTN_SHORT keys (rounded up to a multiple of ch).
__device__ __forceinline__ int attn_chunk_len(int n, int ch, int maxs) {
    if (BW24_ATTN_SHORT > 0 && n <= BW24_ATTN_SHORT) return ch * ((BW24_ATTN_SHORT + ch - 1) / ch);
    return attn_chunk_len_long(n, ch, maxs);
}

// One block's pass-1 merge, shared by attn_split and attn_dec_mma: head g's dim d over the WARPS warps' partials
// (sm_m / sm_l [WARPS][GH], acc [WARPS][GH][DVH] in shared memory), then either the row's output (and its int8 group)
// when this split is the row's only live one, or the split's partial row (h = t * H + the head's index).
template <int WARPS, int GH, int DVH>
__device__ __forceinline__ void merge_warps_store(const float (*sm_m)[GH], const float (*sm_l)[GH], const float (*acc)[GH][DVH],
                                                  int g, int d, i64 h, int nsplit, int s, bool single, int lane,
                                                  float* __restrict__ out, i8* __restrict__ xq, int2* __restrict__ xs,
                                                  float* __restrict__ part_ml, float* __restrict__ part_acc) {
    float M = -INFINITY;
#pragma unroll
    for (int u = 0; u < WARPS; ++u) M = fmaxf(M, sm_m[u][g]);
    float L = 0.f, A = 0.f;
#pragma unroll
    for (int u = 0; u < WARPS; ++u) {
        const float f = sm_m[u][g] == -INFINITY ? 0.f : expf(sm_m[u][g] - M);
        L += sm_l[u][g] * f;
        A += acc[u][g][d] * f;
    }
    const i64 row = h * nsplit + s;
    if (single) {
        const i64 o = h * DVH + d;  // a whole warp: 32 dims of one head (DVH % 32 == 0)
        out[o] = A / L;
        if (xq) quant_group32(A / L, lane, xq + (o & ~(i64)31), xs + (o >> 5));
    } else {
        part_acc[row * DVH + d] = A;
        if (d == 0) { part_ml[2 * row] = M; part_ml[2 * row + 1] = L; }
    }
}

// The fused pass 2 of GH heads at once (their rows h0 .. h0 + GH - 1 of out, partials at rows h * nsplit + s), by NT
// threads, one output a thread at a time: attn_combine's arithmetic for each (attention.cu combine_head: M the exact
// max of the live m_s, w_s = e^(m_s - M), L = the sum of l_s w_s and A of acc_s w_s in split order, out = A / L), so
// its bits; nl = live but for a canary. The weights are staged in fw / fl [GH][FUSE_SPLITS], fm [GH]: live <=
// FUSE_SPLITS (ops/cuda/attn.py DEC_FUSE_SPLITS). Used by attn_dec_mma's fused pass 2 (BW24_DEC_MMA_FUSE) and
// attn_split's (BW24_ATTN_FUSE_ALL), where a block's last split combined its heads one after another: a chain of
// dependent round trips per head.
#define FUSE_SPLITS 72
template <int GH, int DVH, int NT>
__device__ __forceinline__ void combine_heads_all(const float* __restrict__ part_ml, const float* __restrict__ part_acc,
                                                  i64 h0, int nsplit, int live, int nl, float* __restrict__ out,
                                                  i8* __restrict__ xq, int2* __restrict__ xs,
                                                  float (*fw)[FUSE_SPLITS], float (*fl)[FUSE_SPLITS], float* fm) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int gg = w; gg < GH; gg += NT / 32) {  // each head's max over its live splits (exact in any order)
        float M = -INFINITY;
        for (int u = lane; u < live; u += 32) M = fmaxf(M, __ldcg(part_ml + 2 * ((h0 + gg) * nsplit + u)));
        M = warp_max(M);
        if (lane == 0) fm[gg] = M;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < GH * live; i += NT) {  // combine_head's weights, per head and split
        const int gg = i / live, u = i % live;
        const i64 r = (h0 + gg) * nsplit + u;
        const float f = expf(__ldcg(part_ml + 2 * r) - fm[gg]);
        fw[gg][u] = f;
        fl[gg][u] = __ldcg(part_ml + 2 * r + 1) * f;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < GH * DVH; i += NT) {  // GH x DVH % 32 == 0: whole warps, whole int8 groups
        const int gg = i / DVH, d = i % DVH;
        const float* ab = part_acc + (h0 + gg) * nsplit * DVH + d;
        float L = 0.f, A = 0.f;
#pragma unroll 16
        for (int u = 0; u < nl; ++u) {
            L += fl[gg][u];
            A = fmaf(__ldcg(ab + (i64)u * DVH), fw[gg][u], A);
        }
        const i64 o = (h0 + gg) * DVH + d;
        out[o] = A / L;
        if (xq) quant_group32(A / L, lane, xq + (o & ~(i64)31), xs + (o >> 5));
    }
}

