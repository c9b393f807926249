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


