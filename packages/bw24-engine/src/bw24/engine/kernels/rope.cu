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
#include "rope_row.cuh"  // the row itself (shared with qmatvec_q8.cu qmv8_qkvr), RS

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
    float* qd = is_q ? q + ((i64)t * H + head) * D : nullptr;  // q rotates in place (fp32) ...
    const float* src = is_q ? qd : k + ((i64)t * Hkv + hk) * D;
    KT* kd = is_q ? nullptr : k_cache + ((i64)hk * S + p) * D;  // ... k goes to the cache (KT), with its v row
    const float* vs = is_q ? nullptr : v + ((i64)t * Hkv + hk) * Dv;
    KT* vd = is_q ? nullptr : v_cache + ((i64)hk * S + p) * Dv;
    rope_row<KT>(src, is_q, qd, kd, vs, vd, D, Dv, p, rope_dim, neox, tab, is_q ? q_norm : k_norm, eps, threadIdx.x,
                 blockDim.x, red);
}
