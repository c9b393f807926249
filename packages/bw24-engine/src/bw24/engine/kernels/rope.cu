// rope.cu: rotary position embedding of q (in place) and k, fused with the KV-cache append and,
// optionally, the per-head qk-norm (qwen3 / gemma3) applied before the rotation.
//
// Formula: token t sits at p = pos[0] + t (pos read from device memory, so a captured graph
// replays at every position). If a norm weight nw [D] is given for the row (q_norm for q heads,
// k_norm for k heads): x = x * rsqrt(mean(x^2) + eps) * nw over the head's D dims (RMSNorm).
// Pair i < rope_dim/2 turns by a = p * freq_scale * base^(-2i/rope_dim):
//   (u, v) -> (u cos a - v sin a, v cos a + u sin a), pairs (2i, 2i+1) for "norm", (i, i+rope_dim/2)
//   for "neox"; dims >= rope_dim pass unchanged. k_cache[hk, p] = rotated k, v_cache[hk, p] = v.
// Angles in double (like the reference) so long positions keep their precision, computed once per
// (position, pair) into a table by rope_table (ops/cuda/norm.py rope_table): rope_kv reads (cos a, sin a)
// there. In-kernel double pow/cos/sin cost ~47 us per 8B prefill launch at T = 512, and inside every attention
// split block (the rope inside attention, BW24_ROPE_ATTN, since removed) the 8B's decode step +1.4 ms (0d45897).
// Thread-to-data mapping: block (t, head) with head < H for q and H <= head < H + Hkv for k (+v);
// the D dims form D/2 slots: slot i < rope_dim/2 is rope pair i, slot i >= rope_dim/2 the pass-through
// dims (rope_dim + 2(i - half), +1). Thread x holds slots x, x + blockDim, ... (at most RS) in
// registers, so the norm's sum of squares is one block reduction and the in-place rotation of q needs
// no barrier. blockDim is fixed by D and Dv alone: a row's arithmetic does not depend on T.
// KT: the cache element, float or __half (common.cuh kv_store; the rotation itself is fp32).
// Bytes moved: q read+write 8*H*D, k read 4*Hkv*D, cache writes sizeof(KT)*Hkv*(D+Dv), v read 4*Hkv*Dv per token
//   (+ 4*D per norm weight, L2-resident).
#include "common.cuh"

#define RS 4  // slots per thread: D <= 2 * RS * blockDim

// tab [n_pos, rope_dim / 2] of (cos a, sin a), a = p * freq_scale * base^(-2i/rope_dim): the float32 pair
// rope_kv used to compute in place, from the same double expression. One thread per entry.
extern "C" __global__ void rope_table(float2* __restrict__ tab, int n_pos, int rope_dim, double base,
                                      double freq_scale) {
    PDL_OPEN();
    const int half = rope_dim / 2;
    const i64 n = (i64)n_pos * half;
    for (i64 x = (i64)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (i64)gridDim.x * blockDim.x) {
        const int p = (int)(x / half), i = (int)(x % half);
        const double ang = (double)p * freq_scale * pow(base, -2.0 * i / rope_dim);
        tab[x] = make_float2((float)cos(ang), (float)sin(ang));
    }
}

template <typename KT>
__global__ void rope_kv(float* q, const float* __restrict__ k, const float* __restrict__ v,
                        const int* __restrict__ pos, KT* k_cache, KT* v_cache,
                                   int H, int Hkv, int D, int Dv, int S, int rope_dim, int neox,
                                   const float2* __restrict__ tab, const float* __restrict__ q_norm,
                                   const float* __restrict__ k_norm, float eps) {
    PDL_OPEN();
    __shared__ float red[32];
    const int t = blockIdx.x, head = blockIdx.y;
    const int p = pos[0] + t;
    if (p >= S) return;  // the host reserves cache room before queuing a step (uniform per block)
    const bool is_q = head < H;
    const int hk = head - H;
    const float* src = is_q ? q + ((i64)t * H + head) * D : k + ((i64)t * Hkv + hk) * D;
    float* qd = is_q ? q + ((i64)t * H + head) * D : nullptr;  // q rotates in place (fp32) ...
    KT* kd = is_q ? nullptr : k_cache + ((i64)hk * S + p) * D;   // ... k goes to the cache (KT)
    auto put = [&](int i, float x) { if (is_q) qd[i] = x; else kv_store(kd + i, x); };
    const float* nw = is_q ? q_norm : k_norm;
    const int half = rope_dim / 2, slots = D / 2;
    int i0[RS], i1[RS];
    float a[RS], b[RS];
    float ss = 0.f;
#pragma unroll
    for (int r = 0; r < RS; ++r) {
        const int i = threadIdx.x + r * blockDim.x;
        i0[r] = i < half ? (neox ? i : 2 * i) : rope_dim + 2 * (i - half);
        i1[r] = i < half ? (neox ? i + half : 2 * i + 1) : i0[r] + 1;
        a[r] = b[r] = 0.f;
        if (i < slots) { a[r] = src[i0[r]]; b[r] = src[i1[r]]; }
        ss += a[r] * a[r] + b[r] * b[r];
    }
    if (nw) {  // uniform per block: every thread reaches the barrier of block_sum
        ss = block_sum(ss, red);
        const float rn = rsqrtf(ss / (float)D + eps);
#pragma unroll
        for (int r = 0; r < RS; ++r)
            if (threadIdx.x + r * blockDim.x < slots) {
                a[r] = a[r] * rn * nw[i0[r]];
                b[r] = b[r] * rn * nw[i1[r]];
            }
    }
#pragma unroll
    for (int r = 0; r < RS; ++r) {
        const int i = threadIdx.x + r * blockDim.x;
        if (i >= slots) continue;
        if (i < half) {
            const float2 cs = tab[(i64)p * half + i];  // rope_table: (cos a, sin a)
            const float c = cs.x, s = cs.y;
            put(i0[r], a[r] * c - b[r] * s);
            put(i1[r], b[r] * c + a[r] * s);
        } else if (!is_q || nw) {  // pass-through dims: q keeps them in place unless normed
            put(i0[r], a[r]);
            put(i1[r], b[r]);
        }
    }
    if (!is_q) {
        const float* vs = v + ((i64)t * Hkv + hk) * Dv;
        KT* vd = v_cache + ((i64)hk * S + p) * Dv;
        for (int i = threadIdx.x; i < Dv; i += blockDim.x) kv_store(vd + i, vs[i]);
    }
}
