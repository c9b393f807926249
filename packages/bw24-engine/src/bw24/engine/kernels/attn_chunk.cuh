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

// Head h's merged (M, L, A) of dim d: the row's output (and its int8 group) when this split is the row's only live
// one, or the split's partial row.
template <int DVH>
__device__ __forceinline__ void merge_put(float M, float L, float A, int d, i64 h, int nsplit, int s, bool single,
                                          int lane, float* __restrict__ out, i8* __restrict__ xq, int2* __restrict__ xs,
                                          float* __restrict__ part_ml, float* __restrict__ part_acc) {
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
    merge_put<DVH>(M, L, A, d, h, nsplit, s, single, lane, out, xq, xs, part_ml, part_acc);
}

// BW24_ATTN_MERGE_FACTORS (ops/cuda/backend.py attn_merge_factors; the default, BW24_ATTN_MERGE_FACTORS=0 off): the
// block's merge works out each head's M = max_u m_u, f_u = e^(m_u - M) and L = sum_u l_u f_u once (one thread a
// head, into shared memory) instead of in every one of the head's DV elements. Why: at 4 warps and 8 heads a block
// (the 32B's attn_dec_mma) each thread merged 8 elements, each with 4 expf and its own max and L again: 32 expf a
// thread where 4 a head do, in a kernel that runs latency-bound on instruction issue at ~1 TB/s on the H200
// (evidence/ncu_h200_b7b8a71_*: 0.34 issued a cycle a scheduler, DRAM 24% busy). The same expressions on
// the same values in the same warp order (fmaf of l and A as merge_warps_store contracts them): the same bits
// (kernel-check's "attn merge factors == per element bitwise").
#ifndef BW24_ATTN_MERGE_FACTORS
#define BW24_ATTN_MERGE_FACTORS 1
#endif

// The whole merge of a block's WARPS warps for its gc heads (h0: the row index t * H + the block's first head),
// called by every thread of the block after the barrier that publishes sm_m, sm_l and acc.
// Each of the gc heads' M = max_u m_u, factors f_u = e^(m_u - M) and L = sum_u l_u f_u over the WARPS warps, one
// thread a head, into f [WARPS][GH] and ML [GH][2] (BW24_ATTN_MERGE_FACTORS' merge_block; attention_dec_mma.cu's
// cluster merge). The caller syncs before reading them.
template <int WARPS, int GH>
__device__ __forceinline__ void merge_factors(const float (*sm_m)[GH], const float (*sm_l)[GH], int gc, float (*f)[GH],
                                              float (*ML)[2]) {
    for (int g = threadIdx.x; g < gc; g += WARPS * 32) {
        float M = -INFINITY;
#pragma unroll
        for (int u = 0; u < WARPS; ++u) M = fmaxf(M, sm_m[u][g]);
        float L = 0.f;
#pragma unroll
        for (int u = 0; u < WARPS; ++u) {
#ifdef BW24_PLANTED_MERGEF  // kernel_check canary: the last warp's keys left out of the merge
            const float fu = u == WARPS - 1 || sm_m[u][g] == -INFINITY ? 0.f : expf(sm_m[u][g] - M);
#else
            const float fu = sm_m[u][g] == -INFINITY ? 0.f : expf(sm_m[u][g] - M);
#endif
            f[u][g] = fu;
            L += sm_l[u][g] * fu;
        }
        ML[g][0] = M;
        ML[g][1] = L;
    }
}

template <int WARPS, int GH, int DVH>
__device__ __forceinline__ void merge_block(const float (*sm_m)[GH], const float (*sm_l)[GH], const float (*acc)[GH][DVH],
                                            int gc, i64 h0, int nsplit, int s, bool single, int lane,
                                            float* __restrict__ out, i8* __restrict__ xq, int2* __restrict__ xs,
                                            float* __restrict__ part_ml, float* __restrict__ part_acc) {
#if BW24_ATTN_MERGE_FACTORS
    __shared__ float sm_f[WARPS][GH], sm_ML[GH][2];
    merge_factors<WARPS, GH>(sm_m, sm_l, gc, sm_f, sm_ML);
    __syncthreads();
    for (int i = threadIdx.x; i < gc * DVH; i += WARPS * 32) {
        const int g = i / DVH, d = i % DVH;
        float A = 0.f;
#pragma unroll
        for (int u = 0; u < WARPS; ++u) A += acc[u][g][d] * sm_f[u][g];
        merge_put<DVH>(sm_ML[g][0], sm_ML[g][1], A, d, h0 + g, nsplit, s, single, lane, out, xq, xs, part_ml,
                       part_acc);
    }
#else
    for (int i = threadIdx.x; i < gc * DVH; i += WARPS * 32)
        merge_warps_store<WARPS, GH, DVH>(sm_m, sm_l, acc, i / DVH, i % DVH, h0 + i / DVH, nsplit, s, single, lane, out,
                                          xq, xs, part_ml, part_acc);
#endif
}
